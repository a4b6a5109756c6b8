//! Batched lease renewals, on a connection of their own.
//!
//! The lease keeper renews every lease of a process at once, from a thread
//! and a Tokio runtime of its own. A batch is one pipeline of `EVALSHA`s of
//! `renew.lua` (one script call per key), sent in one round trip on a
//! connection that only carries renewals: it is opened the first time the
//! keeper renews, so it lives on the keeper's runtime, and renewals never
//! queue behind the application's commands, nor wait on an application
//! thread that is busy. On a cluster, each primary gets such a connection
//! and one pipeline per batch (see `primaries.rs`); renewals on a caller's
//! cluster connection go one pipeline per slot (a pipeline through the
//! cluster client may only touch one slot), all sent at once.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{RedisError, ServerErrorKind, Value};
use tokio::sync::OnceCell;

use super::connection::{RedisConnection, Source};
use super::groups::{Answered, Redirect, gather, within};
use super::primaries::Primaries;
use super::reply;
use super::scripts::millis;
use super::{RedisStore, slot_of};
use crate::store::{Fence, Renewal, StoreError};

/// Where renewals go.
pub(super) enum RenewalConnection {
    /// On the caller's connection (a store built on it has no URL to open
    /// another from).
    Shared,
    /// On a connection of their own to one server, opened from `source` on
    /// first use.
    Own { source: Source, connection: OnceCell<RedisConnection> },
    /// Straight to each primary of a cluster, each on a connection of its own.
    Primaries(Primaries),
}

impl RenewalConnection {
    /// Renewals on a connection of their own to one server.
    pub(super) fn own(source: Source) -> Self {
        Self::Own { source, connection: OnceCell::new() }
    }

    /// Whether renewals have connections of their own.
    pub(super) fn is_separate(&self) -> bool {
        !matches!(self, Self::Shared)
    }
}

/// Longest wait for one group of renewals (a slot's, or a primary's) when
/// the connection has no response timeout.
const GROUP_BUDGET: Duration = Duration::from_secs(1);

/// Why a renewal pipeline failed.
struct Failed {
    /// The slot is moving (`ASK`, `MOVED`): its renewals may get through
    /// one command each.
    moving: bool,
    error: StoreError,
}

impl Failed {
    fn other(error: StoreError) -> Self {
        Self { moving: false, error }
    }
}

/// Whether a reply of the pipeline is `NOSCRIPT`.
fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(error) if error.kind() == Some(ServerErrorKind::NoScript))
}

impl RedisStore {
    /// The connection renewals go through (not on a cluster's primaries):
    /// the renewals' own, opened now on the caller's runtime if it is the
    /// first batch, else the shared one.
    async fn renewal_connection(&self) -> Result<RedisConnection, StoreError> {
        let RenewalConnection::Own { source, connection } = &*self.renewals else {
            return Ok(self.connection.clone());
        };
        let connection = connection
            .get_or_try_init(|| source.connect())
            .await
            .map_err(|e| self.endpoint.error("connect for renewals", e))?;
        Ok(connection.clone())
    }

    /// Sends `renewals` (of one slot through the cluster client, or of one
    /// primary on its own connection) as one pipeline, with `WAIT` last when
    /// replica acknowledgements are on, and returns each raw reply and what
    /// `WAIT` said; a failure says whether the slot is moving.
    async fn renewal_pipeline(
        &self,
        mut connection: RedisConnection,
        renewals: &[&Renewal],
        asking: bool,
    ) -> Result<(Vec<Value>, Result<(), StoreError>), Failed> {
        let mut pipeline = redis::pipe();
        for renewal in renewals {
            if asking {
                pipeline.cmd("ASKING");
            }
            let mut call = self.scripts.renew.key(self.record_key(&renewal.key));
            call.arg(renewal.token.to_bytes().as_slice()).arg(millis(renewal.lease));
            pipeline.invoke_script(&call);
        }
        if let Some(acks) = self.acks {
            pipeline.add_command(acks.wait());
        }
        // Each reply on its own: one renewal's error must not hide the others'.
        let replies: Value = pipeline.ignore_errors().query_async(&mut connection).await.map_err(|error| Failed {
            moving: error.is_cluster_error() && error.redirect_node().is_some(),
            error: self.endpoint.error("renew many", error),
        })?;
        let mut replies = match replies {
            Value::Array(replies) if replies.len() == pipeline.len() => replies,
            other => {
                let message = format!("{} renewals were answered {other:?}", renewals.len());
                return Err(Failed::other(StoreError::Corrupt { store: "redis", message }));
            }
        };
        let acked = match self.acks {
            Some(acks) => {
                let acked = replies.pop().unwrap_or(Value::Nil);
                acks.check("renew many", &acked)
            }
            None => Ok(()),
        };
        if asking {
            // Each `ASKING`'s own `OK` dropped.
            replies = replies.into_iter().skip(1).step_by(2).collect();
        }
        Ok((replies, acked))
    }

