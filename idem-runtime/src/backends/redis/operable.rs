//! The operator's view of the Redis store ([`Operable`]): listing records
//! with `SCAN`, finding one by its id, and settling an execution with
//! `settle.lua`.
//!
//! A listing costs what any `SCAN` of the whole keyspace costs: every key
//! of the database is visited (on every primary of a cluster), a thousand
//! per `SCAN` call, and each record's first kilobyte (its header and route)
//! is read to filter it. Only the records kept (at most the filter's limit,
//! the oldest admitted) are then read whole. It is meant for an operator's
//! occasional look, not for a request path.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream;
use redis::{RedisError, Value};

use super::{RedisStore, layout, reply, slot_of};
use crate::record::{Record, RecordState, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{
    FencingToken, InFlightSettle, ListFilter, Operable, Settle, Settlement, StateName, Store, StoreError,
};

/// Keys each `SCAN` call asks for.
const SCAN_COUNT: usize = 1_000;
/// Bytes read of each record to filter it: the header and a route of up to
/// 940 bytes (a record with a longer route is read whole).
const GLANCE_BYTES: usize = 1_024;
/// Reads in flight at once (a multiplexed connection pipelines them).
const READS_AT_ONCE: usize = 64;

/// Listing and finding visit every key with `SCAN`, O(keyspace) on the
/// server (every primary of a cluster), like any `SCAN`: for an operator's
/// occasional use (see the module documentation). A listing reads the
/// header of every record it meets and keeps the oldest that the filter
/// admits; a record that changes between its header's read and its whole
/// read is filtered again, and left out if it no longer passes. On a
/// cluster, finding a record reads the keys of the one slot its id names.
#[async_trait]
impl Operable for RedisStore {
    async fn list(&self, filter: &ListFilter) -> Result<Vec<(StorageKey, Record)>, StoreError> {
        if filter.limit == 0 {
            return Ok(Vec::new());
        }
        let mut scan = Scan::new(self.pattern("*"));
        let mut kept = Vec::new();
        while let Some(keys) = scan.next(self).await? {
            let keys: Vec<StorageKey> = keys.iter().filter_map(|key| self.storage_key(key)).collect();
            let glanced = stream::iter(keys).map(|key| self.glance(key, filter)).buffered(READS_AT_ONCE);
            for candidate in glanced.collect::<Vec<_>>().await {
                kept.extend(candidate?);
            }
            if kept.len() > filter.limit.saturating_mul(2) {
                keep_oldest(&mut kept, filter.limit);
            }
        }
        keep_oldest(&mut kept, filter.limit);
        let read = stream::iter(kept).map(|candidate| async move {
            let record = match candidate.record {
                Some(record) => Some(record),
                None => self.get(&candidate.key).await?,
            };
            Ok::<_, StoreError>(record.map(|record| (candidate.key, record)))
        });
        let mut found = Vec::new();
        for record in read.buffered(READS_AT_ONCE).collect::<Vec<_>>().await {
            found.extend(record?.filter(|(_, record)| filter.admits(record)));
        }
        found.sort_by(|(a, one), (b, other)| (one.claimed_at, a.as_str()).cmp(&(other.claimed_at, b.as_str())));
        Ok(found)
    }

    async fn find(&self, id: &str) -> Result<Option<StorageKey>, StoreError> {
        if id.len() != 32 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Ok(None);
        }
        let tag = format!("{{{id}}}");
        if self.connection.is_cluster() {
            // The id is the hash tag: its keys are all in one slot.
            let keys = self.keys_in_slot(slot_of(&tag)).await?;
            return self.live(keys.iter().filter_map(|key| self.storage_key(key)), id).await;
        }
        let mut scan = Scan::new(self.pattern(&tag));
        while let Some(keys) = scan.next(self).await? {
            if let Some(key) = self.live(keys.iter().filter_map(|key| self.storage_key(key)), id).await? {
                return Ok(Some(key));
            }
        }
        Ok(None)
    }

    /// `settle.lua`: one fenced write, acknowledged by replicas when
    /// [`RedisStore::with_replica_acks`] asks for it (a settlement whose
    /// acknowledgement failed may have applied: inspect the record again).
    async fn settle(
        &self,
        key: &StorageKey,
        token: FencingToken,
        state: StateName,
        settlement: &Settlement,
        in_flight: InFlightSettle,
    ) -> Result<Settle, StoreError> {
        if !matches!(state, StateName::InFlight | StateName::Held) {
            return Ok(Settle::Changed);
        }
        let (action, response) = match settlement {
            Settlement::Release { forget_steps: false } => ("release", None),
            Settlement::Release { forget_steps: true } => ("forget", None),
            Settlement::Resolve(response) => ("resolve", Some(Self::fits(response.to_bytes())?)),
        };
        let lapsed = match in_flight {
            InFlightSettle::AfterGrace(grace) => grace.as_millis().max(1).to_string(),
            InFlightSettle::Force => "force".to_owned(),
        };
        let (reply, acked) = self
            .run_acked("settle", &self.scripts.settle, key, |args| {
                args.arg(token.to_bytes().as_slice()).arg(state.as_str()).arg(action).arg(lapsed.as_str());
                if let Some(response) = response {
                    args.arg(response);
                }
            })
            .await?;
        match reply::settle(reply)? {
            Settle::Applied => acked.map(|()| Settle::Applied),
            // A grace is a write too, acknowledged as a settlement is: a
            // grace lost with a failover would let the next settle apply
            // at once.
            Settle::Graced { grace } => acked.map(|()| Settle::Graced { grace }),
            other => Ok(other),
        }
    }
}

