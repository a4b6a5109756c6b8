//! Reading the scripts' replies back into store types.

use std::time::Duration;

use redis::Value;

use super::layout::{self, State, Stored};
use crate::record::{Record, RecordState, StoredResponse};
use crate::store::{Attempt, Claim, Fence, FencingToken, Settle, StoreError};

/// Reply codes of `claim.lua` beside an acquired key's attempt (0, 1, 2)
/// (a replay is answered with the stored response alone).
const IN_FLIGHT: i64 = 3;
const MISMATCH: i64 = 4;
const HELD: i64 = 5;
/// Reply code of `settle.lua` beside the claim's in flight: the settle gave
/// a lapsed lease a grace.
const GRACED: i64 = 6;

pub(super) fn corrupt(message: impl Into<String>) -> StoreError {
    StoreError::Corrupt { store: "redis", message: message.into() }
}

/// `PTTL` milliseconds as a duration; negative answers (no expiry, no key)
/// count as nothing left.
fn time_left(value: &Value) -> Result<Duration, StoreError> {
    match value {
        Value::Int(ms) => Ok(Duration::from_millis(u64::try_from(*ms).unwrap_or(0))),
        other => Err(corrupt(format!("expected a PTTL in milliseconds, got {other:?}"))),
    }
}

fn required_bytes(value: Value, what: &str) -> Result<Vec<u8>, StoreError> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        other => Err(corrupt(format!("expected the {what} as bytes, got {other:?}"))),
    }
}

pub(super) fn response(bytes: &[u8]) -> Result<StoredResponse, StoreError> {
    StoredResponse::from_bytes(bytes).map_err(|e| corrupt(e.to_string()))
}

/// The reply of `claim.lua`; `token` is the one the script was given.
pub(super) fn claim(value: Value, token: FencingToken) -> Result<Claim, StoreError> {
    let items = match value {
        Value::Array(items) => items,
        Value::BulkString(stored) => return Ok(Claim::Replay(response(&stored)?)),
        other => return Err(corrupt(format!("unexpected claim reply {other:?}"))),
    };
    let mut items = items.into_iter();
    let code = match items.next() {
        Some(Value::Int(code)) => code,
        other => return Err(corrupt(format!("unexpected claim reply code {other:?}"))),
    };
    let attempt = match code {
        0 => Some(Attempt::First),
        1 => Some(Attempt::AfterRelease),
        2 => Some(Attempt::Takeover),
        _ => None,
    };
    match (code, attempt, items.next(), items.next()) {
        (_, Some(attempt), Some(steps), None) => {
            let steps = layout::steps(&required_bytes(steps, "steps")?).map_err(corrupt)?;
            Ok(Claim::Acquired { token, attempt, steps })
        }
        (MISMATCH, _, None, None) => Ok(Claim::Mismatch),
        (IN_FLIGHT, _, Some(left), None) => Ok(Claim::InFlight { retry_after: time_left(&left)? }),
        (HELD, _, Some(Value::Int(newly @ (0 | 1))), None) => Ok(Claim::Held { newly: newly == 1 }),
        (code, ..) => Err(corrupt(format!("unexpected claim reply code {code}"))),
    }
}

/// The reply of a fenced script: 1 held, 0 lost.
pub(super) fn fence(value: Value) -> Result<Fence, StoreError> {
    match value {
        Value::Int(1) => Ok(Fence::Held),
        Value::Int(0) => Ok(Fence::Lost),
        other => Err(corrupt(format!("unexpected fenced reply {other:?}"))),
    }
}

/// The reply of `settle.lua`: 1 settled, 0 changed, `{3, lease ms left}`
/// running, `{6, grace ms}` graced.
pub(super) fn settle(value: Value) -> Result<Settle, StoreError> {
    let millis = |value: &Value| match value {
        &Value::Int(ms) => u64::try_from(ms).ok().map(Duration::from_millis),
        _ => None,
    };
    let settle = match &value {
        Value::Int(1) => Some(Settle::Applied),
        Value::Int(0) => Some(Settle::Changed),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(IN_FLIGHT), left] => millis(left).map(|lease_left| Settle::Running { lease_left }),
            [Value::Int(GRACED), grace] => millis(grace).map(|grace| Settle::Graced { grace }),
            _ => None,
        },
        _ => None,
    };
    settle.ok_or_else(|| corrupt(format!("unexpected settle reply {value:?}")))
}

/// A record's value read back, or [`StoreError::Corrupt`].
pub(super) fn stored(value: &[u8]) -> Result<Stored<'_>, StoreError> {
    layout::read(value).map_err(corrupt)
}

