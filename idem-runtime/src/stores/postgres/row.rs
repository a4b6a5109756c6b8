//! Reading rows back into claims and records.

use std::time::Duration;

use bytes::Bytes;
use sqlx::postgres::PgRow;
use sqlx::{Decode, Postgres, Row, Type};

use crate::fingerprint::Fingerprint;
use crate::record::{Record, RecordState, StoredResponse};
use crate::store::{Claim, FencingToken};

/// Why a row could not be read; becomes [`crate::StoreError::Corrupt`].
pub(super) type Decoded<T> = Result<T, String>;

/// The two values of the `state` column.
enum State {
    InFlight,
    Completed,
}

fn get<'r, T: Decode<'r, Postgres> + Type<Postgres>>(row: &'r PgRow, column: &str) -> Decoded<T> {
    row.try_get(column).map_err(|error| error.to_string())
}

fn state(row: &PgRow) -> Decoded<State> {
    match get::<&str>(row, "state")? {
        "in_flight" => Ok(State::InFlight),
        "completed" => Ok(State::Completed),
        other => Err(format!("unknown state {other:?}")),
    }
}

/// Time left before the row expires, from the `left_us` column (computed by
/// the database, so with its clock).
fn left(row: &PgRow) -> Decoded<Duration> {
    let micros = get::<i64>(row, "left_us")?;
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

/// A row returned by the claim statement. `token` is the one the claim
/// offered; the row says whether it won.
pub(super) fn claim(row: &PgRow, token: FencingToken) -> Decoded<Claim> {
    if get::<bool>(row, "acquired")? {
        return Ok(Claim::Acquired { token });
    }
    if !get::<Option<bool>>(row, "same_request")?.unwrap_or(false) {
        return Ok(Claim::Mismatch);
    }
    Ok(match state(row)? {
        State::Completed => Claim::Replay(response(row)?),
        State::InFlight => Claim::InFlight { retry_after: left(row)? },
    })
}

/// A row returned by the lookup statement.
pub(super) fn record(row: &PgRow) -> Decoded<Record> {
    let fingerprint = fingerprint(row)?;
    let state = match state(row)? {
        State::InFlight => RecordState::InFlight { token: token(row)?, lease_left: left(row)? },
        State::Completed => RecordState::Completed { response: response(row)?, ttl_left: left(row)? },
    };
    Ok(Record { fingerprint, state })
}
