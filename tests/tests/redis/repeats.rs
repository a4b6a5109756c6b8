//! Scripts sent again with the same arguments, as a client does after a
//! lost answer (redis-rs's cluster client retries on its own): a claim
//! repeated with its own token still owns the key, a completion repeated
//! with its token and response is still held; anything else is refused.

use idem_runtime::RedisStore;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, FencingToken, Store};
use idem_tests::backend::{redis_store, url};
use redis::Value;

const CLAIM: &str = include_str!("../../../idem-runtime/src/stores/redis/claim.lua");
const LEASE_MS: u64 = 30_000;

async fn claim(connection: &mut redis::aio::MultiplexedConnection, key: &str, token: &[u8]) -> Value {
    redis::cmd("EVAL")
        .arg(CLAIM)
        .arg(1)
        .arg(key)
        .arg(fingerprint("a").as_bytes().as_slice())
        .arg(token)
        .arg(LEASE_MS)
        .arg(LEASE_MS * 2)
        .query_async(connection)
        .await
        .expect("EVAL claim.lua")
}

/// The shared Redis's store and a plain connection to it, or `None` when
/// the test is skipped (no server outside `scripts/test`).
async fn shared(test: &str) -> Option<(RedisStore, redis::aio::MultiplexedConnection)> {
    let (Some(url), Some(store)) = (url("IDEM_REDIS_URL", test), redis_store(test).await) else { return None };
    let client = redis::Client::open(url).unwrap();
    Some((store, client.get_multiplexed_async_connection().await.expect("connecting to Redis")))
}

/// Claims a fresh `key` through the store and returns its token.
async fn acquire(store: &impl Store, key: &idem_runtime::store::StorageKey) -> FencingToken {
    match store.claim(key, &fingerprint("a"), LEASE, LEASE).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        other => panic!("a fresh key is acquired, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_sent_again_with_its_own_token_still_owns_the_key() {
    let Some((store, mut connection)) = shared("a_claim_sent_again_with_its_own_token_still_owns_the_key").await else {
        return;
    };
    let key = fresh_key();
    let record = store.record_key(&key);
    let token = FencingToken::generate().to_bytes();
    let acquired = Value::Int(0);
    assert_eq!(claim(&mut connection, &record, &token).await, acquired);
    assert_eq!(claim(&mut connection, &record, &token).await, acquired, "the same claim, sent again");
    let other = FencingToken::generate().to_bytes();
    let Value::Array(answer) = claim(&mut connection, &record, &other).await else { panic!("an array") };
    assert_eq!(answer.first(), Some(&Value::Int(3)), "another claim finds the key in flight");
    // The repeated claim's token is the owner's: it completes the key.
    let owner = FencingToken::from_bytes(token);
    assert_eq!(store.complete(&key, owner, &response(b"done"), LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"done")));
}

const LEASE: std::time::Duration = std::time::Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_sent_again_keeps_its_attempt() {
    let Some((store, mut connection)) = shared("a_claim_sent_again_keeps_its_attempt").await else { return };
    let key = fresh_key();
    let first = acquire(&store, &key).await;
    assert_eq!(store.release(&key, first).await.unwrap(), Fence::Held);
    let token = FencingToken::generate().to_bytes();
    let after_release = Value::Int(1);
    let record = store.record_key(&key);
    assert_eq!(claim(&mut connection, &record, &token).await, after_release);
    assert_eq!(claim(&mut connection, &record, &token).await, after_release, "sent again: still after a release");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completion_sent_again_keeps_a_record_without_expiry() {
    let Some((store, mut connection)) = shared("a_completion_sent_again_keeps_a_record_without_expiry").await else {
        return;
    };
    let key = fresh_key();
    let token = acquire(&store, &key).await;
    assert_eq!(store.complete(&key, token, &response(b"done"), LEASE).await.unwrap(), Fence::Held);
    // Persisted by hand (or restored without its expiry).
    let () = redis::cmd("PERSIST").arg(store.record_key(&key)).query_async(&mut connection).await.unwrap();
    assert_eq!(store.complete(&key, token, &response(b"done"), LEASE).await.unwrap(), Fence::Held, "sent again");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"done")));
    let left: i64 = redis::cmd("PTTL").arg(store.record_key(&key)).query_async(&mut connection).await.unwrap();
    assert!(left > 20_000, "the record got the TTL back, {left} ms");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completion_sent_again_is_held_and_no_other_is() {
    let Some(store) = redis_store("a_completion_sent_again_is_held_and_no_other_is").await else { return };
    let key = fresh_key();
    let token = acquire(&store, &key).await;
    assert_eq!(store.complete(&key, token, &response(b"done"), LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.complete(&key, token, &response(b"done"), LEASE).await.unwrap(), Fence::Held, "sent again");
    assert_eq!(store.complete(&key, token, &response(b"other"), LEASE).await.unwrap(), Fence::Lost);
    let stranger = FencingToken::generate();
    assert_eq!(store.complete(&key, stranger, &response(b"done"), LEASE).await.unwrap(), Fence::Lost);
    assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"done")));
}

/// A key holding something other than a record of this layout (a hash, as
/// the earlier versions kept a record; or any other value) is refused, fail
/// closed: never overwritten, never taken for a free key.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_holding_no_record_of_this_layout_is_refused_and_kept() {
    let Some((store, mut connection)) = shared("a_key_holding_no_record_of_this_layout_is_refused_and_kept").await
    else {
        return;
    };
    let (hash, text) = (fresh_key(), fresh_key());
    let () = redis::cmd("HSET")
        .arg(store.record_key(&hash))
        .arg("fp")
        .arg(fingerprint("a").as_bytes().as_slice())
        .arg("resp")
        .arg(response(b"done").to_bytes())
        .query_async(&mut connection)
        .await
        .unwrap();
    let () = redis::cmd("SET").arg(store.record_key(&text)).arg("OK").query_async(&mut connection).await.unwrap();
    for key in [&hash, &text] {
        let error = store.claim(key, &fingerprint("a"), LEASE, LEASE).await.unwrap_err();
        assert!(!error.to_string().is_empty());
        assert!(store.get(key).await.is_err(), "a get of {key:?}");
        let stranger = FencingToken::generate();
        assert!(!matches!(store.complete(key, stranger, &response(b"x"), LEASE).await, Ok(Fence::Held)));
    }
    let kind: String = redis::cmd("TYPE").arg(store.record_key(&hash)).query_async(&mut connection).await.unwrap();
    assert_eq!(kind, "hash");
    let kept: String = redis::cmd("GET").arg(store.record_key(&text)).query_async(&mut connection).await.unwrap();
    assert_eq!(kept, "OK");
}
