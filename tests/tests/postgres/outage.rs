//! A PostgreSQL outage, at the store level: with the server stopped every
//! operation fails within a bounded time (no hang), and once the server is
//! back on the same port and data directory the same store works again,
//! records intact, without being rebuilt.

use std::time::{Duration, Instant};

use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, PurgeExpired, Store};
use idem_runtime::{PostgresStore, StoreError};
use idem_tests::postgres_server::PostgresServer;

const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(600);
/// The pool's acquire timeout (3 s) plus scheduling margin.
const FAIL_WITHIN: Duration = Duration::from_secs(6);

fn assert_outage_error(operation: &str, error: &StoreError) {
    assert!(
        matches!(
            error,
            StoreError::Unavailable { store: "postgres", .. } | StoreError::Timeout { store: "postgres", .. }
        ),
        "{operation}: {error:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_fail_fast_during_an_outage_and_recover_after() {
    if idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_outage").is_none() {
        return;
    }
    let Some(server) = PostgresServer::start("postgres_outage", &[]) else {
        return;
    };
    let store = PostgresStore::connect(&server.url("postgres")).await.expect("connecting");
    store.migrate().await.expect("migrating");

    let done = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&done, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
        panic!("claim not acquired");
    };
    assert_eq!(store.complete(&done, token, &response(b"before"), LEASE).await.unwrap(), Fence::Held);
    let running = fresh_key();
    let Claim::Acquired { token: running_token, .. } =
        store.claim(&running, &fingerprint("a"), LEASE, TTL).await.unwrap()
    else {
        panic!("claim not acquired");
    };

    server.stop();

    let started = Instant::now();
    let (fresh, fp, during) = (fresh_key(), fingerprint("a"), response(b"during"));
    let (claim, complete, renew, get, release, purge) = tokio::join!(
        store.claim(&fresh, &fp, LEASE, TTL),
        store.complete(&running, running_token, &during, LEASE),
        store.renew(&running, running_token, LEASE),
        store.get(&done),
        store.release(&running, running_token),
        store.purge_expired(10),
    );
    let elapsed = started.elapsed();
    assert_outage_error("claim", &claim.unwrap_err());
    assert_outage_error("complete", &complete.unwrap_err());
    assert_outage_error("renew", &renew.unwrap_err());
    assert_outage_error("get", &get.unwrap_err());
    assert_outage_error("release", &release.unwrap_err());
    assert_outage_error("purge", &purge.unwrap_err());
    assert!(elapsed < FAIL_WITHIN, "operations took {elapsed:?} to fail");

    // One more, alone, after the pool has seen its connections die.
    let started = Instant::now();
    let error = store.claim(&fresh, &fingerprint("a"), LEASE, TTL).await.unwrap_err();
    assert_outage_error("second claim", &error);
    assert!(started.elapsed() < FAIL_WITHIN, "took {:?}", started.elapsed());
    assert!(error.to_string().contains(&format!("127.0.0.1:{}", server.port())), "{error}");

    server.restart();

    // The same store, not rebuilt: the records survived the restart.
    assert_eq!(store.claim(&done, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"before")));
    assert!(matches!(store.claim(&running, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::InFlight { .. }));
    assert_eq!(store.complete(&running, running_token, &response(b"after"), LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&running, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"after")));
    assert!(matches!(store.claim(&fresh, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Acquired { .. }));
    store.pool().close().await;
}
