//! A store unreachable for longer than a lease (a server frozen, or
//! crashed and restarted from its data), while a payment runs and after it
//! answered: the promise of §1 of the behaviour contract that time must not
//! break. Ownership is the fencing token, not the lease: when the store
//! answers again, the holder renews and completes with its token, and a
//! retry is a replay (or a 409 while the payment still runs), never a
//! second execution. A client retries the key all along, 20 ms after each
//! answer (its claims wait in the sockets of a frozen server, on the idle
//! connections of warmed pools, and run the moment it resumes; and they
//! reach a restarted one the moment it listens), so the first claims after
//! the store's return race the holder's renewal: the first claim to find
//! the lease lapsed gives the holder a grace instead of taking over.
//! Shared by the Redis and Postgres suites, each with its own server and
//! ways of taking it away.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, post, web};
use idem_runtime::inbox::{Delivery, Inbox, InboxError};
use idem_runtime::store::Store;
use idem_runtime::{Idem, idempotent};

use crate::counter::Counter;
use crate::http::{Reply, fresh_key, post_with};
use crate::server::TestServer;

/// The lease of the payment route and of the inbox: the outages below
/// outlast it twice over.
pub const LEASE: Duration = Duration::from_secs(2);
/// Store calls give up well within a third of the lease.
const STORE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the store is away: more than twice the lease.
const OUTAGE: Duration = Duration::from_millis(4_500);
/// When the store goes away, after the payment started.
const INTO_THE_PAYMENT: Duration = Duration::from_millis(300);
/// Time the holder gets, once the store is back, to renew and complete
/// (it tries at least once a second) before the retry comes.
const SETTLE: Duration = Duration::from_secs(3);

/// What the test does to the store's server.
pub trait Outage {
    /// Takes the store away (freezes it, or crashes it).
    fn begin(&mut self);
    /// Brings it back (thaws it, or starts it again from its data).
    fn end(&mut self);
}

/// A payment that charges (counts) once per execution and takes the time
/// its `x-hold-ms` header says.
#[idempotent(scope = "route", lock_ttl = "2s")]
#[post("/pay")]
async fn pay(request: HttpRequest, charges: web::Data<Counter>) -> HttpResponse {
    let charge = charges.next();
    let hold = request.headers().get("x-hold-ms").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(hold)).await;
    HttpResponse::Created().body(format!("charge {charge}"))
}

/// Serves the payment route on `store`, after a few payments that leave the
/// store's pools with idle connections (a retry during a freeze then sends
/// its claim at once, to wait in the frozen server's socket). Returns the
/// server and the charges counter, those warm-up payments taken out.
async fn serve(store: Arc<dyn Store>) -> (TestServer, Charges) {
    let charges = web::Data::new(Counter::default());
    let shared = charges.clone();
    let idem = Idem::from_arc(store).store_timeout(STORE_TIMEOUT);
    let server = TestServer::start(idem, move |config| {
        config.app_data(shared.clone()).service(pay);
    });
    for _ in 0..4 {
        let warm = post_with(&server.at("/pay"), &[("idempotency-key", &fresh_key())], "{}").await;
        assert_eq!(warm.status.as_u16(), 201, "{warm:?}");
    }
    let before = charges.get();
    (server, Charges { counter: charges, before })
}

/// The charges of the scenario.
struct Charges {
    counter: web::Data<Counter>,
    before: usize,
}

impl Charges {
    fn get(&self) -> usize {
        self.counter.get() - self.before
    }
}

/// A client that retries one key until stopped, 20 ms after each answer,
/// keeping every answer.
struct Retrier {
    stop: Arc<AtomicBool>,
    task: actix_web::rt::task::JoinHandle<Vec<Reply>>,
}

