//! A process stopped while its Redis Cluster fails over, twice, then
//! resumed into the second failover: the store must answer again once the
//! cluster is healthy.
//!
//! Found by the fault campaign: an order service frozen (SIGSTOP) for a
//! minute across two primary kills came back with its cluster connection
//! answering nothing, for good, while the lease keeper (on connections of
//! its own) kept its executions' leases alive, so their keys stayed in
//! flight. The redis crate's cluster client had deadlocked in its own
//! recovery. Here the "process" is a store on a single-threaded runtime of
//! its own, blocked on its thread like a stopped process, under 256 tasks
//! that never stop calling the store: the second failover's replica is
//! promoted while it is stopped, and its old primary comes back (as a
//! replica) while it reconnects. The deadlock is a race: without the fix,
//! the first round failed in each of 3 runs here ("answered 0 calls"), and
//! with it a connection was replaced in the first or second round of each
//! of 4 runs. Rounds go on until the store has replaced a stalled
//! connection (its log says so, and it is replaced only once it stayed
//! silent) or they run out. Each round starts a new process, and must see
//! it answer again within a few seconds of the cluster's health.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use idem_runtime::RedisStore;
use idem_runtime::store::{IdempotencyKey, Scope, StorageKey, Store};
use idem_tests::logs::Logs;
use idem_tests::redis_cluster::RedisCluster;

/// Rounds at most, each about 8 to 12 s.
const ROUNDS: u32 = 4;
/// Tasks calling the store: with 64, the client stalled in about one
/// round in ten here; with 256, in one of the first two rounds of every
/// run.
const CALLERS: u64 = 256;
/// How long after the process resumes the second failover's dead primary
/// comes back (as a replica): while the client is busy reconnecting.
const BACK_AFTER: Duration = Duration::from_millis(1300);
/// How soon after the cluster is healthy again the store must answer: a
/// stall noticed and confirmed (2 s), a pause between replacements (2 s)
/// and a new connection opened (a few seconds on a loaded machine).
const RECOVERY: Duration = Duration::from_secs(12);
/// The engine's own bound on one store call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

fn key(caller: u64, n: u64) -> StorageKey {
    let key = IdempotencyKey::parse(format!("stall-{caller}-{}", n % 61).as_bytes()).expect("a valid key");
    StorageKey::new(Scope::Route, None, "POST", "/stall", &key)
}

/// What the store's thread is told.
enum Order {
    /// Stop the runtime, say so on the first channel, and wait on the second.
    Pause(mpsc::Sender<()>, mpsc::Receiver<()>),
    Stop,
}

/// The store on a runtime of its own, on a thread of its own, with
/// `CALLERS` tasks calling `get` without end and counting answers.
struct Process {
    answers: Arc<AtomicU64>,
    orders: mpsc::Sender<Order>,
    thread: std::thread::JoinHandle<()>,
    logs: Logs,
}

impl Process {
    fn start(url: String) -> Self {
        let answers = Arc::new(AtomicU64::new(0));
        let (orders, received) = mpsc::channel::<Order>();
        let logs = Logs::default();
        let (counted, captured) = (Arc::clone(&answers), logs.clone());
        let thread = std::thread::spawn(move || {
            let _capture = captured.capture(tracing::Level::INFO);
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async move {
                let store = RedisStore::connect(&url).await.expect("connecting to the private cluster");
                for caller in 0..CALLERS {
                    let (store, answers) = (store.clone(), Arc::clone(&counted));
                    tokio::spawn(async move {
                        for n in 0.. {
                            match tokio::time::timeout(CALL_TIMEOUT, store.get(&key(caller, n))).await {
                                Ok(Ok(_)) => {
                                    answers.fetch_add(1, Ordering::Relaxed);
                                }
                                _ => tokio::time::sleep(Duration::from_millis(20)).await,
                            }
                        }
                    });
                }
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    match received.try_recv() {
                        // The whole runtime stops, like a stopped process.
                        Ok(Order::Pause(paused, resume)) => {
                            let _ = paused.send(());
                            let _ = resume.recv();
                        }
                        Ok(Order::Stop) | Err(mpsc::TryRecvError::Disconnected) => break,
                        Err(mpsc::TryRecvError::Empty) => {}
                    }
                }
            });
        });
        Self { answers, orders, thread, logs }
    }

    fn answers(&self) -> u64 {
        self.answers.load(Ordering::Relaxed)
    }

    /// Stops the process's runtime; it resumes when the sender returned is
    /// used or dropped.
    fn pause(&self) -> mpsc::Sender<()> {
        let (paused, stopped) = mpsc::channel();
        let (resume, resumed) = mpsc::channel();
        self.orders.send(Order::Pause(paused, resumed)).expect("the store's thread");
        stopped.recv_timeout(Duration::from_secs(10)).expect("the store's runtime to stop");
        resume
    }

    fn replacements(&self) -> usize {
        self.logs.text().matches("replaced the one that stopped answering").count()
    }

    fn stop(self) {
        let _ = self.orders.send(Order::Stop);
        self.thread.join().expect("the store's thread");
    }
}

#[test]
fn a_process_resumed_into_a_failover_gets_a_store_that_answers() {
    let Some(mut cluster) = RedisCluster::start("a_process_resumed_into_a_failover_gets_a_store_that_answers") else {
        return;
    };
    let mut replaced = 0;
    for round in 0..ROUNDS {
        let process = Process::start(cluster.url());
        let started = Instant::now();
        while process.answers() < 1000 {
            assert!(started.elapsed() < Duration::from_secs(10), "round {round}: the store did not answer at first");
            std::thread::sleep(Duration::from_millis(50));
        }
        let resume = process.pause();
        // The first failover, over while the process is stopped.
        let first = cluster.primary_of(&format!("{{first-{round}}}"));
        cluster.kill(first);
        cluster.wait_for_new_primary(first, Duration::from_secs(20));
        cluster.restart(first);
        cluster.wait_until_healthy(Duration::from_secs(30));
        // The second: its replica promoted while the process is stopped, its
        // primary back (as a replica) while the process reconnects.
        let second = cluster.primary_of(&format!("{{second-{round}}}"));
        cluster.kill(second);
        cluster.wait_for_new_primary(second, Duration::from_secs(20));
        drop(resume);
        std::thread::sleep(BACK_AFTER);
        cluster.restart(second);
        cluster.wait_until_healthy(Duration::from_secs(30));
        let healthy = Instant::now();
        let before = process.answers();
        while process.answers() < before + 100 {
            assert!(
                healthy.elapsed() < RECOVERY,
                "round {round}: the store answered {} calls in the {RECOVERY:?} after the cluster was healthy \
                 again\nits log:\n{}",
                process.answers() - before,
                process.logs.summary()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        replaced += process.replacements();
        eprintln!(
            "round {round}: the store answered again {:?} after the cluster's health; connections replaced: {}",
            healthy.elapsed(),
            process.replacements()
        );
        process.stop();
        if replaced > 0 {
            break;
        }
    }
    if replaced == 0 {
        eprintln!("no round stalled the cluster client ({ROUNDS} rounds): the race was not met this time");
    }
}
