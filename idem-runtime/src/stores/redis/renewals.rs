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
use redis::cluster_routing::Slot;
use redis::{RedisError, ServerErrorKind, Value};
use tokio::sync::OnceCell;

use super::RedisStore;
use super::connection::{RedisConnection, Source};
use super::primaries::{Primaries, slot_of};
use super::reply;
use super::scripts::millis;
use crate::store::{Fence, Renewal, StoreError};

/// The renewals' own connections, opened on first use.
pub(super) struct RenewalConnection {
    /// What to open a single server's from; `None` on a cluster, and for a
    /// store on a caller's connection, whose renewals then share that
    /// connection.
    source: Option<Source>,
    connection: OnceCell<RedisConnection>,
    /// A cluster's primaries, each on a connection of its own.
    primaries: Option<Primaries>,
}

impl RenewalConnection {
    /// Renewals on a connection of their own to one server, opened from
    /// `source`; `None`: on the caller's connection.
    pub(super) fn new(source: Option<Source>) -> Self {
        Self { source, connection: OnceCell::new(), primaries: None }
    }

    /// Renewals straight to each primary of a cluster.
    pub(super) fn on_primaries(primaries: Primaries) -> Self {
        Self { source: None, connection: OnceCell::new(), primaries: Some(primaries) }
    }

    /// Whether renewals have connections of their own.
    pub(super) fn is_separate(&self) -> bool {
        self.source.is_some() || self.primaries.is_some()
    }
}

