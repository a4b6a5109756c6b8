//! Counting running executions, so that a shutdown can wait for them, and
//! so that they are bounded.
//!
//! An execution counts from just before its claim is sent until its
//! completion or release is settled, including one that finishes in the
//! background after its client left. Once draining starts, no new execution
//! begins: a claim attempted from then on is refused before it is sent
//! (the runtime answers 503 with `Retry-After`, and nothing ran). The same
//! holds while as many execute as the bound allows: a client that resets
//! its connection leaves its execution running by design, so without a
//! bound handlers could be piled up faster than they finish.
//!
//! The executions of the process are published as the gauge
//! [`RUNNING_METRIC`](crate::observability::RUNNING_METRIC), moved only by
//! executions that claimed their key (a replay or a refusal leaves it be).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::observe::RUNNING_METRIC;

/// The running executions of one [`Idem`](crate::Idem) (or inbox).
#[derive(Debug)]
pub(crate) struct Running {
    count: AtomicUsize,
    /// Most executions at once (claims being sent included).
    max: usize,
    draining: AtomicBool,
    idle: Notify,
}

impl Default for Running {
    fn default() -> Self {
        Self::with_limit(Self::DEFAULT_MAX)
    }
}

/// Why [`Running::enter`] refused a new execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A drain has begun.
    Draining,
    /// As many run as the bound allows.
    Full,
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
        metrics::gauge!(RUNNING_METRIC).increment(1.0);
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
    /// The bound of [`Idem::max_running`](crate::Idem::max_running) unless
    /// set: far above what a process serves at once in a healthy service,
    /// far below what would exhaust its memory (each execution holds its
    /// request, its body up to the body limit, and its response up to the
    /// stored-response limit).
    pub(crate) const DEFAULT_MAX: usize = 2048;

    /// No execution yet, at most `max` at once (at least one).
    pub(crate) fn with_limit(max: usize) -> Self {
        Self { count: AtomicUsize::new(0), max: max.max(1), draining: AtomicBool::new(false), idle: Notify::new() }
    }

    /// The bound.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Counts a new execution, unless draining has begun or as many run as
    /// the bound allows.
    pub(crate) fn enter(self: &Arc<Self>) -> Result<Entered<'_>, Refused> {
        // Count first (never past the bound, not even for a moment), then
        // look: a drain that starts in between sees the count and waits for
        // it (both sides use SeqCst).
        if self.count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < self.max).then_some(n + 1)).is_err() {
            return Err(if self.draining.load(Ordering::SeqCst) { Refused::Draining } else { Refused::Full });
        }
        let entered = Entered { running: self };
        if self.draining.load(Ordering::SeqCst) {
            return Err(Refused::Draining); // the drop takes the count back
        }
        Ok(entered)
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
        metrics::gauge!(RUNNING_METRIC).decrement(1.0);
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
        assert_eq!(running.enter().err(), Some(Refused::Draining), "no new execution once draining");
        assert_eq!(running.count(), 1);
        drop(first);
        let drained = drain.await.unwrap();
        assert!(drained.is_complete());
        assert!(drained.waited >= Duration::from_secs(1) && drained.waited < Duration::from_secs(2));
    }

    #[test]
    fn executions_past_the_bound_are_refused_until_one_ends() {
        let running = Arc::new(Running::with_limit(2));
        let first = running.enter().unwrap().keep();
        let second = running.enter().unwrap().keep();
        assert_eq!(running.enter().err(), Some(Refused::Full));
        assert_eq!(running.count(), 2, "a refusal gives its count back");
        drop(first);
        let third = running.enter().expect("room again");
        drop((second, third));
        assert_eq!(running.count(), 0);
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
