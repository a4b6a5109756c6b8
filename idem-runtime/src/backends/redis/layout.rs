//! A record as one Redis string: its layout, shared with the Lua scripts
//! (`layout.lua`, which every script holds, reads it at the same offsets).
//!
//! | bytes | field |
//! |---|---|
//! | 1 | state: `l` in flight, `g` in flight after a grace, `h` held, `c` completed, `r` released |
//! | 32 | the request's fingerprint |
//! | 16 | the token: its holder's (in flight, held); the last holder's (completed, released) |
//! | 1 | the attempt: `0` first, `1` after a release, `2` a takeover |
//! | 15 | the lease mark: milliseconds of `PTTL`, decimal, zero padded (zero once completed or released) |
//! | 13 | when the execution was claimed: unix milliseconds by the claiming process's clock, zero padded, all zero when unknown |
//! | 4 | the route's length `n`, decimal, zero padded |
//! | `n` | the route (`POST /orders`, UTF-8), empty when the claim named none |
//! | the rest | in flight, held or released, the steps, in the order recorded, each a name length (3 digits), the name, a result length (10 digits), the result; completed, [`StoredResponse::to_bytes`] |
//!
//! Why so:
//!
//! - **The lease is kept relative to the key's expiry**, so that no
//!   operation needs the server's clock as a number and a claim can be one
//!   plain `SET`: the lease holds while the key's `PTTL` is above the
//!   *lease mark*. A claim writes the record with the TTL as its expiry and
//!   the TTL minus the lease as its mark; a renewal moves the mark to the
//!   `PTTL` minus the lease.
//! - **Fixed widths before the route**: a renewal rewrites the mark in
//!   place, and every field is read at the same offset in Lua and here.
//! - **The steps come last**: recording one is an `APPEND` (`step.lua`),
//!   with no rewrite of what is there. A step records an effect that
//!   happened, so the steps outlive their execution: a takeover hands them
//!   on as they are, a release keeps them in the tombstone and the claim
//!   after it hands them on in turn. Only a completion (which replaces them
//!   with the response), an operator's release with `forget_steps` and the
//!   record's expiry drop them.
//! - **The claim time is the application's clock**, written by the claim
//!   and never compared with anything by a script: it tells operators a
//!   record's age (`Operable::list`), it decides nothing. Expiry and leases
//!   are the server's alone.
//! - **The header stays through completion and release**: a completion
//!   sent again is recognised by its token, and operators still see the
//!   route, claim time and attempt of a completed or released record.
//!
//! `g` is a lease a claim found lapsed: the claim gave the holder a grace
//! (a new mark half a lease below the `PTTL`) instead of taking the key
//! over, in case the holder was only cut off from the server; a renewal
//! turns it back into `l`, and a claim after the grace takes the key over,
//! or, under `on_lapse = "hold"`, turns it into `h`: held, with its token
//! and steps, until its holder completes or releases it or an operator
//! settles it. A renewal keeps a held record held.
//!
//! **The upper-case layout.** Records written before this layout use
//! upper-case states and no claim time, route or steps: `L`/`G`, the
//! fingerprint, the token, the attempt digit and the lease mark in as many
//! digits as it takes; `C`, the fingerprint, the completing token and the
//! response; `R`, the fingerprint (a tombstone without steps). Every script
//! and [`read`] still answer them (during a rolling upgrade, and until they
//! expire); a script that changes one writes it in this layout, and every
//! new record is written in this layout, but for the grace a claim gives
//! an `L` record: that is written `G` as the previous version wrote it, so
//! that its holder (a process of that version, whose scripts answer lost
//! for any lower-case record) can still renew, complete or release it.
//! Lower-case letters tell the two apart at the first byte.
//!
//! [`StoredResponse::to_bytes`]: crate::record::StoredResponse::to_bytes

use std::io::Write;
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::fingerprint::Fingerprint;
use crate::store::{Attempt, FencingToken, StateName, Step};

const FINGERPRINT: Range<usize> = 1..33;
const TOKEN: Range<usize> = 33..49;
const ATTEMPT: usize = 49;
const MARK: Range<usize> = 50..65;
const CLAIMED_AT: Range<usize> = 65..78;
const ROUTE_LENGTH: Range<usize> = 78..82;
/// Bytes of the fixed header, up to the route.
const HEADER: usize = 82;
/// Where a completed record of the upper-case layout keeps its response.
const UPPER_RESPONSE: usize = 49;

/// Longest route kept, in bytes (four digits of length); a longer one is
/// cut at a character boundary.
pub const MAX_ROUTE_BYTES: usize = 9_999;
/// Longest step name kept, in bytes (three digits of length).
pub const MAX_STEP_NAME_BYTES: usize = 999;
/// Largest claim time kept (13 digits of unix milliseconds: year 2286).
const MAX_CLAIMED_AT_MS: u64 = 9_999_999_999_999;
/// Largest lease mark written (15 digits); expiries are far below it.
const MAX_MARK: u64 = 999_999_999_999_999;

