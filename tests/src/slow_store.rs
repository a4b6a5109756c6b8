//! A store far away: `#[idempotent]` on a real actix-web server whose store
//! connection runs through a [`LatencyProxy`], shared by the Redis and
//! Postgres suites. Only the store is slow; HTTP stays on loopback.
//!
//! Leases are whole seconds (the attribute's smallest unit is `s`), and the
//! latencies are picked against them:
//!
//! - **Refused**: `lock_ttl = "1s"` with the default store timeout (2 s),
//!   more than a third of the lease, a configuration the contract refuses
//!   (§3). At 400 ms one way, a renewal is sent a third of the lease after
//!   the claim's answer and lands a round trip later, 1.13 s after the lease
//!   began (later still on a store that first checks its pooled connection
//!   with a round trip of its own): without the refusal, the lease lapses
//!   under a running handler and a duplicate takes the key over.
//! - **Slow but valid**: `lock_ttl = "2s"`, store timeout 500 ms (a quarter
//!   of the lease), 100 ms one way: a renewal lands 0.87 s after the last,
//!   well inside the lease, while a 4 s handler runs under a stream of
//!   duplicates.

use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::web::ServiceConfig;
use actix_web::{HttpResponse, post, web};
use futures_util::future::join_all;
use idem_runtime::store::testing::{fingerprint, fresh_key as fresh_storage_key, response};
use idem_runtime::store::{Claim, Fence, Store};
use idem_runtime::{Idem, idempotent};

use crate::counter::Counter;
use crate::http::{Reply, fresh_key, send};
use crate::proxy::LatencyProxy;
use crate::server::TestServer;

/// One-way store latency of the refused configuration.
pub const REFUSED_ONE_WAY: Duration = Duration::from_millis(400);
/// `lock_ttl` of the refused configuration's route.
pub const SHORT_LEASE: Duration = Duration::from_secs(1);
/// How long the refused configuration's handler would take.
pub const SHORT_LEASE_HANDLER: Duration = Duration::from_secs(2);

/// One-way store latency of the slow but valid configuration.
pub const SLOW_ONE_WAY: Duration = Duration::from_millis(100);
/// `lock_ttl` of the slow but valid configuration's route.
pub const SLOW_LEASE: Duration = Duration::from_secs(2);
/// Store timeout of the slow but valid configuration.
pub const SLOW_STORE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the slow but valid configuration's handler takes.
pub const SLOW_HANDLER: Duration = Duration::from_secs(4);

/// Time between two duplicates.
pub const DUPLICATE_EVERY: Duration = Duration::from_millis(100);

/// Concurrent warm-up cycles, at least the connections a store may open.
pub const WARM_UP_CONNECTIONS: usize = 16;

const BODY: &str = r#"{"coffees": 2}"#;

async fn order(hits: &Counter, body: &str, takes: Duration) -> HttpResponse {
    let n = hits.next();
    tokio::time::sleep(takes).await;
    HttpResponse::Created().insert_header(("x-order", n.to_string())).body(format!("order {n}: {body}"))
}

/// An order under a one-second lease.
#[idempotent(scope = "route", lock_ttl = "1s")]
#[post("/slow/short-lease")]
pub async fn short_lease_order(hits: web::Data<Counter>, body: String) -> HttpResponse {
    order(&hits, &body, SHORT_LEASE_HANDLER).await
}

/// An order under a two-second lease, taking twice as long.
#[idempotent(scope = "route", lock_ttl = "2s")]
#[post("/slow/orders")]
pub async fn slow_order(hits: web::Data<Counter>, body: String) -> HttpResponse {
    order(&hits, &body, SLOW_HANDLER).await
}

/// Opens the store's connections and prepares its statements while the
/// proxy adds no delay, as in an app that has been serving for a while:
/// the test measures a slow store, not a cold one.
pub async fn warm_up(store: &dyn Store) {
    for _ in 0..3 {
        join_all((0..WARM_UP_CONNECTIONS).map(|_| warm_up_cycle(store))).await;
    }
}

/// Every operation a request uses, once: claim, renew, complete, release, get.
async fn warm_up_cycle(store: &dyn Store) {
    let (lease, ttl) = (Duration::from_secs(5), Duration::from_secs(60));
    let request = fingerprint("warm-up");
    for release in [false, true] {
        let key = fresh_storage_key();
        let token = match store.claim(&key, &request, lease, ttl).await.expect("warm-up claim") {
            Claim::Acquired { token, .. } => token,
            other => panic!("warm-up claim of a fresh key: {other:?}"),
        };
        assert_eq!(store.renew(&key, token, lease).await.expect("warm-up renew"), Fence::Held);
        let fence = if release {
            store.release(&key, token).await.expect("warm-up release")
        } else {
            store.complete(&key, token, &response(b"warm-up"), ttl).await.expect("warm-up complete")
        };
        assert_eq!(fence, Fence::Held);
        store.get(&key).await.expect("warm-up get");
    }
}

/// Serves the one route `routes` adds (so that its lease is the smallest in
/// use) with `idem`; returns the server and the execution counter.
fn serve(idem: Idem, routes: fn(&mut ServiceConfig)) -> (TestServer, web::Data<Counter>) {
    let hits = web::Data::new(Counter::default());
    let shared = hits.clone();
    let server = TestServer::start(idem, move |config| {
        config.app_data(shared.clone());
        routes(config);
    });
    (server, hits)
}

/// Sends the order with `key` from a client of its own, on a task of its own.
fn spawn_post(url: &str, key: &str) -> actix_web::rt::task::JoinHandle<Reply> {
    let (url, key) = (url.to_owned(), key.to_owned());
    actix_web::rt::spawn(async move { send(&url, None, Some(&key), Some(BODY)).await })
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status.as_u16()).collect()
}

