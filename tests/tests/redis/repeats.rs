//! Scripts sent again with the same arguments, as a client does after a
//! lost answer (redis-rs's cluster client retries on its own): a claim
//! repeated with its own token still owns the key, a completion repeated
//! with its token and response is still held; anything else is refused.

use idem_runtime::RedisStore;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Attempt, Claim, Fence, FencingToken, Step, Store};
use idem_tests::backend::{redis_store, url};
use redis::Value;

/// `claim.lua` as the store loads it: the record layout's functions first.
const CLAIM: &str = concat!(
    include_str!("../../../idem-runtime/src/backends/redis/layout.lua"),
    include_str!("../../../idem-runtime/src/backends/redis/claim.lua")
);
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
        .arg("takeover")
        .arg("00000000000000000")
        .query_async(connection)
        .await
        .expect("EVAL claim.lua")
}

/// `claim.lua`'s answer for a key it acquired as `attempt`, no step recorded.
fn acquired(attempt: i64) -> Value {
    Value::Array(vec![Value::Int(attempt), Value::BulkString(Vec::new())])
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
    assert_eq!(claim(&mut connection, &record, &token).await, acquired(0));
    assert_eq!(claim(&mut connection, &record, &token).await, acquired(0), "the same claim, sent again");
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
    let charge = Step { name: "charge".into(), result: bytes::Bytes::from_static(b"ch_1") };
    assert_eq!(store.record_step(&key, first, &charge).await.unwrap(), Fence::Held);
    assert_eq!(store.release(&key, first).await.unwrap(), Fence::Held);
    let token = FencingToken::generate().to_bytes();
    // The tombstone kept the step: the claim after it gets it back.
    let after_release = Value::Array(vec![Value::Int(1), Value::BulkString(b"006charge0000000004ch_1".to_vec())]);
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

/// Records of the earlier layout (a hash: `fp`, `tok`, `lease` in
/// milliseconds of the server's `TIME`, `resp`), as processes of the
/// earlier version write them during a rolling upgrade: answered as that
/// version would (a replay, a mismatch, in flight), and replaced by a
/// record of this layout only when a claim acquires the key (a lapsed lease
/// or a tombstone, by the same request).
#[tokio::test(flavor = "multi_thread")]
async fn records_of_the_earlier_layout_are_answered_and_taken_over() {
    let Some((store, mut connection)) = shared("records_of_the_earlier_layout_are_answered_and_taken_over").await
    else {
        return;
    };
    let fp = fingerprint("a");
    let now_ms = |time: Vec<String>| time[0].parse::<u64>().unwrap() * 1000 + time[1].parse::<u64>().unwrap() / 1000;
    let now = now_ms(redis::cmd("TIME").query_async(&mut connection).await.unwrap());
    let old = |key: &idem_runtime::store::StorageKey, fields: &[(&str, Vec<u8>)]| {
        let mut command = redis::cmd("HSET");
        command.arg(store.record_key(key));
        for (name, value) in fields {
            command.arg(*name).arg(value.as_slice());
        }
        command
    };
    let token = FencingToken::generate().to_bytes().to_vec();
    let (completed, running, lapsed, released) = (fresh_key(), fresh_key(), fresh_key(), fresh_key());
    let fields = [
        (
            &completed,
            vec![("fp", fp.as_bytes().to_vec()), ("resp", response(b"done").to_bytes()), ("done", token.clone())],
        ),
        (
            &running,
            vec![
                ("fp", fp.as_bytes().to_vec()),
                ("tok", token.clone()),
                ("lease", (now + 60_000).to_string().into_bytes()),
            ],
        ),
        (
            &lapsed,
            vec![("fp", fp.as_bytes().to_vec()), ("tok", token.clone()), ("lease", (now - 1).to_string().into_bytes())],
        ),
        (&released, vec![("fp", fp.as_bytes().to_vec())]),
    ];
    for (key, fields) in &fields {
        let () = old(key, fields).query_async(&mut connection).await.unwrap();
        let () =
            redis::cmd("PEXPIRE").arg(store.record_key(key)).arg(600_000).query_async(&mut connection).await.unwrap();
    }
    let kind = |key: &idem_runtime::store::StorageKey| redis::cmd("TYPE").arg(store.record_key(key)).clone();

    assert_eq!(store.claim(&completed, &fp, LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"done")));
    assert_eq!(store.claim(&completed, &fingerprint("b"), LEASE, LEASE).await.unwrap(), Claim::Mismatch);
    match store.claim(&running, &fp, LEASE, LEASE).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after.as_secs() > 50, "{retry_after:?}"),
        other => panic!("an earlier version's lease in flight, not {other:?}"),
    }
    assert_eq!(store.claim(&running, &fingerprint("b"), LEASE, LEASE).await.unwrap(), Claim::Mismatch);
    for key in [&completed, &running] {
        let still: String = kind(key).query_async(&mut connection).await.unwrap();
        assert_eq!(still, "hash", "answered, never rewritten");
    }
    assert_eq!(store.claim(&released, &fingerprint("b"), LEASE, LEASE).await.unwrap(), Claim::Mismatch);
    for (key, expected) in [(&lapsed, Attempt::Takeover), (&released, Attempt::AfterRelease)] {
        let token = match store.claim(key, &fp, LEASE, LEASE).await.unwrap() {
            Claim::Acquired { token, attempt, .. } => {
                assert_eq!(attempt, expected);
                token
            }
            other => panic!("the same request takes the key, not {other:?}"),
        };
        let now: String = kind(key).query_async(&mut connection).await.unwrap();
        assert_eq!(now, "string", "replaced by a record of this layout");
        assert_eq!(store.complete(key, token, &response(b"again"), LEASE).await.unwrap(), Fence::Held);
        assert_eq!(store.claim(key, &fp, LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"again")));
    }
}

