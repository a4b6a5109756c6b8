//! The operator's view of the memory store ([`Operable`]): the only way to
//! look into it, since it lives in the application's process.

use std::time::Instant;

use async_trait::async_trait;

use super::MemoryStore;
use super::shard::{RESERVED, State, steps_size};
use crate::clock::later;
use crate::record::Record;
use crate::scope::StorageKey;
use crate::store::{FencingToken, InFlightSettle, ListFilter, Operable, Settle, Settlement, StateName, StoreError};

/// Listing visits every shard under its lock, one at a time: a cost in
/// proportion to the records held, for an operator's occasional look.
#[async_trait]
impl Operable for MemoryStore {
    async fn list(&self, filter: &ListFilter) -> Result<Vec<(StorageKey, Record)>, StoreError> {
        let now = Instant::now();
        let mut found = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock();
            for (digest, entry) in &shard.records {
                if entry.expires_at <= now {
                    continue;
                }
                let record = entry.record(now);
                if filter.admits(&record) {
                    found.push((StorageKey::from_digest(*digest), record));
                }
            }
        }
        // Oldest first, as the other stores list.
        found.sort_by_key(|(_, record)| record.claimed_at);
        found.truncate(filter.limit);
        Ok(found)
    }

    async fn find(&self, id: &str) -> Result<Option<StorageKey>, StoreError> {
        let now = Instant::now();
        for shard in &self.shards {
            let shard = shard.lock();
            let found = shard
                .records
                .iter()
                .find(|(digest, entry)| entry.expires_at > now && StorageKey::from_digest(**digest).record_id() == id);
            if let Some((digest, _)) = found {
                return Ok(Some(StorageKey::from_digest(*digest)));
            }
        }
        Ok(None)
    }

    async fn settle(
        &self,
        key: &StorageKey,
        token: FencingToken,
        state: StateName,
        settlement: &Settlement,
        in_flight: InFlightSettle,
    ) -> Result<Settle, StoreError> {
        let now = Instant::now();
        let mut shard = self.shard(key).lock();
        let Some(entry) = shard.records.get_mut(key.digest()).filter(|entry| entry.expires_at > now) else {
            return Ok(Settle::Changed);
        };
        let State::InFlight { token: holder, held, steps, lease_until, graced } = &mut entry.state else {
            return Ok(Settle::Changed);
        };
        let inspected = match state {
            StateName::InFlight => !*held,
            StateName::Held => *held,
            StateName::Completed | StateName::Released => false,
        };
        if *holder != token || !inspected {
            return Ok(Settle::Changed);
        }
        // In flight, settled only as a claim takes a lapsed lease over:
        // after a grace, which a renewal ends (the holder's renewal may
        // have landed since the operator looked).
        if let (false, InFlightSettle::AfterGrace(grace)) = (*held, in_flight) {
            if *lease_until > now {
                return Ok(Settle::Running { lease_left: *lease_until - now });
            }
            if !*graced {
                *lease_until = later(now, grace);
                *graced = true;
                entry.expires_at = entry.expires_at.max(*lease_until);
                return Ok(Settle::Graced { grace });
            }
        }
        let held_bytes = RESERVED + steps_size(steps);
        match settlement {
            &Settlement::Release { forget_steps } => {
                let State::InFlight { steps, .. } =
                    std::mem::replace(&mut entry.state, State::Released { steps: Vec::new() })
                else {
                    return Ok(Settle::Changed);
                };
                let kept = if forget_steps { Vec::new() } else { steps };
                self.totals.free(held_bytes - steps_size(&kept), false);
                entry.state = State::Released { steps: kept };
            }
            Settlement::Resolve(response) => {
                let size = response.size();
                if size > held_bytes && !self.totals.reserve(size - held_bytes, false, self.max_bytes, usize::MAX) {
                    return Err(StoreError::Full {
                        store: "memory",
                        detail: format!("a response of {size} bytes does not fit (MemoryStore::with_max_bytes)"),
                    });
                }
                if size < held_bytes {
                    self.totals.free(held_bytes - size, false);
                }
                let kept = crate::record::StoredResponse {
                    status: response.status,
                    headers: response.headers.clone(),
                    body: bytes::Bytes::copy_from_slice(&response.body),
                };
                entry.state = State::Completed { response: std::sync::Arc::new(kept) };
            }
        }
        drop(shard);
        self.publish();
        Ok(Settle::Applied)
    }
}
