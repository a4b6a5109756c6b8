//! The optional background task that deletes expired records from a store
//! that keeps them until deleted ([`PurgeExpired`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::store::PurgeExpired;

/// A running sweeper, started by [`SweeperHandle::spawn`] (or
/// `PostgresStore::spawn_sweeper`).
///
/// Dropping the handle stops the sweeper too (at its next step, without
/// waiting); [`SweeperHandle::stop`] stops it and waits until it is done.
#[derive(Debug)]
#[must_use = "dropping the handle stops the sweeper"]
pub struct SweeperHandle {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl SweeperHandle {
    /// Starts a task on the current Tokio runtime that deletes `store`'s
    /// expired records every `interval`, `batch` per call, until a call
    /// deletes fewer. Failures are logged (`warn`) and retried at the next
    /// interval.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime (as `tokio::spawn` does).
    pub fn spawn(store: Arc<dyn PurgeExpired>, interval: Duration, batch: usize) -> Self {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(store, interval.max(Duration::from_millis(1)), batch.max(1), stopped));
        Self { stop: Some(stop), task: Some(task) }
    }

    /// Stops the sweeper and waits for it to finish; a purge running at that
    /// moment is abandoned (its statement is rolled back by the server).
    pub async fn stop(mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            // The task never panics on its own; a panic or cancellation of
            // the runtime has nothing left to stop.
            let _ = task.await;
        }
    }

    /// Whether the sweeper task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for SweeperHandle {
    fn drop(&mut self) {
        // Closing the channel is the stop signal.
        self.stop.take();
    }
}

/// Every `interval`, deletes expired records in batches of `batch` until a
/// batch comes back short. Failures are logged and retried next interval.
async fn run(store: Arc<dyn PurgeExpired>, interval: Duration, batch: usize, mut stopped: oneshot::Receiver<()>) {
    let kind = store.kind();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tracing::debug!(store = kind, ?interval, batch, "idem sweeper started");
    'sweeping: loop {
        tokio::select! {
            _ = &mut stopped => break,
            _ = ticker.tick() => {}
        }
        let mut total = 0u64;
        loop {
            let purged = tokio::select! {
                _ = &mut stopped => break 'sweeping,
                purged = store.purge_expired(batch) => purged,
            };
            match purged {
                Ok(count) => {
                    total += count;
                    if count < batch as u64 {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(store = kind, %error, "idem sweeper: purge failed; retrying next interval");
                    break;
                }
            }
        }
        if total > 0 {
            tracing::debug!(store = kind, deleted = total, "idem sweeper deleted expired records");
        }
    }
    tracing::debug!(store = kind, "idem sweeper stopped");
}
