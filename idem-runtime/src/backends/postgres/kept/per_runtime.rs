//! A runtime's side of the kept connections: what it keeps of one store
//! ([`Local`]: its idle connections and its waiting operations), how a
//! connection is handed from one operation to the next or back to the pool
//! ([`give_back`], [`keep`]), the task that takes connections from the pool
//! for those waiting ([`fetch`]), and the one that gives back those kept
//! too long ([`tend`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, Postgres};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::{HOLD, Kept};

/// One runtime's part of one store.
pub(super) struct Local {
    pub(super) free: Mutex<Free>,
    /// What the others see of it.
    pub(super) tally: Arc<Tally>,
    pub(super) store: Weak<Kept>,
    /// The store's [`Kept::wanting`].
    pub(super) wanting: Arc<AtomicUsize>,
}

/// How much of the pool a runtime has, read by the others without its lock.
#[derive(Default)]
pub(super) struct Tally {
    /// Connections it keeps: idle, or in use by its operations.
    pub(super) held: AtomicUsize,
    /// Its fetch waits for the pool.
    pub(super) wants: AtomicBool,
}

/// A connection a runtime keeps: back to the pool when dropped.
pub(super) struct KeptConnection {
    /// Always there but while it is dropped.
    pub(super) connection: Option<PoolConnection<Postgres>>,
    /// When it was taken from the pool.
    pub(super) taken: Instant,
    /// Its runtime's count.
    pub(super) tally: Arc<Tally>,
}

/// What a runtime's waiting operation is handed: a connection, or the
/// pool's failure to give one.
pub(super) type Handed = Result<KeptConnection, sqlx::Error>;

/// One runtime's kept connections of one store, and its operations waiting.
pub(super) struct Free {
    /// The store's pool: a connection nobody here waits for goes back to
    /// it at once when it has none free.
    pub(super) pool: PgPool,
    /// Not in use; the most recently given back last.
    pub(super) idle: Vec<KeptConnection>,
    /// Operations of this runtime waiting for a connection, oldest first.
    pub(super) waiting: VecDeque<oneshot::Sender<Handed>>,
    /// A task takes connections from the pool for those waiting.
    pub(super) fetching: bool,
}

/// Where this thread finds a runtime's [`Local`] for a store. Weak: the task
/// that [`Kept::local`] spawns holds it, so that its connections are
/// dropped on their runtime (giving one back to the pool needs a runtime),
/// never in a thread-local destructor.
pub(super) struct Entry {
    pub(super) store: Weak<Kept>,
    pub(super) runtime: tokio::runtime::Id,
    pub(super) local: Weak<Local>,
}

thread_local! {
    pub(super) static ENTRIES: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

impl KeptConnection {
    pub(super) fn taken(connection: PoolConnection<Postgres>, tally: &Arc<Tally>) -> Self {
        tally.held.fetch_add(1, Ordering::AcqRel);
        Self { connection: Some(connection), taken: Instant::now(), tally: Arc::clone(tally) }
    }

    /// Kept by the runtime of `tally` from now on.
    pub(super) fn moved_to(mut self, tally: &Arc<Tally>) -> Self {
        tally.held.fetch_add(1, Ordering::AcqRel);
        let left = std::mem::replace(&mut self.tally, Arc::clone(tally));
        left.held.fetch_sub(1, Ordering::AcqRel);
        self
    }

    pub(super) fn connection(&mut self) -> &mut PoolConnection<Postgres> {
        self.connection.as_mut().expect("a kept connection is there until it is dropped")
    }

    pub(super) fn is_due(&self) -> bool {
        self.taken.elapsed() >= HOLD
    }
}

/// The most recently given back of `free`'s idle connections, unless it is
/// due back to the pool; then it and every other are (to be dropped by the
/// caller, after unlocking).
pub(super) fn take(free: &mut Free) -> (Option<KeptConnection>, Vec<KeptConnection>) {
    match free.idle.pop() {
        Some(connection) if !connection.is_due() => (Some(connection), Vec::new()),
        Some(due) => {
            let mut due_ones = std::mem::take(&mut free.idle);
            due_ones.push(due);
            (None, due_ones)
        }
        None => (None, Vec::new()),
    }
}

/// Hands `connection` to the oldest operation of its runtime waiting for
/// one, or puts it with the idle ones; back to the pool if it is due, or if
/// it gives way to someone else waiting for the pool ([`Kept::gives_way`]).
pub(super) fn give_back(local: &Local, connection: KeptConnection) {
    // Cheap first: does anyone wait for the pool but this runtime?
    let others_want = local.wanting.load(Ordering::Acquire) > usize::from(local.tally.wants.load(Ordering::Acquire));
    if others_want && local.store.upgrade().is_some_and(|store| store.gives_way(&local.tally, &connection)) {
        return;
    }
    keep(local, connection);
}

/// Hands `connection` to the oldest operation of its runtime waiting for
/// one, or puts it with the idle ones; back to the pool if it is due.
pub(super) fn keep(local: &Local, mut connection: KeptConnection) {
    if connection.is_due() {
        return;
    }
    let mut free = local.free.lock();
    while let Some(waiting) = free.waiting.pop_front() {
        match waiting.send(Ok(connection)) {
            Ok(()) => return,
            // That operation ended.
            Err(Ok(back)) => connection = back,
            Err(Err(_)) => return,
        }
    }
    // Nobody here waits, and the pool has none free: someone may wait for
    // the pool (a transaction, another runtime); it goes back.
    let saturated = free.pool.size() >= free.pool.options().get_max_connections() && free.pool.num_idle() == 0;
    if saturated {
        drop(free);
        return;
    }
    free.idle.push(connection);
}

impl Drop for KeptConnection {
    fn drop(&mut self) {
        self.tally.held.fetch_sub(1, Ordering::AcqRel);
        if Handle::try_current().is_ok() {
            return;
        }
        // No runtime (one dropped in a thread-local destructor): sqlx gives
        // a connection back on a task it spawns, which would panic here. So
        // it is dropped on a thread of its own, in a runtime of its own
        // (where it is closed and its place in the pool freed).
        let Some(connection) = self.connection.take() else { return };
        tracing::debug!(
            "a kept Postgres connection dropped outside a Tokio runtime: closing it on a thread of its own"
        );
        let closing = std::thread::Builder::new().name("idem-pg-close".into()).spawn(move || {
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(async move { drop(connection.detach()) }),
                // Never dropped without a runtime: its place stays taken.
                Err(error) => {
                    tracing::warn!(%error, "no runtime to close a kept Postgres connection in; it is leaked");
                    std::mem::forget(connection);
                }
            }
        });
        if let Err(error) = closing {
            tracing::warn!(%error, "no thread to close a kept Postgres connection on; it is leaked");
        }
    }
}

