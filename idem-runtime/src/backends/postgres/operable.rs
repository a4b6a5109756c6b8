//! The operator's view of the Postgres store ([`Operable`]): listing,
//! finding a record by its id, and settling an execution, each one
//! statement.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;

use super::{PostgresStore, error, interval, row, sql};
use crate::record::Record;
use crate::scope::StorageKey;
use crate::store::{FencingToken, InFlightSettle, ListFilter, Operable, Settle, Settlement, StateName, StoreError};

/// Listing executions in flight or held reads the partial index of
/// in-flight rows in its order (oldest claim first) and stops at the limit:
/// a cost in proportion to the executions running, however large the
/// table. Listing completed or released records, or every state, reads the
/// whole table (a sequential scan, then the oldest `limit` of the rows that
/// pass the filter): a cost in proportion to the table, for an operator's
/// occasional look; it is bounded by the operation timeout
/// ([`PostgresStore::with_operation_timeout`]). A record's age is counted
/// from its claim by the database's clock; records claimed by an earlier
/// version have none, and are listed first (and never as older than
/// anything).
///
/// Finding a record by its id is one lookup of the primary key's index.
/// Settling is one fenced `UPDATE` of the record's row.
#[async_trait]
impl Operable for PostgresStore {
    async fn list(&self, filter: &ListFilter) -> Result<Vec<(StorageKey, Record)>, StoreError> {
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        // On the pool as it is: an operator's listing is rare, and its rows
        // many.
        let list = || {
            let query = sqlx::query(sql(self.sql.list(filter.state)))
                .bind(filter.route.as_deref())
                .bind(filter.older_than.map(interval))
                .bind(limit);
            query.fetch_all(&self.pool)
        };
        let rows = self.run(error::repeatable(list)).await?;
        rows.iter()
            .map(|found| Ok((row::key(found)?, row::record(found)?)))
            .collect::<Result<_, String>>()
            .map_err(|reason| self.corrupt(reason))
    }

    /// The key is `idem:v1:{<id>}:<32 hex digits>`: every key with that id
    /// lies between the id followed by 32 zeros and the id followed by 32
    /// `f`s, a range of the primary key's index. Whatever the column's
    /// collation, keys compare by their hex digits: they all have the same
    /// length and the same punctuation at the same places (which a
    /// linguistic collation may skip at first, but skips alike in every
    /// key), and every collation PostgreSQL offers (`C`, libc, ICU) orders
    /// the digits `0`-`9` before the letters `a`-`f`, each in its usual
    /// order. The key found is checked to have the id all the same.
    async fn find(&self, id: &str) -> Result<Option<StorageKey>, StoreError> {
        if id.len() != 32 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Ok(None);
        }
        let (lowest, highest) =
            (format!("idem:v1:{{{id}}}:{}", "0".repeat(32)), format!("idem:v1:{{{id}}}:{}", "f".repeat(32)));
        let find = || self.kept.fetch_optional(sqlx::query(sql(&self.sql.find)).bind(&lowest).bind(&highest));
        let Some(found) = self.run(error::repeatable(find)).await? else { return Ok(None) };
        let key = row::key(&found).map_err(|reason| self.corrupt(reason))?;
        Ok(Some(key).filter(|key| key.record_id() == id))
    }

    async fn settle(
        &self,
        key: &StorageKey,
        token: FencingToken,
        state: StateName,
        settlement: &Settlement,
        in_flight: InFlightSettle,
    ) -> Result<Settle, StoreError> {
        let held = match state {
            StateName::InFlight => false,
            StateName::Held => true,
            // Nothing to settle: only an execution is.
            StateName::Completed | StateName::Released => return Ok(Settle::Changed),
        };
        let grace = match in_flight {
            InFlightSettle::AfterGrace(grace) => Some(interval(grace)),
            InFlightSettle::Force => None,
        };
        let token_bytes = token.to_bytes();
        let (response, forget_steps) = match settlement {
            &Settlement::Release { forget_steps } => (None, forget_steps),
            // A completion drops the steps, whatever `$8` says.
            Settlement::Resolve(response) => (Some(response), true),
        };
        let names: Option<Vec<&str>> =
            response.map(|response| response.headers.iter().map(|(name, _)| name.as_str()).collect());
        let values: Option<Vec<&[u8]>> =
            response.map(|response| response.headers.iter().map(|(_, value)| value.as_slice()).collect());
        let query = sqlx::query(sql(&self.sql.settle))
            .bind(key.as_str())
            .bind(&token_bytes[..])
            .bind(held)
            .bind(response.map(|response| i32::from(response.status)))
            .bind(names)
            .bind(values)
            .bind(response.map(|response| &response.body[..]))
            .bind(forget_steps)
            .bind(grace);
        // Not sent again on a dropped connection: a settlement that landed
        // would be answered changed the second time.
        let Some(found) = self.run(self.kept.fetch_optional(query)).await? else { return Ok(Settle::Changed) };
        let outcome: String = found.try_get("outcome").map_err(|error| self.corrupt(error.to_string()))?;
        let left_ms: i64 = found.try_get("left_ms").map_err(|error| self.corrupt(error.to_string()))?;
        let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
        match (outcome.as_str(), in_flight) {
            ("settle", _) => Ok(Settle::Applied),
            ("running", _) => Ok(Settle::Running { lease_left: left }),
            ("grace", InFlightSettle::AfterGrace(grace)) => Ok(Settle::Graced { grace }),
            (other, _) => Err(self.corrupt(format!("unexpected settle outcome {other:?}"))),
        }
    }
}
