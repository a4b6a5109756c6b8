//! The Redis Cluster test infrastructure itself: the shared cluster of
//! `scripts/test` has three primaries and three replicas and is healthy,
//! and a private cluster promotes a replica, with its data, when a primary
//! is killed, and takes the old primary back as a replica.

use std::io::Write;
use std::time::{Duration, Instant};

use idem_tests::backend;
use idem_tests::redis_cluster::RedisCluster;
use idem_tests::redis_node::{info_field, query, seeds};

/// How long a failover or a rejoin may take before the test fails.
const WAIT: Duration = Duration::from_secs(20);

/// Prints `line` past libtest's capture, so that it shows in the test log.
fn report(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

#[test]
fn shared_cluster_has_three_healthy_primaries_with_a_linked_replica_each() {
    let test = "shared_cluster_has_three_healthy_primaries_with_a_linked_replica_each";
    let Some(url) = backend::url("IDEM_REDIS_CLUSTER_URL", test) else { return };
    let seeds = seeds(&url);
    assert_eq!(seeds.len(), 6, "{url}: every node should be a seed");
    let (mut primaries, mut replicas) = (0, 0);
    for seed in &seeds {
        let info: String = query(seed, redis::cmd("CLUSTER").arg("INFO")).unwrap_or_else(|e| panic!("{seed}: {e}"));
        assert_eq!(info_field(&info, "cluster_state"), Some("ok"), "{seed}: {info}");
        assert_eq!(info_field(&info, "cluster_known_nodes"), Some("6"), "{seed}: {info}");
        let replication: String =
            query(seed, redis::cmd("INFO").arg("replication")).unwrap_or_else(|e| panic!("{seed}: {e}"));
        match info_field(&replication, "role") {
            Some("master") => primaries += 1,
            Some("slave") => {
                assert_eq!(info_field(&replication, "master_link_status"), Some("up"), "{seed}: {replication}");
                replicas += 1;
            }
            role => panic!("{seed}: unexpected role {role:?}"),
        }
    }
    assert_eq!((primaries, replicas), (3, 3), "primaries and replicas of {url}");
}

#[test]
fn a_replica_takes_over_a_killed_primary_with_its_data_and_the_old_one_returns_as_its_replica() {
    let test = "a_replica_takes_over_a_killed_primary_with_its_data_and_the_old_one_returns_as_its_replica";
    let started = Instant::now();
    let Some(mut cluster) = RedisCluster::start(test) else { return };
    let created = started.elapsed();
    let key = "{cluster-setup}probe";
    let old = cluster.primary_of(key);
    let replicas = cluster.replicas_of(old);
    assert_eq!(replicas.len(), 1, "replicas of the primary {old}: {replicas:?}");

    // Replication is asynchronous: the write must reach the replica before
    // the kill. `WAIT` counts the writes of its own connection only, so it
    // goes in one pipeline with the `SET`, on one connection.
    let mut connection = redis::Client::open(format!("redis://127.0.0.1:{old}/"))
        .and_then(|client| client.get_connection())
        .expect("a plain connection to the primary");
    let (acknowledged,): (i64,) = redis::pipe()
        .cmd("SET")
        .arg(key)
        .arg("before")
        .ignore()
        .cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut connection)
        .expect("SET and WAIT on the primary");
    assert_eq!(acknowledged, 1, "the replica did not acknowledge the write");

    let killed = Instant::now();
    cluster.kill(old);
    let new = cluster.wait_for_new_primary(old, WAIT);
    let promoted = killed.elapsed();
    assert!(replicas.contains(&new), "the new primary {new} was not a replica of {old} ({replicas:?})");
    assert_eq!(cluster.primary_of(key), new);
    let value: Option<String> = cluster.query(new, redis::cmd("GET").arg(key)).expect("GET on the new primary");
    assert_eq!(value.as_deref(), Some("before"), "the write acknowledged before the kill");
    let () = cluster.query(new, redis::cmd("SET").arg(key).arg("after")).expect("SET on the new primary");

    let restarted = Instant::now();
    cluster.restart(old);
    cluster.wait_until_healthy(WAIT);
    let rejoined = restarted.elapsed();
    assert_eq!(cluster.replicas_of(new), vec![old], "the old primary should follow the new one");
    assert_eq!(cluster.primary_of(key), new);
    report(&format!(
        "cluster_setup: cluster created in {created:.1?}; replica {new} promoted {promoted:.1?} after \
         primary {old} was killed; {old} back as its replica {rejoined:.1?} after its restart"
    ));
}
