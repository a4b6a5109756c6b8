//! An open-loop load generator: latency at a fixed request rate, the way
//! wrk2 measures it (no coordinated omission), for `scripts/bench`.
//!
//! ```text
//! target/release/open_loop --url http://127.0.0.1:8090/redis/orders \
//!     --rate 2000 --seconds 8 --connections 16 --path first --key run-1
//! ```
//!
//! Each connection is one HTTP/1.1 keep-alive connection of its own, sending
//! `POST`s with an `Idempotency-Key` on the schedule of [`schedule`]; the
//! latencies after a warm-up go into an HDR histogram, and the run prints one
//! JSON line ([`report::Report`]):
//!
//! ```text
//! {"rate":2000,"achieved":2000.1,"requests":16000,"errors":0,"p50_ms":0.31,"p99_ms":0.52,"p999_ms":1.9,"max_ms":3.1}
//! ```
//!
//! It runs on one thread, so that it takes little of the cores the server
//! under test shares.

mod report;
mod schedule;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONNECTION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until, timeout};

use report::Report;
use schedule::{Schedule, latency_start};

/// The order `scripts/lib/bench.py` posts.
const ORDER: &str = r#"{"customer_id":"cus_8e03978e","amount_cents":1500,"currency":"EUR","lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}"#;

/// Latency at a fixed request rate (open loop).
#[derive(Parser, Debug)]
struct Args {
    /// The URL to post to, http only (`http://127.0.0.1:8090/redis/orders`).
    #[arg(long)]
    url: Uri,
    /// Requests per second, all connections together.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    rate: u64,
    /// Seconds recorded, after the warm-up.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Seconds at the rate before recording.
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Connections, each sending at rate / connections.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    connections: u64,
    /// `first`: a new key per request; `replay`: one key for every request.
    #[arg(long, value_enum)]
    path: KeyPath,
    /// The replay key, or the prefix of the new keys (`KEY-N`).
    #[arg(long)]
    key: String,
    /// The request body (JSON).
    #[arg(long, default_value = ORDER)]
    body: String,
    /// Seconds before an exchange counts as failed; also how long the run
    /// may overrun its schedule before the requests left unsent count as
    /// errors.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// Which idempotency keys the requests carry.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum KeyPath {
    /// A key of its own per request: every request a first execution.
    First,
    /// One key for all: every request a replay (once the key is primed).
    Replay,
}

/// What every request of the run shares.
struct Target {
    /// `host:port`, to connect to.
    address: String,
    /// The `Host` header.
    host: String,
    /// The path and query posted to.
    path: String,
    /// The request body.
    body: Bytes,
    /// Which keys the requests carry.
    key_path: KeyPath,
    /// The replay key, or the prefix of the new keys.
    key: String,
}

impl Target {
    /// The target of `args`, or why its URL cannot be used.
    fn new(args: &Args) -> Result<Self, String> {
        let url = &args.url;
        if url.scheme_str() != Some("http") {
            return Err(format!("--url {url}: only http:// URLs are supported"));
        }
        let authority = url.authority().ok_or_else(|| format!("--url {url}: no host"))?;
        let address = match authority.port_u16() {
            Some(_) => authority.as_str().to_owned(),
            None => format!("{}:80", authority.host()),
        };
        Ok(Target {
            address,
            host: authority.as_str().to_owned(),
            path: url.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
            body: Bytes::from(args.body.clone()),
            key_path: args.path,
            key: args.key.clone(),
        })
    }

    /// Request number `n` of the run.
    fn request(&self, n: u64) -> Request<Full<Bytes>> {
        let key = match self.key_path {
            KeyPath::First => format!("{}-{n}", self.key),
            KeyPath::Replay => self.key.clone(),
        };
        Request::builder()
            .method(Method::POST)
            .uri(self.path.as_str())
            .header(HOST, self.host.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header("idempotency-key", key)
            .body(Full::new(self.body.clone()))
            .expect("the path and headers come from a parsed URL and printable keys")
    }

    /// A new keep-alive connection, its driver spawned.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
        let stream = TcpStream::connect(self.address.as_str()).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // Its errors surface on the next request too.
        tokio::spawn(async move { connection.await.ok() });
        Ok(sender)
    }
}

