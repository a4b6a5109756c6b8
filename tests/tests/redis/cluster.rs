//! The Redis store on the real six-node Redis Cluster of `scripts/test`
//! (`IDEM_REDIS_CLUSTER_URL`: three primaries, three replicas): the
//! conformance suite, with and without replica acknowledgements, records
//! spread over every primary, scripts flushed from every node, a batch of
//! renewals over many slots, replica acknowledgements that fail closed,
//! and `#[idempotent]` bursts on a real actix-web server.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::FencingToken;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, Renewal, Store};
use idem_runtime::{Idem, StoreError};
use idem_tests::backend::{redis_cluster_store, url};
use idem_tests::burst::{assert_burst_runs_once, assert_burst_waits, serve};

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(300);

async fn cluster_store() -> Option<Arc<dyn Store>> {
    Some(Arc::new(redis_cluster_store("redis_cluster_conformance").await?))
}

idem_runtime::store::testing::store_conformance_tests!(cluster_store);
idem_runtime::store::testing::store_sequence_tests!(cluster_store);

/// What operators do on the cluster: list (every primary scanned), find
/// (the one slot an id names) and settle records, with and without replica
/// acknowledgements.
mod operable {
    use std::sync::Arc;
    use std::time::Duration;

    use idem_runtime::store::Operable;
    use idem_tests::backend::redis_cluster_store;

    async fn operable_store() -> Option<Arc<dyn Operable>> {
        Some(Arc::new(redis_cluster_store("redis_cluster_operable_conformance").await?))
    }

    idem_runtime::store::testing::operable_conformance_tests!(operable_store);

    mod replica_acks {
        use super::*;

        async fn acked_store() -> Option<Arc<dyn Operable>> {
            let store = redis_cluster_store("redis_cluster_operable_conformance_with_replica_acks").await?;
            Some(Arc::new(store.with_replica_acks(1, Duration::from_secs(1))))
        }

        idem_runtime::store::testing::operable_conformance_tests!(acked_store);
    }
}

/// The suite again with every claim, completion and renewal acknowledged by
/// a replica (`WAIT 1`).
mod replica_acks {
    use std::sync::Arc;
    use std::time::Duration;

    use idem_runtime::store::Store;
    use idem_tests::backend::redis_cluster_store;

    async fn acked_store() -> Option<Arc<dyn Store>> {
        let store = redis_cluster_store("redis_cluster_conformance_with_replica_acks").await?;
        Some(Arc::new(store.with_replica_acks(1, Duration::from_secs(1))))
    }

    idem_runtime::store::testing::store_conformance_tests!(acked_store);
}

/// A plain (non-cluster) connection to each node of the shared cluster.
async fn nodes(test: &str) -> Option<Vec<(String, redis::aio::MultiplexedConnection)>> {
    let url = url("IDEM_REDIS_CLUSTER_URL", test)?;
    let hosts = url.strip_prefix("redis-cluster://").expect("a redis-cluster:// URL");
    let mut nodes = Vec::new();
    for host in hosts.trim_end_matches('/').split(',') {
        let client = redis::Client::open(format!("redis://{host}/")).expect("a node URL");
        let connection = client.get_multiplexed_async_connection().await.unwrap_or_else(|e| panic!("{host}: {e}"));
        nodes.push((host.to_owned(), connection));
    }
    Some(nodes)
}

/// Whether the node behind `connection` is a primary.
async fn is_primary(connection: &mut redis::aio::MultiplexedConnection) -> bool {
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(connection).await.expect("ROLE");
    matches!(role.first(), Some(redis::Value::BulkString(role)) if role == b"master")
}

