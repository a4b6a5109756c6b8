//! Stored responses and idempotency records.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::token::FencingToken;

/// Leading byte of every encoded [`StoredResponse`]; bumped on layout changes.
const RESPONSE_FORMAT_VERSION: u8 = 1;

/// A response as kept for replay: status, headers in order, body bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// Header names (lower case) and values, in order; a multi-valued
    /// header appears once per value.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, byte for byte.
    pub body: Bytes,
}

/// Why stored bytes could not be read back as a response.
#[derive(Debug, thiserror::Error)]
#[error("stored response is unreadable: {reason}")]
pub struct DecodeError {
    reason: String,
}

impl StoredResponse {
    /// Compact binary encoding: a version byte, then postcard.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![RESPONSE_FORMAT_VERSION];
        // Encoding into a Vec only fails on allocation failure.
        postcard::to_io(self, &mut out).expect("encoding into a Vec cannot fail");
        out
    }

    /// Reads back what [`StoredResponse::to_bytes`] wrote, and nothing else:
    /// bytes after the response (a value cut and pasted, a store that
    /// appends) are refused, not ignored.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        match bytes.split_first() {
            Some((&RESPONSE_FORMAT_VERSION, rest)) => match postcard::take_from_bytes(rest) {
                Ok((response, [])) => Ok(response),
                Ok((_, trailing)) => {
                    Err(DecodeError { reason: format!("{} unexpected bytes after the response", trailing.len()) })
                }
                Err(e) => Err(DecodeError { reason: e.to_string() }),
            },
            Some((version, _)) => Err(DecodeError { reason: format!("unknown format version {version}") }),
            None => Err(DecodeError { reason: "empty record".into() }),
        }
    }

    /// Approximate size in bytes, for the stored-response limit.
    pub fn size(&self) -> usize {
        self.body.len() + self.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum::<usize>() + 8
    }
}

/// What a store holds for one key, as [`Store::get`](crate::store::Store::get) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Fingerprint of the request that claimed the key.
    pub fingerprint: Fingerprint,
    /// In flight, held, completed or released.
    pub state: RecordState,
    /// The route that claimed it (`POST /orders`), when the claim named one
    /// and the record was written by a version that keeps it.
    pub route: Option<String>,
    /// When its execution's claim was made, by the claiming process's
    /// clock (for operators: a record's age; never used for expiry).
    pub claimed_at: Option<SystemTime>,
    /// Which execution of the key holds it, or last held it.
    pub attempt: Option<Attempt>,
    /// The durable steps its executions recorded, in order (in flight,
    /// held or released; a completed record keeps none).
    pub steps: Vec<Step>,
}

impl Record {
    /// A record with nothing known beyond its fingerprint and state.
    pub fn new(fingerprint: Fingerprint, state: RecordState) -> Self {
        Self { fingerprint, state, route: None, claimed_at: None, attempt: None, steps: Vec::new() }
    }

    /// Its state's name.
    pub fn state_name(&self) -> StateName {
        match self.state {
            RecordState::InFlight { .. } => StateName::InFlight,
            RecordState::Held { .. } => StateName::Held,
            RecordState::Completed { .. } => StateName::Completed,
            RecordState::Released { .. } => StateName::Released,
        }
    }

    /// The token of its execution, in flight or held.
    pub fn token(&self) -> Option<FencingToken> {
        match self.state {
            RecordState::InFlight { token, .. } | RecordState::Held { token, .. } => Some(token),
            _ => None,
        }
    }

    /// Time left before it expires.
    pub fn ttl_left(&self) -> Duration {
        match self.state {
            RecordState::InFlight { ttl_left, .. }
            | RecordState::Held { ttl_left, .. }
            | RecordState::Completed { ttl_left, .. }
            | RecordState::Released { ttl_left } => ttl_left,
        }
    }

    /// How long ago its execution was claimed, when known.
    pub fn age(&self) -> Option<Duration> {
        self.claimed_at.map(|at| SystemTime::now().duration_since(at).unwrap_or_default())
    }
}

/// The lives of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordState {
    /// A handler is running under a lease, or ran under one that lapsed.
    InFlight {
        /// The owner's fencing token.
        token: FencingToken,
        /// Time left on the lease, by the store's clock; zero once it lapsed
        /// (the owner crashed or stalled), when the same request may take
        /// the key over.
        lease_left: Duration,
        /// Time left before the record expires, by the store's clock.
        ttl_left: Duration,
    },
    /// Its lease lapsed unfinished on a route with `on_lapse = "hold"`: no
    /// claim runs it again; its holder may still complete, an operator may
    /// release or resolve it.
    Held {
        /// The holder's fencing token.
        token: FencingToken,
        /// Time left before the record expires, by the store's clock.
        ttl_left: Duration,
    },
    /// The handler reported that nothing happened: a tombstone keeping the
    /// fingerprint, so that only the same request may claim the key again.
    Released {
        /// Time left before the record expires, by the store's clock.
        ttl_left: Duration,
    },
    /// The response is stored.
    Completed {
        /// The stored response.
        response: StoredResponse,
        /// Time left before the record expires, by the store's clock.
        ttl_left: Duration,
    },
}