    /// Renews `renewals` (of one slot through the cluster client, or of one
    /// primary on its own connection; after `ASKING` each when `asking`),
    /// loading the script again for those answered `NOSCRIPT` (after a
    /// restart or a failover) and sending them once more. Renewals answered
    /// `ASK` or `MOVED` (a slot migrating or moved, a primary demoted) are
    /// [`Fence::Unknown`] in the answer, listed with where they were sent
    /// ([`Answered::redirects`]) for the caller to follow; other errors of
    /// one renewal leave it unanswered. The group fails when the pipeline
    /// fails (on the cluster client, a pipeline redirected as a whole is
    /// sent again one command each, and fails when none gets through), and
    /// when replicas did not acknowledge renewals this node holds (their
    /// leases are not confirmed, and the keeper tries again).
    pub(super) async fn renew_group(
        &self,
        connection: RedisConnection,
        renewals: &[&Renewal],
        asking: bool,
    ) -> Result<Answered, StoreError> {
        let (mut replies, mut acked) = match self.renewal_pipeline(connection.clone(), renewals, asking).await {
            Ok(answered) => answered,
            Err(Failed { moving: true, error }) => {
                let fences = self.renew_each(renewals).await;
                if fences.iter().all(|fence| *fence == Fence::Unknown) {
                    return Err(error);
                }
                return Ok(Answered { fences, redirects: Vec::new(), remap: true });
            }
            Err(Failed { error, .. }) => return Err(error),
        };
        let missing: Vec<usize> = (0..replies.len()).filter(|&i| is_noscript(&replies[i])).collect();
        if !missing.is_empty() {
            self.scripts
                .renew
                .prepare_invoke()
                .load_async(&mut connection.clone())
                .await
                .map_err(|e| self.endpoint.error("load the renew script", e))?;
            let again: Vec<&Renewal> = missing.iter().map(|&i| renewals[i]).collect();
            let (answers, acked_again) =
                self.renewal_pipeline(connection.clone(), &again, asking).await.map_err(|failed| failed.error)?;
            for (i, answer) in missing.into_iter().zip(answers) {
                replies[i] = answer;
            }
            acked = acked.and(acked_again);
        }
        let mut answered = Answered { fences: Vec::with_capacity(replies.len()), redirects: Vec::new(), remap: false };
        for (i, reply) in replies.into_iter().enumerate() {
            answered.fences.push(match reply {
                Value::ServerError(error) => {
                    let kind = error.kind();
                    let error = RedisError::from(error);
                    match (kind, error.redirect_node()) {
                        (Some(ServerErrorKind::Moved | ServerErrorKind::Ask), Some((node, _))) => {
                            let ask = kind == Some(ServerErrorKind::Ask);
                            answered.redirects.push(Redirect { at: i, node: node.to_owned(), ask });
                        }
                        // One lease's error (TRYAGAIN, say) leaves that
                        // lease unanswered, never the others.
                        _ => {
                            answered.remap |= kind == Some(ServerErrorKind::ClusterDown);
                            let error = self.endpoint.error("renew many", error);
                            tracing::warn!(%error, "one renewal failed");
                        }
                    }
                    Fence::Unknown
                }
                reply => reply::fence(reply)?,
            });
        }
        answered.remap |= !answered.redirects.is_empty();
        // A node that redirected every renewal (a demoted primary, say)
        // holds none of them: what its replicas acknowledged does not matter.
        if answered.redirects.len() < answered.fences.len() {
            acked?;
        }
        Ok(answered)
    }

    /// [`Self::renew_group`] on the cluster client or a single server, the
    /// redirected renewals sent again one command each, all at once.
    async fn renew_slot(&self, connection: RedisConnection, renewals: &[&Renewal]) -> Result<Vec<Fence>, StoreError> {
        let mut answered = self.renew_group(connection, renewals, false).await?;
        let moved: Vec<&Renewal> = answered.redirects.iter().map(|redirect| renewals[redirect.at]).collect();
        for (redirect, fence) in answered.redirects.iter().zip(self.renew_each(&moved).await) {
            answered.fences[redirect.at] = fence;
        }
        Ok(answered.fences)
    }

    /// `renewals` one command each, all at once: each follows its key's
    /// redirections. A renewal that fails is [`Fence::Unknown`].
    pub(super) async fn renew_each(&self, renewals: &[&Renewal]) -> Vec<Fence> {
        let sent = renewals.iter().map(|renewal| self.renew_one(renewal));
        join_all(sent).await
    }

    async fn renew_one(&self, renewal: &Renewal) -> Fence {
        match crate::store::Store::renew(self, &renewal.key, renewal.token, renewal.lease).await {
            Ok(fence) => fence,
            Err(error) => {
                tracing::warn!(%error, "one renewal failed");
                Fence::Unknown
            }
        }
    }

    /// [`Store::renew_many`](crate::store::Store::renew_many): one round
    /// trip (on a cluster, one pipeline per primary, or per slot on a
    /// caller's connection, sent together), plus a `SCRIPT LOAD` and a
    /// second round trip for the renewals answered `NOSCRIPT`.
    pub(super) async fn renew_batch(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        if let RenewalConnection::Primaries(primaries) = &*self.renewals {
            return self.renew_on_primaries(primaries, renewals).await;
        }
        let connection = self.renewal_connection().await?;
        // Positions of the renewals in each group: one group per slot on a
        // cluster, a single group otherwise.
        let mut groups: HashMap<Option<u16>, Vec<usize>> = HashMap::new();
        for (i, renewal) in renewals.iter().enumerate() {
            let slot = connection.is_cluster().then(|| slot_of(&self.record_key(&renewal.key)));
            groups.entry(slot).or_default().push(i);
        }
        let groups: Vec<Vec<usize>> = groups.into_values().collect();
        let budget = self.group_budget();
        let sent = groups.iter().map(|members| {
            let connection = connection.clone();
            async move {
                let group: Vec<&Renewal> = members.iter().map(|&i| &renewals[i]).collect();
                within(budget, self.renew_slot(connection, &group)).await
            }
        });
        let answered = join_all(sent).await;
        gather(renewals.len(), &groups, answered)
    }

    /// Each group's wait: within half the response timeout, so that a slot
    /// whose primary is down cannot hold the live slots' answers past the
    /// caller's own timeout (which would lose them all).
    pub(super) fn group_budget(&self) -> Duration {
        self.endpoint.response_timeout.map_or(GROUP_BUDGET, |timeout| timeout / 2)
    }
}
