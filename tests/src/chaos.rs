//! A loopback TCP proxy that loses responses: each request is forwarded to
//! the server, and then, at random but reproducibly (seeded), its response
//! is dropped (the connection closed before a byte of it reaches the
//! client), the connection is reset (RST), or the response is held past
//! the client's timeout and then dropped. The server did the work every
//! time; only its answer is lost, as on a real network.
//!
//! HTTP/1.1 clients send one request at a time per connection, so a
//! response starts with the server's first bytes after the client spoke;
//! each such turn gets its fate. The proxy runs on a runtime of its own
//! thread and stops when dropped.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// What happens to one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Deliver,
    /// Closed before the response: the client sees the connection end.
    Drop,
    /// Reset (RST) before the response.
    Reset,
    /// Held past the client's timeout, then dropped.
    Delay,
}

/// The losses so far.
#[derive(Debug, Default)]
struct Counts {
    responses: AtomicU64,
    lost: AtomicU64,
}

/// A running chaos proxy on a free `127.0.0.1` port; stopped when dropped.
#[derive(Debug)]
pub struct ChaosProxy {
    addr: SocketAddr,
    counts: Arc<Counts>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// How the proxy loses responses.
#[derive(Debug, Clone, Copy)]
pub struct Chaos {
    /// The fraction of responses lost, split evenly between dropped, reset
    /// and delayed.
    pub loss: f64,
    /// The seed of the fates: connection `n` draws from `seed + n`.
    pub seed: u64,
    /// How long a delayed response is held before it is dropped: more than
    /// the client's timeout.
    pub hold: Duration,
}

impl ChaosProxy {
    /// Starts a proxy to `upstream`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the proxy thread cannot start.
    pub fn start(upstream: SocketAddr, chaos: Chaos) -> Self {
        let listener = StdListener::bind("127.0.0.1:0").expect("binding a loopback port for the chaos proxy");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the proxy's address");
        let counts = Arc::new(Counts::default());
        let (stop, stopped) = oneshot::channel();
        let shared = Arc::clone(&counts);
        let thread = std::thread::Builder::new()
            .name(format!("chaos-proxy-{}", addr.port()))
            .spawn(move || serve(listener, upstream, chaos, shared, stopped))
            .expect("starting the chaos proxy thread");
        Self { addr, counts, stop: Some(stop), thread: Some(thread) }
    }

    /// The proxy's base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// (responses the server sent, responses lost).
    pub fn counts(&self) -> (u64, u64) {
        (self.counts.responses.load(Ordering::Relaxed), self.counts.lost.load(Ordering::Relaxed))
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(
    listener: StdListener,
    upstream: SocketAddr,
    chaos: Chaos,
    counts: Arc<Counts>,
    stopped: oneshot::Receiver<()>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("the proxy's runtime");
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener).expect("a tokio listener");
        let accept = async {
            let mut connection = 0u64;
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let rng = fastrand::Rng::with_seed(chaos.seed.wrapping_add(connection));
                connection += 1;
                tokio::spawn(relay(client, upstream, chaos, rng, Arc::clone(&counts)));
            }
        };
        tokio::select! {
            () = accept => {}
            _ = stopped => {}
        }
    });
}

/// Carries one client connection, deciding the fate of each response.
async fn relay(client: TcpStream, upstream: SocketAddr, chaos: Chaos, mut rng: fastrand::Rng, counts: Arc<Counts>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Set when the client sent bytes the server has not answered yet.
    let spoke = Arc::new(AtomicBool::new(false));
    let requests = {
        let spoke = Arc::clone(&spoke);
        async move {
            let mut buffer = vec![0u8; 16 << 10];
            loop {
                match client_read.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        spoke.store(true, Ordering::SeqCst);
                        if server_write.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = server_write.shutdown().await;
        }
    };
    let responses = async move {
        let mut buffer = vec![0u8; 16 << 10];
        let mut fate = Fate::Deliver;
        loop {
            let n = match server_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if spoke.swap(false, Ordering::SeqCst) {
                counts.responses.fetch_add(1, Ordering::Relaxed);
                fate = draw(&mut rng, chaos.loss);
                if fate != Fate::Deliver {
                    counts.lost.fetch_add(1, Ordering::Relaxed);
                }
            }
            match fate {
                Fate::Deliver => {
                    if client_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
                Fate::Drop => break,
                Fate::Reset => {
                    // A zero linger, and no FIN first: the socket closes
                    // with an RST once the read half goes too.
                    let _ = socket2::SockRef::from(client_write.as_ref()).set_linger(Some(Duration::ZERO));
                    client_write.forget();
                    return;
                }
                Fate::Delay => {
                    tokio::time::sleep(chaos.hold).await;
                    break;
                }
            }
        }
        // Dropping the halves closes (or, with a zero linger, resets) the
        // client's connection.
        drop(client_write);
    };
    tokio::select! {
        () = requests => {}
        () = responses => {}
    }
}

fn draw(rng: &mut fastrand::Rng, loss: f64) -> Fate {
    let roll = rng.f64();
    if roll >= loss {
        return Fate::Deliver;
    }
    match (roll / loss * 3.0) as u32 {
        0 => Fate::Drop,
        1 => Fate::Reset,
        _ => Fate::Delay,
    }
}