/// A record a listing keeps: the record itself when it was read whole
/// already.
struct Candidate {
    key: StorageKey,
    claimed_at: Option<SystemTime>,
    record: Option<Record>,
}

/// Keeps the `limit` oldest of `kept` (each key once: `SCAN` may name a
/// key twice).
fn keep_oldest(kept: &mut Vec<Candidate>, limit: usize) {
    kept.sort_by(|a, b| (a.claimed_at, a.key.as_str()).cmp(&(b.claimed_at, b.key.as_str())));
    kept.dedup_by(|a, b| a.key == b.key);
    kept.truncate(limit);
}

impl RedisStore {
    /// The `SCAN` pattern of the record keys whose hash tag is `tag`
    /// (`*` for every one), this store's prefix escaped.
    fn pattern(&self, tag: &str) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + 16 + tag.len());
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str("idem:v1:");
        pattern.push_str(tag);
        pattern.push_str(":*");
        pattern
    }

    /// The storage key of a Redis key of this store's, if it is one.
    fn storage_key(&self, record_key: &str) -> Option<StorageKey> {
        StorageKey::from_stored(record_key.strip_prefix(self.prefix.as_str())?)
    }

    /// The record of `key` as a listing candidate, if `filter` admits it:
    /// its header read alone (`GETRANGE`), or, when the header does not
    /// fit in [`GLANCE_BYTES`] or is unreadable, the whole record. A key
    /// that holds no record of this store (a value of another kind, an
    /// unreadable one) is left out and logged.
    async fn glance(&self, key: StorageKey, filter: &ListFilter) -> Result<Option<Candidate>, StoreError> {
        let mut command = redis::cmd("GETRANGE");
        command.arg(self.record_key(&key)).arg(0).arg(GLANCE_BYTES - 1);
        let start = match self.query(&command).await {
            Ok(Value::BulkString(start)) => start,
            Ok(Value::Nil) => return Ok(None),
            Ok(other) => return Err(reply::corrupt(format!("GETRANGE answered {other:?}"))),
            Err(error) if error.code() == Some("WRONGTYPE") => {
                tracing::warn!(record = key.record_id(), %error, "listing: a key that holds no record, left out");
                return Ok(None);
            }
            Err(error) => return Err(self.endpoint.error("list", error)),
        };
        if start.is_empty() {
            // Gone since the scan.
            return Ok(None);
        }
        if let Ok(glance) = layout::glance(&start) {
            let claimed_at = glance.claimed_at;
            return Ok(filter.admits(&sketch(glance)).then_some(Candidate { key, claimed_at, record: None }));
        }
        match self.get(&key).await {
            Ok(Some(record)) if filter.admits(&record) => {
                Ok(Some(Candidate { key, claimed_at: record.claimed_at, record: Some(record) }))
            }
            Ok(_) => Ok(None),
            Err(error @ StoreError::Corrupt { .. }) => {
                tracing::warn!(record = key.record_id(), %error, "listing: an unreadable record, left out");
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// The first of `keys` whose id is `id` and that is live (a key
    /// listed by `CLUSTER GETKEYSINSLOT` may be past its expiry; `EXISTS`
    /// tells).
    async fn live(&self, keys: impl Iterator<Item = StorageKey>, id: &str) -> Result<Option<StorageKey>, StoreError> {
        for key in keys.filter(|key| key.record_id() == id) {
            let mut exists = redis::cmd("EXISTS");
            exists.arg(self.record_key(&key));
            match self.query(&exists).await.map_err(|e| self.endpoint.error("find", e))? {
                Value::Int(1) => return Ok(Some(key)),
                Value::Int(_) => {}
                other => return Err(reply::corrupt(format!("EXISTS answered {other:?}"))),
            }
        }
        Ok(None)
    }

    /// Every key of a cluster's `slot`, from its primary.
    async fn keys_in_slot(&self, slot: u16) -> Result<Vec<String>, StoreError> {
        let mut connection = self.connection.clone();
        let fail = |e| self.endpoint.error("find", e);
        let mut count = redis::cmd("CLUSTER");
        count.arg("COUNTKEYSINSLOT").arg(slot);
        let count = match connection.on_slot(&count, slot).await.map_err(fail)? {
            Value::Int(0) => return Ok(Vec::new()),
            Value::Int(count) => count,
            other => return Err(reply::corrupt(format!("CLUSTER COUNTKEYSINSLOT answered {other:?}"))),
        };
        let mut keys = redis::cmd("CLUSTER");
        keys.arg("GETKEYSINSLOT").arg(slot).arg(count);
        keys_of(connection.on_slot(&keys, slot).await.map_err(fail)?)
    }
}

/// What a filter reads of a record (its state, route and age), from its
/// header alone: a record with nothing else in it.
fn sketch(glance: layout::Glance<'_>) -> Record {
    let token = glance.token.unwrap_or_else(|| FencingToken::from_bytes([0; 16]));
    let state = match glance.state {
        StateName::InFlight => RecordState::InFlight { token, lease_left: Duration::ZERO, ttl_left: Duration::ZERO },
        StateName::Held => RecordState::Held { token, ttl_left: Duration::ZERO },
        StateName::Completed => {
            let response = StoredResponse { status: 0, headers: Vec::new(), body: Bytes::new() };
            RecordState::Completed { response, ttl_left: Duration::ZERO }
        }
        StateName::Released => RecordState::Released { ttl_left: Duration::ZERO },
    };
    let mut record = Record::new(glance.fingerprint, state);
    record.route = glance.route.map(str::to_owned);
    record.claimed_at = glance.claimed_at;
    record.attempt = glance.attempt;
    record
}

/// A `SCAN` of the one server, or of every primary of a cluster, a page
/// at a time.
struct Scan {
    pattern: String,
    /// The nodes still to scan (`None`: the one server) and their cursors;
    /// `None` before the first page.
    pending: Option<Vec<(Option<String>, u64)>>,
}

impl Scan {
    fn new(pattern: String) -> Self {
        Self { pattern, pending: None }
    }

    /// The next page's keys; `None` once every node was scanned. The first
    /// page asks every primary at once.
    async fn next(&mut self, store: &RedisStore) -> Result<Option<Vec<String>>, StoreError> {
        let mut connection = store.connection.clone();
        let fail = |e| store.endpoint.error("list", e);
        let Some(pending) = &mut self.pending else {
            let mut pending = Vec::new();
            let mut keys = Vec::new();
            for (node, page) in connection.on_every_primary(scan_command(&self.pattern, 0)).await.map_err(fail)? {
                if let Value::ServerError(error) = page {
                    return Err(fail(RedisError::from(error)));
                }
                let (cursor, page) = page_of(page)?;
                keys.extend(page);
                if cursor != 0 {
                    pending.push((node, cursor));
                }
            }
            self.pending = Some(pending);
            return Ok(Some(keys));
        };
        let Some((node, cursor)) = pending.pop() else { return Ok(None) };
        let (next, keys) =
            page_of(connection.on_node(&scan_command(&self.pattern, cursor), node.as_deref()).await.map_err(fail)?)?;
        if next != 0 {
            pending.push((node, next));
        }
        Ok(Some(keys))
    }
}

/// `SCAN cursor` of the keys matching `pattern`, strings only (a record of
/// the earlier layout, a hash, cannot be listed).
fn scan_command(pattern: &str, cursor: u64) -> redis::Cmd {
    let mut command = redis::cmd("SCAN");
    command.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_COUNT).arg("TYPE").arg("string");
    command
}

/// A `SCAN` reply: the next cursor and the page's keys.
fn page_of(reply: Value) -> Result<(u64, Vec<String>), StoreError> {
    let Value::Array(reply) = reply else { return Err(reply::corrupt(format!("SCAN answered {reply:?}"))) };
    match <[Value; 2]>::try_from(reply) {
        Ok([Value::BulkString(cursor), keys]) => {
            let cursor = std::str::from_utf8(&cursor).ok().and_then(|cursor| cursor.parse().ok());
            let cursor = cursor.ok_or_else(|| reply::corrupt("SCAN answered a cursor that is no number"))?;
            Ok((cursor, keys_of(keys)?))
        }
        Ok(reply) => Err(reply::corrupt(format!("SCAN answered {reply:?}"))),
        Err(reply) => Err(reply::corrupt(format!("SCAN answered {reply:?}"))),
    }
}

/// An array of keys; keys that are not UTF-8 (no record's) are left out.
fn keys_of(keys: Value) -> Result<Vec<String>, StoreError> {
    let Value::Array(keys) = keys else { return Err(reply::corrupt(format!("expected keys, got {keys:?}"))) };
    Ok(keys
        .into_iter()
        .filter_map(|key| match key {
            Value::BulkString(key) => String::from_utf8(key).ok(),
            Value::SimpleString(key) => Some(key),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_patterns_escape_the_prefix() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
            let config = RedisStore::default_config();
            let manager = redis::aio::ConnectionManager::new_lazy_with_config(client, config).unwrap();
            let store = RedisStore::from_manager(manager).with_key_prefix("shop*[1]?\\:").unwrap();
            assert_eq!(store.pattern("*"), "shop\\*\\[1\\]\\?\\\\:idem:v1:*:*");
            let key = StorageKey::from_digest([9; 32]);
            assert_eq!(store.storage_key(&store.record_key(&key)), Some(key.clone()));
            assert_eq!(store.storage_key(key.as_str()), None, "without the prefix");
        });
    }

    #[test]
    fn the_oldest_are_kept_once_each() {
        let key = |n: u8| StorageKey::from_digest([n; 32]);
        let at = |s: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        let candidate = |n, claimed_at| Candidate { key: key(n), claimed_at, record: None };
        let mut kept = vec![candidate(1, at(30)), candidate(2, at(10)), candidate(2, at(10)), candidate(3, None)];
        keep_oldest(&mut kept, 2);
        let kept: Vec<_> = kept.into_iter().map(|candidate| candidate.key).collect();
        assert_eq!(kept, [key(3), key(2)], "unknown ages first, as the memory store lists");
    }

    #[test]
    fn scan_replies_are_read() {
        let reply = Value::Array(vec![
            Value::BulkString(b"42".to_vec()),
            Value::Array(vec![Value::BulkString(b"a".to_vec()), Value::BulkString(vec![0xff])]),
        ]);
        assert_eq!(page_of(reply).unwrap(), (42, vec!["a".to_owned()]));
        assert!(page_of(Value::Array(vec![Value::BulkString(b"x".to_vec()), Value::Array(vec![])])).is_err());
        assert!(page_of(Value::Nil).is_err());
    }
}
