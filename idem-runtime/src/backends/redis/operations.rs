//! The [`Store`] operations of [`RedisStore`]: each one script call, plus,
//! with replica acknowledgements on, a `WAIT` for the writes that must
//! survive a failover.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use redis::Value;

use super::RedisStore;
use super::layout;
use super::reply;
use super::scripts::millis;
use crate::fingerprint::Fingerprint;
use crate::record::{Record, StoredResponse};
use crate::scope::StorageKey;
use crate::store::{Attempt, Claim, ClaimTerms, Fence, FencingToken, Renewal, Step, Store, StoreError};

impl RedisStore {
    /// With replica acknowledgements on, makes a won claim durable before
    /// its handler may run: a renewal of the new lease and `WAIT` in one
    /// pipeline. The renewal is a write on the connection that sends the
    /// `WAIT`, after the claim in the primary's replication stream, so its
    /// acknowledgement covers the claim even if the claim's own connection
    /// was replaced in between. Too few acknowledgements release the key
    /// (best effort) and fail the claim: the runtime answers 503, the
    /// handler does not run.
    async fn confirm_claim(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<(), StoreError> {
        let (reply, acked) = self
            .run_acked("claim", &self.scripts.renew, key, |args| {
                args.arg(token.to_bytes().as_slice()).arg(millis(lease));
            })
            .await?;
        let failed = match (reply::fence(reply)?, acked) {
            (Fence::Held, Ok(())) => return Ok(()),
            (Fence::Held, Err(error)) => error,
            (_, _) => StoreError::Unavailable {
                store: "redis",
                message: "claim: the lease was gone right after the claim (a failover?)".to_owned(),
                source: None,
            },
        };
        if let Err(error) = self.release(key, token).await {
            tracing::warn!(%error, "could not release a claim that replicas did not acknowledge; it lapses with its lease");
        }
        Err(failed)
    }

    /// `claim.lua`: the claim of a record in flight, held or released.
    /// `tail` is the new record's claim time and route ([`layout::tail`]).
    async fn claim_by_script(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
        tail: &[u8],
    ) -> Result<Claim, StoreError> {
        let reply = self
            .run("claim", &self.scripts.claim, key, |args| {
                args.arg(fingerprint.as_bytes().as_slice())
                    .arg(token.to_bytes().as_slice())
                    .arg(millis(terms.lease))
                    .arg(millis(terms.ttl.max(terms.lease)))
                    .arg(terms.on_lapse.as_str())
                    .arg(tail);
            })
            .await?;
        reply::claim(reply, token)
    }

    /// `encoded` (a response) if a Redis value takes it, else
    /// [`StoreError::Full`].
    pub(super) fn fits(encoded: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        if encoded.len() > Self::MAX_RECORD_BYTES {
            return Err(StoreError::Full {
                store: "redis",
                detail: format!(
                    "a stored response of {} bytes is over the {} bytes Redis accepts in one value",
                    encoded.len(),
                    Self::MAX_RECORD_BYTES
                ),
            });
        }
        Ok(encoded)
    }

    /// `release.lua`: the in-flight record of `key` that holds `token`
    /// becomes a tombstone; a held one only if `held_too`. Not acknowledged
    /// by replicas even when asked for: a release lost at failover leaves
    /// the key in flight until its lease runs out, then the same request
    /// may take it as after the release (or, under `on_lapse = "hold"`,
    /// finds it held).
    async fn release_if(&self, key: &StorageKey, token: FencingToken, held_too: bool) -> Result<Fence, StoreError> {
        let reply = self
            .run("release", &self.scripts.release, key, |args| {
                args.arg(token.to_bytes().as_slice()).arg(if held_too { "1" } else { "0" });
            })
            .await?;
        reply::fence(reply)
    }
}

#[async_trait]
impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn claim_with(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError> {
        let (lease_ms, ttl_ms) = (millis(terms.lease), millis(terms.ttl.max(terms.lease)));
        let tail = layout::tail(SystemTime::now(), terms.route.as_deref());
        // One plain `SET NX GET`: it creates the record of a free key and
        // hands back any other, which answers a completed one (a replay or
        // a mismatch) at once. A record in flight, held or released is
        // claimed by `claim.lua`, in a second round trip, which judges its
        // lease.
        let mut set = redis::cmd("SET");
        set.arg(self.record_key(key))
            .arg(layout::claimed(fingerprint, token, lease_ms, ttl_ms, &tail))
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .arg("GET");
        let claim = match self.query(&set).await {
            Ok(Value::Nil) => Claim::Acquired { token, attempt: Attempt::First, steps: Vec::new() },
            Ok(Value::BulkString(record)) => match reply::stored(&record)? {
                layout::Stored { state: layout::State::Completed { response }, fingerprint: stored, .. }
                    if stored == *fingerprint =>
                {
                    Claim::Replay(reply::response(response)?)
                }
                layout::Stored { state: layout::State::Completed { .. }, .. } => Claim::Mismatch,
                _ => self.claim_by_script(key, fingerprint, token, terms, &tail).await?,
            },
            Ok(other) => return Err(reply::corrupt(format!("unexpected claim reply {other:?}"))),
            // Refused by the server: `SET` is a write even when it writes
            // nothing, so a server that refuses writes (`OOM` at
            // `maxmemory`, `NOREPLICAS` under `min-replicas-to-write`,
            // `READONLY`, an ACL) refuses it for a replay too; and a key
            // holding a record of the earlier layout (a hash) answers
            // `WRONGTYPE`. The script answers all of these that it can (a
            // replay, a mismatch, a key in flight or held), writes only to
            // acquire or hold, and fails closed on the rest.
            // A timeout or a lost connection is not a refusal: 503.
            Err(error) if error.code().is_some() && !error.is_timeout() && !error.is_io_error() => {
                self.claim_by_script(key, fingerprint, token, terms, &tail).await?
            }
            Err(error) => return Err(self.endpoint.error("claim", error)),
        };
        if self.acks.is_some() && matches!(claim, Claim::Acquired { .. }) {
            self.confirm_claim(key, token, terms.lease).await?;
        }
        Ok(claim)
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        let (reply, acked) = self
            .run_acked("renew", &self.scripts.renew, key, |args| {
                args.arg(token.to_bytes().as_slice()).arg(millis(lease));
            })
            .await?;
        match reply::fence(reply)? {
            Fence::Held => acked.map(|()| Fence::Held),
            lost => Ok(lost),
        }
    }

    /// One pipeline of `renew.lua` calls on the renewals' own connection (on
    /// a cluster, one per primary on its own connection; per slot on a
    /// caller's cluster connection), sent together (see the type's docs).
    async fn renew_many(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        self.renew_batch(renewals).await
    }

    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError> {
        let encoded = Self::fits(response.to_bytes())?;
        let (reply, acked) = self
            .run_acked("complete", &self.scripts.complete, key, |args| {
                args.arg(token.to_bytes().as_slice()).arg(encoded).arg(millis(ttl));
            })
            .await?;
        match reply::fence(reply)? {
            // Too few acknowledgements: the runtime sends the completion
            // again (the script answers a repeat by the same token as held).
            Fence::Held => acked.map(|()| Fence::Held),
            lost => Ok(lost),
        }
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.release_if(key, token, true).await
    }

    async fn release_unless_held(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.release_if(key, token, false).await
    }

    /// `step.lua`: one fenced append; with replica acknowledgements on,
    /// acknowledged like a completion (a step record lost at failover
    /// would run the step again).
    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError> {
        if step.name.len() > layout::MAX_STEP_NAME_BYTES || step.size() > Self::MAX_RECORD_BYTES {
            return Err(StoreError::Full {
                store: "redis",
                detail: format!(
                    "step {:?} ({} bytes of name, {} of result) is over what a Redis record keeps ({} bytes of \
                     name, {} in all)",
                    step.name.chars().take(40).collect::<String>(),
                    step.name.len(),
                    step.result.len(),
                    layout::MAX_STEP_NAME_BYTES,
                    Self::MAX_RECORD_BYTES
                ),
            });
        }
        let (reply, acked) = self
            .run_acked("record a step", &self.scripts.step, key, |args| {
                args.arg(token.to_bytes().as_slice()).arg(step.name.as_bytes()).arg(step.result.as_ref());
            })
            .await?;
        match reply::fence(reply)? {
            // Too few acknowledgements: the runtime records the step again
            // (the script answers the same name as held).
            Fence::Held => acked.map(|()| Fence::Held),
            lost => Ok(lost),
        }
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        reply::record(self.run("get", &self.scripts.get, key, |_| {}).await?)
    }
}
