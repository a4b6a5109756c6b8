//! Counting running executions, so that a shutdown can wait for them.
//!
//! An execution counts from just before its claim is sent until its
//! completion or release is settled, including one that finishes in the
//! background after its client left. Once draining starts, no new execution
//! begins: a claim attempted from then on is refused before it is sent
//! (the runtime answers 503 with `Retry-After`, and nothing ran).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The running executions of one [`Idem`](crate::Idem).
#[derive(Debug, Default)]
pub(crate) struct Running {
    count: AtomicUsize,
    draining: AtomicBool,
    idle: Notify,
}

/// How a drain ended, as [`Idem::drain`](crate::Idem::drain) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Drained {
    /// Executions still running when the drain gave up (0: all finished).
    pub still_running: usize,
    /// How long the drain waited.
    pub waited: Duration,
}

impl Drained {
    /// Whether every execution finished within the timeout.
    pub fn is_complete(&self) -> bool {
        self.still_running == 0
    }
}

/// One execution, counted until dropped.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    running: Arc<Running>,
}

/// A claim counted while it is sent, borrowing its [`Running`]: a claim
/// that does not acquire (a replay, a conflict) gives its count back
/// without touching the shared reference count, which every worker would
/// otherwise bounce between cores on every request.
#[derive(Debug)]
pub(crate) struct Entered<'a> {
    running: &'a Arc<Running>,
}

impl Entered<'_> {
    /// Keeps the count for an execution that outlives the claim.
    pub(crate) fn keep(self) -> RunningGuard {
        let guard = RunningGuard { running: Arc::clone(self.running) };
        // The count moves to the guard: taken once, given back once.
        std::mem::forget(self);
        guard
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.running.leave();
    }
}

impl Running {
    /// Counts a new execution, or `None` once draining has begun.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Entered<'_>> {
        // Count first, then look: a drain that starts in between sees the
        // count and waits for it (both sides use SeqCst).
        self.count.fetch_add(1, Ordering::SeqCst);
        let entered = Entered { running: self };
        if self.draining.load(Ordering::SeqCst) {
            return None; // the drop takes the count back
        }
        Some(entered)
    }

    /// Gives back one count.
    fn leave(&self) {
        // Only a drain waits for the count to reach zero, and it sets
        // `draining` before it reads the count: an execution that ends
        // unseen by it finds the flag set here (both sequentially
        // consistent), so no wake-up is lost, and none is paid outside one.
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.draining.load(Ordering::SeqCst) {
            self.idle.notify_waiters();
        }
    }

    /// Executions running now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Refuses new executions from now on, then waits up to `timeout` for
    /// the running ones.
    pub(crate) async fn drain(&self, timeout: Duration) -> Drained {
        let started = tokio::time::Instant::now();
        self.draining.store(true, Ordering::SeqCst);
        let deadline = started + timeout;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            let still_running = self.count();
            if still_running == 0 || tokio::time::Instant::now() >= deadline {
                return Drained { still_running, waited: started.elapsed() };
            }
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_drain_waits_for_running_executions_and_refuses_new_ones() {
        let running = Arc::new(Running::default());
        let first = running.enter().expect("not draining yet").keep();
        let drain = tokio::spawn({
            let running = Arc::clone(&running);
            async move { running.drain(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(running.enter().is_none(), "no new execution once draining");
        assert_eq!(running.count(), 1);
        drop(first);
        let drained = drain.await.unwrap();
        assert!(drained.is_complete());
        assert!(drained.waited >= Duration::from_secs(1) && drained.waited < Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_gives_up_at_its_timeout() {
        let running = Arc::new(Running::default());
        let _stuck = running.enter().unwrap().keep();
        let drained = running.drain(Duration::from_secs(3)).await;
        assert_eq!(drained.still_running, 1);
        assert_eq!(drained.waited, Duration::from_secs(3));
    }
}