/// A key holding something that is no record (another string, a hash
/// without a fingerprint, a list) is refused, fail closed: never
/// overwritten, never taken for a free key.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_holding_no_record_is_refused_and_kept() {
    let Some((store, mut connection)) = shared("a_key_holding_no_record_is_refused_and_kept").await else {
        return;
    };
    let (text, hash, list) = (fresh_key(), fresh_key(), fresh_key());
    let () = redis::cmd("SET").arg(store.record_key(&text)).arg("OK").query_async(&mut connection).await.unwrap();
    let () =
        redis::cmd("HSET").arg(store.record_key(&hash)).arg("f").arg("v").query_async(&mut connection).await.unwrap();
    let () = redis::cmd("RPUSH").arg(store.record_key(&list)).arg("x").query_async(&mut connection).await.unwrap();
    for key in [&text, &hash, &list] {
        assert!(store.claim(key, &fingerprint("a"), LEASE, LEASE).await.is_err(), "a claim of {key:?}");
        assert!(store.get(key).await.is_err(), "a get of {key:?}");
        let stranger = FencingToken::generate();
        assert!(!matches!(store.complete(key, stranger, &response(b"x"), LEASE).await, Ok(Fence::Held)));
    }
    let kept: String = redis::cmd("GET").arg(store.record_key(&text)).query_async(&mut connection).await.unwrap();
    assert_eq!(kept, "OK");
    let kept: String =
        redis::cmd("HGET").arg(store.record_key(&hash)).arg("f").query_async(&mut connection).await.unwrap();
    assert_eq!(kept, "v");
    let kept: i64 = redis::cmd("LLEN").arg(store.record_key(&list)).query_async(&mut connection).await.unwrap();
    assert_eq!(kept, 1);
}

