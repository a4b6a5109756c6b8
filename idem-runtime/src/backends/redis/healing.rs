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
//! So each command notes when it was sent. One that ends unanswered (timed
//! out, or dropped by a caller that gave up) after waiting at least
//! `stall`, with nothing at all answered on the connection since it was
//! sent, shows the connection stalled: a new one is opened from the same
//! client, in the background, and every later command goes to it. A
//! connection that answers anything (a reply, an error from a node, a
//! refused connection) is alive, however slow, and is kept. At most one
//! replacement is opened at a time, and at most one per `cooldown`. A
//! stalled connection's task may never end: its sockets stay open, a
//! handful per replacement.
//!
//! A cluster connection the application opened and handed to the store
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
        let mut pending = Pending { healing: self, sent: self.watch.now(), open: true };
        let result = request.await;
        pending.open = false;
        match &result {
            Err(error) if error.is_timeout() => self.unanswered(pending.sent),
            _ => self.watch.answered(),
        }
        result
    }

    /// A command sent at `sent` ended unanswered: if that shows the
    /// connection stalled, a replacement is opened in the background.
    fn unanswered(self: &Arc<Self>, sent: u64) {
        let Some(client) = self.client.clone() else { return };
        let Some(runtime) = self.runtime.clone().or_else(|| Handle::try_current().ok()) else { return };
        let Some(waited) = self.watch.stalled(sent, self.watch.now()) else { return };
        tracing::warn!(
            ?waited,
            "the Redis Cluster connection answered nothing while a command waited; opening a new one"
        );
        let healing = Arc::clone(self);
        runtime.spawn(async move {
            match tokio::time::timeout(healing.opening, client.get_async_connection()).await {
                Ok(Ok(connection)) => {
                    *healing.current.write() = connection;
                    healing.watch.answered();
                    tracing::info!("a new Redis Cluster connection replaced the one that stopped answering");
                }
                Ok(Err(error)) => tracing::warn!(%error, "a new Redis Cluster connection could not be opened"),
                Err(_) => tracing::warn!(within = ?healing.opening, "a new Redis Cluster connection did not open"),
            }
            healing.watch.replaced();
        });
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

/// When a connection last answered, and whether it is being replaced.
/// Times are microseconds since `epoch`.
struct Watch {
    epoch: Instant,
    stall: Duration,
    cooldown: Duration,
    /// When the connection last answered.
    answered: AtomicU64,
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
            began: AtomicU64::new(0),
            replacing: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The connection answered a command (or was replaced).
    fn answered(&self) {
        self.answered.fetch_max(self.now(), Ordering::Relaxed);
    }

    /// A command sent at `sent` ended unanswered at `now`. Whether that
    /// shows the connection stalled (it waited `stall` or longer, and
    /// nothing was answered since it was sent) and a replacement should
    /// begin: not while one is being opened, nor within `cooldown` of the
    /// last one's beginning. `Some(how long it waited)` begins one.
    fn stalled(&self, sent: u64, now: u64) -> Option<Duration> {
        let waited = Duration::from_micros(now.saturating_sub(sent));
        if waited < self.stall || self.answered.load(Ordering::Relaxed) >= sent {
            return None;
        }
        let began = self.began.load(Ordering::Relaxed);
        if began != 0 && Duration::from_micros(now.saturating_sub(began)) < self.cooldown {
            return None;
        }
        if self.replacing.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.began.store(now.max(1), Ordering::Relaxed);
        Some(waited)
    }

    /// The replacement begun last is open, or failed.
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
    fn a_command_unanswered_for_the_stall_with_nothing_answered_begins_a_replacement() {
        let watch = watch();
        assert_eq!(watch.stalled(10 * MS, 1_010 * MS), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_short_wait_is_no_stall() {
        let watch = watch();
        assert_eq!(watch.stalled(10 * MS, 900 * MS), None, "a caller that gave up early");
    }

    #[test]
    fn any_answer_since_the_command_was_sent_shows_the_connection_alive() {
        let watch = watch();
        std::thread::sleep(Duration::from_millis(5));
        watch.answered();
        let answered = watch.answered.load(Ordering::Relaxed);
        assert_eq!(watch.stalled(answered - 1, answered + 5_000 * MS), None, "answered after it was sent");
        assert!(watch.stalled(answered + 1, answered + 5_000 * MS).is_some(), "answered before it was sent only");
    }

    #[test]
    fn one_replacement_at_a_time_and_one_per_cooldown() {
        let watch = watch();
        assert!(watch.stalled(MS, 1_001 * MS).is_some());
        assert_eq!(watch.stalled(MS, 5_000 * MS), None, "one is being opened");
        watch.replaced();
        assert_eq!(watch.stalled(MS, 2_500 * MS), None, "within the cooldown of the last one");
        assert!(watch.stalled(MS, 3_001 * MS).is_some(), "the cooldown is over");
    }
}