/// Longest wait for one slot's renewals when the connection has no
/// response timeout.
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
    /// The connection renewals go through: the renewals' own, opened now on
    /// the caller's runtime if it is the first batch, else the shared one.
    async fn renewal_connection(&self) -> Result<RedisConnection, StoreError> {
        let Some(source) = &self.renewals.source else {
            return Ok(self.connection.clone());
        };
        let connection = self
            .renewals
            .connection
            .get_or_try_init(|| source.connect())
            .await
            .map_err(|e| self.endpoint.error("connect for renewals", e))?;
        Ok(connection.clone())
    }

    /// Sends `renewals`, which share one slot on a cluster, as one pipeline
    /// (with `WAIT` last when replica acknowledgements are on) and returns
    /// each raw reply; a failure says whether the slot is moving.
    async fn renewal_pipeline(
        &self,
        mut connection: RedisConnection,
        renewals: &[&Renewal],
    ) -> Result<Vec<Value>, Failed> {
        let mut pipeline = redis::pipe();
        for renewal in renewals {
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
        if let Some(acks) = self.acks {
            let acked = replies.pop().unwrap_or(Value::Nil);
            // Renewals the replicas may not have: their leases are not
            // confirmed, and the keeper tries again.
            acks.check("renew many", &acked).map_err(Failed::other)?;
        }
        Ok(replies)
    }

    /// Renews `renewals` that share one slot, loading the script again for
    /// those answered `NOSCRIPT` (after a restart or a failover) and sending
    /// them once more. On a cluster, renewals the pipeline could not carry
    /// (the slot migrating: `ASK` for some keys, `MOVED`; or the pipeline
    /// failing as a whole) are sent one by one, each following its own
    /// redirection. A renewal that still fails is [`Fence::Unknown`]; the
    /// group fails only when the pipeline fails and no renewal gets through.
    async fn renew_slot(&self, connection: RedisConnection, renewals: Vec<&Renewal>) -> Result<Vec<Fence>, StoreError> {
        self.renew_group(connection, renewals).await.map(|(fences, _)| fences)
    }

    /// [`Self::renew_slot`] for renewals of one slot, or of one primary on
    /// its own connection, saying whether a renewal was redirected.
    async fn renew_group(
        &self,
        connection: RedisConnection,
        renewals: Vec<&Renewal>,
    ) -> Result<(Vec<Fence>, bool), StoreError> {
        let replies = match self.renewal_pipeline(connection.clone(), &renewals).await {
            Ok(replies) => replies,
            Err(Failed { moving: true, error }) => {
                let fences = self.renew_each(&renewals).await;
                return if fences.iter().all(|fence| *fence == Fence::Unknown) {
                    Err(error)
                } else {
                    Ok((fences, true))
                };
            }
            Err(Failed { error, .. }) => return Err(error),
        };
        let mut replies = replies;
        let missing: Vec<usize> = (0..replies.len()).filter(|&i| is_noscript(&replies[i])).collect();
        if !missing.is_empty() {
            self.scripts
                .renew
                .prepare_invoke()
                .load_async(&mut connection.clone())
                .await
                .map_err(|e| self.endpoint.error("load the renew script", e))?;
            let again: Vec<&Renewal> = missing.iter().map(|&i| renewals[i]).collect();
            let answers = self.renewal_pipeline(connection.clone(), &again).await.map_err(|failed| failed.error)?;
            for (i, answer) in missing.into_iter().zip(answers) {
                replies[i] = answer;
            }
        }
        let mut fences = Vec::with_capacity(replies.len());
        let mut redirected = false;
        for (renewal, reply) in renewals.iter().zip(replies) {
            fences.push(match reply {
                // The cluster client, or a primary's own connection (a
                // single server never redirects).
                Value::ServerError(error) if is_redirect(&error) => {
                    redirected = true;
                    self.renew_each(&[renewal]).await[0]
                }
                // One lease's error (TRYAGAIN, say) leaves that lease
                // unanswered, never the others.
                Value::ServerError(error) => {
                    let error = self.endpoint.error("renew many", RedisError::from(error));
                    tracing::warn!(%error, "one renewal failed");
                    Fence::Unknown
                }
                reply => reply::fence(reply)?,
            });
        }
        Ok((fences, redirected))
    }

    /// `renewals` one command each, all at once: each follows its key's
    /// redirections. A renewal that fails is [`Fence::Unknown`].
    async fn renew_each(&self, renewals: &[&Renewal]) -> Vec<Fence> {
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
    /// trip (one pipeline per slot on a cluster, sent together), plus a
    /// `SCRIPT LOAD` and a second round trip for the renewals answered
    /// `NOSCRIPT`.
    pub(super) async fn renew_batch(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(primaries) = &self.renewals.primaries {
            return self.renew_on_primaries(primaries, renewals).await;
        }
        let connection = self.renewal_connection().await?;
        // Positions of the renewals in each group: one group per slot on a
        // cluster, a single group otherwise.
        let mut groups: HashMap<Option<Slot>, Vec<usize>> = HashMap::new();
        for (i, renewal) in renewals.iter().enumerate() {
            let slot = connection.is_cluster().then(|| Slot::for_key(self.record_key(&renewal.key)));
            groups.entry(slot).or_default().push(i);
        }
        let groups: Vec<Vec<usize>> = groups.into_values().collect();
        let budget = self.group_budget();
        let sent = groups.iter().map(|members| {
            let group = self.renew_slot(connection.clone(), members.iter().map(|&i| &renewals[i]).collect());
            async move {
                match tokio::time::timeout(budget, group).await {
                    Ok(answered) => answered,
                    Err(_) => Err(StoreError::Timeout { store: "redis", after: budget }),
                }
            }
        });
        let answered = join_all(sent).await;
        gather(renewals.len(), &groups, answered)
    }

    /// Each group's wait: within half the response timeout, so that a slot
    /// whose primary is down cannot hold the live slots' answers past the
    /// caller's own timeout (which would lose them all).
    fn group_budget(&self) -> Duration {
        self.endpoint.response_timeout.map_or(GROUP_BUDGET, |timeout| timeout / 2)
    }

    /// A batch on a cluster's primaries: one pipeline on each primary's own
    /// connection, all sent at once, and the renewals of slots without a
    /// known primary through the cluster client. A primary that fails or
    /// is late leaves its own renewals unanswered; it is connected to
    /// again, and the slot map asked for again, before the next batch.
    async fn renew_on_primaries(&self, primaries: &Primaries, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        let slots: Vec<u16> = renewals.iter().map(|renewal| slot_of(&self.record_key(&renewal.key))).collect();
        let plan = primaries.plan(&slots).await;
        let budget = self.group_budget();
        let sent = plan.groups.iter().map(|(node, connection, members)| {
            let group = self.renew_group(connection.clone(), members.iter().map(|&i| &renewals[i]).collect());
            async move {
                let answered = match tokio::time::timeout(budget, group).await {
                    Ok(answered) => answered,
                    Err(_) => Err(StoreError::Timeout { store: "redis", after: budget }),
                };
                match answered {
                    Ok((fences, redirected)) => {
                        if redirected {
                            primaries.moved().await;
                        }
                        Ok(fences)
                    }
                    Err(error) => {
                        primaries.failed(node).await;
                        Err(error)
                    }
                }
            }
        });
        let elsewhere: Vec<&Renewal> = plan.elsewhere.iter().map(|&i| &renewals[i]).collect();
        let (answered, elsewhere_fences) = futures_util::future::join(join_all(sent), async {
            tokio::time::timeout(budget, self.renew_each(&elsewhere))
                .await
                .unwrap_or_else(|_| vec![Fence::Unknown; elsewhere.len()])
        })
        .await;
        let mut groups: Vec<Vec<usize>> = plan.groups.into_iter().map(|(_, _, members)| members).collect();
        let mut answered = answered;
        if !plan.elsewhere.is_empty() {
            groups.push(plan.elsewhere);
            answered.push(Ok(elsewhere_fences));
        }
        if !plan.unreachable.is_empty() {
            let error = StoreError::Unavailable {
                store: "redis",
                message: format!("{} renewals' primary could not be reached", plan.unreachable.len()),
                source: None,
            };
            groups.push(plan.unreachable);
            answered.push(Err(error));
        }
        gather(renewals.len(), &groups, answered)
    }
}

/// A batch's fences from its groups' answers: a group that fails (its
/// shard down, or its replicas late) leaves its own leases unanswered,
/// never the others'; the batch fails only when every group does.
fn gather(
    batch: usize,
    groups: &[Vec<usize>],
    answered: Vec<Result<Vec<Fence>, StoreError>>,
) -> Result<Vec<Fence>, StoreError> {
    if answered.iter().all(Result::is_err) {
        let error = answered.into_iter().find_map(Result::err);
        return Err(error.unwrap_or(StoreError::Corrupt { store: "redis", message: "no renewal group".into() }));
    }
    let mut fences = vec![Fence::Unknown; batch];
    for (members, answers) in groups.iter().zip(answered) {
        match answers {
            Ok(answers) => {
                for (&i, fence) in members.iter().zip(answers) {
                    fences[i] = fence;
                }
            }
            Err(error) => tracing::warn!(%error, leases = members.len(), "a group of renewals failed"),
        }
    }
    Ok(fences)
}

/// Whether a server error sends the command to another node (`ASK`,
/// `MOVED`): the slot is moving or has moved.
fn is_redirect(error: &redis::ServerError) -> bool {
    matches!(error.kind(), Some(ServerErrorKind::Ask | ServerErrorKind::Moved))
}
