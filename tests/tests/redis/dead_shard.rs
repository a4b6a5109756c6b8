//! Renewal batches whose leases live on several primaries of a private
//! cluster, one of them killed and left dead: its leases go unanswered
//! (`Fence::Unknown`, tried again) while the others are renewed, batch
//! after batch. One failed shard must not cost every lease of the process.
//!
//! Through the redis crate's cluster client (1.8.1), it did: the dead
//! primary's renewals set the client rebuilding its slot map, one rebuild
//! waited for good on the client's own lock, and from the second or third
//! batch on no renewal was answered at all, the live primaries' included,
//! for as long as the primary stayed dead. Leases that go unrenewed lapse,
//! and a second request may then run. The store now sends renewals to each
//! primary on a connection of its own.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_runtime::RedisStore;
use idem_runtime::store::testing::{fingerprint, fresh_key};
use idem_runtime::store::{Claim, Fence, Renewal, Store};
use idem_tests::redis_cluster::RedisCluster;
use idem_tests::redis_node::{info_field, served_slots, slot_of};

/// How long batches are sent after the kill.
const WINDOW: Duration = Duration::from_secs(4);
/// Fewest batches sent after the kill.
const BATCHES: usize = 5;

/// The store's warnings (each lease or slot group that failed, and why),
/// kept for the failure message.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<u8>>>);

impl Write for Warnings {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Warnings {
    /// The distinct warnings, each with how often it came.
    fn summary(&self) -> String {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        let mut seen: Vec<(String, usize)> = Vec::new();
        for line in text.lines() {
            match seen.iter_mut().find(|(known, _)| known == line) {
                Some((_, count)) => *count += 1,
                None => seen.push((line.to_owned(), 1)),
            }
        }
        seen.iter().take(20).map(|(line, count)| format!("{count} x {line}\n")).collect()
    }
}

/// The dead primary's replica is kept from taking over, so the shard stays
/// dead for the whole test, and the other primaries keep serving the slots
/// they cover (`cluster-require-full-coverage no`; under the default every
/// node refuses commands once the dead one is flagged as failed). A node
/// timeout of 5 s, not the cluster's 1 s, keeps a loaded machine's stalls
/// from making a live primary think itself in the minority (it then refuses
/// commands too). Every batch must leave the dead primary's leases
/// unanswered and never lose one; the live primaries' leases must be renewed
/// in every batch but one (a loaded machine may make one batch late). A
/// failure says what each batch got and why.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_primary_leaves_only_its_own_renewals_unanswered() {
    let Some(mut cluster) = RedisCluster::start("a_dead_primary_leaves_only_its_own_renewals_unanswered") else {
        return;
    };
    let warnings = Warnings::default();
    let writer = warnings.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _capture = tracing::subscriber::set_default(subscriber);

    let store = RedisStore::connect(&cluster.url()).await.expect("connecting to the private cluster");
    let lease = Duration::from_secs(30);
    let mut renewals = Vec::new();
    for _ in 0..60 {
        let key = fresh_key();
        let Claim::Acquired { token, .. } = store.claim(&key, &fingerprint("a"), lease, lease * 2).await.unwrap()
        else {
            panic!("a fresh key is acquired");
        };
        renewals.push(Renewal { key, token, lease });
    }
    let dead = cluster.primary_of("{probe}");
    let slots = served_slots(&format!("127.0.0.1:{dead}")).expect("the primary's slots");
    let on_dead: Vec<bool> = renewals
        .iter()
        .map(|renewal| slots.iter().any(|range| range.contains(&slot_of(&store.record_key(&renewal.key)))))
        .collect();
    assert!(on_dead.iter().any(|&d| d) && on_dead.iter().any(|&d| !d), "leases on the dead primary and on others");
    let set = |name: &str, value: &str| redis::cmd("CONFIG").arg("SET").arg(name).arg(value).clone();
    for port in cluster.live_ports() {
        let () = cluster.query(port, &set("cluster-require-full-coverage", "no")).expect("CONFIG SET");
        let () = cluster.query(port, &set("cluster-node-timeout", "5000")).expect("CONFIG SET");
    }
    let replicas = cluster.replicas_of(dead);
    assert!(!replicas.is_empty(), "the primary to kill has a replica");
    for replica in replicas {
        let () = cluster.query(replica, &set("cluster-replica-no-failover", "yes")).expect("CONFIG SET");
    }
    // The renewals' own connections are open, as in a running service.
    assert!(store.renew_many(&renewals).await.unwrap().iter().all(|fence| *fence == Fence::Held));
    cluster.kill(dead);

    let started = Instant::now();
    let mut batches = Vec::new();
    let mut late = 0;
    while started.elapsed() < WINDOW || batches.len() < BATCHES {
        let sent = started.elapsed();
        let fences = store.renew_many(&renewals).await.unwrap_or_else(|error| {
            batches.push(format!("{sent:.2?}: the batch failed: {error}"));
            vec![Fence::Unknown; renewals.len()]
        });
        for (i, fence) in fences.iter().enumerate() {
            assert_ne!(*fence, Fence::Lost, "renewal {i} (on the dead primary: {})", on_dead[i]);
        }
        let count = |dead: bool, fence: Fence| {
            fences.iter().zip(&on_dead).filter(|(got, on)| **on == dead && **got == fence).count()
        };
        let (dead_held, live_held) = (count(true, Fence::Held), count(false, Fence::Held));
        let live = on_dead.iter().filter(|&&d| !d).count();
        batches.push(format!("{sent:.2?}: dead primary {dead_held} held, live primaries {live_held} held of {live}"));
        assert_eq!(dead_held, 0, "a dead primary renewed nothing");
        if live_held < live {
            late += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if late > 1 {
        let states: Vec<String> = cluster
            .live_ports()
            .into_iter()
            .map(|port| {
                let info: String = cluster.query(port, &redis::cmd("CLUSTER").arg("INFO").clone()).unwrap_or_default();
                format!("{port}: {}", info_field(&info, "cluster_state").unwrap_or("no answer"))
            })
            .collect();
        panic!(
            "the live primaries' leases went unrenewed in {late} of {} batches while one primary was dead\n\
             batches after the kill:\n{}\nthe live nodes' cluster_state: {}\nthe store's warnings:\n{}",
            batches.len(),
            batches.join("\n"),
            states.join(", "),
            warnings.summary()
        );
    }
    eprintln!("{} batches in {:?} after the kill; {late} late", batches.len(), started.elapsed());
}