/// Whether `text` has `value` (as `Duration`'s `Debug` writes it: `2s`,
/// `500ms`) as a word of its own.
fn names(text: &str, value: Duration) -> bool {
    let value = format!("{value:?}");
    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '.').any(|word| word.trim_end_matches('.') == value)
}

/// The refused configuration (see the module docs) behind `proxy`, whose
/// store is `store`: the first request, then a duplicate every 100 ms for
/// 2 s, each from a client of its own. The route is refused with a 500
/// problem naming the store timeout and the lease, and the handler never
/// runs; at the very least, it never runs twice.
pub async fn assert_a_short_lease_is_refused(store: impl Store + 'static, proxy: &LatencyProxy) {
    warm_up(&store).await;
    let idem = Idem::new(store);
    let (server, hits) = serve(idem, |config| {
        config.service(short_lease_order);
    });
    proxy.set_delay(REFUSED_ONE_WAY);
    let (url, key) = (server.at("/slow/short-lease"), fresh_key());
    let first = spawn_post(&url, &key);
    let mut duplicates = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(DUPLICATE_EVERY).await;
        duplicates.push(spawn_post(&url, &key));
    }
    let first = first.await.expect("the first request's task");
    let duplicates: Vec<Reply> =
        join_all(duplicates).await.into_iter().map(|r| r.expect("a duplicate's task")).collect();
    let ran = hits.get();
    assert!(
        ran <= 1,
        "the handler ran {ran} times for one key ({SHORT_LEASE:?} lease, {:?} store round trip); \
         first reply {}, duplicates {:?}",
        2 * REFUSED_ONE_WAY,
        first.status,
        statuses(&duplicates)
    );
    let problem = first.assert_problem(500);
    let detail = problem["detail"].as_str().unwrap_or_default();
    let timeout = Idem::DEFAULT_STORE_TIMEOUT;
    assert!(
        names(detail, timeout) && names(detail, SHORT_LEASE),
        "the refusal must name the store timeout ({timeout:?}) and the lease ({SHORT_LEASE:?}): {problem}"
    );
    for duplicate in &duplicates {
        assert_eq!(duplicate.assert_problem(500), problem, "a duplicate was not refused the same way");
    }
    assert_eq!(ran, 0, "the refused configuration ran the handler");
    server.stop().await;
}

/// The slow but valid configuration (see the module docs) behind `proxy`,
/// whose store is `store`: while a 4 s handler runs, a duplicate every
/// 100 ms from a client of its own. The first request gets its 201, every
/// duplicate a 409 (or, once the response is stored, its replay), the
/// handler runs exactly once, and a retry afterwards is a replay.
pub async fn assert_a_slow_store_runs_the_handler_once(store: impl Store + 'static, proxy: &LatencyProxy) {
    warm_up(&store).await;
    assert_a_warm_slow_store_runs_the_handler_once(store, proxy).await;
}

/// [`assert_a_slow_store_runs_the_handler_once`] with a store the caller
/// has warmed up already (and perhaps done something to since).
pub async fn assert_a_warm_slow_store_runs_the_handler_once(store: impl Store + 'static, proxy: &LatencyProxy) {
    let idem = Idem::new(store).store_timeout(SLOW_STORE_TIMEOUT);
    let (server, hits) = serve(idem, |config| {
        config.service(slow_order);
    });
    proxy.set_delay(SLOW_ONE_WAY);
    let (url, key) = (server.at("/slow/orders"), fresh_key());
    let first = spawn_post(&url, &key);
    // Duplicates start once the first request runs its handler.
    let started = Instant::now();
    while hits.get() == 0 {
        if first.is_finished() {
            let reply = first.await.expect("the first request's task");
            panic!("the first request ended without running the handler: {reply:?}");
        }
        assert!(started.elapsed() < Duration::from_secs(3), "the first request never reached its handler");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut duplicates = Vec::new();
    while !first.is_finished() {
        duplicates.push(spawn_post(&url, &key));
        tokio::time::sleep(DUPLICATE_EVERY).await;
    }
    let first = first.await.expect("the first request's task");
    let duplicates: Vec<Reply> =
        join_all(duplicates).await.into_iter().map(|r| r.expect("a duplicate's task")).collect();
    assert_eq!(
        hits.get(),
        1,
        "the handler ran more than once; first reply {}, duplicates {:?}",
        first.status,
        statuses(&duplicates)
    );
    assert_eq!((first.status, first.replayed.as_deref()), (StatusCode::CREATED, None), "{first:?}");
    let mut conflicts = 0;
    for duplicate in &duplicates {
        if duplicate.status == StatusCode::CONFLICT {
            duplicate.assert_problem(409);
            assert!(duplicate.retry_after.is_some(), "409 without Retry-After: {duplicate:?}");
            conflicts += 1;
        } else {
            // Sent after the response was stored, before the first client had it.
            let replay = (duplicate.status, duplicate.replayed.as_deref(), &duplicate.body);
            assert_eq!(replay, (StatusCode::CREATED, Some("true"), &first.body), "{duplicate:?}");
        }
    }
    assert!(
        conflicts >= duplicates.len() / 2,
        "few duplicates found the request in flight: {:?}",
        statuses(&duplicates)
    );
    let retry = send(&url, None, Some(&key), Some(BODY)).await;
    assert_eq!(
        (retry.status, retry.replayed.as_deref(), &retry.body),
        (StatusCode::CREATED, Some("true"), &first.body)
    );
    assert_eq!(hits.get(), 1);
    server.stop().await;
}