/// Records of the upper-case string layout (`L`, `G`, `C`, `R`: no claim
/// time, route or steps), as processes of the previous version write them
/// during a rolling upgrade: answered as they were, and written in the
/// lower-case layout once an operation changes them (here a step, then a
/// takeover).
#[tokio::test(flavor = "multi_thread")]
async fn records_of_the_upper_case_layout_are_answered_and_rewritten() {
    let Some((store, mut connection)) = shared("records_of_the_upper_case_layout_are_answered_and_rewritten").await
    else {
        return;
    };
    let fp = fingerprint("a");
    let upper = |state: u8, token: &[u8], rest: &[u8]| [&[state][..], fp.as_bytes(), token, rest].concat();
    let (completed, running, lapsed, released) = (fresh_key(), fresh_key(), fresh_key(), fresh_key());
    let holder = FencingToken::generate();
    let values = [
        (&completed, upper(b'C', &holder.to_bytes(), &response(b"done").to_bytes())),
        // A lease of 60 s in a TTL of 600 s, just claimed.
        (&running, upper(b'L', &holder.to_bytes(), b"0540000")),
        // Graced, and lapsed: its mark is above the key's PTTL.
        (&lapsed, upper(b'G', &holder.to_bytes(), b"0700000")),
        (&released, [&b"R"[..], fp.as_bytes()].concat()),
    ];
    for (key, value) in &values {
        let () = redis::cmd("SET")
            .arg(store.record_key(key))
            .arg(value.as_slice())
            .arg("PX")
            .arg(600_000)
            .query_async(&mut connection)
            .await
            .unwrap();
    }
    let value = |key: &idem_runtime::store::StorageKey| redis::cmd("GET").arg(store.record_key(key)).clone();

    assert_eq!(store.claim(&completed, &fp, LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"done")));
    assert_eq!(store.claim(&completed, &fingerprint("b"), LEASE, LEASE).await.unwrap(), Claim::Mismatch);
    assert_eq!(store.claim(&released, &fingerprint("b"), LEASE, LEASE).await.unwrap(), Claim::Mismatch);
    match store.claim(&running, &fp, LEASE, LEASE).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after.as_secs() > 50, "{retry_after:?}"),
        other => panic!("a previous version's lease in flight, not {other:?}"),
    }
    let record = store.get(&running).await.unwrap().expect("a record");
    let expected = (Some(holder), Some(Attempt::First), None, None);
    assert_eq!((record.token(), record.attempt, record.route, record.claimed_at), expected);

    // Its holder records a step: the record is rewritten in this layout,
    // everything else kept.
    let step = idem_runtime::store::testing::step("charge", "1");
    assert_eq!(store.record_step(&running, holder, &step).await.unwrap(), Fence::Held);
    let now: Vec<u8> = value(&running).query_async(&mut connection).await.unwrap();
    assert_eq!(now[0], b'l', "rewritten in the lower-case layout");
    let record = store.get(&running).await.unwrap().expect("a record");
    assert_eq!((record.token(), record.steps.clone()), (Some(holder), vec![step]));
    assert!(record.ttl_left().as_secs() > 500, "its expiry kept: {record:?}");
    assert_eq!(store.renew(&running, holder, LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.complete(&running, holder, &response(b"ran"), LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&running, &fp, LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"ran")));

    for (key, expected) in [(&lapsed, Attempt::Takeover), (&released, Attempt::AfterRelease)] {
        match store.claim(key, &fp, LEASE, LEASE).await.unwrap() {
            Claim::Acquired { attempt, steps, .. } => assert_eq!((attempt, steps), (expected, Vec::new())),
            other => panic!("the same request takes the key, not {other:?}"),
        }
        let now: Vec<u8> = value(key).query_async(&mut connection).await.unwrap();
        assert_eq!(now[0], b'l', "replaced by a record of this layout");
    }
}

/// The previous version's `renew.lua`, `complete.lua` and `release.lua`
/// (commit 16f3047), as its processes still run them during a rolling
/// upgrade: they know only the upper-case layout, and answer 0 (lost) for
/// any other record.
const PREVIOUS_RENEW: &str = r#"#!lua flags=allow-oom
-- Extends the lease of an in-flight record, if it holds the token.
-- KEYS[1]  the record (layout.rs, claim.lua)
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  new lease in milliseconds, from now
-- Returns 1 (held) or 0 (lost).
-- allow-oom: a server at maxmemory must still keep (and end) the leases of
-- running handlers, or a retry would run them again once memory frees up.
-- New claims are still refused when memory is full (claim.lua has no flag).
-- Ownership is the token: a lease that ran out while nobody took the key
-- over (the store was unreachable for longer than the lease) is renewed
-- back into life by its holder. A completed or released record has no
-- owner. A lease that would outlive the record extends the record too.
local record = redis.call('GET', KEYS[1])
local state = record and string.sub(record, 1, 1)
if not record or (state ~= 'L' and state ~= 'G') or string.sub(record, 34, 49) ~= ARGV[1] then
  return 0
end
local mark, lease = tonumber(string.sub(record, 51)), tonumber(ARGV[2])
local left = redis.call('PTTL', KEYS[1])
if left == -1 then
  -- A key without expiry (PERSIST by hand) cannot tell its lease: the
  -- owner's token still holds it. It gets its claim's time to live again.
  left = mark + lease
  redis.call('PEXPIRE', KEYS[1], left)