impl Retrier {
    fn start(url: String, key: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let task = actix_web::rt::spawn(async move {
            let mut replies = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                let client = crate::http::client(Duration::from_secs(5));
                let sent = client.post(&url).insert_header(("idempotency-key", key.as_str())).send_body("{}");
                if let Ok(mut response) = sent.await {
                    let header =
                        |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
                    let (replayed, retry_after) = (header("idempotent-replayed"), header("retry-after"));
                    let body = response.body().await.unwrap_or_default();
                    replies.push(Reply {
                        status: response.status(),
                        content_type: None,
                        replayed,
                        retry_after,
                        location: None,
                        body,
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            replies
        });
        Self { stop, task }
    }

    /// Stops it; every answer it got is a 503 or a 409, or the replay of
    /// `first`.
    async fn stop_and_check(self, first: &Reply) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        let replies = self.task.await.expect("the retrying client");
        for reply in &replies {
            match reply.status.as_u16() {
                409 | 503 => {}
                201 => {
                    assert_eq!(reply.replayed.as_deref(), Some("true"), "a retry ran the payment again: {reply:?}");
                    assert_eq!(reply.body, first.body, "a retry got another answer: {reply:?}");
                }
                _ => panic!("a retry got {reply:?}"),
            }
        }
        replies.len()
    }
}

async fn pay_with(server: &TestServer, key: &str, hold: Duration) -> Reply {
    let hold = hold.as_millis().to_string();
    post_with(&server.at("/pay"), &[("idempotency-key", key), ("x-hold-ms", &hold)], "{}").await
}

/// The payment answers while the store is away: its completion fails, the
/// client gets its 201, and the outage outlasts the lease. Once the store
/// is back, the holder's completion lands with its token, and the retry
/// is the replay of that 201: one charge.
pub async fn a_payment_answered_during_a_long_outage_is_replayed(store: Arc<dyn Store>, outage: &mut dyn Outage) {
    let (server, charges) = serve(store).await;
    let key = fresh_key();
    let url = server.at("/pay");
    let first = {
        let (key, url) = (key.clone(), url.clone());
        actix_web::rt::spawn(
            async move { post_with(&url, &[("idempotency-key", &key), ("x-hold-ms", "1000")], "{}").await },
        )
    };
    tokio::time::sleep(INTO_THE_PAYMENT).await;
    let away = Instant::now();
    outage.begin();
    let retrier = Retrier::start(url, key.clone());
    let first = first.await.expect("the first request");
    assert_eq!(first.status.as_u16(), 201, "the payment answered during the outage: {first:?}");
    tokio::time::sleep(OUTAGE.saturating_sub(away.elapsed())).await;
    outage.end();
    tokio::time::sleep(SETTLE).await;
    let retries = retrier.stop_and_check(&first).await;
    assert!(retries > 20, "the client retried all along ({retries} answers)");
    let retry = pay_with(&server, &key, Duration::ZERO).await;
    assert_eq!(retry.status.as_u16(), 201, "{retry:?}");
    assert_eq!(retry.replayed.as_deref(), Some("true"), "the retry is the replay: {retry:?}");
    assert_eq!(retry.body, first.body, "the replay is the first answer");
    assert_eq!(charges.get(), 1, "charged once, though the store was away for longer than the lease");
    server.stop().await;
}

/// The store is away for longer than the lease while the payment still
/// runs. Once it is back, the keeper renews the lapsed lease with its
/// token: a retry then finds the payment in flight (409), and after it
/// answered, its replay: one charge.
pub async fn a_payment_running_through_a_long_outage_keeps_its_key(store: Arc<dyn Store>, outage: &mut dyn Outage) {
    let (server, charges) = serve(store).await;
    let key = fresh_key();
    let url = server.at("/pay");
    let hold = OUTAGE + INTO_THE_PAYMENT + SETTLE + Duration::from_secs(2);
    let first = {
        let (key, url, hold) = (key.clone(), url.clone(), hold.as_millis().to_string());
        actix_web::rt::spawn(
            async move { post_with(&url, &[("idempotency-key", &key), ("x-hold-ms", &hold)], "{}").await },
        )
    };
    tokio::time::sleep(INTO_THE_PAYMENT).await;
    outage.begin();
    let retrier = Retrier::start(url.clone(), key.clone());
    tokio::time::sleep(OUTAGE).await;
    outage.end();
    tokio::time::sleep(SETTLE).await;
    let during = pay_with(&server, &key, Duration::ZERO).await;
    during.assert_problem(409);
    assert!(during.retry_after.is_some(), "{during:?}");
    let first = first.await.expect("the first request");
    assert_eq!(first.status.as_u16(), 201, "{first:?}");
    let retries = retrier.stop_and_check(&first).await;
    assert!(retries > 20, "the client retried all along ({retries} answers)");
    let retry = pay_with(&server, &key, Duration::ZERO).await;
    assert_eq!(retry.replayed.as_deref(), Some("true"), "{retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(charges.get(), 1, "charged once, though the lease lapsed in the store meanwhile");
    server.stop().await;
}

/// The same on the inbox: a message whose work ends while the store is
/// away for longer than the lease is recorded once the store is back (the
/// delivery waits for that), and its redelivery is a duplicate.
pub async fn a_message_processed_during_a_long_outage_is_not_processed_again(
    store: Arc<dyn Store>,
    outage: &mut dyn Outage,
) {
    let inbox = Inbox::from_arc(store, "long-outage").lease(LEASE).store_timeout(STORE_TIMEOUT);
    let runs = Arc::new(Counter::default());
    let id = format!("evt_{}", fresh_key());
    let delivery = {
        let (inbox, runs, id) = (inbox.clone(), Arc::clone(&runs), id.clone());
        actix_web::rt::spawn(async move {
            inbox
                .process(&id, |_| async move {
                    runs.next();
                    tokio::time::sleep(Duration::from_millis(1_000)).await;
                    Ok::<_, std::io::Error>(())
                })
                .await
        })
    };
    tokio::time::sleep(INTO_THE_PAYMENT).await;
    outage.begin();
    // Redeliveries every 100 ms all along: none may run the work again.
    let stop = Arc::new(AtomicBool::new(false));
    let redeliveries = {
        let (inbox, runs, id, stop) = (inbox.clone(), Arc::clone(&runs), id.clone(), Arc::clone(&stop));
        actix_web::rt::spawn(async move {
            let mut answered = 0;
            while !stop.load(Ordering::SeqCst) {
                let work = |_| async {
                    runs.next();
                    Ok::<_, std::io::Error>(())
                };
                let redelivered = tokio::time::timeout(Duration::from_secs(5), inbox.process(&id, work)).await;
                if matches!(redelivered, Ok(Ok(_))) {
                    answered += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answered
        })
    };
    tokio::time::sleep(OUTAGE).await;
    outage.end();
    match delivery.await.expect("the first delivery") {
        Ok(Delivery::Processed(())) => {}
        other => panic!("the first delivery is recorded once the store is back: {other:?}"),
    }
    tokio::time::sleep(SETTLE).await;
    stop.store(true, Ordering::SeqCst);
    let answered = redeliveries.await.expect("the redeliveries");
    assert!(answered > 0, "redeliveries were answered once the store was back");
    let again: Result<Delivery<()>, InboxError<std::io::Error>> = inbox.process(&id, |_| async { Ok(()) }).await;
    assert!(matches!(again, Ok(Delivery::Duplicate)), "the redelivery is a duplicate: {again:?}");
    assert_eq!(runs.get(), 1, "processed once");
}