/// A record read back.
#[derive(Debug, PartialEq, Eq)]
pub struct Stored<'a> {
    /// The claiming request's fingerprint.
    pub fingerprint: Fingerprint,
    /// What the record holds in its state.
    pub state: State<'a>,
    /// Which execution holds it or held it; `None` for a completed or
    /// released record of the upper-case layout.
    pub attempt: Option<Attempt>,
    /// When its execution was claimed (the claiming process's clock);
    /// `None` when unknown (the upper-case layout).
    pub claimed_at: Option<SystemTime>,
    /// The route that claimed it, if the claim named one.
    pub route: Option<&'a str>,
    /// The durable steps recorded, in order (in flight, held or released).
    pub steps: Vec<Step>,
}

/// A record's state, as [`read`] finds it.
#[derive(Debug, PartialEq, Eq)]
pub enum State<'a> {
    /// `l` or `g`: a lease, held while the key's `PTTL` is above `mark`.
    InFlight {
        /// The owner's fencing token.
        token: FencingToken,
        /// The lease mark, in milliseconds of `PTTL`.
        mark: u64,
        /// `g`: a claim found the lease lapsed and gave a grace.
        graced: bool,
    },
    /// `h`: lapsed past its grace under `on_lapse = "hold"`.
    Held {
        /// The holder's fencing token.
        token: FencingToken,
    },
    /// `c`: a completed record.
    Completed {
        /// The stored response's bytes.
        response: &'a [u8],
    },
    /// `r`: a tombstone (its steps, if any, in [`Stored::steps`]).
    Released,
}

/// What a record's header tells, read from its first bytes alone (the
/// start of a value is enough, as long as it holds the route): enough for
/// an operator's filter.
#[derive(Debug, PartialEq, Eq)]
pub struct Glance<'a> {
    /// The claiming request's fingerprint.
    pub fingerprint: Fingerprint,
    /// The record's state.
    pub state: StateName,
    /// The holder's token (in flight or held).
    pub token: Option<FencingToken>,
    /// See [`Stored::attempt`].
    pub attempt: Option<Attempt>,
    /// See [`Stored::claimed_at`].
    pub claimed_at: Option<SystemTime>,
    /// See [`Stored::route`].
    pub route: Option<&'a str>,
}

/// The claim time, route length and route of a new execution's record
/// (its bytes from the claim time on): the claim builds them once, for its
/// `SET` and for `claim.lua`.
pub fn tail(claimed_at: SystemTime, route: Option<&str>) -> Vec<u8> {
    let route = route.map_or("", |route| {
        let end = (0..=MAX_ROUTE_BYTES.min(route.len())).rev().find(|&at| route.is_char_boundary(at)).unwrap_or(0);
        &route[..end]
    });
    let ms = claimed_at.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis());
    let ms = u64::try_from(ms).unwrap_or(u64::MAX).min(MAX_CLAIMED_AT_MS);
    let mut tail = Vec::with_capacity(CLAIMED_AT.len() + ROUTE_LENGTH.len() + route.len());
    write!(tail, "{ms:013}{:04}", route.len()).expect("writing to a Vec cannot fail");
    tail.extend_from_slice(route.as_bytes());
    tail
}

/// The value of a claim that acquires a free key: in flight, attempt 0, a
/// lease of `lease_ms` within a record that lives `ttl_ms` (at least the
/// lease), then `tail` ([`tail`]).
pub fn claimed(fingerprint: &Fingerprint, token: FencingToken, lease_ms: u64, ttl_ms: u64, tail: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(CLAIMED_AT.start + tail.len());
    value.push(b'l');
    value.extend_from_slice(fingerprint.as_bytes());
    value.extend_from_slice(&token.to_bytes());
    value.push(b'0');
    let mark = ttl_ms.saturating_sub(lease_ms).min(MAX_MARK);
    write!(value, "{mark:015}").expect("writing to a Vec cannot fail");
    value.extend_from_slice(tail);
    value
}

/// Reads a record's value; `Err` says what is wrong with it.
pub fn read(value: &[u8]) -> Result<Stored<'_>, String> {
    let (glance, mark, body) = header(value)?;
    let steps = match glance.state {
        StateName::InFlight | StateName::Held | StateName::Released => steps(body)?,
        StateName::Completed => Vec::new(),
    };
    let token = || glance.token.ok_or_else(|| "a record without its token".to_owned());
    let state = match glance.state {
        StateName::InFlight => State::InFlight { token: token()?, mark, graced: matches!(value[0], b'g' | b'G') },
        StateName::Held => State::Held { token: token()? },
        StateName::Completed => State::Completed { response: body },
        StateName::Released => State::Released,
    };
    let Glance { fingerprint, attempt, claimed_at, route, .. } = glance;
    Ok(Stored { fingerprint, state, attempt, claimed_at, route, steps })
}

/// Reads the header at the start of a value (which may be cut after it).
pub fn glance(value: &[u8]) -> Result<Glance<'_>, String> {
    header(value).map(|(glance, _, _)| glance)
}

