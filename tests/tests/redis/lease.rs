//! A lease that runs out while its owner is paused (no renewals): the
//! first claim to find it lapsed gives the owner a grace, the next after it
//! takes over, the old owner is fenced off, and the new owner's response
//! is the one replayed. Renewals sent from a lease keeper's own
//! runtime keep working while the application's runtime is stalled.

use std::time::{Duration, Instant};

use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, RecordState, Renewal, Store, grace};
use idem_tests::backend::redis_store;

const LEASE: Duration = Duration::from_millis(400);
const TTL: Duration = Duration::from_secs(60);
/// The lease the keeper test renews: long enough that opening the renewal
/// connection on a busy machine stays well within it; a renewal stuck
/// behind the stalled runtime waits for the response timeout (2 s) instead.
const KEEPER_LEASE: Duration = Duration::from_secs(1);

fn acquired(claim: Claim) -> idem_runtime::store::FencingToken {
    match claim {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_owner_loses_its_lease_to_a_new_claimer() {
    let Some(store) = redis_store("paused_owner_loses_its_lease_to_a_new_claimer").await else {
        return;
    };
    let key = fresh_key();
    let request = fingerprint("charge 5 EUR");
    let paused = acquired(store.claim(&key, &request, LEASE, TTL).await.unwrap());

    // While the lease lives, a retry is told to come back, not run.
    match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after <= LEASE && !retry_after.is_zero(), "{retry_after:?}"),
        other => panic!("expected in flight, got {other:?}"),
    }

    // The owner stalls (a GC pause, a stuck call) and renews nothing; the
    // lease runs out on the Redis server's clock. The first claim to find it
    // so gives the owner a grace; the first after the grace takes over.
    tokio::time::sleep(LEASE + Duration::from_millis(400)).await;
    match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after <= grace(LEASE), "the grace: {retry_after:?}"),
        other => panic!("expected the grace, got {other:?}"),
    }
    tokio::time::sleep(grace(LEASE) + Duration::from_millis(100)).await;
    let successor = acquired(store.claim(&key, &request, Duration::from_secs(30), TTL).await.unwrap());
    assert_ne!(paused, successor);

    // The paused owner wakes up: everything it tries is refused.
    assert_eq!(store.renew(&key, paused, LEASE).await.unwrap(), Fence::Lost);
    assert_eq!(store.complete(&key, paused, &response(b"paused"), Duration::from_secs(60)).await.unwrap(), Fence::Lost);
    assert_eq!(store.release(&key, paused).await.unwrap(), Fence::Lost);
    match store.get(&key).await.unwrap().expect("the successor's record").state {
        RecordState::InFlight { token, .. } => assert_eq!(token, successor),
        other => panic!("the paused owner changed the record: {other:?}"),
    }

    // The successor completes, and its response is what retries get back.
    let stored = response(b"successor");
    assert_eq!(store.complete(&key, successor, &stored, Duration::from_secs(60)).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::Replay(stored.clone()));
    assert_eq!(store.complete(&key, paused, &response(b"paused"), Duration::from_secs(60)).await.unwrap(), Fence::Lost);
    assert_eq!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::Replay(stored));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_flight_record_stripped_of_its_expiry_cannot_hold_its_key_forever() {
    let test = "an_in_flight_record_stripped_of_its_expiry_cannot_hold_its_key_forever";
    let (Some(store), Some(url)) = (redis_store(test).await, idem_tests::backend::url("IDEM_REDIS_URL", test)) else {
        return;
    };
    let key = fresh_key();
    let request = fingerprint("charge 5 EUR");
    acquired(store.claim(&key, &request, LEASE, TTL).await.unwrap());
    // An operator (or a restore) removes the expiry of the in-flight record.
    let mut raw = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let record = store.record_key(&key);
    let persisted: i64 = redis::cmd("PERSIST").arg(&record).query_async(&mut raw).await.unwrap();
    assert_eq!(persisted, 1);
    // The next claim, even a refused one, gives the record an expiry again
    // (that claim's TTL), so its fingerprint cannot hold the key forever.
    assert_eq!(store.claim(&key, &fingerprint("another"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&record).query_async(&mut raw).await.unwrap();
    assert!(ttl_ms > 0 && ttl_ms <= TTL.as_millis() as i64, "PTTL {ttl_ms}");
    // The lease, a field of the record, still runs out on its own.
    match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after <= LEASE && !retry_after.is_zero(), "{retry_after:?}"),
        other => panic!("expected in flight, got {other:?}"),
    }
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    assert!(matches!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::InFlight { .. }), "the grace");
    tokio::time::sleep(grace(LEASE) + Duration::from_millis(100)).await;
    acquired(store.claim(&key, &request, LEASE, TTL).await.unwrap());

    // Stripped again, and claimed with a longer TTL (the route's changed):
    // the lease still runs a lease from the repair, not the difference.
    let key = fresh_key();
    acquired(store.claim(&key, &request, LEASE, TTL).await.unwrap());
    let record = store.record_key(&key);
    let persisted: i64 = redis::cmd("PERSIST").arg(&record).query_async(&mut raw).await.unwrap();
    assert_eq!(persisted, 1);
    match store.claim(&key, &request, LEASE, 100 * TTL).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after <= LEASE && !retry_after.is_zero(), "{retry_after:?}"),
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// The lease keeper renews from a thread and a runtime of its own. Its
/// batches go through a connection of their own, opened on its runtime, so
/// they keep a lease alive while the runtime that built the store (an
/// application worker, blocked by a handler) does not run at all; through
/// the application's connection they would wait for that runtime, and time
/// out.
#[test]
fn keeper_renewals_do_not_wait_for_a_stalled_application_runtime() {
    let test = "keeper_renewals_do_not_wait_for_a_stalled_application_runtime";
    let app = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let Some(store) = app.block_on(redis_store(test)) else {
        return;
    };
    let (key, request) = (fresh_key(), fingerprint("a long handler"));
    let token = app.block_on(async { acquired(store.claim(&key, &request, KEEPER_LEASE, TTL).await.unwrap()) });
    // From now on nothing drives `app`, as if its only thread were blocked.
    let keeper = {
        let renewals = [Renewal { key: key.clone(), token, lease: KEEPER_LEASE }];
        let store = store.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let until = Instant::now() + 3 * KEEPER_LEASE;
                while Instant::now() < until {
                    let sent = Instant::now();
                    assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Held]);
                    assert!(sent.elapsed() < KEEPER_LEASE / 2, "a renewal took {:?}", sent.elapsed());
                    tokio::time::sleep(KEEPER_LEASE / 4).await;
                }
            });
        })
    };
    keeper.join().expect("the keeper's renewals");
    app.block_on(async {
        match store.claim(&key, &request, KEEPER_LEASE, TTL).await.unwrap() {
            Claim::InFlight { retry_after } => assert!(!retry_after.is_zero()),
            other => panic!("the lease should have been kept alive, got {other:?}"),
        }
        assert_eq!(store.complete(&key, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    });
}

/// A private Redis (its settings are changed), a store on it and an
/// administrator's connection, or `None` when the test is skipped.
async fn private(
    test: &str,
) -> Option<(idem_tests::redis_server::RedisServer, idem_runtime::RedisStore, redis::aio::MultiplexedConnection)> {
    let redis = idem_tests::redis_server::RedisServer::start(test)?;
    let store = idem_runtime::RedisStore::connect(&redis.url()).await.expect("connecting to the private Redis");
    let client = redis::Client::open(redis.url()).unwrap();
    let admin = client.get_multiplexed_async_connection().await.expect("connecting the administrator");
    Some((redis, store, admin))
}

/// A server at `maxmemory` under `noeviction` refuses new claims, but still
/// renews, releases and completes the leases of running handlers: refusing
/// renewals would let their leases lapse, and a retry run them again once
/// memory is free. Replays, mismatches and duplicates in flight are still
/// answered (Redis refuses the claim's `SET` at `maxmemory` even when it
/// would write nothing; the claim script answers them).
#[tokio::test(flavor = "multi_thread")]
async fn a_full_server_keeps_running_leases_and_refuses_new_claims() {
    let Some((_redis, store, mut admin)) = private("a_full_server_keeps_running_leases_and_refuses_new_claims").await
    else {
        return;
    };
    let (running, released) = (fresh_key(), fresh_key());
    let request = fingerprint("charge 5 EUR");
    let token = acquired(store.claim(&running, &request, LEASE, TTL).await.unwrap());
    let other = acquired(store.claim(&released, &request, LEASE, TTL).await.unwrap());
    let config = |name: &'static str, value: &'static str| redis::cmd("CONFIG").arg("SET").arg(name).arg(value).clone();
    let () = config("maxmemory-policy", "noeviction").query_async(&mut admin).await.unwrap();
    let () = config("maxmemory", "1").query_async(&mut admin).await.unwrap();

    let error = store.claim(&fresh_key(), &request, LEASE, TTL).await.unwrap_err();
    assert!(error.to_string().to_lowercase().contains("full") || error.to_string().contains("OOM"), "{error}");
    assert!(matches!(store.claim(&running, &request, LEASE, TTL).await.unwrap(), Claim::InFlight { .. }));
    assert_eq!(store.claim(&running, &fingerprint("other"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
    assert_eq!(store.release(&released, other).await.unwrap(), Fence::Held, "released at maxmemory");
    // The released key's same request would run again: a new claim, refused.
    assert!(store.claim(&released, &request, LEASE, TTL).await.is_err(), "a claim after a release at maxmemory");
    for _ in 0..3 {
        let renewal = [Renewal { key: running.clone(), token, lease: LEASE }];
        assert_eq!(store.renew_many(&renewal).await.unwrap(), [Fence::Held], "renewed at maxmemory");
        tokio::time::sleep(LEASE / 2).await;
    }
    assert_eq!(store.complete(&running, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&running, &request, LEASE, TTL).await.unwrap(), Claim::Replay(response(b"done")));
    assert_eq!(store.claim(&running, &fingerprint("other"), LEASE, TTL).await.unwrap(), Claim::Mismatch);

    let () = config("maxmemory", "0").query_async(&mut admin).await.unwrap();
    assert_eq!(store.claim(&running, &request, LEASE, TTL).await.unwrap(), Claim::Replay(response(b"done")));
}

/// A server that refuses writes (here `min-replicas-to-write` without a
/// replica) refuses the claim's `SET` even for a replay, which writes
/// nothing: replays, mismatches and duplicates in flight are still
/// answered, and only a claim that would write is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_refusing_writes_still_answers_replays() {
    let Some((_redis, store, mut admin)) = private("a_server_refusing_writes_still_answers_replays").await else {
        return;
    };
    let (done, running) = (fresh_key(), fresh_key());
    let request = fingerprint("charge 5 EUR");
    let token = acquired(store.claim(&done, &request, LEASE, TTL).await.unwrap());
    assert_eq!(store.complete(&done, token, &response(b"done"), TTL).await.unwrap(), Fence::Held);
    acquired(store.claim(&running, &request, TTL, TTL).await.unwrap());
    let () =
        redis::cmd("CONFIG").arg("SET").arg("min-replicas-to-write").arg("1").query_async(&mut admin).await.unwrap();

    assert_eq!(store.claim(&done, &request, LEASE, TTL).await.unwrap(), Claim::Replay(response(b"done")));
    assert_eq!(store.claim(&done, &fingerprint("other"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
    assert!(matches!(store.claim(&running, &request, LEASE, TTL).await.unwrap(), Claim::InFlight { .. }));
    let error = store.claim(&fresh_key(), &request, LEASE, TTL).await.unwrap_err();
    assert!(error.to_string().contains("NOREPLICAS"), "{error}");
}
