//! A loopback TCP proxy that adds latency, to put a real store server "far
//! away" from the app under test.
//!
//! Every chunk read from either side is delivered to the other side
//! `one_way` after it was read: a queue of timestamped chunks per direction,
//! so the latency is pure (order kept, throughput not throttled, pipelined
//! requests not serialized), as on a long link. An end of stream is
//! delivered with the same delay. The proxy runs on a Tokio runtime on a
//! thread of its own, so it serves under actix test systems as well as
//! under `#[tokio::test]`, and it stops (closing every connection) when
//! dropped.

use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Most bytes taken from a socket in one read.
const READ_CHUNK: usize = 64 << 10;

/// A running latency proxy on a free `127.0.0.1` port; stopped when dropped.
#[derive(Debug)]
pub struct LatencyProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    delay: Arc<Delay>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The current one-way delay, in nanoseconds, shared with the forwarders.
#[derive(Debug)]
struct Delay(AtomicU64);

impl Delay {
    fn new(delay: Duration) -> Self {
        Self(AtomicU64::new(nanos(delay)))
    }

    fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    fn set(&self, delay: Duration) {
        self.0.store(nanos(delay), Ordering::Relaxed);
    }
}

fn nanos(delay: Duration) -> u64 {
    u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX)
}

impl LatencyProxy {
    /// Starts a proxy to `upstream` that delays each direction by `one_way`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the proxy thread cannot start.
    pub fn start(upstream: SocketAddr, one_way: Duration) -> Self {
        // Bound here, so the address is known and connectable on return.
        let listener = StdListener::bind("127.0.0.1:0").expect("binding a loopback port for the proxy");
        listener.set_nonblocking(true).expect("a non-blocking proxy listener");
        let addr = listener.local_addr().expect("the proxy's local address");
        let delay = Arc::new(Delay::new(one_way));
        let (stop, stopped) = oneshot::channel();
        let shared = Arc::clone(&delay);
        let thread = std::thread::Builder::new()
            .name(format!("latency-proxy-{}", addr.port()))
            .spawn(move || serve(listener, upstream, shared, stopped))
            .expect("starting the proxy thread");
        Self { addr, upstream, delay, stop: Some(stop), thread: Some(thread) }
    }

    /// Starts a proxy in front of the server of `url` (`scheme://[user@]host:port/...`)
    /// and returns it with the same URL pointing at the proxy instead.
    ///
    /// # Panics
    ///
    /// When the URL has no `host:port` authority that resolves.
    pub fn in_front_of(url: &str, one_way: Duration) -> (Self, String) {
        let (authority, start) = host_port(url);
        let upstream = authority
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .unwrap_or_else(|| panic!("the address `{authority}` of the server to proxy does not resolve"));
        let proxy = Self::start(upstream, one_way);
        let proxied = format!("{}{}{}", &url[..start], proxy.addr, &url[start + authority.len()..]);
        (proxy, proxied)
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the proxy connects for each client.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The current one-way delay.
    pub fn delay(&self) -> Duration {
        self.delay.get()
    }

    /// Changes the one-way delay for every chunk read from now on, on open
    /// connections too. Chunks keep their order: after a decrease, a chunk
    /// still waits for the ones read before it.
    pub fn set_delay(&self, one_way: Duration) {
        self.delay.set(one_way);
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // The runtime, its tasks and their sockets are gone once it ends.
            let _ = thread.join();
        }
    }
}

/// `host:port` of `url` and where it starts.
fn host_port(url: &str) -> (&str, usize) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let host_port = &authority[host_start..];
    assert!(host_port.contains(':'), "no `host:port` in the URL to proxy (`{host_port}`)");
    (host_port, after_scheme + host_start)
}

/// The proxy thread: accepts until told to stop, then drops the runtime,
/// which cancels every forwarder and closes its sockets.
fn serve(listener: StdListener, upstream: SocketAddr, delay: Arc<Delay>, stopped: oneshot::Receiver<()>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("the proxy's runtime");
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener).expect("a Tokio listener");
        let accept = async {
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        tokio::spawn(connect(client, upstream, Arc::clone(&delay)));
                    }
                    // Out of file descriptors, say: do not spin.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        };
        tokio::select! {
            _ = stopped => {}
            () = accept => {}
        }
    });
}

/// Joins `client` to a new connection to `upstream`; a client whose
/// upstream cannot be reached is disconnected.
async fn connect(client: TcpStream, upstream: SocketAddr, delay: Arc<Delay>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    for socket in [&client, &server] {
        let _ = socket.set_nodelay(true);
    }
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::spawn(forward(client_read, server_write, Arc::clone(&delay)));
    tokio::spawn(forward(server_read, client_write, delay));
}

/// What travels through a direction's queue, with its delivery time.
enum Segment {
    Data(Bytes),
    End,
}

/// One direction: a reader that timestamps each chunk as it arrives and a
/// writer that delivers it at that time plus the delay.
async fn forward(mut from: OwnedReadHalf, to: OwnedWriteHalf, delay: Arc<Delay>) {
    let (queue, queued) = mpsc::unbounded_channel();
    let writer = tokio::spawn(deliver(queued, to));
    let mut buffer = BytesMut::with_capacity(READ_CHUNK);
    loop {
        buffer.reserve(READ_CHUNK);
        let segment = match from.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => Segment::End,
            Ok(_) => Segment::Data(buffer.split().freeze()),
        };
        let end = matches!(segment, Segment::End);
        if queue.send((Instant::now() + delay.get(), segment)).is_err() || end {
            break;
        }
    }
    drop(queue);
    let _ = writer.await;
}

