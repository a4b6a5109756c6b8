//! Each thread that uses a `RedisStore` gets a connection of its own (its
//! driver then runs on the thread that waits for the replies), opened in
//! the background; a thread whose runtime has shut down gets a new one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::RedisStore;
use idem_runtime::store::testing::{fingerprint, fresh_key};
use idem_runtime::store::{Claim, Store};
use idem_tests::redis_server::RedisServer;

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(600);

/// Clients connected to the server, as `CLIENT LIST` counts them (this
/// connection included).
async fn clients(url: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut connection).await.unwrap();
    list.lines().count()
}

/// A private server, and the runtime the store's shared connection lives
/// on (a runtime of its own, as an application's main runtime would be).
struct Private {
    /// Shut down first (fields drop in order), then the server stops.
    main: tokio::runtime::Runtime,
    url: String,
    _server: RedisServer,
}

impl Private {
    /// `None` when the test is skipped (no server outside `scripts/test`).
    fn start(test: &str) -> Option<Self> {
        let server = RedisServer::start(test)?;
        let url = server.url();
        let main = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        Some(Self { main, url, _server: server })
    }

    fn store(&self) -> RedisStore {
        self.main.block_on(RedisStore::connect(&self.url)).expect("connecting the store")
    }

    fn clients(&self) -> usize {
        self.main.block_on(clients(&self.url))
    }

    /// Claims on `runtime` until this thread's connection for it is open
    /// (`CLIENT LIST` reaches `clients`).
    fn until_open(&self, runtime: &tokio::runtime::Runtime, store: &RedisStore, clients: usize) {
        let started = Instant::now();
        while self.clients() < clients {
            assert!(matches!(claim_here(runtime, store), Claim::Acquired { .. }));
            assert!(started.elapsed() < Duration::from_secs(5), "the runtime's connection was never opened");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Claims a new key on `store`, on a runtime of this thread's own.
fn claim_here(runtime: &tokio::runtime::Runtime, store: &RedisStore) -> Claim {
    runtime.block_on(store.claim(&fresh_key(), &fingerprint("thread"), LEASE, TTL)).expect("claiming")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn each_thread_gets_one_connection_of_its_own() {
    let Some(private) = Private::start("each_thread_gets_one_connection_of_its_own") else { return };
    let store = Arc::new(private.store());
    let before = private.clients();
    // Two threads, each with a runtime of its own (as actix workers have),
    // claim 200 keys each.
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let runtime = current_thread();
                for _ in 0..200 {
                    assert!(matches!(claim_here(&runtime, &store), Claim::Acquired { .. }));
                }
                // Kept running until the count below is taken.
                runtime
            })
        })
        .collect();
    let runtimes: Vec<_> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
    // One more each, and no more however many requests.
    assert_eq!(private.clients(), before + 2);
    drop(runtimes);
}

/// Claims 50 keys on `runtime`, each in well under the response timeout.
fn claims_promptly(runtime: &tokio::runtime::Runtime, store: &RedisStore) {
    for _ in 0..50 {
        let started = Instant::now();
        assert!(matches!(claim_here(runtime, store), Claim::Acquired { .. }));
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    }
}

#[test]
fn a_connection_serves_only_the_runtime_that_opened_it() {
    let Some(private) = Private::start("a_connection_serves_only_the_runtime_that_opened_it") else { return };
    let store = private.store();
    // The shared connection and the one `clients` opens: 2.
    let first = current_thread();
    private.until_open(&first, &store, 3);
    // A second runtime on this thread, the first one idle but alive: its
    // driver does not run, so its connection must not carry this one's
    // commands (they would wait for the response timeout).
    let second = current_thread();
    claims_promptly(&second, &store);
    private.until_open(&second, &store, 4);
    // The first runtime is gone, and its connection with it.
    drop(first);
    claims_promptly(&second, &store);
    drop(second);
    let third = current_thread();
    claims_promptly(&third, &store);
}

/// An application that replaces its store (a configuration reload, a store
/// per tenant) on long-lived workers: a dropped store leaves no connection
/// open on them.
#[test]
fn a_dropped_store_leaves_no_connection_on_a_live_runtime() {
    let Some(private) = Private::start("a_dropped_store_leaves_no_connection_on_a_live_runtime") else { return };
    let worker = current_thread();
    let before = private.clients();
    for _ in 0..5 {
        let store = private.store();
        // The shared connection, the one `clients` opens, the worker's.
        private.until_open(&worker, &store, before + 2);
        drop(store);
        worker.block_on(async { tokio::time::sleep(Duration::from_millis(100)).await });
    }
    let after = private.clients();
    assert!(after <= before, "{} connections left open by 5 dropped stores", after - before);
}

/// Store calls from blocking threads of a single-threaded runtime (actix's
/// `web::block`): each blocking thread opens a connection of its own, which
/// goes when the thread ends.
#[test]
fn a_blocking_thread_that_ends_leaves_no_connection_behind() {
    let Some(private) = Private::start("a_blocking_thread_that_ends_leaves_no_connection_behind") else { return };
    let store = Arc::new(private.store());
    let before = private.clients();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_keep_alive(Duration::from_millis(20))
        .build()
        .unwrap();
    runtime.block_on(async {
        for _ in 0..5 {
            let store = Arc::clone(&store);
            tokio::task::spawn_blocking(move || {
                let handle = tokio::runtime::Handle::current();
                for _ in 0..5 {
                    let claim = handle.block_on(store.claim(&fresh_key(), &fingerprint("blocking"), LEASE, TTL));
                    assert!(matches!(claim, Ok(Claim::Acquired { .. })));
                    std::thread::sleep(Duration::from_millis(40));
                }
            })
            .await
            .unwrap();
            // The blocking thread ends (keep-alive 20 ms).
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let after = private.clients();
    assert!(after <= before + 1, "{} connections for 5 blocking threads that ended", after - before);
}
