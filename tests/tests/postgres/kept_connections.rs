//! The connections each runtime keeps between operations: while workers
//! keep the whole pool busy, everything else that waits for it still gets a
//! connection within a fraction of a second, and a runtime that ends gives
//! its connections back.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use idem_runtime::PostgresStore;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, Store};
use idem_tests::backend::{postgres_store, url};

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(60);

/// The tests whose workers keep the machine's cores busy take turns (side
/// by side, each would measure the others' load).
static BUSY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One first execution: a claim and its completion.
async fn first_execution(store: &PostgresStore) {
    let key = fresh_key();
    let token = match store.claim(&key, &fingerprint("kept"), LEASE, TTL).await.expect("a claim") {
        Claim::Acquired { token, .. } => token,
        other => panic!("a fresh key's claim: {other:?}"),
    };
    let fence = store.complete(&key, token, &response(b"kept"), TTL).await.expect("a completion");
    assert_eq!(fence, Fence::Held);
}

/// A worker: a single-threaded runtime of its own, running first executions
/// back to back, four at a time, until `stop`. Its runtime runs on until
/// every worker of `stopped` has stopped: a connection is driven by the
/// runtime that opened it, so one opened here and kept by another worker
/// would fail there once this runtime has ended, or wait while it is
/// blocked (sqlx's connections are bound to their runtime; not what these
/// tests are about).
fn worker(
    store: PostgresStore,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    stopped: Arc<tokio::sync::Barrier>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let loops = (0..4).map(|_| async {
                while !stop.load(Ordering::Acquire) {
                    first_execution(&store).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
            let ended = AssertUnwindSafe(futures_util::future::join_all(loops)).catch_unwind().await;
            // Not for ever: one whose loop panicked has stopped too.
            let _ = tokio::time::timeout(Duration::from_secs(10), stopped.wait()).await;
            if let Err(panic) = ended {
                std::panic::resume_unwind(panic);
            }
        });
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_serves_others_while_workers_keep_its_connections() {
    let test = "postgres the_pool_serves_others_while_workers_keep_its_connections";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    let _turn = BUSY.lock().await;
    // Two connections, wanted by eight operations at a time.
    let store = postgres_store(&url, 2).await;
    let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let stopped = Arc::new(tokio::sync::Barrier::new(2));
    let workers: Vec<_> =
        (0..2).map(|_| worker(store.clone(), Arc::clone(&stop), Arc::clone(&done), Arc::clone(&stopped))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = done.load(Ordering::Relaxed);
    let mut waits = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let connection = tokio::time::timeout(Duration::from_secs(2), store.pool().acquire()).await;
        let waited = started.elapsed();
        let connection = connection
            .unwrap_or_else(|_| {
                panic!("no connection from the pool in 2 s while the workers ran; waits so far {waits:?}")
            })
            .expect("a connection");
        waits.push(waited);
        drop(connection);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = done.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Release);
    for worker in workers {
        worker.join().expect("a worker ended without panicking");
    }
    assert!(during > 0, "the workers made no progress while the pool was shared");
    // Each wait is bounded by the workers giving their connections back to
    // the pool (a quarter of a second after they took them) plus its ping.
    let longest = waits.iter().max().copied().unwrap_or_default();
    assert!(longest < Duration::from_secs(1), "waited up to {longest:?} for the pool: {waits:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_ends_gives_its_connections_back() {
    let test = "postgres a_runtime_that_ends_gives_its_connections_back";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    let store = postgres_store(&url, 2).await;
    let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    // It keeps both connections, then its runtime ends with the thread.
    let worker = worker(store.clone(), Arc::clone(&stop), Arc::clone(&done), Arc::new(tokio::sync::Barrier::new(1)));
    while done.load(Ordering::Relaxed) < 50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Release);
    worker.join().expect("the worker's runtime ended without panicking");
    // Both are the pool's again (kept for ever, they never would be).
    let started = Instant::now();
    let both = tokio::time::timeout(
        Duration::from_secs(1),
        futures_util::future::try_join(store.pool().acquire(), store.pool().acquire()),
    )
    .await;
    assert!(
        matches!(both, Ok(Ok(_))),
        "the pool's two connections were not back {:?} after the runtime ended: {both:?}",
        started.elapsed()
    );
}

/// A runtime kept in a thread local is dropped by its destructor, without a
/// Tokio context: the connections it keeps are closed, never given back
/// through a task (sqlx would panic there, twice: an abort).
#[test]
fn a_runtime_dropped_by_a_thread_local_destructor_closes_its_connections() {
    let test = "postgres a_runtime_dropped_by_a_thread_local_destructor_closes_its_connections";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    }
    // Four connections: two kept idle when the thread ends.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let store = runtime.block_on(postgres_store(&url, 4));
    let worker = {
        let store = store.clone();
        std::thread::spawn(move || {
            RUNTIME.with(|runtime| {
                runtime.block_on(futures_util::future::join(first_execution(&store), first_execution(&store)));
            });
        })
    };
    worker.join().expect("the thread ended, its runtime dropped, without a panic");
    // Their places in the pool are free again.
    let both = runtime.block_on(async {
        let all = (0..4).map(|_| store.pool().acquire());
        let both = futures_util::future::try_join_all(all);
        // Given back inside the runtime.
        tokio::time::timeout(Duration::from_secs(2), both).await.map(|both| both.map(drop))
    });
    assert!(matches!(both, Ok(Ok(()))), "the pool's places were not freed: {both:?}");
}

/// During an outage, an operation on a single-threaded runtime fails after
/// the pool's acquire timeout, not after it twice (waiting for its
/// runtime's fetch, then asking the pool itself).
#[test]
fn an_operation_fails_within_the_acquire_timeout_during_an_outage() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        // Nothing listens there.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("its address").port();
        drop(listener);
        let acquire = Duration::from_millis(800);
        let pool = PostgresStore::pool_options()
            .acquire_timeout(acquire)
            .connect_lazy(&format!("postgres://idem@127.0.0.1:{port}/none"))
            .expect("a lazy pool");
        let store = PostgresStore::new(pool).with_operation_timeout(None);
        let started = Instant::now();
        let failed = store.get(&fresh_key()).await;
        let took = started.elapsed();
        assert!(failed.is_err(), "{failed:?}");
        assert!(took < acquire + acquire / 2, "failed after {took:?}, with an acquire timeout of {acquire:?}");
    });
}