async fn deliver(mut queued: mpsc::UnboundedReceiver<(Instant, Segment)>, mut to: OwnedWriteHalf) {
    while let Some((due, segment)) = queued.recv().await {
        tokio::time::sleep_until(due).await;
        match segment {
            Segment::Data(bytes) => {
                if to.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Segment::End => {
                // Half-close: the other direction may still be talking.
                let _ = to.shutdown().await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::time::Instant;

    use super::{LatencyProxy, host_port};

    const DELAY: Duration = Duration::from_millis(100);
    /// Slack for a busy test machine; far below what any failure costs.
    const SLACK: Duration = Duration::from_millis(150);

    /// An echo server on a free loopback port; each connection echoes until
    /// the client half-closes, then closes.
    async fn echo_server() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.into_split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                    let _ = write.shutdown().await;
                });
            }
        });
        addr
    }

    async fn connect(proxy: &LatencyProxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.addr()).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    async fn round_trip(stream: &mut TcpStream, message: &[u8]) -> Duration {
        let started = Instant::now();
        stream.write_all(message).await.unwrap();
        let mut echoed = vec![0; message.len()];
        stream.read_exact(&mut echoed).await.unwrap();
        assert_eq!(echoed, message);
        started.elapsed()
    }

    #[tokio::test]
    async fn a_round_trip_takes_twice_the_delay_and_keeps_every_byte() {
        let proxy = LatencyProxy::start(echo_server().await, DELAY);
        let mut stream = connect(&proxy).await;
        let elapsed = round_trip(&mut stream, b"ping").await;
        assert!(elapsed >= 2 * DELAY && elapsed < 2 * DELAY + SLACK, "{elapsed:?}");

        // 4 MiB each way, in many reads; the end of stream comes through.
        let sent: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        let (mut read, mut write) = stream.into_split();
        let writer = tokio::spawn({
            let sent = sent.clone();
            async move {
                write.write_all(&sent).await.unwrap();
                write.shutdown().await.unwrap();
            }
        });
        let mut received = Vec::new();
        read.read_to_end(&mut received).await.unwrap();
        writer.await.unwrap();
        assert!(received == sent, "{} bytes sent, {} received, or reordered", sent.len(), received.len());
    }

    #[tokio::test]
    async fn pipelined_chunks_are_delayed_each_not_serialized() {
        const CHUNKS: u8 = 20;
        const SPACING: Duration = Duration::from_millis(10);
        let delay = 2 * DELAY;
        let proxy = LatencyProxy::start(echo_server().await, delay);
        let (mut read, mut write) = connect(&proxy).await.into_split();
        let started = Instant::now();
        let writer = tokio::spawn(async move {
            let mut sent_at = Vec::new();
            for chunk in 0..CHUNKS {
                sent_at.push(Instant::now());
                write.write_all(&[chunk]).await.unwrap();
                tokio::time::sleep(SPACING).await;
            }
            sent_at
        });
        let mut received_at = Vec::new();
        for chunk in 0..CHUNKS {
            assert_eq!(read.read_u8().await.unwrap(), chunk, "out of order");
            received_at.push(Instant::now());
        }
        let total = started.elapsed();
        // Each chunk comes back one round trip after it left, whatever was
        // sent before it: a proxy that sleeps in its read loop batches the
        // chunks that arrive meanwhile and returns them late.
        for (chunk, (sent, received)) in writer.await.unwrap().iter().zip(&received_at).enumerate() {
            let trip = *received - *sent;
            assert!(trip >= 2 * delay && trip < 2 * delay + SLACK, "chunk {chunk} came back after {trip:?}");
        }
        // Serialized, this would take CHUNKS round trips (8 s).
        let expected = 2 * delay + SPACING * u32::from(CHUNKS);
        assert!(total < expected + SLACK, "{CHUNKS} chunks took {total:?}");
    }

    #[tokio::test]
    async fn the_delay_changes_on_an_open_connection() {
        let proxy = LatencyProxy::start(echo_server().await, DELAY);
        let mut stream = connect(&proxy).await;
        assert!(round_trip(&mut stream, b"far").await >= 2 * DELAY);
        proxy.set_delay(Duration::from_millis(10));
        assert_eq!(proxy.delay(), Duration::from_millis(10));
        let elapsed = round_trip(&mut stream, b"near").await;
        assert!(elapsed >= Duration::from_millis(20) && elapsed < 2 * DELAY, "{elapsed:?}");
        proxy.set_delay(Duration::from_millis(300));
        let elapsed = round_trip(&mut stream, b"far again").await;
        assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_its_port_and_its_connections() {
        let proxy = LatencyProxy::start(echo_server().await, Duration::from_millis(10));
        let addr = proxy.addr();
        let mut stream = connect(&proxy).await;
        round_trip(&mut stream, b"open").await;
        drop(proxy);
        let mut rest = Vec::new();
        let closed = stream.read_to_end(&mut rest).await;
        assert!(closed.is_err() || rest.is_empty(), "{closed:?} {rest:?}");
        assert!(TcpStream::connect(addr).await.is_err(), "the proxy still accepts connections");
    }

    #[tokio::test]
    async fn a_url_is_pointed_at_the_proxy() {
        let upstream = echo_server().await;
        let url = format!("postgres://idem:secret@{upstream}/postgres?sslmode=disable");
        let (proxy, proxied) = LatencyProxy::in_front_of(&url, DELAY);
        assert_eq!(proxy.upstream(), upstream);
        assert_eq!(proxied, format!("postgres://idem:secret@{}/postgres?sslmode=disable", proxy.addr()));
        assert_eq!(host_port("redis://127.0.0.1:6379/"), ("127.0.0.1:6379", 8));
    }
}