/// What one connection measured.
struct Tally {
    /// Latencies of the answered measured requests, in microseconds.
    micros: Histogram<u64>,
    /// Measured requests.
    requests: u64,
    /// Measured requests not answered 201.
    errors: u64,
    /// When the last measured answer arrived.
    last_answer: Option<Instant>,
}

/// Runs connection `index`'s share of `schedule`, which starts at `start`,
/// on `sender`; gives up on the requests still unsent at `deadline`.
async fn drive(
    index: u64,
    sender: SendRequest<Full<Bytes>>,
    target: Arc<Target>,
    schedule: Schedule,
    start: Instant,
    deadline: Instant,
    limit: Duration,
) -> Tally {
    let mut tally = Tally { micros: histogram(), requests: 0, errors: 0, last_answer: None };
    let mut connected = Some(sender);
    // The connections were set up before the start.
    let mut free_at = start;
    for n in schedule.requests(index) {
        let measured = schedule.is_measured(n);
        tally.requests += u64::from(measured);
        if Instant::now() > deadline {
            tally.errors += u64::from(measured);
            continue;
        }
        let intended = start + schedule.offset(n);
        sleep_until(intended).await;
        let mut sender = match connected.take().filter(|sender| !sender.is_closed()) {
            Some(sender) => sender,
            None => match target.connect().await {
                Ok(sender) => {
                    free_at = Instant::now();
                    sender
                }
                Err(_) => {
                    free_at = Instant::now();
                    tally.errors += u64::from(measured);
                    continue;
                }
            },
        };
        let request = target.request(n);
        let sent = Instant::now();
        let status = timeout(limit, exchange(&mut sender, request)).await;
        let answered = Instant::now();
        let from = latency_start(intended, sent, free_at);
        free_at = answered;
        let status = match status {
            Ok(Ok((status, keep_alive))) => {
                connected = keep_alive.then_some(sender);
                Some(status)
            }
            // A failed or timed-out exchange: a new connection for the next.
            _ => None,
        };
        if measured {
            if status.is_some() {
                let micros = u64::try_from((answered - from).as_micros()).unwrap_or(u64::MAX);
                tally.micros.saturating_record(micros);
                tally.last_answer = Some(answered);
            }
            tally.errors += u64::from(status != Some(StatusCode::CREATED));
        }
    }
    tally
}

/// An empty histogram of latencies in microseconds, from 1 µs to an hour at
/// 3 significant figures; a longer latency is recorded as an hour.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("the bounds and precision are valid")
}

/// Sends `request` and reads its whole answer; its status, and whether the
/// server keeps the connection open (no `Connection: close`).
async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> hyper::Result<(StatusCode, bool)> {
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let closes =
        response.headers().get_all(CONNECTION).iter().any(|value| value.as_bytes().eq_ignore_ascii_case(b"close"));
    response.into_body().collect().await?;
    Ok((status, !closes))
}

/// Connects every connection, runs the schedule, merges the tallies.
async fn run(args: Args) -> Result<Report, String> {
    let target = Arc::new(Target::new(&args)?);
    let schedule = Schedule::new(args.rate, args.connections, args.warmup, args.seconds);
    let limit = Duration::from_secs(args.timeout);
    let mut senders = Vec::new();
    for _ in 0..args.connections {
        let sender =
            target.connect().await.map_err(|error| format!("cannot connect to {}: {error}", target.address))?;
        senders.push(sender);
    }
    let start = Instant::now();
    let deadline = start + schedule.last_offset() + limit;
    let tasks: Vec<_> = senders
        .into_iter()
        .zip(0..)
        .map(|(sender, index)| tokio::spawn(drive(index, sender, target.clone(), schedule, start, deadline, limit)))
        .collect();
    let mut micros = histogram();
    let (mut requests, mut errors, mut last_answer) = (0, 0, None);
    for task in tasks {
        let tally = task.await.map_err(|error| format!("a connection's task failed: {error}"))?;
        micros.add(&tally.micros).expect("histograms of the same precision add up");
        requests += tally.requests;
        errors += tally.errors;
        last_answer = last_answer.max(tally.last_answer);
    }
    let measured_from = start + schedule.measured_from();
    let elapsed = last_answer.map_or(Duration::ZERO, |last| last.saturating_duration_since(measured_from));
    Ok(Report::new(args.rate, &micros, requests, errors, elapsed))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(report) => {
            println!("{}", report.to_line());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("open_loop: {error}");
            ExitCode::FAILURE
        }
    }
}
