//! Reading the scripts' replies back into store types.

use std::time::Duration;

use redis::Value;

use crate::fingerprint::Fingerprint;
use crate::record::{Record, RecordState, StoredResponse};
use crate::store::{Attempt, Claim, Fence, FencingToken, StoreError};

/// Reply codes of `claim.lua` (an acquired key is answered with its attempt
/// alone, an integer, and a replay with the stored response alone).
const IN_FLIGHT: i64 = 3;
const MISMATCH: i64 = 4;

fn corrupt(message: impl Into<String>) -> StoreError {
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

fn response(bytes: &[u8]) -> Result<StoredResponse, StoreError> {
    StoredResponse::from_bytes(bytes).map_err(|e| corrupt(e.to_string()))
}

fn token(bytes: &[u8]) -> Result<FencingToken, StoreError> {
    let bytes: [u8; 16] =
        bytes.try_into().map_err(|_| corrupt(format!("a fencing token of {} bytes, expected 16", bytes.len())))?;
    Ok(FencingToken::from_bytes(bytes))
}

fn fingerprint(bytes: &[u8]) -> Result<Fingerprint, StoreError> {
    let bytes: [u8; 32] =
        bytes.try_into().map_err(|_| corrupt(format!("a fingerprint of {} bytes, expected 32", bytes.len())))?;
    Ok(Fingerprint::from_bytes(bytes))
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

/// Reply codes of `get.lua`.
const NO_RECORD: i64 = 0;
const RECORD_IN_FLIGHT: i64 = 1;
const RECORD_COMPLETED: i64 = 2;
const RECORD_RELEASED: i64 = 3;

/// The reply of `get.lua`: a code, then the fields of that state.
pub(super) fn record(value: Value) -> Result<Option<Record>, StoreError> {
    let Value::Array(items) = value else {
        return Err(corrupt(format!("unexpected record reply {value:?}")));
    };
    let mut items = items.into_iter();
    let code = match items.next() {
        Some(Value::Int(code)) => code,
        other => return Err(corrupt(format!("unexpected record reply code {other:?}"))),
    };
    let mut next = |what: &str| items.next().ok_or_else(|| corrupt(format!("a record reply without its {what}")));
    if code == NO_RECORD {
        return Ok(None);
    }
    let fingerprint = fingerprint(&required_bytes(next("fingerprint")?, "fingerprint")?)?;
    let state = match code {
        RECORD_IN_FLIGHT => {
            let token = token(&required_bytes(next("fencing token")?, "fencing token")?)?;
            let lease_left = time_left(&next("lease")?)?;
            RecordState::InFlight { token, lease_left, ttl_left: time_left(&next("time to live")?)? }
        }
        RECORD_COMPLETED => {
            let response = response(&required_bytes(next("stored response")?, "stored response")?)?;
            RecordState::Completed { response, ttl_left: time_left(&next("time to live")?)? }
        }
        RECORD_RELEASED => RecordState::Released { ttl_left: time_left(&next("time to live")?)? },
        other => return Err(corrupt(format!("unexpected record reply code {other}"))),
    };
    match items.next() {
        None => Ok(Some(Record { fingerprint, state })),
        Some(extra) => Err(corrupt(format!("a record reply with an extra {extra:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

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
        let fp = || Value::BulkString(vec![0; 32]);
        for bad in [
            Value::Nil,
            Value::Boolean(false),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(9), fp(), Value::Int(10)]),
            // A token of the wrong length.
            Value::Array(vec![Value::Int(1), fp(), Value::BulkString(vec![0; 15]), Value::Int(1), Value::Int(10)]),
            // A missing field, an extra one, a fingerprint that is not bytes.
            Value::Array(vec![Value::Int(1), fp(), Value::BulkString(vec![0; 16]), Value::Int(1)]),
            Value::Array(vec![Value::Int(3), fp(), Value::Int(10), Value::Int(10)]),
            Value::Array(vec![Value::Int(3), Value::Boolean(false), Value::Int(10)]),
            Value::Array(vec![Value::Int(2), fp(), Value::Nil, Value::Int(10)]),
        ] {
            assert!(matches!(record(bad.clone()), Err(StoreError::Corrupt { .. })), "{bad:?}");
        }
    }

    #[test]
    fn reads_records() {
        assert_eq!(record(Value::Array(vec![Value::Int(0)])).unwrap(), None);
        let token = FencingToken::generate();
        let fp = Fingerprint::from_bytes([7; 32]);
        let fp_value = || Value::BulkString(fp.as_bytes().to_vec());
        let in_flight = Value::Array(vec![
            Value::Int(1),
            fp_value(),
            Value::BulkString(token.to_bytes().to_vec()),
            Value::Int(250),
            Value::Int(90_000),
        ]);
        let (lease_left, ttl_left) = (Duration::from_millis(250), Duration::from_secs(90));
        let expected = RecordState::InFlight { token, lease_left, ttl_left };
        assert_eq!(record(in_flight).unwrap(), Some(Record { fingerprint: fp, state: expected }));
        let completed =
            Value::Array(vec![Value::Int(2), fp_value(), Value::BulkString(stored().to_bytes()), Value::Int(-1)]);
        let expected = RecordState::Completed { response: stored(), ttl_left: Duration::ZERO };
        assert_eq!(record(completed).unwrap(), Some(Record { fingerprint: fp, state: expected }));
        let released = Value::Array(vec![Value::Int(3), fp_value(), Value::Int(1_500)]);
        let expected = RecordState::Released { ttl_left: Duration::from_millis(1_500) };
        assert_eq!(record(released).unwrap(), Some(Record { fingerprint: fp, state: expected }));
    }
}
