//! A handler that blocks its actix worker thread for longer than its lease,
//! beside a well-behaved one on the same worker, while a second server (a
//! second process, as far as the store can tell) receives their duplicates.
//! Shared by the memory, Redis and Postgres suites.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, post, web};
use idem_runtime::store::Store;
use idem_runtime::{Idem, idempotent};

use crate::counter::Counter;
use crate::http::{fresh_key, send};
use crate::server::TestServer;

/// The lease of both routes: long enough that a loaded machine (the suites
/// run side by side on two cores) answers a claim and starts its handler
/// within it, or the request is refused (503) and the test has nothing to
/// show.
const LEASE: Duration = Duration::from_secs(2);
/// How long the blocking handler holds its thread: 1.5 × the lease.
const BLOCK: Duration = Duration::from_millis(3000);

/// Executions of each route.
#[derive(Debug, Default)]
pub struct Hits {
    blocking: Counter,
    polite: Counter,
}

/// Blocks its worker thread (a synchronous SDK call, heavy CPU).
#[idempotent(scope = "global", lock_ttl = "2s", ttl = "1h")]
#[post("/blocking")]
async fn blocking(hits: web::Data<Hits>) -> HttpResponse {
    hits.blocking.next();
    std::thread::sleep(BLOCK);
    HttpResponse::Created().body("blocked, then charged")
}

/// Waits without blocking, on the same worker.
#[idempotent(scope = "global", lock_ttl = "2s", ttl = "1h")]
#[post("/polite")]
async fn polite(hits: web::Data<Hits>) -> HttpResponse {
    hits.polite.next();
    tokio::time::sleep(BLOCK + LEASE).await;
    HttpResponse::Created().body("waited, then charged")
}

fn serve(store: &Arc<dyn Store>, hits: &web::Data<Hits>) -> TestServer {
    let idem = Idem::from_arc(Arc::clone(store)).store_timeout(LEASE / 4);
    let hits = hits.clone();
    // One worker: both handlers share its thread.
    TestServer::with_workers(1, idem, move |config| {
        config.app_data(hits.clone()).service(blocking).service(polite);
    })
}

/// A worker blocked for 1.5 × `lock_ttl` keeps its own lease and its
/// neighbour's: duplicates sent meanwhile to another server get 409, and
/// each handler runs once. Must be called inside an actix system.
///
/// `first` and `second` are the two servers' stores: two handles on one
/// backend, as two processes have (a connection pool shared by two actix
/// systems would stall the second on connections the blocked one opened),
/// or the same memory store.
pub async fn a_blocked_worker_keeps_every_lease_on_it(first: Arc<dyn Store>, second: Arc<dyn Store>) {
    let hits = web::Data::new(Hits::default());
    let (first, second) = (serve(&first, &hits), serve(&second, &hits));
    let (polite_key, blocking_key) = (fresh_key(), fresh_key());
    let polite_url = first.at("/polite");
    let polite_first = actix_web::rt::spawn({
        let key = polite_key.clone();
        async move { send(&polite_url, None, Some(&key), Some("{}")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let blocking_url = first.at("/blocking");
    let blocked_at = Instant::now();
    let blocking_first = actix_web::rt::spawn({
        let key = blocking_key.clone();
        async move { send(&blocking_url, None, Some(&key), Some("{}")).await }
    });
    // Duplicates of both, to the other server, while the first one's worker
    // is blocked and past the lease.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let until = blocked_at + BLOCK - Duration::from_millis(150);
    let mut duplicates = 0;
    while Instant::now() < until {
        for (path, key) in [("/blocking", &blocking_key), ("/polite", &polite_key)] {
            let reply = send(&second.at(path), None, Some(key), Some("{}")).await;
            assert_eq!(reply.status.as_u16(), 409, "{path}: a duplicate during the block must not run: {reply:?}");
            duplicates += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(duplicates >= 8, "only {duplicates} duplicates were sent");
    let (blocking_first, polite_first) = (blocking_first.await.unwrap(), polite_first.await.unwrap());
    assert_eq!(blocking_first.status.as_u16(), 201, "{blocking_first:?}");
    assert_eq!(polite_first.status.as_u16(), 201, "{polite_first:?}");
    for (path, key, body) in [("/blocking", &blocking_key, "blocked"), ("/polite", &polite_key, "waited")] {
        let replay = send(&second.at(path), None, Some(key), Some("{}")).await;
        assert_eq!(replay.status.as_u16(), 201, "{path}: {replay:?}");
        assert_eq!(replay.replayed.as_deref(), Some("true"), "{path}");
        assert!(replay.body.starts_with(body.as_bytes()), "{path}: {replay:?}");
    }
    assert_eq!(hits.blocking.get(), 1, "the blocking handler ran twice");
    assert_eq!(hits.polite.get(), 1, "the handler beside the blocking one ran twice");
    first.stop().await;
    second.stop().await;
}