/// The reply of `get.lua`: `{0}` (no record) or `{1, the record, PTTL}`.
pub(super) fn record(value: Value) -> Result<Option<Record>, StoreError> {
    let Value::Array(items) = value else {
        return Err(corrupt(format!("unexpected record reply {value:?}")));
    };
    let (value, left) = match <[Value; 3]>::try_from(items) {
        Ok([Value::Int(1), value, left]) => (required_bytes(value, "record")?, left),
        Err(items) if matches!(items[..], [Value::Int(0)]) => return Ok(None),
        Ok(items) => return Err(corrupt(format!("unexpected record reply {items:?}"))),
        Err(items) => return Err(corrupt(format!("unexpected record reply {items:?}"))),
    };
    let ttl_left = time_left(&left)?;
    let Value::Int(left_ms) = left else { return Err(corrupt(format!("expected a PTTL, got {left:?}"))) };
    let Stored { fingerprint, state, attempt, claimed_at, route, steps } = stored(&value)?;
    let state = match state {
        State::InFlight { token, mark, .. } => {
            RecordState::InFlight { token, lease_left: layout::lease_left(mark, left_ms), ttl_left }
        }
        State::Held { token } => RecordState::Held { token, ttl_left },
        State::Completed { response: stored } => RecordState::Completed { response: response(stored)?, ttl_left },
        State::Released => RecordState::Released { ttl_left },
    };
    let mut record = Record::new(fingerprint, state);
    record.route = route.map(str::to_owned);
    record.claimed_at = claimed_at;
    record.attempt = attempt;
    record.steps = steps;
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use bytes::Bytes;

    use super::*;
    use crate::fingerprint::Fingerprint;
    use crate::store::Step;

    fn stored() -> StoredResponse {
        StoredResponse { status: 200, headers: vec![("x".into(), b"1".to_vec())], body: Bytes::from_static(b"\x00ok") }
    }

    fn acquired(attempt: i64, steps: &[u8]) -> Value {
        Value::Array(vec![Value::Int(attempt), Value::BulkString(steps.to_vec())])
    }

    #[test]
    fn reads_each_claim_outcome() {
        let token = FencingToken::generate();
        let first = Claim::Acquired { token, attempt: Attempt::First, steps: Vec::new() };
        assert_eq!(claim(acquired(0, b""), token).unwrap(), first);
        let after_release = Claim::Acquired { token, attempt: Attempt::AfterRelease, steps: Vec::new() };
        assert_eq!(claim(acquired(1, b""), token).unwrap(), after_release);
        let charge = Step { name: "charge".into(), result: Bytes::from_static(b"\x00\xff") };
        let after_release = Claim::Acquired { token, attempt: Attempt::AfterRelease, steps: vec![charge.clone()] };
        assert_eq!(claim(acquired(1, b"006charge0000000002\x00\xff"), token).unwrap(), after_release);
        let takeover = Claim::Acquired { token, attempt: Attempt::Takeover, steps: vec![charge] };
        assert_eq!(claim(acquired(2, b"006charge0000000002\x00\xff"), token).unwrap(), takeover);
        assert_eq!(claim(Value::Array(vec![Value::Int(4)]), token).unwrap(), Claim::Mismatch);
        assert_eq!(claim(Value::BulkString(stored().to_bytes()), token).unwrap(), Claim::Replay(stored()));
        let in_flight = Value::Array(vec![Value::Int(3), Value::Int(1500)]);
        let retry_after = Duration::from_millis(1500);
        assert_eq!(claim(in_flight, token).unwrap(), Claim::InFlight { retry_after });
        let held = |newly| Value::Array(vec![Value::Int(5), Value::Int(newly)]);
        assert_eq!(claim(held(1), token).unwrap(), Claim::Held { newly: true });
        assert_eq!(claim(held(0), token).unwrap(), Claim::Held { newly: false });
    }

    #[test]
    fn refuses_malformed_replies() {
        let token = FencingToken::generate();
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(9)]),
            Value::Array(vec![Value::Int(2), Value::Nil]),
            Value::Array(vec![Value::Int(2)]),
            Value::Array(vec![Value::Int(2), Value::BulkString(b"006charge".to_vec())]),
            acquired(3, b""),
            acquired(-1, b""),
            Value::Array(vec![Value::Int(0), Value::BulkString(Vec::new()), Value::Int(0)]),
            Value::BulkString(vec![7, 7]),
            Value::Int(0),
            Value::Int(3),
            Value::Array(vec![Value::Int(4), Value::Int(0)]),
            Value::Array(vec![Value::Int(3)]),
            Value::Array(vec![Value::Int(5)]),
            Value::Array(vec![Value::Int(5), Value::Int(2)]),
            Value::Array(vec![Value::Int(5), Value::Nil]),
        ] {
            assert!(matches!(claim(bad.clone(), token), Err(StoreError::Corrupt { .. })), "{bad:?}");
        }
        assert!(matches!(fence(Value::Int(2)), Err(StoreError::Corrupt { .. })));
        let in_flight = |mark: &[u8]| {
            let tail = layout::tail(SystemTime::now(), None);
            let mut value = layout::claimed(&Fingerprint::from_bytes([7; 32]), FencingToken::generate(), 1, 2, &tail);
            value[50..50 + mark.len()].copy_from_slice(mark);
            Value::BulkString(value)
        };
        for bad in [
            Value::Nil,
            Value::Boolean(false),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(9)]),
            Value::Array(vec![Value::Int(2), in_flight(b"1"), Value::Int(10)]),
            Value::Array(vec![Value::Int(1), in_flight(b"1")]),
            Value::Array(vec![Value::Int(1), in_flight(b"1"), Value::Int(10), Value::Int(10)]),
            Value::Array(vec![Value::Int(1), in_flight(b"x"), Value::Int(10)]),
            Value::Array(vec![Value::Int(1), Value::BulkString(b"OK".to_vec()), Value::Int(10)]),
            Value::Array(vec![Value::Int(1), Value::Int(5), Value::Int(10)]),
            Value::Array(vec![Value::Int(1), in_flight(b"1"), Value::Nil]),
        ] {
            assert!(matches!(record(bad.clone()), Err(StoreError::Corrupt { .. })), "{bad:?}");
        }
    }

    #[test]
    fn reads_records() {
        assert_eq!(record(Value::Array(vec![Value::Int(0)])).unwrap(), None);
        let token = FencingToken::generate();
        let fp = Fingerprint::from_bytes([7; 32]);
        let read = |value: Vec<u8>, left: i64| {
            record(Value::Array(vec![Value::Int(1), Value::BulkString(value), Value::Int(left)])).unwrap().unwrap()
        };
        // Claimed with a lease of 1 s in a TTL of 100 s, 750 ms ago.
        let at = UNIX_EPOCH + Duration::from_millis(1_767_225_600_000);
        let claimed = layout::claimed(&fp, token, 1_000, 100_000, &layout::tail(at, Some("POST /orders")));
        let in_flight = read(claimed.clone(), 99_250);
        let (lease_left, ttl_left) = (Duration::from_millis(250), Duration::from_millis(99_250));
        assert_eq!(in_flight.state, RecordState::InFlight { token, lease_left, ttl_left });
        assert_eq!((in_flight.route.as_deref(), in_flight.claimed_at), (Some("POST /orders"), Some(at)));
        assert_eq!((in_flight.fingerprint, in_flight.attempt), (fp, Some(Attempt::First)));
        let step = Step { name: "charge".into(), result: Bytes::from_static(b"1") };
        let held = [&b"h"[..], &claimed[1..], b"006charge00000000011"].concat();
        let held = read(held, 5_000);
        assert_eq!(held.state, RecordState::Held { token, ttl_left: Duration::from_secs(5) });
        assert_eq!(held.steps, vec![step.clone()]);
        let completed = [&b"c"[..], &claimed[1..], &stored().to_bytes()].concat();
        let expected = RecordState::Completed { response: stored(), ttl_left: Duration::ZERO };
        assert_eq!(read(completed, -1).state, expected);
        let completed = [&b"C"[..], fp.as_bytes(), &token.to_bytes(), &stored().to_bytes()].concat();
        let completed = read(completed, -1);
        assert_eq!(completed.state, expected, "the upper-case layout");
        assert_eq!((completed.route, completed.claimed_at, completed.attempt), (None, None, None));
        let released = [&b"R"[..], fp.as_bytes()].concat();
        let expected = RecordState::Released { ttl_left: Duration::from_millis(1_500) };
        assert_eq!(read(released, 1_500).state, expected);
        let released = [&b"r"[..], &claimed[1..], b"006charge00000000011"].concat();
        let released = read(released, 1_500);
        assert_eq!((released.state, released.route.as_deref()), (expected, Some("POST /orders")));
        assert_eq!(released.steps, vec![step], "a tombstone shows the steps it keeps");
    }
}