/// A transaction on a pool of one, taken after a claim on the same
/// runtime, does not wait for the claim's connection to be given back
/// later: nobody else waits here, so it goes back to the pool at once.
#[test]
fn a_transaction_after_a_claim_gets_the_only_connection_at_once() {
    let test = "postgres a_transaction_after_a_claim_gets_the_only_connection_at_once";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let store = postgres_store(&url, 1).await;
        for _ in 0..5 {
            let claimed = store.claim(&fresh_key(), &fingerprint("tx"), LEASE, TTL).await.expect("a claim");
            assert!(matches!(claimed, Claim::Acquired { .. }), "{claimed:?}");
            let started = Instant::now();
            let tx = tokio::time::timeout(Duration::from_secs(2), store.pool().begin()).await;
            let waited = started.elapsed();
            assert!(matches!(tx, Ok(Ok(_))), "{tx:?}");
            // Kept for the keeping time, it would be a quarter of a second
            // and more.
            assert!(waited < Duration::from_millis(150), "the transaction waited {waited:?} for the pool");
        }
    });
}

/// A worker whose thread a handler blocks keeps its connections; another
/// worker does not take them while the pool can open more (each is driven
/// by its worker's runtime: it would wait for the blocked thread).
#[test]
fn a_blocked_worker_holds_nobody_else_up_while_the_pool_has_room() {
    let test = "postgres a_blocked_worker_holds_nobody_else_up_while_the_pool_has_room";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    let setup = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let store = setup.block_on(postgres_store(&url, 8));
    let (kept, blocked) = (Arc::new(Barrier::new(2)), Duration::from_secs(3));
    let worker = {
        let (store, kept) = (store.clone(), Arc::clone(&kept));
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async {
                let keys = [fresh_key(), fresh_key(), fresh_key()];
                for got in futures_util::future::join_all(keys.iter().map(|key| store.get(key))).await {
                    got.expect("a lookup");
                }
            });
            kept.wait();
            // A handler blocking its worker thread.
            std::thread::sleep(blocked);
            drop(runtime);
        })
    };
    kept.wait();
    let other = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let took = other.block_on(async {
        let started = Instant::now();
        let keys = [fresh_key(), fresh_key(), fresh_key()];
        for got in futures_util::future::join_all(keys.iter().map(|key| store.get(key))).await {
            got.expect("a lookup");
        }
        started.elapsed()
    });
    worker.join().expect("the blocked worker");
    assert!(took < blocked / 2, "the other worker's lookups took {took:?}: they waited for the blocked one");
}

/// Workers whose operations keep every connection of the pool busy give
/// them way as soon as another worker waits for one: the other's
/// operations wait for one of the busy workers' operations, or for a
/// connection's turn when the pool is smaller than the workers, not until
/// the busy workers' connections are due back to the pool.
#[test]
fn a_busy_worker_shares_the_pool_with_another_that_waits() {
    let test = "postgres a_busy_worker_shares_the_pool_with_another_that_waits";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    assert_the_other_waits_briefly(&url, 4, 1, Duration::from_millis(50));
}