/// `error` again, for each operation that waited on the fetch it ended.
pub(super) fn again(error: &sqlx::Error) -> sqlx::Error {
    match error {
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        other => sqlx::Error::Io(std::io::Error::other(other.to_string())),
    }
}

/// Counts a wait for the pool while it lasts (dropped with it when its task
/// ends, however).
pub(super) struct Wants<'a> {
    pub(super) wanting: &'a AtomicUsize,
    pub(super) tally: Option<&'a Tally>,
}

impl<'a> Wants<'a> {
    pub(super) fn new(wanting: &'a AtomicUsize, tally: Option<&'a Tally>) -> Self {
        if let Some(tally) = tally {
            tally.wants.store(true, Ordering::Release);
        }
        wanting.fetch_add(1, Ordering::AcqRel);
        Self { wanting, tally }
    }
}

impl Drop for Wants<'_> {
    fn drop(&mut self) {
        self.wanting.fetch_sub(1, Ordering::AcqRel);
        if let Some(tally) = self.tally {
            tally.wants.store(false, Ordering::Release);
        }
    }
}

/// Takes connections from the pool for the operations of `local`'s runtime
/// waiting for one, while some wait. If the pool fails, they fail with its
/// error.
pub(super) async fn fetch(pool: PgPool, local: Arc<Local>) {
    loop {
        let fetched = {
            let _wants = Wants::new(&local.wanting, Some(&local.tally));
            pool.acquire().await
        };
        let mut list = local.free.lock();
        match fetched {
            Ok(connection) => {
                drop(list);
                // This runtime's, whatever its share: the pool chose it.
                keep(&local, KeptConnection::taken(connection, &local.tally));
                list = local.free.lock();
                list.waiting.retain(|waiting| !waiting.is_closed());
                if !list.waiting.is_empty() {
                    continue;
                }
            }
            // Each waiting operation fails with it, now (not after an
            // acquire timeout of its own).
            Err(error) => {
                let mut waiting = list.waiting.drain(..);
                let first = waiting.next();
                for other in waiting {
                    let _ = other.send(Err(again(&error)));
                }
                if let Some(first) = first {
                    let _ = first.send(Err(error));
                }
            }
        }
        list.fetching = false;
        return;
    }
}

/// Holds a runtime's [`Local`] while the runtime runs and the store lives,
/// giving idle connections back to the pool when they are due.
pub(super) async fn tend(store: Weak<Kept>, local: Arc<Local>) {
    let mut tick = tokio::time::interval(HOLD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while store.strong_count() > 0 {
        tick.tick().await;
        let due: Vec<_> = {
            let mut free = local.free.lock();
            let idle = std::mem::take(&mut free.idle);
            let (due, fresh) = idle.into_iter().partition(KeptConnection::is_due);
            free.idle = fresh;
            due
        };
        drop(due);
    }
}
