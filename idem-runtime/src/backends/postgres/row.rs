//! Reading rows back into claims and records.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use sqlx::postgres::PgRow;
use sqlx::{Decode, Postgres, Row, Type};

use crate::fingerprint::Fingerprint;
use crate::record::{Record, RecordState, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{Attempt, Claim, FencingToken, Step};

/// Why a row could not be read; becomes [`crate::StoreError::Corrupt`].
pub(super) type Decoded<T> = Result<T, String>;

/// The values of the `state` column.
enum State {
    InFlight,
    Completed,
    Released,
}

fn get<'r, T: Decode<'r, Postgres> + Type<Postgres>>(row: &'r PgRow, column: &str) -> Decoded<T> {
    row.try_get(column).map_err(|error| error.to_string())
}

fn state(row: &PgRow) -> Decoded<State> {
    match get::<&str>(row, "state")? {
        "in_flight" => Ok(State::InFlight),
        "completed" => Ok(State::Completed),
        "released" => Ok(State::Released),
        other => Err(format!("unknown state {other:?}")),
    }
}

/// Time left, from a microseconds `column` computed by the database (so by
/// its clock): `lease_left_us` or `ttl_left_us`.
fn left(row: &PgRow, column: &str) -> Decoded<Duration> {
    let micros = get::<Option<i64>>(row, column)?.ok_or_else(|| format!("no {column}"))?;
    Ok(Duration::from_micros(u64::try_from(micros).unwrap_or(0)))
}

fn fingerprint(row: &PgRow) -> Decoded<Fingerprint> {
    let bytes = get::<&[u8]>(row, "fingerprint")?;
    let bytes = <[u8; 32]>::try_from(bytes).map_err(|_| format!("fingerprint of {} bytes, not 32", bytes.len()))?;
    Ok(Fingerprint::from_bytes(bytes))
}

fn token(row: &PgRow) -> Decoded<FencingToken> {
    let bytes = get::<Option<&[u8]>>(row, "token")?.ok_or("in-flight row without a token")?;
    let bytes = <[u8; 16]>::try_from(bytes).map_err(|_| format!("token of {} bytes, not 16", bytes.len()))?;
    Ok(FencingToken::from_bytes(bytes))
}

fn response(row: &PgRow) -> Decoded<StoredResponse> {
    let status = get::<Option<i32>>(row, "status")?.ok_or("completed row without a status")?;
    let status = u16::try_from(status).map_err(|_| format!("status {status} out of range"))?;
    let names = get::<Option<Vec<String>>>(row, "header_names")?.ok_or("completed row without header names")?;
    let values = get::<Option<Vec<Vec<u8>>>>(row, "header_values")?.ok_or("completed row without header values")?;
    if names.len() != values.len() {
        return Err(format!("{} header names but {} header values", names.len(), values.len()));
    }
    let body = get::<Option<Vec<u8>>>(row, "body")?.ok_or("completed row without a body")?;
    Ok(StoredResponse { status, headers: names.into_iter().zip(values).collect(), body: Bytes::from(body) })
}

fn attempt(row: &PgRow) -> Decoded<Option<Attempt>> {
    match get::<Option<&str>>(row, "attempt")? {
        None => Ok(None),
        Some("first") => Ok(Some(Attempt::First)),
        Some("after_release") => Ok(Some(Attempt::AfterRelease)),
        Some("takeover") => Ok(Some(Attempt::Takeover)),
        Some(other) => Err(format!("unknown attempt {other:?}")),
    }
}

/// The steps, in order, from the `step_names` and `step_values` columns
/// (none when they are NULL).
fn steps(row: &PgRow) -> Decoded<Vec<Step>> {
    let names = get::<Option<Vec<String>>>(row, "step_names")?.unwrap_or_default();
    let values = get::<Option<Vec<Vec<u8>>>>(row, "step_values")?.unwrap_or_default();
    if names.len() != values.len() {
        return Err(format!("{} step names but {} step results", names.len(), values.len()));
    }
    Ok(names.into_iter().zip(values).map(|(name, result)| Step { name, result: Bytes::from(result) }).collect())
}

/// When the execution was claimed, from `claimed_at_us` (microseconds since
/// the Unix epoch; NULL for a row an earlier version claimed).
fn claimed_at(row: &PgRow) -> Decoded<Option<SystemTime>> {
    let Some(micros) = get::<Option<i64>>(row, "claimed_at_us")? else { return Ok(None) };
    let since_epoch = Duration::from_micros(micros.unsigned_abs());
    let at = if micros >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(since_epoch)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(since_epoch)
    };
    at.map(Some).ok_or_else(|| format!("claimed at {micros} µs from the epoch, out of range"))
}

/// A row returned by the claim statement. `token` is the one the claim
/// offered; the row says whether it won.
pub(super) fn claim(row: &PgRow, token: FencingToken) -> Decoded<Claim> {
    if get::<bool>(row, "acquired")? {
        let attempt = attempt(row)?.unwrap_or(Attempt::First);
        return Ok(Claim::Acquired { token, attempt, steps: steps(row)? });
    }
    if !get::<Option<bool>>(row, "same_request")?.unwrap_or(false) {
        return Ok(Claim::Mismatch);
    }
    match state(row)? {
        State::Completed => Ok(Claim::Replay(response(row)?)),
        State::InFlight if get::<bool>(row, "held")? => Ok(Claim::Held { newly: get::<bool>(row, "newly_held")? }),
        State::InFlight => Ok(Claim::InFlight { retry_after: left(row, "lease_left_us")? }),
        // The claim statement takes a tombstone of the same request over.
        State::Released => Err("a claim left a tombstone of the same request in place".into()),
    }
}

/// A row returned by the lookup and listing statements (`record.sql`).
pub(super) fn record(row: &PgRow) -> Decoded<Record> {
    let ttl_left = left(row, "ttl_left_us")?;
    let state = match state(row)? {
        State::InFlight if get::<bool>(row, "held")? => RecordState::Held { token: token(row)?, ttl_left },
        State::InFlight => {
            RecordState::InFlight { token: token(row)?, lease_left: left(row, "lease_left_us")?, ttl_left }
        }
        State::Completed => RecordState::Completed { response: response(row)?, ttl_left },
        State::Released => RecordState::Released { ttl_left },
    };
    let mut record = Record::new(fingerprint(row)?, state);
    record.route = get::<Option<String>>(row, "route")?;
    record.claimed_at = claimed_at(row)?;
    record.attempt = attempt(row)?;
    record.steps = steps(row)?;
    Ok(record)
}

/// The storage key of a row of the listing or the lookup by id.
pub(super) fn key(row: &PgRow) -> Decoded<StorageKey> {
    let stored = get::<&str>(row, "key")?;
    StorageKey::from_stored(stored).ok_or_else(|| format!("a key that no storage key spells: {stored:?}"))
}
