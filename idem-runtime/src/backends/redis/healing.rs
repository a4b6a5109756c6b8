//! A Redis Cluster connection that is replaced when it stops answering.
//!
//! The redis crate's cluster client drives every node's connection from
//! one task. Found by a fault campaign and reproduced against a real
//! cluster (see `tests/tests/redis/stalled_cluster_client.rs`): when a
//! process stopped for a while (SIGSTOP, a VM paused) resumes into a
//! failover, that task can deadlock in its own recovery (redis 1.8: the
//! slot refresh waits for a lock that was handed to a request the task
//! polls only after the refresh). Every command then waits its timeout,
//! for good, although every node answers; meanwhile the lease keeper,
//! whose renewals go to each primary on connections of their own, keeps
//! renewing the leases of executions that cannot complete, and their keys
//! stay in flight until the process restarts.
//!
//! So each command notes when it was sent, and the connection when it last
//! answered anything (a reply, an error from a node, a refused
//! connection). When a command ends unanswered (timed out, or dropped by a
//! caller that gave up) and nothing has been answered since the oldest
//! command still owed was sent, `stall` or longer ago, the connection is
//! suspect. It is given one more `stall` to answer anything (after a pause
//! of the whole process, callers' timers fire before the client's task has
//! delivered the replies that came meanwhile); if it does not, a new
//! connection is opened from the same client, in the background, and every
//! later command goes to it. A client whose task has ended (every command
//! refused at once) is replaced at once. At most one replacement is opened
//! at a time, and at most one per `cooldown`. The old connection's tasks
//! end when its last command does (the redis crate aborts them when the
//! connection is dropped).
//!
//! A `ClusterConnection` the application opened and handed to the store
//! (no client to open another from) is never replaced.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use redis::RedisResult;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::runtime::Handle;

/// How long a command waits, with nothing answered, before the connection
/// counts as stalled: half the response timeout, within these bounds.
const STALL: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));

/// The least time between two replacements.
const COOLDOWN: Duration = Duration::from_secs(2);

/// A cluster connection, and what replaces it when it stalls.
pub(super) struct Healing {
    current: RwLock<ClusterConnection>,
    /// Where replacements come from (`None`: a caller's connection).
    client: Option<ClusterClient>,
    /// The runtime that opened the connection: replacements are opened
    /// there, so that their driver runs where the first one did.
    runtime: Option<Handle>,
    /// Longest wait for a replacement to open.
    opening: Duration,
    watch: Watch,
}

impl Healing {
    /// `connection`, replaced from `client` when it stalls; `response_timeout`
    /// sets how long a command may wait unanswered (see the module's docs).
    pub(super) fn new(
        connection: ClusterConnection,
        client: Option<ClusterClient>,
        response_timeout: Option<Duration>,
        connection_timeout: Option<Duration>,
    ) -> Arc<Self> {
        let stall = response_timeout.map_or(STALL.1, |timeout| (timeout / 2).clamp(STALL.0, STALL.1));
        Arc::new(Self {
            current: RwLock::new(connection),
            client,
            runtime: Handle::try_current().ok(),
            // The client connects to the seeds, then reads the slot map.
            opening: connection_timeout.unwrap_or(Duration::from_secs(1)) * 2 + response_timeout.unwrap_or(STALL.1),
            watch: Watch::new(stall, COOLDOWN),
        })
    }

    /// The connection commands go to now.
    pub(super) fn current(&self) -> ClusterConnection {
        self.current.read().clone()
    }

    /// Runs `request` (a command on [`Healing::current`]), noting whether
    /// it was answered.
    pub(super) async fn watch<T>(self: &Arc<Self>, request: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        let mut pending = Pending { healing: self, sent: self.watch.sent(), open: true };
        let result = request.await;
        pending.open = false;
        match &result {
            Err(error) if error.is_timeout() => self.unanswered(pending.sent),
            Err(error) if is_client_gone(error) && self.client.is_some() => {
                if self.watch.begin(self.watch.now()) {
                    self.open_replacement(None);
                }
            }
            _ => self.watch.answered(),
        }
        result
    }