/// Reads the steps kept after a header (or handed back by `claim.lua`).
pub fn steps(mut bytes: &[u8]) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    while !bytes.is_empty() {
        let cut = || format!("steps cut short after {} of them", steps.len());
        let name_length = bytes.get(..3).and_then(digits).ok_or_else(cut)? as usize;
        let name = bytes.get(3..3 + name_length).ok_or_else(cut)?;
        let name = std::str::from_utf8(name).map_err(|_| format!("a step name that is not UTF-8: {name:?}"))?;
        let at = 3 + name_length;
        let result_length = bytes.get(at..at + 10).and_then(digits).ok_or_else(cut)?;
        let end = usize::try_from(result_length).ok().and_then(|length| length.checked_add(at + 10)).ok_or_else(cut)?;
        let result = bytes.get(at + 10..end).ok_or_else(cut)?;
        steps.push(Step { name: name.to_owned(), result: Bytes::copy_from_slice(result) });
        bytes = &bytes[end..];
    }
    Ok(steps)
}

/// The header of `value`, its lease mark (zero when it has none) and the
/// bytes after it (steps, or a completed record's response).
fn header(value: &[u8]) -> Result<(Glance<'_>, u64, &[u8]), String> {
    let fingerprint = |value: &[u8]| -> Result<Fingerprint, String> {
        let bytes = value.get(FINGERPRINT).and_then(|bytes| <[u8; 32]>::try_from(bytes).ok());
        bytes.map(Fingerprint::from_bytes).ok_or_else(|| format!("a record of {} bytes", value.len()))
    };
    let token = |value: &[u8]| value.get(TOKEN).and_then(|bytes| <[u8; 16]>::try_from(bytes).ok());
    let token = |value: &[u8]| token(value).map(FencingToken::from_bytes).ok_or_else(|| "a short token".to_owned());
    let attempt = |digit: u8| match digit {
        b'0' => Ok(Attempt::First),
        b'1' => Ok(Attempt::AfterRelease),
        b'2' => Ok(Attempt::Takeover),
        other => Err(format!("a record with attempt {other:#04x}")),
    };
    // A header of the upper-case layout: no claim time, no route.
    let upper = |fingerprint, state, token, attempt| Glance {
        fingerprint,
        state,
        token,
        attempt,
        claimed_at: None,
        route: None,
    };
    match value.first() {
        Some(&letter @ (b'l' | b'g' | b'h' | b'c' | b'r')) if value.len() >= HEADER => {
            let field = |range: Range<usize>, what: &str| {
                digits(&value[range.clone()]).ok_or_else(|| format!("a record with the {what} {:?}", &value[range]))
            };
            let mark = field(MARK, "lease mark")?;
            let claimed_ms = field(CLAIMED_AT, "claim time")?;
            let end = HEADER + field(ROUTE_LENGTH, "route length")? as usize;
            let route = value.get(HEADER..end).ok_or_else(|| format!("a route cut short in {} bytes", value.len()))?;
            let route = std::str::from_utf8(route).map_err(|_| format!("a route that is not UTF-8: {route:?}"))?;
            let state = match letter {
                b'l' | b'g' => StateName::InFlight,
                b'h' => StateName::Held,
                b'c' => StateName::Completed,
                _ => StateName::Released,
            };
            let holds = matches!(state, StateName::InFlight | StateName::Held);
            let header = Glance {
                fingerprint: fingerprint(value)?,
                state,
                token: holds.then(|| token(value)).transpose()?,
                attempt: Some(attempt(value[ATTEMPT])?),
                claimed_at: (claimed_ms > 0).then(|| UNIX_EPOCH + Duration::from_millis(claimed_ms)),
                route: (!route.is_empty()).then_some(route),
            };
            Ok((header, mark, &value[end..]))
        }
        Some(b'L' | b'G') if value.len() > ATTEMPT + 1 => {
            let mark = &value[ATTEMPT + 1..];
            let mark = digits(mark).ok_or_else(|| format!("an in-flight record with the lease mark {mark:?}"))?;
            let header =
                upper(fingerprint(value)?, StateName::InFlight, Some(token(value)?), Some(attempt(value[ATTEMPT])?));
            Ok((header, mark, &[][..]))
        }
        Some(b'C') if value.len() >= UPPER_RESPONSE => {
            Ok((upper(fingerprint(value)?, StateName::Completed, None, None), 0, &value[UPPER_RESPONSE..]))
        }
        Some(b'R') if value.len() == FINGERPRINT.end => {
            Ok((upper(fingerprint(value)?, StateName::Released, None, None), 0, &[][..]))
        }
        _ => Err(format!("a value of {} bytes that is no idempotency record", value.len())),
    }
}

/// Decimal digits only (no sign, no space, as Rust and Lua read them
/// alike), at most 19 of them.
fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 19 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// What is left of a lease marked `mark`, with the key's `PTTL` at `left_ms`
/// (negative: a key without expiry, whose lease cannot be told; nothing).
pub(super) fn lease_left(mark: u64, left_ms: i64) -> Duration {
    let left = u64::try_from(left_ms).unwrap_or(0);
    Duration::from_millis(left.saturating_sub(mark))
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
