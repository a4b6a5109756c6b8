//! Reading the scripts' replies back into store types.

use std::time::Duration;

use redis::Value;

use super::layout::{self, Stored};
use crate::record::{Record, RecordState, StoredResponse};
use crate::store::{Attempt, Claim, Fence, FencingToken, StoreError};

/// Reply codes of `claim.lua` (an acquired key is answered with its attempt
/// alone, an integer, and a replay with the stored response alone).
const IN_FLIGHT: i64 = 3;
const MISMATCH: i64 = 4;

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
        Value::Int(attempt) => {
            let attempt = match attempt {
                0 => Attempt::First,
                1 => Attempt::AfterRelease,
                2 => Attempt::Takeover,
                other => return Err(corrupt(format!("unexpected claim attempt {other}"))),
            };
            return Ok(Claim::Acquired { token, attempt });
        }
        other => return Err(corrupt(format!("unexpected claim reply {other:?}"))),
    };
    let mut items = items.into_iter();
    let code = match items.next() {
        Some(Value::Int(code)) => code,
        other => return Err(corrupt(format!("unexpected claim reply code {other:?}"))),
    };
    match (code, items.next()) {
        (MISMATCH, None) => Ok(Claim::Mismatch),
        (IN_FLIGHT, Some(left)) => Ok(Claim::InFlight { retry_after: time_left(&left)? }),
        (code, _) => Err(corrupt(format!("unexpected claim reply code {code}"))),
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
    let (fingerprint, state) = match stored(&value)? {
        Stored::InFlight { fingerprint, token, mark, .. } => {
            (fingerprint, RecordState::InFlight { token, lease_left: layout::lease_left(mark, left_ms), ttl_left })
        }
        Stored::Completed { fingerprint, response: stored } => {
            (fingerprint, RecordState::Completed { response: response(stored)?, ttl_left })
        }
        Stored::Released { fingerprint } => (fingerprint, RecordState::Released { ttl_left }),
    };
    Ok(Some(Record { fingerprint, state }))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::fingerprint::Fingerprint;

    fn stored() -> StoredResponse {
        StoredResponse { status: 200, headers: vec![("x".into(), b"1".to_vec())], body: Bytes::from_static(b"\x00ok") }
    }

    #[test]
    fn reads_each_claim_outcome() {
        let token = FencingToken::generate();
        assert_eq!(claim(Value::Int(0), token).unwrap(), Claim::Acquired { token, attempt: Attempt::First });
        assert_eq!(claim(Value::Int(1), token).unwrap(), Claim::Acquired { token, attempt: Attempt::AfterRelease });
        assert_eq!(claim(Value::Int(2), token).unwrap(), Claim::Acquired { token, attempt: Attempt::Takeover });
        assert_eq!(claim(Value::Array(vec![Value::Int(4)]), token).unwrap(), Claim::Mismatch);
        assert_eq!(claim(Value::BulkString(stored().to_bytes()), token).unwrap(), Claim::Replay(stored()));
        let in_flight = Value::Array(vec![Value::Int(3), Value::Int(1500)]);
        let retry_after = Duration::from_millis(1500);
        assert_eq!(claim(in_flight, token).unwrap(), Claim::InFlight { retry_after });
    }

    #[test]
    fn refuses_malformed_replies() {
        let token = FencingToken::generate();
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(9)]),
            Value::Array(vec![Value::Int(2), Value::Nil]),
            Value::Array(vec![Value::Int(2), Value::BulkString(stored().to_bytes())]),
            Value::BulkString(vec![7, 7]),
            Value::Int(3),
            Value::Int(-1),
            Value::Array(vec![Value::Int(1), Value::Int(0)]),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Int(1), Value::Int(3)]),
            Value::Array(vec![Value::Int(1), Value::Nil]),
        ] {
            assert!(matches!(claim(bad, token), Err(StoreError::Corrupt { .. })));
        }
        assert!(matches!(fence(Value::Int(2)), Err(StoreError::Corrupt { .. })));
        let in_flight = |mark: &[u8]| {
            let mut value = layout::claimed(&Fingerprint::from_bytes([7; 32]), FencingToken::generate(), 1, 2);
            value.truncate(50);
            value.extend_from_slice(mark);
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
            record(Value::Array(vec![Value::Int(1), Value::BulkString(value), Value::Int(left)])).unwrap()
        };
        // Claimed with a lease of 1 s in a TTL of 100 s, 750 ms ago.
        let in_flight = read(layout::claimed(&fp, token, 1_000, 100_000), 99_250);
        let (lease_left, ttl_left) = (Duration::from_millis(250), Duration::from_millis(99_250));
        let expected = RecordState::InFlight { token, lease_left, ttl_left };
        assert_eq!(in_flight, Some(Record { fingerprint: fp, state: expected }));
        let completed = [&b"C"[..], fp.as_bytes(), &token.to_bytes(), &stored().to_bytes()].concat();
        let expected = RecordState::Completed { response: stored(), ttl_left: Duration::ZERO };
        assert_eq!(read(completed, -1), Some(Record { fingerprint: fp, state: expected }));
        let released = [&b"R"[..], fp.as_bytes()].concat();
        let expected = RecordState::Released { ttl_left: Duration::from_millis(1_500) };
        assert_eq!(read(released, 1_500), Some(Record { fingerprint: fp, state: expected }));
    }
}
