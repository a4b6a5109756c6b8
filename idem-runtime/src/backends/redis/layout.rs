//! A record as one Redis string: its layout, shared with the Lua scripts
//! (which read it with `string.sub` at the same offsets).
//!
//! | state | bytes |
//! |---|---|
//! | in flight | `L` (`G` once a claim found its lease lapsed), fingerprint (32), owner's token (16), attempt (one digit), lease mark (decimal) |
//! | completed | `C`, fingerprint (32), the completing token (16), [`StoredResponse::to_bytes`] |
//! | released | `R`, fingerprint (32) |
//!
//! The lease is kept relative to the key's expiry, so that no operation
//! needs the server's clock as a number and a claim can be one plain `SET`:
//! the lease holds while the key's `PTTL` is above the *lease mark*. A claim
//! writes the record with the TTL as its expiry and the TTL minus the lease
//! as its mark; a renewal moves the mark to the `PTTL` minus the lease.
//!
//! `G` is a lease a claim found lapsed: the claim gave the holder a grace
//! (a new mark half a lease below the `PTTL`) instead of taking the key
//! over, in case the holder was only cut off from the server; a renewal
//! turns it back into `L`, and a claim after the grace takes the key over.
//!
//! [`StoredResponse::to_bytes`]: crate::record::StoredResponse::to_bytes

use std::io::Write;
use std::time::Duration;

use crate::fingerprint::Fingerprint;
use crate::store::{Attempt, FencingToken};

const FINGERPRINT: std::ops::Range<usize> = 1..33;
const TOKEN: std::ops::Range<usize> = 33..49;
/// Where an in-flight record's attempt digit is; its lease mark follows.
const ATTEMPT: usize = 49;
/// Where a completed record's response begins.
const RESPONSE: usize = 49;

/// A record read back.
#[derive(Debug, PartialEq, Eq)]
pub enum Stored<'a> {
    /// `L` or `G`: a lease, held while the key's `PTTL` is above `mark`.
    InFlight {
        /// The claiming request's fingerprint.
        fingerprint: Fingerprint,
        /// The owner's fencing token.
        token: FencingToken,
        /// Which execution of the key it is.
        attempt: Attempt,
        /// The lease mark, in milliseconds of `PTTL`.
        mark: u64,
        /// `G`: a claim found the lease lapsed and gave a grace.
        graced: bool,
    },
    /// `C`: a completed record.
    Completed {
        /// The request's fingerprint.
        fingerprint: Fingerprint,
        /// The stored response's bytes.
        response: &'a [u8],
    },
    /// `R`: a tombstone.
    Released {
        /// The released request's fingerprint.
        fingerprint: Fingerprint,
    },
}

/// The value of a claim that acquires a free key: in flight, attempt 0, a
/// lease of `lease_ms` within a record that lives `ttl_ms` (at least the
/// lease).
pub fn claimed(fingerprint: &Fingerprint, token: FencingToken, lease_ms: u64, ttl_ms: u64) -> Vec<u8> {
    // At most 20 digits: the value is built in one allocation.
    let mut value = Vec::with_capacity(ATTEMPT + 1 + 20);
    value.push(b'L');
    value.extend_from_slice(fingerprint.as_bytes());
    value.extend_from_slice(&token.to_bytes());
    value.push(b'0');
    write!(value, "{}", ttl_ms.saturating_sub(lease_ms)).expect("writing to a Vec cannot fail");
    value
}