/// Which execution of its key a won claim starts, by what the key held
/// before the claim (§8 of the behaviour contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Attempt {
    /// The key held no live record (none, or one past its TTL): the first
    /// execution.
    First,
    /// The key held a tombstone of the same request: an earlier execution
    /// released it, reporting that nothing happened.
    AfterRelease,
    /// The key held a lapsed lease of the same request: an earlier
    /// execution stopped before completing (a crash, a stall, a lost
    /// lease) and may have had effects. Downstream calls made with a
    /// [derived key](crate::ExecutionContext::derived_key) are not repeated.
    Takeover,
}

impl Attempt {
    /// `first`, `after_release` or `takeover`, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::First => "first",
            Self::AfterRelease => "after_release",
            Self::Takeover => "takeover",
        }
    }
}

/// A durable step's recorded result (§8 of the behaviour contract): what
/// [`Store::record_step`](crate::store::Store::record_step) kept and a takeover's claim hands back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    /// The step's name, unique within its execution (`"charge"`).
    pub name: String,
    /// Its serialized result (the runtime writes JSON).
    pub result: Bytes,
}

impl Step {
    /// Longest step name, in bytes.
    pub const MAX_NAME_BYTES: usize = 200;

    /// Bytes this step takes in a record, for size limits.
    pub fn size(&self) -> usize {
        self.name.len() + self.result.len() + 16
    }
}

/// A record's state, as operators name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateName {
    /// An execution runs under a lease, or ran under one that lapsed.
    InFlight,
    /// An execution lapsed unfinished on a route that holds such
    /// executions (`on_lapse = "hold"`): it waits for an operator.
    Held,
    /// The response is stored and replayed.
    Completed,
    /// A tombstone: the same request may run again.
    Released,
}

impl StateName {
    /// Every state, in the order of a record's life.
    pub const ALL: [Self; 4] = [Self::InFlight, Self::Held, Self::Completed, Self::Released];

    /// `in-flight`, `held`, `completed` or `released`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in-flight",
            Self::Held => "held",
            Self::Completed => "completed",
            Self::Released => "released",
        }
    }
}

impl fmt::Display for StateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is none of [`StateName::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state `{0}`: expected in-flight, held, completed or released")]
pub struct UnknownState(pub String);

impl FromStr for StateName {
    type Err = UnknownState;

    fn from_str(name: &str) -> Result<Self, UnknownState> {
        Self::ALL.into_iter().find(|state| state.as_str() == name).ok_or_else(|| UnknownState(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("x-multi".into(), b"one".to_vec()),
                ("x-multi".into(), b"two".to_vec()),
            ],
            body: Bytes::from_static(b"{\"id\":1}\x00\xff"),
        }
    }

    #[test]
    fn round_trips_byte_for_byte() {
        let response = sample();
        let bytes = response.to_bytes();
        assert_eq!(StoredResponse::from_bytes(&bytes).unwrap(), response);
        // Binary body, not base64: the encoding is barely larger than the data.
        assert!(bytes.len() < response.size() + 16, "{} bytes", bytes.len());
    }

    #[test]
    fn refuses_garbage_and_unknown_versions() {
        assert!(StoredResponse::from_bytes(&[]).is_err());
        assert!(StoredResponse::from_bytes(&[9, 1, 2]).is_err());
        let mut bytes = sample().to_bytes();
        bytes.truncate(bytes.len() - 3);
        assert!(StoredResponse::from_bytes(&bytes).is_err());
    }

    /// Found by the `record` fuzz check: postcard reads a value from the
    /// front of its input and ignored what followed, so a stored value with
    /// bytes appended still decoded.
    #[test]
    fn record_decoder_rejects_trailing_bytes() {
        let mut bytes = sample().to_bytes();
        bytes.push(0xff);
        let error = StoredResponse::from_bytes(&bytes).expect_err("a byte after the response");
        assert!(error.to_string().contains("1 unexpected bytes after the response"), "{error}");
        // The smallest record, as the fuzzer found it: status 200, no
        // headers, an empty body, then one byte.
        assert!(StoredResponse::from_bytes(&[1, 0xc8, 0x01, 0, 0, 0xff]).is_err());
        assert!(StoredResponse::from_bytes(&[1, 0xc8, 0x01, 0, 0]).is_ok());
    }
}
