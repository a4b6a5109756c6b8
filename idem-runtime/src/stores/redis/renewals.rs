//! Batched lease renewals, on a connection of their own.
//!
//! The lease keeper renews every lease of a process at once, from a thread
//! and a Tokio runtime of its own. A batch is one pipeline of `EVALSHA`s of
//! `renew.lua` (one script call per key, so each stays within its key's
//! cluster slot), sent in one round trip on a connection that only carries
//! renewals: it is opened the first time the keeper renews, so it lives on
//! the keeper's runtime, and renewals never queue behind the application's
//! commands, nor wait on an application thread that is busy.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, ServerErrorKind, Value};
use tokio::sync::OnceCell;

use super::RedisStore;
use super::reply;
use super::scripts::millis;
use crate::store::{Fence, Renewal, StoreError};

/// The renewals' own connection, opened on first use.
pub(super) struct RenewalConnection {
    /// What to open it from; `None` for a store on a caller's connection,
    /// whose renewals then share that connection.
    source: Option<(redis::Client, ConnectionManagerConfig)>,
    connection: OnceCell<ConnectionManager>,
}

impl RenewalConnection {
    pub(super) fn new(source: Option<(redis::Client, ConnectionManagerConfig)>) -> Self {
        Self { source, connection: OnceCell::new() }
    }

    /// Whether renewals have a connection of their own.
    pub(super) fn is_separate(&self) -> bool {
        self.source.is_some()
    }
}

/// Whether a reply of the pipeline is `NOSCRIPT`.
fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(error) if error.kind() == Some(ServerErrorKind::NoScript))
}

impl RedisStore {
    /// The connection renewals go through: the renewals' own, opened now on
    /// the caller's runtime if it is the first batch, else the shared one.
    async fn renewal_connection(&self) -> Result<ConnectionManager, StoreError> {
        let Some((client, config)) = &self.renewals.source else {
            return Ok(self.connection.clone());
        };
        let connection = self
            .renewals
            .connection
            .get_or_try_init(|| ConnectionManager::new_with_config(client.clone(), config.clone()))
            .await
            .map_err(|e| self.endpoint.error("connect for renewals", e))?;
        Ok(connection.clone())
    }

    /// Sends `renewals` as one pipeline and returns each raw reply.
    async fn renewal_pipeline(
        &self,
        connection: &mut ConnectionManager,
        renewals: &[&Renewal],
    ) -> Result<Vec<Value>, StoreError> {
        let mut pipeline = redis::pipe();
        for renewal in renewals {
            let mut call = self.scripts.renew.key(self.record_key(&renewal.key));
            call.arg(renewal.token.to_bytes().as_slice()).arg(millis(renewal.lease));
            pipeline.invoke_script(&call);
        }
        // Each reply on its own: one renewal's error must not hide the others'.
        let replies: Value =
            pipeline.ignore_errors().query_async(connection).await.map_err(|e| self.endpoint.error("renew many", e))?;
        match replies {
            Value::Array(replies) if replies.len() == renewals.len() => Ok(replies),
            other => Err(StoreError::Corrupt {
                store: "redis",
                message: format!("{} renewals were answered {other:?}", renewals.len()),
            }),
        }
    }

    /// [`Store::renew_many`](crate::store::Store::renew_many): one round
    /// trip, plus a `SCRIPT LOAD` and a second round trip for the renewals
    /// answered `NOSCRIPT` (after a server restart or `SCRIPT FLUSH`).
    pub(super) async fn renew_batch(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = self.renewal_connection().await?;
        let mut replies = self.renewal_pipeline(&mut connection, &renewals.iter().collect::<Vec<_>>()).await?;
        let missing: Vec<usize> = (0..replies.len()).filter(|&i| is_noscript(&replies[i])).collect();
        if !missing.is_empty() {
            self.scripts
                .renew
                .prepare_invoke()
                .load_async(&mut connection)
                .await
                .map_err(|e| self.endpoint.error("load the renew script", e))?;
            let again: Vec<&Renewal> = missing.iter().map(|&i| &renewals[i]).collect();
            let answers = self.renewal_pipeline(&mut connection, &again).await?;
            for (i, answer) in missing.into_iter().zip(answers) {
                replies[i] = answer;
            }
        }
        replies
            .into_iter()
            .map(|reply| match reply {
                Value::ServerError(error) => Err(self.endpoint.error("renew many", RedisError::from(error))),
                reply => reply::fence(reply),
            })
            .collect()
    }
}
