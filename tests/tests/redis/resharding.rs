//! A slot moved between primaries while its records are in flight, on a
//! private cluster, by hand as `redis-cli --cluster reshard` does it: the
//! slot is marked migrating on its owner and importing on the target, one
//! record is moved (`MIGRATE`), then the slot is given to the target. In
//! between, the owner answers `ASK` for the records it no longer has and
//! then `MOVED`; the store follows both, and every lease, completion and
//! replay holds.

use std::time::Duration;

use idem_runtime::RedisStore;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, FencingToken, Renewal, StorageKey, Store};
use idem_tests::redis_cluster::RedisCluster;
use idem_tests::redis_node::{served_slots, slot_of};

const LEASE: Duration = Duration::from_secs(30);

/// A fresh storage key whose record lives in `slot`.
fn key_in(store: &RedisStore, slot: u16) -> StorageKey {
    (0..1_000_000)
        .map(|_| fresh_key())
        .find(|key| slot_of(&store.record_key(key)) == slot)
        .expect("a key in the slot within a million tries")
}

async fn acquire(store: &RedisStore, key: &StorageKey) -> FencingToken {
    match store.claim(key, &fingerprint("a"), LEASE, LEASE * 2).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        other => panic!("a fresh key is acquired, not {other:?}"),
    }
}

pub(crate) fn node_id(cluster: &RedisCluster, port: u16) -> String {
    cluster.query(port, redis::cmd("CLUSTER").arg("MYID")).expect("CLUSTER MYID")
}

pub(crate) fn set_slot(cluster: &RedisCluster, port: u16, slot: u16, state: &str, node: &str) {
    let () = cluster
        .query(port, redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg(state).arg(node))
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} on {port}: {e}"));
}

/// Moves the record at `key` from the node at `source` to the one at
/// `target` (`MIGRATE`).
pub(crate) fn migrate(cluster: &RedisCluster, source: u16, target: u16, key: &str) {
    let mut migrate = redis::cmd("MIGRATE");
    migrate.arg("127.0.0.1").arg(target).arg("").arg(0).arg(5_000).arg("KEYS").arg(key);
    let () = cluster.query(source, &migrate).unwrap_or_else(|e| panic!("MIGRATE {key} from {source}: {e}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn records_in_flight_follow_their_slot_to_another_primary() {
    resharding("records_in_flight_follow_their_slot_to_another_primary", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn records_in_flight_follow_their_slot_with_replica_acks() {
    resharding("records_in_flight_follow_their_slot_with_replica_acks", true).await;
}

async fn resharding(test: &str, acks: bool) {
    let Some(cluster) = RedisCluster::start(test) else { return };
    let store = RedisStore::connect(&cluster.url()).await.expect("connecting to the private cluster");
    let store = if acks { store.with_replica_acks(1, Duration::from_secs(1)) } else { store };

    let moved = fresh_key();
    let slot = slot_of(&store.record_key(&moved));
    let source = cluster.primary_of(&store.record_key(&moved));
    let target = cluster
        .live_ports()
        .into_iter()
        .find(|&port| port != source && served_slots(&format!("127.0.0.1:{port}")).is_some_and(|s| !s.is_empty()))
        .expect("another primary");
    let moved_token = acquire(&store, &moved).await;
    let stays = key_in(&store, slot);
    let stays_token = acquire(&store, &stays).await;

    // The slot migrates: its owner still serves the records it has, and
    // answers ASK for the others, which the target takes (ASKING).
    let (source_id, target_id) = (node_id(&cluster, source), node_id(&cluster, target));
    set_slot(&cluster, target, slot, "IMPORTING", &source_id);
    set_slot(&cluster, source, slot, "MIGRATING", &target_id);
    let arrived = key_in(&store, slot);
    let arrived_token = acquire(&store, &arrived).await;
    // An importing slot answers its records after ASKING, on one connection.
    let mut direct = redis::Client::open(format!("redis://127.0.0.1:{target}/"))
        .and_then(|client| client.get_connection())
        .expect("a plain connection to the target");
    let (on_target,): (i64,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("EXISTS")
        .arg(store.record_key(&arrived))
        .query(&mut direct)
        .expect("EXISTS on the target");
    assert_eq!(on_target, 1, "a new record of a migrating slot is written on the target, after ASK");

    migrate(&cluster, source, target, &store.record_key(&moved));
    let renewals = [
        Renewal { key: moved.clone(), token: moved_token, lease: LEASE },
        Renewal { key: stays.clone(), token: stays_token, lease: LEASE },
        Renewal { key: arrived.clone(), token: arrived_token, lease: LEASE },
    ];
    assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Held; 3], "renewed through ASK");
    assert_eq!(store.complete(&moved, moved_token, &response(b"moved"), LEASE).await.unwrap(), Fence::Held);

    // The rest of the slot moves and the slot is the target's: MOVED.
    migrate(&cluster, source, target, &store.record_key(&stays));
    // The target first, then the source; the others learn it by gossip.
    set_slot(&cluster, target, slot, "NODE", &target_id);
    set_slot(&cluster, source, slot, "NODE", &target_id);
    assert_eq!(store.complete(&stays, stays_token, &response(b"stays"), LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.complete(&arrived, arrived_token, &response(b"arrived"), LEASE).await.unwrap(), Fence::Held);
    for (key, body) in [(&moved, b"moved".as_slice()), (&stays, b"stays"), (&arrived, b"arrived")] {
        assert_eq!(
            store.claim(key, &fingerprint("a"), LEASE, LEASE * 2).await.unwrap(),
            Claim::Replay(response(body)),
            "replayed from the slot's new primary"
        );
    }
    let owner = cluster.primary_of(&store.record_key(&moved));
    assert_eq!(owner, target, "the slot is the target's");
}