elseif left < lease then
  left = lease
  redis.call('PEXPIRE', KEYS[1], left)
end
-- Back to `L`: a grace a claim gave (G) ends, the holder being alive.
redis.call('SET', KEYS[1], 'L' .. string.sub(record, 2, 50) .. string.format('%d', left - lease), 'KEEPTTL')
return 1
"#;
const PREVIOUS_COMPLETE: &str = r#"#!lua flags=allow-oom
-- Stores the response of an in-flight record, if it holds the token, its
-- lease running or not (ownership is the token: nobody took the key over).
-- KEYS[1]  the record (layout.rs, claim.lua)
-- ARGV[1]  fencing token (16 bytes)
-- ARGV[2]  encoded response (StoredResponse::to_bytes)
-- ARGV[3]  time to live in milliseconds, from now
-- Returns 1 (held) or 0 (lost). The record becomes `C`, the fingerprint,
-- the token (so that the very same completion sent again, same token and
-- same response, because its reply was lost or replicas did not
-- acknowledge it in time, is answered 1 again, and written again, so that
-- a `WAIT` after it covers the record whichever connection sends it) and
-- the response. Any other completion of a completed record is refused.
-- allow-oom: a server at maxmemory must still complete running handlers,
-- or their retries would find them in flight until their leases end and
-- then run them again. New claims are refused when memory is full.
local record = redis.call('GET', KEYS[1])
if not record or string.sub(record, 34, 49) ~= ARGV[1] then
  return 0
end
local state = string.sub(record, 1, 1)
if state == 'L' or state == 'G' then
  redis.call('SET', KEYS[1], 'C' .. string.sub(record, 2, 49) .. ARGV[2], 'PX', ARGV[3])
  return 1
end
if state == 'C' and string.sub(record, 50) == ARGV[2] then
  -- Written again by an expiry left as it is: a write that replicates (so
  -- a WAIT after it covers the record). A record without expiry (PERSIST
  -- by hand, a restore) gets the TTL.
  local left = redis.call('PTTL', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], left > 0 and left or ARGV[3])
  return 1
end
return 0
"#;
const PREVIOUS_RELEASE: &str = r#"#!lua flags=allow-oom
-- Turns an in-flight record into a tombstone, if it holds the token (its
-- lease running or not): the token and lease go, the fingerprint stays until
-- the record's expiry.
-- KEYS[1]  the record (layout.rs, claim.lua)
-- ARGV[1]  fencing token (16 bytes)
-- Returns 1 (held) or 0 (lost).
-- allow-oom: a server at maxmemory must still keep (and end) the leases of
-- running handlers, or a retry would run them again once memory frees up.
-- New claims are still refused when memory is full (claim.lua has no flag).
local record = redis.call('GET', KEYS[1])
local state = record and string.sub(record, 1, 1)
if not record or (state ~= 'L' and state ~= 'G') or string.sub(record, 34, 49) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], 'R' .. string.sub(record, 2, 33), 'KEEPTTL')
return 1
"#;

