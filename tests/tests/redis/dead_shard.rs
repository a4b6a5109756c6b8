//! Renewal batches whose leases live on several primaries of a private
//! cluster while one node is dead or hung: the dead primary's leases go
//! unanswered (`Fence::Unknown`, tried again) while the others are
//! renewed, batch after batch. One failed node must not cost every lease of
//! the process.
//!
//! Through the redis crate's cluster client (1.8.1), it did: the dead
//! primary's renewals set the client rebuilding its slot map, one rebuild
//! waited for good on the client's own lock, and from the second or third
//! batch on no renewal was answered at all, the live primaries' included,
//! for as long as the primary stayed dead. Leases that go unrenewed lapse,
//! and a second request may then run. The store now sends renewals to each
//! primary on a connection of its own; a hung node (`SIGSTOP`: a host that
//! stops answering) must not hold the others' renewals either, nor batches
//! sent at the same time, nor the first slot map when it is a seed.

use std::time::{Duration, Instant};

use idem_runtime::RedisStore;
use idem_runtime::store::testing::{fingerprint, fresh_key};
use idem_runtime::store::{Claim, Fence, Renewal, Store, StoreError};
use idem_tests::logs::Logs;
use idem_tests::redis_cluster::RedisCluster;
use idem_tests::redis_node::{info_field, served_slots, slot_of};

/// How long batches are sent after the failure.
const WINDOW: Duration = Duration::from_secs(4);
/// Fewest batches sent after the failure.
const BATCHES: usize = 5;
/// The runtime's default store timeout, which bounds each batch of the
/// lease keeper.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);
const LEASE: Duration = Duration::from_secs(30);

/// `count` leases acquired on `store`. With replica acknowledgements, a
/// claim whose acknowledgement came late (a loaded machine, a replica still
/// catching up after the cluster started) fails closed; another key is
/// tried then, a few times.
async fn acquire(store: &RedisStore, count: usize) -> Vec<Renewal> {
    let mut renewals = Vec::new();
    let mut refused = 0;
    while renewals.len() < count {
        let key = fresh_key();
        match store.claim(&key, &fingerprint("a"), LEASE, LEASE * 2).await {
            Ok(Claim::Acquired { token, .. }) => renewals.push(Renewal { key, token, lease: LEASE }),
            Ok(other) => panic!("a fresh key is acquired, not {other:?}"),
            Err(error @ StoreError::Unavailable { .. }) if refused < 5 => {
                refused += 1;
                eprintln!("a claim was refused ({error}); trying another key");
            }
            Err(error) => panic!("claiming a fresh key: {error}"),
        }
    }
    renewals
}

/// Sixty leases acquired on `store`, all renewed once (the renewals'
/// connections are open, as in a running service).
async fn leases(store: &RedisStore) -> Vec<Renewal> {
    let renewals = acquire(store, 60).await;
    assert!(store.renew_many(&renewals).await.unwrap().iter().all(|fence| *fence == Fence::Held));
    renewals
}

/// Readies `cluster` for one primary to fail and stay failed: the primary
/// of `{probe}`, returned with which of `renewals` it holds. Its replicas
/// never take over; the other primaries keep serving the slots they cover
/// (`cluster-require-full-coverage no`; under the default every node
/// refuses commands once the failed one is flagged); and a node timeout of
/// 5 s, not the cluster's 1 s, keeps a loaded machine's stalls from making
/// a live primary think itself in the minority (it then refuses commands
/// too).
fn doomed_primary(cluster: &RedisCluster, store: &RedisStore, renewals: &[Renewal]) -> (u16, Vec<bool>) {
    let doomed = cluster.primary_of("{probe}");
    let slots = served_slots(&format!("127.0.0.1:{doomed}")).expect("the primary's slots");
    let on_doomed: Vec<bool> = renewals
        .iter()
        .map(|renewal| slots.iter().any(|range| range.contains(&slot_of(&store.record_key(&renewal.key)))))
        .collect();
    assert!(on_doomed.iter().any(|&d| d) && on_doomed.iter().any(|&d| !d), "leases on the primary and on others");
    let set = |name: &str, value: &str| redis::cmd("CONFIG").arg("SET").arg(name).arg(value).clone();
    for port in cluster.live_ports() {
        let () = cluster.query(port, &set("cluster-require-full-coverage", "no")).expect("CONFIG SET");
        let () = cluster.query(port, &set("cluster-node-timeout", "5000")).expect("CONFIG SET");
    }
    let replicas = cluster.replicas_of(doomed);
    assert!(!replicas.is_empty(), "the primary has a replica");
    for replica in replicas {
        let () = cluster.query(replica, &set("cluster-replica-no-failover", "yes")).expect("CONFIG SET");
    }
    (doomed, on_doomed)
}

