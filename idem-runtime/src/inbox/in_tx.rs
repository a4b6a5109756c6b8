//! The inbox on Postgres with the work's own writes in the transaction of
//! the processed-message record: both commit, or neither does.

use sqlx::PgConnection;

use super::{Delivery, Inbox, InboxError, MessageContext, processed};
use crate::background;
use crate::engine::Releaser;
use crate::engine::tx_commit::{Commit, Committed, begin, roll_back};

impl Inbox {
    /// Like [`Inbox::process`], on a `PostgresStore`, with the work's writes
    /// in a transaction that commits together with the processed-message
    /// record: a message is processed, with all its writes, or not at all,
    /// even when the lease is lost or the process dies half way.
    ///
    /// The transaction is opened after the claim on the store's pool
    /// (`BEGIN ISOLATION LEVEL READ COMMITTED`); the work writes through the
    /// connection it is given and never commits itself. `Ok(value)` commits
    /// ([`Delivery::Processed`]) or, if that fails, rolls back
    /// ([`InboxError::NotCommitted`]); `Err` rolls back and releases the
    /// message for a later delivery ([`InboxError::Failed`]).
    ///
    /// ```no_run
    /// # async fn demo(inbox: idem_runtime::inbox::Inbox) {
    /// let sent = inbox
    ///     .process_in_tx("order.created:42", async |_, tx| {
    ///         sqlx::query("INSERT INTO notifications (order_id) VALUES ('42')").execute(tx).await
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub async fn process_in_tx<T, E, F>(&self, id: &str, work: F) -> Result<Delivery<T>, InboxError<E, T>>
    where
        F: AsyncFnOnce(MessageContext, &mut PgConnection) -> Result<T, E>,
    {
        let Some(store) = self.store.transactional() else {
            return Err(InboxError::NotPostgres { store: self.store.kind() });
        };
        let (execution, context) = match self.start(id).await {
            Ok(started) => started,
            Err(skipped) => return skipped,
        };
        let timeout = self.terms.timeout;
        let mut tx = match begin(&*store, timeout).await {
            Ok(tx) => tx,
            Err(error) => {
                let _ = background::spawn_joined(execution.release(Releaser::Handler)).await;
                return Err(InboxError::Store(error));
            }
        };
        let token = execution.token();
        let value = match work(context, &mut tx).await {
            Ok(value) => value,
            Err(error) => {
                roll_back(tx, timeout).await;
                let _ = background::spawn_joined(execution.release(Releaser::Handler)).await;
                return Err(InboxError::Failed(error));
            }
        };
        let Some(Commit { committed, execution, .. }) = execution.commit(store, tx, processed(token)).await else {
            return Err(InboxError::NotCommitted);
        };
        if committed == Committed::Done {
            return Ok(Delivery::Processed(value));
        }
        // Rolled back (or, for an unanswered COMMIT, perhaps committed: the
        // release is fenced and then changes nothing). The work said it was
        // done: a message held for an operator meanwhile stays held.
        let _ = background::spawn_joined(execution.release(Releaser::Runtime)).await;
        Err(InboxError::NotCommitted)
    }
}