/// A lapsed `L` record, whose holder is a process of the previous version:
/// the claim that finds it lapsed gives it a grace written `G`, as the
/// previous version's claim wrote it, so that its holder, alive and only
/// late, still renews (back to `L`), completes or releases it with the
/// previous version's scripts. Past the grace, it is taken over, or under
/// `hold` held, in the lower-case layout.
#[tokio::test(flavor = "multi_thread")]
async fn a_grace_of_an_upper_case_record_is_one_its_holder_still_renews() {
    let Some((store, mut connection)) = shared("a_grace_of_an_upper_case_record_is_one_its_holder_still_renews").await
    else {
        return;
    };
    let fp = fingerprint("a");
    let holder = FencingToken::generate().to_bytes();
    // Claimed by a process of the previous version, its lease lapsed: the
    // mark is above the key's PTTL.
    let lapsed = [&b"L"[..], fp.as_bytes(), &holder, b"0700000"].concat();
    let (renewed, completed, released, held) = (fresh_key(), fresh_key(), fresh_key(), fresh_key());
    for key in [&renewed, &completed, &released, &held] {
        let record = store.record_key(key);
        let () = redis::cmd("SET")
            .arg(&record)
            .arg(lapsed.as_slice())
            .arg("PX")
            .arg(600_000)
            .query_async(&mut connection)
            .await
            .unwrap();
        let other = FencingToken::generate().to_bytes();
        let grace = Value::Array(vec![Value::Int(3), Value::Int(LEASE_MS as i64 / 2)]);
        assert_eq!(claim(&mut connection, &record, &other).await, grace, "a grace, not a takeover");
        // `G`, the rest of the header as it was, and the new lease mark in
        // as many digits as it takes: the previous version's layout.
        let value: Vec<u8> = redis::cmd("GET").arg(&record).query_async(&mut connection).await.unwrap();
        assert_eq!(value[0], b'G', "the grace of an upper-case record: {:?}", String::from_utf8_lossy(&value));
        assert_eq!(value[1..50], lapsed[1..50], "fingerprint, holder's token and attempt kept");
        let mark = std::str::from_utf8(&value[50..]).unwrap();
        assert!(!mark.starts_with('0') && mark.bytes().all(|b| b.is_ascii_digit()), "a mark of {mark:?}");
        let mark: u64 = mark.parse().unwrap();
        assert!((500_000..=600_000 - LEASE_MS / 2).contains(&mark), "a grace of half a lease below the PTTL: {mark}");
    }
    let previous = |script: &str, key: &idem_runtime::store::StorageKey| {
        let mut command = redis::cmd("EVAL");
        command.arg(script).arg(1).arg(store.record_key(key)).arg(holder.as_slice());
        command
    };
    let value = |key: &idem_runtime::store::StorageKey| redis::cmd("GET").arg(store.record_key(key)).clone();

    // The holder renews within its grace, then completes; or completes
    // without renewing.
    let renewal: i64 = previous(PREVIOUS_RENEW, &renewed).arg(LEASE_MS).query_async(&mut connection).await.unwrap();
    assert_eq!(renewal, 1, "the previous version's renewal of its graced record");
    let now: Vec<u8> = value(&renewed).query_async(&mut connection).await.unwrap();
    assert_eq!(now[0], b'L', "renewed back to `L`");
    match store.claim(&renewed, &fp, LEASE, LEASE).await.unwrap() {
        Claim::InFlight { .. } => {}
        other => panic!("a renewed lease is in flight, not {other:?}"),
    }
    for key in [&renewed, &completed] {
        let completion: i64 = previous(PREVIOUS_COMPLETE, key)
            .arg(response(b"done").to_bytes())
            .arg(600_000)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(completion, 1, "the previous version's completion of its record");
        assert_eq!(store.claim(key, &fp, LEASE, LEASE).await.unwrap(), Claim::Replay(response(b"done")));
    }

    // Or releases it, and the next claim runs it after a release.
    let release: i64 = previous(PREVIOUS_RELEASE, &released).query_async(&mut connection).await.unwrap();
    assert_eq!(release, 1, "the previous version's release of its graced record");
    match store.claim(&released, &fp, LEASE, LEASE).await.unwrap() {
        Claim::Acquired { attempt, .. } => assert_eq!(attempt, Attempt::AfterRelease),
        other => panic!("a tombstone is acquired, not {other:?}"),
    }

    // A grace that lapsed too, under `hold`: held, in the lower-case layout
    // (its holder presumed dead).
    let () = redis::cmd("SET")
        .arg(store.record_key(&held))
        .arg([&b"G"[..], fp.as_bytes(), &holder, b"0700000"].concat())
        .arg("PX")
        .arg(600_000)
        .query_async(&mut connection)
        .await
        .unwrap();
    let answer: Value = redis::cmd("EVAL")
        .arg(CLAIM)
        .arg(1)
        .arg(store.record_key(&held))
        .arg(fp.as_bytes().as_slice())
        .arg(FencingToken::generate().to_bytes().as_slice())
        .arg(LEASE_MS)
        .arg(LEASE_MS * 2)
        .arg("hold")
        .arg("00000000000000000")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(answer, Value::Array(vec![Value::Int(5), Value::Int(1)]), "held by this claim");
    let now: Vec<u8> = value(&held).query_async(&mut connection).await.unwrap();
    assert_eq!(now[0], b'h', "held in the lower-case layout");
}