    /// A command sent at `sent` ended unanswered: if that makes the
    /// connection suspect, it is watched for one more `stall`, then
    /// replaced if it still answers nothing. A caller's connection (no
    /// client) is only watched.
    fn unanswered(self: &Arc<Self>, sent: u64) {
        if self.client.is_none() {
            return;
        }
        let now = self.watch.now();
        if let Some(quiet) = self.watch.stalled(sent, now) {
            self.open_replacement(Some((now, quiet)));
        }
    }

    /// Opens a replacement in the background: after one more `stall` in
    /// which nothing may be answered, when `suspect` says since when and
    /// for how long nothing was; at once otherwise.
    fn open_replacement(self: &Arc<Self>, suspect: Option<(u64, Duration)>) {
        let Some(client) = self.client.clone() else {
            self.watch.replaced();
            return;
        };
        let Some(runtime) = self.runtime.clone().or_else(|| Handle::try_current().ok()) else {
            self.watch.replaced();
            return;
        };
        let healing = Arc::clone(self);
        runtime.spawn(async move {
            // Ends the replacement however this task ends (even dropped
            // unpolled, by a runtime shutting down).
            let _done = Done(&healing.watch);
            if let Some((since, quiet)) = suspect {
                tokio::time::sleep(healing.watch.stall).await;
                if healing.watch.answered_after(since) {
                    return;
                }
                let quiet = quiet + healing.watch.stall;
                tracing::warn!(?quiet, "the Redis Cluster connection answered nothing; opening a new one");
            } else {
                tracing::warn!("the Redis Cluster client has stopped; opening a new one");
            }
            match tokio::time::timeout(healing.opening, client.get_async_connection()).await {
                Ok(Ok(connection)) => {
                    *healing.current.write() = connection;
                    healing.watch.answered();
                    tracing::info!("a new Redis Cluster connection replaced the one that stopped answering");
                }
                Ok(Err(error)) => tracing::warn!(%error, "a new Redis Cluster connection could not be opened"),
                Err(_) => tracing::warn!(within = ?healing.opening, "a new Redis Cluster connection did not open"),
            }
        });
    }
}

/// Whether `error` is the cluster client's own: its task is gone, and no
/// command reaches a node any more.
fn is_client_gone(error: &redis::RedisError) -> bool {
    error.is_connection_dropped() && error.to_string().contains("redis_cluster: Unable to")
}

/// Marks the replacement under way as ended when dropped.
struct Done<'a>(&'a Watch);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.replaced();
    }
}

/// A command on its way: one dropped before its answer (its caller gave up)
/// is unanswered.
struct Pending<'a> {
    healing: &'a Arc<Healing>,
    sent: u64,
    open: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.open {
            self.healing.unanswered(self.sent);
        }
    }
}

/// When a connection last answered, what it owes, and whether it is being
/// replaced. Times are microseconds since `epoch`.
struct Watch {
    epoch: Instant,
    stall: Duration,
    cooldown: Duration,
    /// When the connection last answered.
    answered: AtomicU64,
    /// When the oldest command sent since the last answer was sent (stale,
    /// and so meaningless, when not after `answered`).
    owed: AtomicU64,
    /// When the last replacement began (0: never).
    began: AtomicU64,
    replacing: AtomicBool,
}

impl Watch {
    fn new(stall: Duration, cooldown: Duration) -> Self {
        Self {
            epoch: Instant::now(),
            stall,
            cooldown,
            answered: AtomicU64::new(0),
            owed: AtomicU64::new(0),
            began: AtomicU64::new(0),
            replacing: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX).max(1)
    }

    /// A command is sent now: returns the time, noted as owed if nothing is.
    fn sent(&self) -> u64 {
        let now = self.now();
        let owed = self.owed.load(Ordering::Relaxed);
        if owed <= self.answered.load(Ordering::Relaxed) {
            // Another command sent at the same moment may win: as old.
            let _ = self.owed.compare_exchange(owed, now, Ordering::Relaxed, Ordering::Relaxed);
        }
        now
    }

    /// The connection answered a command (or was replaced).
    fn answered(&self) {
        self.answered.fetch_max(self.now(), Ordering::Relaxed);
    }

    /// Whether the connection answered anything after `at`.
    fn answered_after(&self, at: u64) -> bool {
        self.answered.load(Ordering::Relaxed) > at
    }