/// As above, with two busy workers sharing the pool: neither gives way for
/// the other, and both for the one that has none.
#[test]
fn two_busy_workers_share_the_pool_with_another_that_waits() {
    let test = "postgres two_busy_workers_share_the_pool_with_another_that_waits";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    assert_the_other_waits_briefly(&url, 4, 2, Duration::from_millis(50));
}

/// As above, with more workers than connections: they take turns.
#[test]
fn busy_workers_take_turns_on_a_pool_smaller_than_they_are() {
    let test = "postgres busy_workers_take_turns_on_a_pool_smaller_than_they_are";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    assert_the_other_waits_briefly(&url, 2, 3, Duration::from_millis(150));
}

/// `busy` workers run eight lookups at a time each on a pool of
/// `connections`, so they keep all of it, and each always has an operation
/// waiting for the next; another worker looks a key up eight times (after
/// a first), with none kept before each: at least two of its waits are under `under`,
/// well under the time the busy workers keep a connection.
fn assert_the_other_waits_briefly(url: &str, connections: u32, busy: usize, under: Duration) {
    let _turn = BUSY.blocking_lock();
    let setup = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let store = setup.block_on(postgres_store(url, connections));
    let (stop, looked_up) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let stopped = Arc::new(tokio::sync::Barrier::new(busy));
    let busy: Vec<_> = (0..busy)
        .map(|_| {
            let (store, stop, looked_up) = (store.clone(), Arc::clone(&stop), Arc::clone(&looked_up));
            let stopped = Arc::clone(&stopped);
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                runtime.block_on(async {
                    let loops = (0..8).map(|_| async {
                        while !stop.load(Ordering::Acquire) {
                            store.get(&fresh_key()).await.expect("a lookup");
                            looked_up.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    futures_util::future::join_all(loops).await;
                    // Its runtime runs until all have stopped (one may use
                    // a connection this one drives).
                    let _ = tokio::time::timeout(Duration::from_secs(10), stopped.wait()).await;
                });
            })
        })
        .collect();
    while looked_up.load(Ordering::Relaxed) < 200 {
        assert!(!busy.iter().any(|worker| worker.is_finished()), "a busy worker ended early");
        std::thread::sleep(Duration::from_millis(10));
    }
    let other = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let waits = other.block_on(async {
        let mut waits = Vec::new();
        // A first round out of step with the others (sometimes brief
        // without giving way), then eight.
        for round in 0..9 {
            // The connection it kept from the last round is due back to
            // the pool: it has none again.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let started = Instant::now();
            store.get(&fresh_key()).await.expect("a lookup");
            if round > 0 {
                waits.push(started.elapsed());
            }
        }
        // This runtime runs until the busy ones have stopped (they may have
        // taken a connection this one drives).
        stop.store(true, Ordering::Release);
        while !busy.iter().all(|worker| worker.is_finished()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        waits
    });
    for worker in busy {
        worker.join().expect("a busy worker");
    }
    drop(other);
    // Connections are due back to the pool a quarter of a second after they
    // were taken: waiting for that takes 65 to 100 ms here with room for
    // one connection each, 300 to 350 ms with more workers than
    // connections (a millisecond for one of the busy workers' lookups, 30
    // ms for a connection's turn). Two rounds of eight: a loaded machine
    // slows rounds down, never speeds one up.
    let brief = waits.iter().filter(|&&wait| wait < under).count();
    assert!(brief >= 2, "the other worker waited {under:?} or more in {} rounds of 8: {waits:?}", 8 - brief);
}

/// A single-threaded runtime driven from several threads in turn (a
/// `block_on` on each) keeps one list of connections, tended by one task:
/// not one per thread.
#[test]
fn a_runtime_driven_from_many_threads_keeps_one_list() {
    let test = "postgres a_runtime_driven_from_many_threads_keeps_one_list";
    let Some(url) = url("IDEM_POSTGRES_URL", test) else { return };
    let setup = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let store = setup.block_on(postgres_store(&url, 4));
    let runtime = Arc::new(tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"));
    for _ in 0..10 {
        let (runtime, store) = (Arc::clone(&runtime), store.clone());
        std::thread::spawn(move || runtime.block_on(first_execution(&store))).join().expect("a first execution");
    }
    // Its list's task, and at most one giving a connection back.
    let tasks = runtime.metrics().num_alive_tasks();
    assert!(tasks <= 2, "{tasks} tasks alive on the runtime after ten threads drove it");
}