/// Reads a record's value; `Err` says what is wrong with it.
pub fn read(value: &[u8]) -> Result<Stored<'_>, String> {
    let fingerprint = |value: &[u8]| -> Result<Fingerprint, String> {
        let bytes = value.get(FINGERPRINT).and_then(|bytes| <[u8; 32]>::try_from(bytes).ok());
        bytes.map(Fingerprint::from_bytes).ok_or_else(|| format!("a record of {} bytes", value.len()))
    };
    match value.first() {
        Some(b'C') if value.len() >= RESPONSE => {
            Ok(Stored::Completed { fingerprint: fingerprint(value)?, response: &value[RESPONSE..] })
        }
        Some(b'R') if value.len() == FINGERPRINT.end => Ok(Stored::Released { fingerprint: fingerprint(value)? }),
        Some(&state @ (b'L' | b'G')) if value.len() > ATTEMPT + 1 => {
            let token = <[u8; 16]>::try_from(&value[TOKEN]).map_err(|_| "a short token".to_owned())?;
            let attempt = match value[ATTEMPT] {
                b'0' => Attempt::First,
                b'1' => Attempt::AfterRelease,
                b'2' => Attempt::Takeover,
                other => return Err(format!("an in-flight record with attempt {other:#04x}")),
            };
            let mark = &value[ATTEMPT + 1..];
            let mark = std::str::from_utf8(mark)
                .ok()
                .filter(|mark| mark.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|mark| mark.parse().ok())
                .ok_or_else(|| format!("an in-flight record with the lease mark {mark:?}"))?;
            Ok(Stored::InFlight {
                fingerprint: fingerprint(value)?,
                token: FencingToken::from_bytes(token),
                attempt,
                mark,
                graced: state == b'G',
            })
        }
        _ => Err(format!("a value of {} bytes that is no idempotency record", value.len())),
    }
}

/// What is left of a lease marked `mark`, with the key's `PTTL` at `left_ms`
/// (negative: a key without expiry, whose lease cannot be told; nothing).
pub(super) fn lease_left(mark: u64, left_ms: i64) -> Duration {
    let left = u64::try_from(left_ms).unwrap_or(0);
    Duration::from_millis(left.saturating_sub(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_value_reads_back() {
        let (fp, token) = (Fingerprint::from_bytes([7; 32]), FencingToken::generate());
        let value = claimed(&fp, token, 30_000, 86_400_000);
        assert_eq!(&value[ATTEMPT + 1..], b"86370000");
        let read = read(&value).unwrap();
        let expected =
            Stored::InFlight { fingerprint: fp, token, attempt: Attempt::First, mark: 86_370_000, graced: false };
        assert_eq!(read, expected);
        let mut graced = value.clone();
        graced[0] = b'G';
        assert!(matches!(super::read(&graced).unwrap(), Stored::InFlight { graced: true, .. }));
        assert_eq!(lease_left(86_370_000, 86_399_000), Duration::from_millis(29_000));
        assert_eq!(lease_left(86_370_000, 86_000_000), Duration::ZERO);
        assert_eq!(lease_left(86_370_000, -1), Duration::ZERO);
    }

    #[test]
    fn completed_and_released_values_read_back() {
        let mut value = vec![b'C'];
        value.extend_from_slice(&[1; 32]);
        value.extend_from_slice(&[2; 16]);
        value.extend_from_slice(b"resp");
        let fingerprint = Fingerprint::from_bytes([1; 32]);
        assert_eq!(read(&value).unwrap(), Stored::Completed { fingerprint, response: b"resp" });
        assert_eq!(read(&value[..49]).unwrap(), Stored::Completed { fingerprint, response: b"" });
        let mut released = vec![b'R'];
        released.extend_from_slice(&[1; 32]);
        assert_eq!(read(&released).unwrap(), Stored::Released { fingerprint });
    }

    #[test]
    fn anything_else_is_refused() {
        let fp = [3u8; 32];
        let in_flight = |attempt: u8, mark: &[u8]| [&b"L"[..], &fp, &[4; 16], &[attempt], mark].concat();
        for bad in [
            Vec::new(),
            b"OK".to_vec(),
            [&b"R"[..], &fp, b"x"].concat(),
            [&b"R"[..], &fp[..31]].concat(),
            [&b"C"[..], &fp, &[0; 15]].concat(),
            in_flight(b'0', b""),
            in_flight(b'3', b"10"),
            in_flight(b'0', b"-1"),
            in_flight(b'0', b"1 "),
            in_flight(b'0', b"99999999999999999999999"),
            [&b"X"[..], &fp].concat(),
        ] {
            assert!(read(&bad).is_err(), "{bad:?}");
        }
        assert!(read(&in_flight(b'2', b"0")).is_ok());
    }
}