    /// A command sent at `sent` ended unanswered at `now`. Whether that
    /// makes the connection suspect: nothing answered since it was sent,
    /// nor since the oldest command owed was sent, `stall` or longer ago;
    /// and a replacement may begin (see [`Watch::begin`]). `Some(how long
    /// nothing was answered)` begins one.
    fn stalled(&self, sent: u64, now: u64) -> Option<Duration> {
        let answered = self.answered.load(Ordering::Relaxed);
        if answered >= sent {
            return None;
        }
        let owed = self.owed.load(Ordering::Relaxed);
        let since = if owed > answered { owed.min(sent) } else { sent };
        let quiet = Duration::from_micros(now.saturating_sub(since));
        (quiet >= self.stall && self.begin(now)).then_some(quiet)
    }

    /// Begins a replacement at `now`, unless one is being opened or the
    /// last one began less than `cooldown` ago.
    fn begin(&self, now: u64) -> bool {
        let began = self.began.load(Ordering::Relaxed);
        if began != 0 && Duration::from_micros(now.saturating_sub(began)) < self.cooldown {
            return false;
        }
        if self.replacing.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.began.store(now, Ordering::Relaxed);
        true
    }

    /// The replacement begun last is open, failed, or was not needed.
    fn replaced(&self) {
        self.replacing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    fn watch() -> Watch {
        Watch::new(Duration::from_secs(1), Duration::from_secs(2))
    }

    #[test]
    fn a_command_unanswered_for_the_stall_with_nothing_answered_makes_the_connection_suspect() {
        let watch = watch();
        assert_eq!(watch.stalled(10 * MS, 1_010 * MS), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_short_wait_is_no_stall() {
        let watch = watch();
        assert_eq!(watch.stalled(10 * MS, 900 * MS), None, "a caller that gave up early");
    }

    #[test]
    fn callers_that_give_up_early_still_show_a_connection_that_owes_answers_for_long() {
        // Each caller gives up after 900 ms, under the 1 s stall; the oldest
        // command owed was sent 1.4 s before the second one gave up.
        let watch = watch();
        watch.owed.store(100 * MS, Ordering::Relaxed);
        assert_eq!(watch.stalled(600 * MS, 1_500 * MS), Some(Duration::from_millis(1_400)));
    }

    #[test]
    fn any_answer_since_the_command_was_sent_shows_the_connection_alive() {
        let watch = watch();
        watch.answered.store(500 * MS, Ordering::Relaxed);
        assert_eq!(watch.stalled(400 * MS, 5_000 * MS), None, "answered after it was sent");
        // Owed since before that answer: the quiet time counts from this command.
        watch.owed.store(100 * MS, Ordering::Relaxed);
        assert_eq!(watch.stalled(600 * MS, 1_500 * MS), None, "900 ms of quiet");
        assert!(watch.stalled(600 * MS, 1_600 * MS).is_some(), "1 s of quiet");
        assert!(watch.answered_after(400 * MS) && !watch.answered_after(500 * MS));
    }

    #[test]
    fn sending_notes_the_oldest_command_owed_since_the_last_answer() {
        let watch = watch();
        let first = watch.sent();
        std::thread::sleep(Duration::from_millis(2));
        watch.sent();
        assert_eq!(watch.owed.load(Ordering::Relaxed), first, "the oldest command owed");
        std::thread::sleep(Duration::from_millis(2));
        watch.answered();
        std::thread::sleep(Duration::from_millis(2));
        let after = watch.sent();
        assert_eq!(watch.owed.load(Ordering::Relaxed), after, "owed anew after an answer");
    }

    #[test]
    fn one_replacement_at_a_time_and_one_per_cooldown() {
        let watch = watch();
        assert!(watch.stalled(MS, 1_001 * MS).is_some());
        assert_eq!(watch.stalled(MS, 5_000 * MS), None, "one is being opened");
        watch.replaced();
        assert_eq!(watch.stalled(MS, 2_500 * MS), None, "within the cooldown of the last one");
        assert!(watch.stalled(MS, 3_001 * MS).is_some(), "the cooldown is over");
        watch.replaced();
        assert!(!watch.begin(4_000 * MS), "within the cooldown, whatever asks");
        assert!(watch.begin(5_002 * MS));
    }
}