/// What the batches after a failure got.
#[derive(Default)]
struct Batches {
    lines: Vec<String>,
    /// Batches sent.
    sent: usize,
    /// Batches that left a lease of a live primary unrenewed.
    late: usize,
}

impl Batches {
    /// Sends `renewals` for [`WINDOW`] (at least [`BATCHES`] times), split
    /// in `parts` batches sent at once, each within [`STORE_TIMEOUT`], and
    /// checks each answer: no lease lost, none of the failed primary's
    /// (`failed`) renewed.
    async fn send(store: &RedisStore, renewals: &[Renewal], failed: &[bool], parts: usize) -> Self {
        let mut batches = Self::default();
        let started = Instant::now();
        let size = renewals.len().div_ceil(parts);
        while started.elapsed() < WINDOW || batches.sent < BATCHES {
            let sent = started.elapsed();
            let answers = futures_util::future::join_all(renewals.chunks(size).map(|part| async move {
                let began = Instant::now();
                let answer = tokio::time::timeout(STORE_TIMEOUT, store.renew_many(part)).await;
                (answer, began.elapsed())
            }))
            .await;
            for ((answer, took), (part, failed)) in
                answers.into_iter().zip(renewals.chunks(size).zip(failed.chunks(size)))
            {
                batches.sent += 1;
                let fences = match answer {
                    Ok(Ok(fences)) => fences,
                    Ok(Err(error)) => {
                        batches.lines.push(format!("{sent:.2?}: the batch failed in {took:.2?}: {error}"));
                        vec![Fence::Unknown; part.len()]
                    }
                    Err(_) => {
                        batches.lines.push(format!("{sent:.2?}: the batch took over {STORE_TIMEOUT:?}"));
                        vec![Fence::Unknown; part.len()]
                    }
                };
                for (i, fence) in fences.iter().enumerate() {
                    assert_ne!(*fence, Fence::Lost, "renewal {i} (on the failed primary: {})", failed[i]);
                }
                let count = |on_failed: bool, fence: Fence| {
                    fences.iter().zip(failed).filter(|(got, on)| **on == on_failed && **got == fence).count()
                };
                let (failed_held, live_held) = (count(true, Fence::Held), count(false, Fence::Held));
                let live = failed.iter().filter(|&&d| !d).count();
                batches.lines.push(format!(
                    "{sent:.2?}: in {took:.2?}, failed primary {failed_held} held, live primaries {live_held} held of {live}"
                ));
                assert_eq!(failed_held, 0, "a failed primary renewed nothing");
                if live_held < live {
                    batches.late += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        batches
    }

    /// Fails unless the live primaries' leases were renewed in every batch
    /// but one (a loaded machine may make one late), saying what each batch
    /// got, the live nodes' `cluster_state` and the store's warnings.
    fn check(&self, cluster: &RedisCluster, warnings: &Logs) {
        if self.late <= 1 {
            eprintln!("{} batches after the failure, {} late", self.sent, self.late);
            return;
        }
        let states: Vec<String> = cluster
            .live_ports()
            .into_iter()
            .map(|port| {
                let info: String = cluster.query(port, &redis::cmd("CLUSTER").arg("INFO").clone()).unwrap_or_default();
                format!("{port}: {}", info_field(&info, "cluster_state").unwrap_or("no answer"))
            })
            .collect();
        panic!(
            "the live primaries' leases went unrenewed in {} of {} batches\nbatches after the failure:\n{}\n\
             the live nodes' cluster_state: {}\nthe store's warnings:\n{}",
            self.late,
            self.sent,
            self.lines.join("\n"),
            states.join(", "),
            warnings.summary()
        );
    }
}

/// A primary killed (`kill -9`) and left dead.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_primary_leaves_only_its_own_renewals_unanswered() {
    let Some(mut cluster) = RedisCluster::start("a_dead_primary_leaves_only_its_own_renewals_unanswered") else {
        return;
    };
    let warnings = Logs::default();
    let _capture = warnings.capture(tracing::Level::WARN);
    let store = RedisStore::connect(&cluster.url()).await.expect("connecting to the private cluster");
    let renewals = leases(&store).await;
    let (dead, on_dead) = doomed_primary(&cluster, &store, &renewals);
    cluster.kill(dead);
    Batches::send(&store, &renewals, &on_dead, 1).await.check(&cluster, &warnings);
}

/// A primary frozen (`SIGSTOP`), like a host that stops answering, with the
/// keeper's batches two at a time: neither may wait on the hung primary
/// past its own renewals.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_primary_holds_neither_the_others_renewals_nor_other_batches() {
    let Some(cluster) = RedisCluster::start("a_hung_primary_holds_neither_the_others_renewals_nor_other_batches")
    else {
        return;
    };
    let warnings = Logs::default();
    let _capture = warnings.capture(tracing::Level::WARN);
    let store = RedisStore::connect(&cluster.url()).await.expect("connecting to the private cluster");
    let renewals = leases(&store).await;
    let (hung, on_hung) = doomed_primary(&cluster, &store, &renewals);
    cluster.freeze(hung);
    let batches = Batches::send(&store, &renewals, &on_hung, 2).await;
    cluster.thaw(hung);
    batches.check(&cluster, &warnings);
}

/// The URL's first seeds are a node with no slots (a replica reset, as a
/// retired node still listed: its `CLUSTER SLOTS` is empty) and a replica
/// frozen before the first batch, and a primary is frozen too: the slot
/// map must come from the nodes that know it, without waiting on the
/// frozen seed, and the hung primary must hold only its own renewals (with
/// the empty view taken for the map, every renewal waited on the hung one).
#[tokio::test(flavor = "multi_thread")]
async fn seeds_without_slots_or_answers_do_not_make_the_slot_map() {
    let Some(cluster) = RedisCluster::start("seeds_without_slots_or_answers_do_not_make_the_slot_map") else {
        return;
    };
    let warnings = Logs::default();
    let _capture = warnings.capture(tracing::Level::WARN);
    let probe = cluster.primary_of("{probe}");
    let serves = |port: u16| served_slots(&format!("127.0.0.1:{port}")).is_some_and(|slots| !slots.is_empty());
    let ports = cluster.live_ports();
    let others: Vec<u16> =
        ports.iter().copied().filter(|&port| !serves(port) && !cluster.replicas_of(probe).contains(&port)).collect();
    let [retired, hung] = others[..] else { panic!("two replicas of the other primaries: {others:?}") };
    let () = cluster.query(retired, redis::cmd("CLUSTER").arg("RESET").arg("HARD")).expect("CLUSTER RESET");
    let seeds: Vec<String> = [retired, hung]
        .into_iter()
        .chain(ports.iter().copied().filter(|&port| port != retired && port != hung))
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let store = RedisStore::connect(&format!("redis-cluster://{}", seeds.join(",")))
        .await
        .expect("connecting to the private cluster");
    let renewals = acquire(&store, 60).await;
    let (doomed, on_doomed) = doomed_primary(&cluster, &store, &renewals);
    cluster.freeze(hung);
    cluster.freeze(doomed);
    let batches = Batches::send(&store, &renewals, &on_doomed, 1).await;
    cluster.thaw(doomed);
    cluster.thaw(hung);
    batches.check(&cluster, &warnings);
}

/// A graceful manual failover (`CLUSTER FAILOVER`, as for maintenance)
/// with replica acknowledgements: the old primary, now a replica, answers
/// `MOVED` to each of its renewals. They must be renewed on the new primary
/// by the next batches, and the application's own commands (which go
/// through the cluster client) must keep answering: sending hundreds of
/// redirected renewals through that client at once, each with its `WAIT`,
/// and dropping them at the batch's end, wedged it for every claim after.
#[tokio::test(flavor = "multi_thread")]
async fn a_manual_failover_with_replica_acks_moves_the_renewals_and_wedges_nothing() {
    let Some(cluster) =
        RedisCluster::start("a_manual_failover_with_replica_acks_moves_the_renewals_and_wedges_nothing")
    else {
        return;
    };
    let warnings = Logs::default();
    let _capture = warnings.capture(tracing::Level::WARN);
    let store = RedisStore::connect(&cluster.url())
        .await
        .expect("connecting to the private cluster")
        .with_replica_acks(1, Duration::from_millis(400));
    let renewals = acquire(&store, 300).await;
    assert!(store.renew_many(&renewals).await.unwrap().iter().all(|fence| *fence == Fence::Held));
    let old = cluster.primary_of("{probe}");
    let replica = cluster.replicas_of(old)[0];
    let () = cluster.query(replica, redis::cmd("CLUSTER").arg("FAILOVER")).expect("CLUSTER FAILOVER");
    let deadline = Instant::now() + Duration::from_secs(10);
    while served_slots(&format!("127.0.0.1:{replica}")).is_none_or(|slots| slots.is_empty()) {
        assert!(Instant::now() < deadline, "the replica took over within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut lines = Vec::new();
    let mut renewed = false;
    for _ in 0..3 {
        let began = Instant::now();
        let answer = tokio::time::timeout(STORE_TIMEOUT, store.renew_many(&renewals)).await;
        let held = match &answer {
            Ok(Ok(fences)) => {
                assert!(fences.iter().all(|fence| *fence != Fence::Lost), "no lease lost: {fences:?}");
                fences.iter().filter(|fence| **fence == Fence::Held).count()
            }
            _ => 0,
        };
        lines.push(format!("a batch in {:.2?}: {held} of {} held", began.elapsed(), renewals.len()));
        if held == renewals.len() {
            renewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for _ in 0..5 {
        let began = Instant::now();
        let claim =
            tokio::time::timeout(STORE_TIMEOUT, store.claim(&fresh_key(), &fingerprint("b"), LEASE, LEASE * 2)).await;
        let answered = matches!(claim, Ok(Ok(Claim::Acquired { .. })));
        lines.push(format!(
            "a claim in {:.2?}: {}",
            began.elapsed(),
            if answered { "acquired" } else { "not answered" }
        ));
        assert!(
            answered,
            "the application's commands answer after the failover\n{}\n{}",
            lines.join("\n"),
            warnings.summary()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(renewed, "every lease renewed within three batches\n{}\n{}", lines.join("\n"), warnings.summary());
}

/// A slot migrating to a primary that hangs: the migrating primary answers
/// `ASK` for the record already moved, whose renewal goes unanswered, and
/// its own renewals must still be renewed, batch after batch (a late
/// redirection once cost the redirecting primary all of its renewals).
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_importing_primary_leaves_only_the_moved_renewals_unanswered() {
    use crate::resharding::{migrate, node_id, set_slot};

    let Some(cluster) = RedisCluster::start("a_hung_importing_primary_leaves_only_the_moved_renewals_unanswered")
    else {
        return;
    };
    let warnings = Logs::default();
    let _capture = warnings.capture(tracing::Level::WARN);
    let store = RedisStore::connect(&cluster.url()).await.expect("connecting to the private cluster");
    let target = cluster.primary_of("{probe}");
    let mut renewals = acquire(&store, 60).await;
    let moved = loop {
        let renewal = acquire(&store, 1).await.remove(0);
        if cluster.primary_of(&store.record_key(&renewal.key)) != target {
            break renewal;
        }
    };
    let record = store.record_key(&moved.key);
    let (source, slot) = (cluster.primary_of(&record), slot_of(&record));
    renewals.push(moved);
    assert!(store.renew_many(&renewals).await.unwrap().iter().all(|fence| *fence == Fence::Held));
    let (hung, mut unanswered) = doomed_primary(&cluster, &store, &renewals);
    assert_eq!(hung, target);
    *unanswered.last_mut().expect("the moved record's renewal") = true;
    set_slot(&cluster, target, slot, "IMPORTING", &node_id(&cluster, source));
    set_slot(&cluster, source, slot, "MIGRATING", &node_id(&cluster, target));
    migrate(&cluster, source, target, &record);
    cluster.freeze(target);
    let batches = Batches::send(&store, &renewals, &unanswered, 1).await;
    cluster.thaw(target);
    batches.check(&cluster, &warnings);
}