#[tokio::test(flavor = "multi_thread")]
async fn records_spread_over_every_primary() {
    let test = "records_spread_over_every_primary";
    let (Some(store), Some(mut nodes)) = (redis_cluster_store(test).await, nodes(test).await) else { return };
    let keys: Vec<_> = (0..48).map(|_| fresh_key()).collect();
    for key in &keys {
        assert!(matches!(store.claim(key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Acquired { .. }));
    }
    let mut primaries = 0;
    for (host, connection) in &mut nodes {
        if !is_primary(connection).await {
            continue;
        }
        primaries += 1;
        let mut held = 0;
        for key in &keys {
            // A primary answers for the keys of its own slots only (the
            // others are MOVED errors).
            let exists: redis::RedisResult<i64> =
                redis::cmd("EXISTS").arg(store.record_key(key)).query_async(connection).await;
            held += exists.unwrap_or(0);
        }
        assert!(held > 0, "the primary {host} holds none of {} records", keys.len());
    }
    assert_eq!(primaries, 3, "the shared cluster has three primaries");
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_flushed_from_every_node_are_loaded_again() {
    let test = "scripts_flushed_from_every_node_are_loaded_again";
    let (Some(store), Some(mut nodes)) = (redis_cluster_store(test).await, nodes(test).await) else { return };
    let flush = |connection: &mut redis::aio::MultiplexedConnection| {
        let mut connection = connection.clone();
        async move {
            let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut connection).await.expect("SCRIPT FLUSH");
        }
    };
    for (_, connection) in &mut nodes {
        flush(connection).await;
    }
    let key = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    for (_, connection) in &mut nodes {
        flush(connection).await;
    }
    let renewal = [Renewal { key: key.clone(), token, lease: LEASE }];
    assert_eq!(store.renew_many(&renewal).await.unwrap(), [Fence::Held]);
    for (_, connection) in &mut nodes {
        flush(connection).await;
    }
    assert_eq!(store.complete(&key, token, &response(b"kept"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"kept")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_batch_over_many_slots_answers_each_lease() {
    let Some(store) = redis_cluster_store("a_renewal_batch_over_many_slots_answers_each_lease").await else { return };
    let mut renewals = Vec::new();
    for i in 0..200 {
        let key = fresh_key();
        let Claim::Acquired { token, .. } = store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
            panic!("a fresh key is acquired");
        };
        // Every fourth lease is someone else's: its token is forged.
        let token = if i % 4 == 0 { FencingToken::generate() } else { token };
        renewals.push(Renewal { key, token, lease: LEASE * 2 });
    }
    let fences = store.renew_many(&renewals).await.unwrap();
    assert_eq!(fences.len(), renewals.len());
    for (i, fence) in fences.iter().enumerate() {
        let expected = if i % 4 == 0 { Fence::Lost } else { Fence::Held };
        assert_eq!(*fence, expected, "renewal {i}");
    }
}

/// Batches of renewals sent at once on a store that has not read the slot
/// map yet (several keepers on one store: an `Idem` and an `Inbox`) are
/// all answered: those sent while one of them reads the map wait for it,
/// instead of failing with "renewals' slots have no known primary".
/// Found by the store sequences (`store_sequence_tests!`).
#[tokio::test(flavor = "multi_thread")]
async fn renewal_batches_sent_at_once_are_all_answered() {
    let Some(store) = redis_cluster_store("renewal_batches_sent_at_once_are_all_answered").await else { return };
    let store = Arc::new(store);
    let key = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    let batches = (0..16).map(|_| {
        let (store, renewal) = (Arc::clone(&store), Renewal { key: key.clone(), token, lease: LEASE });
        tokio::spawn(async move { store.renew_many(&[renewal]).await })
    });
    for answer in futures_util::future::join_all(batches).await {
        assert_eq!(answer.unwrap().unwrap(), [Fence::Held]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn too_few_replica_acks_fail_the_claim_closed_and_free_the_key() {
    let test = "too_few_replica_acks_fail_the_claim_closed_and_free_the_key";
    let Some(store) = redis_cluster_store(test).await else { return };
    // Each primary has one replica: two acknowledgements never come.
    let strict = store.clone().with_replica_acks(2, Duration::from_millis(100));
    let key = fresh_key();
    let error = strict.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Unavailable { message, .. } if message.contains("1 of the 2 replicas")),
        "{error}"
    );
    // The refused claim was released: the same request may run at once.
    assert!(matches!(store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Acquired { .. }));

    // A completion the replicas do not acknowledge is an error the runtime
    // retries; the same completion sent again is held, once acknowledged.
    let key = fresh_key();
    let acked = store.clone().with_replica_acks(1, Duration::from_secs(1));
    let Claim::Acquired { token, .. } = acked.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    assert!(strict.complete(&key, token, &response(b"done"), TTL).await.is_err());
    assert_eq!(acked.complete(&key, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(acked.complete(&key, token, &response(b"other"), TTL).await.unwrap(), Fence::Lost);
    assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"done")));
}

#[actix_web::test]
async fn operations_run_once_on_the_cluster() {
    let Some(store) = redis_cluster_store("operations_run_once_on_the_cluster").await else { return };
    idem_tests::once_checks::assert_once(std::sync::Arc::new(store)).await;
}

#[actix_web::test]
async fn a_burst_of_same_key_requests_runs_the_handler_once_on_the_cluster() {
    let test = "a_burst_of_same_key_requests_runs_the_handler_once_on_the_cluster";
    let Some(store) = redis_cluster_store(test).await else { return };
    let (server, hits) = serve(Idem::new(store));
    assert_burst_runs_once(&server.url, &hits).await;
    server.stop().await;
}

#[actix_web::test]
async fn a_burst_in_wait_mode_gets_one_response_for_all_on_the_cluster() {
    let test = "a_burst_in_wait_mode_gets_one_response_for_all_on_the_cluster";
    let Some(store) = redis_cluster_store(test).await else { return };
    let (server, hits) = serve(Idem::new(store.with_replica_acks(1, Duration::from_secs(1))));
    assert_burst_waits(&server.url, &hits).await;
    server.stop().await;
}

/// A listing scans every primary, and a record is found by its id on the
/// primary of its slot: records spread over the whole cluster are all
/// listed and each is found.
#[tokio::test(flavor = "multi_thread")]
async fn operators_see_records_on_every_primary() {
    use idem_runtime::store::{ClaimTerms, ListFilter, Operable};

    let Some(store) = redis_cluster_store("operators_see_records_on_every_primary").await else { return };
    let route = format!("POST /spread-{}", FencingToken::generate().to_hex());
    let terms = ClaimTerms::new(LEASE, TTL).route(route.as_str());
    let keys: Vec<_> = (0..48).map(|_| fresh_key()).collect();
    for key in &keys {
        let claimed = store.claim_with(key, &fingerprint("a"), FencingToken::generate(), &terms).await.unwrap();
        assert!(matches!(claimed, Claim::Acquired { .. }), "{claimed:?}");
    }
    let listed = store.list(&ListFilter::new(100).route(route.as_str())).await.unwrap();
    let mut listed: Vec<_> = listed.into_iter().map(|(key, _)| key.as_str().to_owned()).collect();
    let mut expected: Vec<_> = keys.iter().map(|key| key.as_str().to_owned()).collect();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    for key in &keys {
        assert_eq!(store.find(key.record_id()).await.unwrap().as_ref(), Some(key));
    }
}
