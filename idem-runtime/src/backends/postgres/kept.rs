//! Connections each runtime keeps from one operation to the next.
//!
//! **Why.** Through sqlx's pool, every statement costs more than its round
//! trip: a connection given back is pinged on a task of its own before
//! anyone may have it, and a connection opened by one actix worker is
//! driven by that worker's reactor, so another worker using it waits for a
//! thread switch on every reply. So each single-threaded runtime (an actix
//! worker, the runtime's own thread) keeps the connections its operations
//! took, for [`HOLD`], and hands them from one operation to the next: no
//! ping, no task, no thread switch. A multi-threaded runtime uses the pool
//! as it is.
//!
//! **Getting one.** An operation takes, in this order: one its runtime
//! keeps idle; one the pool has free; an idle one another runtime keeps;
//! else it waits for whichever comes first, one of its runtime's coming
//! back or one a task of its runtime takes from the pool for it
//! (`per_runtime::fetch`; a task, because sqlx closes a connection whose
//! acquiring is cut short).
//!
//! **Giving one back.** A kept connection stays checked out of the pool, so
//! the pool's bound holds. It goes back to the pool:
//!
//! - [`HOLD`] after it was taken, or after lying idle that long;
//! - at once, when others wait for the pool (another runtime, or a
//!   transaction of the store's own) and keep at least two fewer, or one
//!   fewer once it has had its [`TURN`]: the holdings of those who wait
//!   level out, and a pool smaller than the number of runtimes goes round
//!   them a turn at a time ([`Kept::gives_way`]);
//! - at once, when the pool has none free and nobody of its runtime waits
//!   (someone else may: the sweeper, the application's queries);
//! - at once, when its operation failed or was cut short (its state is
//!   unknown: the pool checks it or closes it);
//! - when its runtime ends or the store is dropped (closed on a thread of
//!   its own outside a Tokio runtime, where sqlx cannot give it back).
//!
//! So whatever else uses the pool waits at most about twice [`HOLD`] for a
//! running runtime's connections. A blocked runtime (a handler blocking its
//! worker) keeps its connections until it runs again; others take them
//! only when the pool cannot open another, since each is driven by its own
//! runtime's reactor. A connection whose runtime has ended fails its next
//! statement (the operation is unavailable, the connection closed).
//!
//! This file holds the store's side ([`Kept`]: the operations, and choosing
//! whom a connection goes to) and an operation's connection ([`Held`]);
//! `per_runtime.rs` holds a runtime's side.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use sqlx::PgConnection;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgPool, PgQueryResult, PgRow, Postgres};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use self::per_runtime::{ENTRIES, Entry, Free, KeptConnection, Local, Tally, Wants, fetch, give_back, take, tend};

mod per_runtime;

/// How long a runtime keeps a connection it took from the pool.
pub(super) const HOLD: Duration = Duration::from_millis(250);

/// How long a runtime keeps a connection, at least, while another that
/// keeps one fewer waits for the pool.
const TURN: Duration = Duration::from_millis(20);

/// A runtime's queue of waiting operations is cleared of those that left
/// when it grows this long.
const PRUNE_WAITING: usize = 64;

/// A statement with its arguments.
type Query<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// What a store's runtimes keep their connections from.
pub(super) struct Kept {
    pool: PgPool,
    /// Every runtime's [`Local`]: one per runtime, whichever of its threads
    /// asks (a `block_on` from another thread finds it here), and for the
    /// others to take idle connections from.
    runtimes: Mutex<Vec<(tokio::runtime::Id, Weak<Local>)>>,
    /// How many wait for the pool: each runtime's fetch while it waits, and
    /// the store's own waits (a transaction's connection).
    wanting: Arc<AtomicUsize>,
}

/// The connection of one operation: back to its runtime when the operation
/// [`succeeded`](Self::succeeded), else back to the pool.
pub(super) struct Held {
    connection: Option<Connection>,
    succeeded: bool,
}

enum Connection {
    /// Kept by the runtime whose [`Local`] this is.
    Kept(KeptConnection, Arc<Local>),
    /// The pool's (outside a single-threaded runtime).
    Pooled(PoolConnection<Postgres>),
}

impl Kept {
    pub(super) fn new(pool: PgPool) -> Arc<Self> {
        Arc::new(Self { pool, runtimes: Mutex::default(), wanting: Arc::default() })
    }

    /// Runs `query` on a connection of [`Kept::acquire`].
    pub(super) async fn execute(self: &Arc<Self>, query: Query<'_>) -> Result<PgQueryResult, sqlx::Error> {
        let mut held = self.acquire().await?;
        let done = query.execute(held.connection()).await?;
        held.succeeded();
        Ok(done)
    }

    /// Runs `query` on a connection of [`Kept::acquire`]: its one row.
    pub(super) async fn fetch_one(self: &Arc<Self>, query: Query<'_>) -> Result<PgRow, sqlx::Error> {
        let mut held = self.acquire().await?;
        let row = query.fetch_one(held.connection()).await?;
        held.succeeded();
        Ok(row)
    }

    /// Runs `query` on a connection of [`Kept::acquire`]: its row, if any.
    pub(super) async fn fetch_optional(self: &Arc<Self>, query: Query<'_>) -> Result<Option<PgRow>, sqlx::Error> {
        let mut held = self.acquire().await?;
        let row = query.fetch_optional(held.connection()).await?;
        held.succeeded();
        Ok(row)
    }

    /// A connection for one operation: one this runtime keeps, else one the
    /// pool has free, else (only when the pool is full) an idle one another
    /// runtime keeps, else whichever comes first of one given back on this
    /// runtime and one this runtime's fetch takes from the pool.
    pub(super) async fn acquire(self: &Arc<Self>) -> Result<Held, sqlx::Error> {
        let Some(local) = self.local() else {
            return Ok(Held::new(Connection::Pooled(self.pool.acquire().await?)));
        };
        if let Some(held) = self.at_once(&local) {
            return Ok(held);
        }
        let (send, receive) = oneshot::channel();
        {
            let mut list = local.free.lock();
            if list.waiting.len() >= PRUNE_WAITING {
                // Operations that were cut short while they waited.
                list.waiting.retain(|waiting| !waiting.is_closed());
            }
            list.waiting.push_back(send);
            if !list.fetching {
                list.fetching = true;
                drop(list);
                // A task of its own: sqlx's acquire must not be cut short
                // (a connection it was pinging or opening would be closed).
                drop(tokio::spawn(fetch(self.pool.clone(), Arc::clone(&local))));
            }
        }
        let connection = match receive.await {
            Ok(handed) => handed?,
            // Its sender went with the free list: the pool, then.
            Err(_) => KeptConnection::taken(self.pool.acquire().await?, &local.tally),
        };
        Ok(Held::new(Connection::Kept(connection, local)))
    }

    /// A connection for one operation if there is one at once, as
    /// [`Kept::acquire`] takes it before it waits (outside a
    /// single-threaded runtime: one the pool has idle); else none, without
    /// waiting for one, nor opening one.
    pub(super) fn try_acquire(self: &Arc<Self>) -> Option<Held> {
        match self.local() {
            Some(local) => self.at_once(&local),
            None => self.pool.try_acquire().map(|connection| Held::new(Connection::Pooled(connection))),
        }
    }

    /// One this runtime keeps idle, else one the pool has idle, else (only
    /// when the pool is full) an idle one another runtime keeps.
    fn at_once(&self, local: &Arc<Local>) -> Option<Held> {
        let (fresh, stale) = take(&mut local.free.lock());
        // Back to the pool, outside the lock.
        drop(stale);
        if let Some(connection) = fresh {
            return Some(Held::new(Connection::Kept(connection, Arc::clone(local))));
        }
        if let Some(connection) = self.pool.try_acquire() {
            return Some(Held::new(Connection::Kept(
                KeptConnection::taken(connection, &local.tally),
                Arc::clone(local),
            )));
        }
        if self.pool.size() >= self.pool.options().get_max_connections()
            && let Some(connection) = self.take_elsewhere(local)
        {
            return Some(Held::new(Connection::Kept(connection, Arc::clone(local))));
        }
        None
    }

    /// Runs `waits`, a wait of the store's own for the pool (a
    /// transaction's connection). When the pool has none free, one idle
    /// connection a runtime keeps goes back to it first, and the wait is
    /// counted meanwhile: the runtimes give theirs way to it (see
    /// [`Kept::gives_way`]).
    pub(super) fn waiting_for_pool<F: Future>(self: &Arc<Self>, waits: F) -> impl Future<Output = F::Output> + use<F> {
        let store = Arc::clone(self);
        async move {
            let full = store.pool.size() >= store.pool.options().get_max_connections() && store.pool.num_idle() == 0;
            let _wants = full.then(|| Wants::new(&store.wanting, None));
            if full {
                drop(store.idle_elsewhere());
            }
            waits.await
        }
    }

    /// Whether the runtime of `tally` should give `connection` back to the
    /// pool, for someone else waiting for it: one that keeps at least two
    /// fewer connections (a wait of the store's own keeps none), or one
    /// fewer once `connection` has had its [`TURN`]. So the holdings of
    /// those who wait level out, and a pool smaller than the number of its
    /// runtimes goes round them a turn at a time.
    fn gives_way(&self, tally: &Arc<Tally>, connection: &KeptConnection) -> bool {
        // Those waiting are not short of connections while the pool has
        // one idle (handed to a waiter whose runtime is blocked, say) or
        // room for another.
        if self.pool.num_idle() > 0 || self.pool.size() < self.pool.options().get_max_connections() {
            return false;
        }
        let wanting = self.wanting.load(Ordering::Acquire);
        let (mut runtimes_wanting, mut neediest) = (0, None::<usize>);
        for (_, other) in self.runtimes.lock().iter() {
            let Some(other) = other.upgrade() else { continue };
            if !other.tally.wants.load(Ordering::Acquire) {
                continue;
            }
            runtimes_wanting += 1;
            if !Arc::ptr_eq(&other.tally, tally) {
                let held = other.tally.held.load(Ordering::Acquire);
                neediest = Some(neediest.map_or(held, |least| least.min(held)));
            }
        }
        // A runtime's wait is flagged before it is counted, and unflagged
        // after: a wait counted beyond the flagged ones is the store's own.
        if wanting > runtimes_wanting {
            neediest = Some(0);
        }
        let Some(neediest) = neediest else { return false };
        let held = tally.held.load(Ordering::Acquire);
        held >= neediest + 2 || (held > neediest && connection.taken.elapsed() >= TURN)
    }

    /// An idle connection of the runtime that keeps the most, for the
    /// caller to drop back into the pool.
    fn idle_elsewhere(&self) -> Option<KeptConnection> {
        let runtimes = self.runtimes.lock();
        let most = runtimes
            .iter()
            .filter_map(|(_, other)| other.upgrade())
            .filter(|other| !other.free.lock().idle.is_empty())
            .max_by_key(|other| other.tally.held.load(Ordering::Acquire))?;
        let idle = most.free.lock().idle.pop();
        drop(runtimes);
        idle
    }

    /// An idle connection another runtime keeps: driven by that runtime, so
    /// slower here, but at once. Kept here from now on, until it is due
    /// back to the pool. Only when the pool cannot open another: a
    /// connection is driven by its runtime, and one whose runtime is
    /// blocked (a handler blocking its worker) would hold this operation up.
    fn take_elsewhere(&self, local: &Arc<Local>) -> Option<KeptConnection> {
        // Under the list's lock, then each other runtime's in turn (never
        // the other way round); connections due back are dropped after.
        let mut due = Vec::new();
        let found = self.runtimes.lock().iter().filter_map(|(_, other)| other.upgrade()).find_map(|other| {
            if Arc::ptr_eq(&other, local) {
                return None;
            }
            let (fresh, stale) = take(&mut other.free.lock());
            due.extend(stale);
            fresh
        });
        drop(due);
        found.map(|connection| connection.moved_to(&local.tally))
    }

    /// This runtime's [`Local`] for the store, made now if there is none;
    /// none outside a single-threaded runtime.
    fn local(self: &Arc<Self>) -> Option<Arc<Local>> {
        let handle = Handle::try_current().ok()?;
        if handle.runtime_flavor() != RuntimeFlavor::CurrentThread {
            return None;
        }
        let runtime = handle.id();
        ENTRIES
            .try_with(|entries| {
                let mut entries = entries.borrow_mut();
                let serves = |e: &Entry| e.runtime == runtime && std::ptr::eq(e.store.as_ptr(), Arc::as_ptr(self));
                if let Some(local) = entries.iter().find(|e| serves(e)).and_then(|e| e.local.upgrade()) {
                    return local;
                }
                entries.retain(|e| !serves(e) && e.store.strong_count() > 0 && e.local.strong_count() > 0);
                let mut runtimes = self.runtimes.lock();
                runtimes.retain(|(_, other)| other.strong_count() > 0);
                if let Some(local) =
                    runtimes.iter().find(|(id, _)| *id == runtime).and_then(|(_, local)| local.upgrade())
                {
                    entries.push(Entry { store: Arc::downgrade(self), runtime, local: Arc::downgrade(&local) });
                    return local;
                }
                let local = Arc::new(Local {
                    free: Mutex::new(Free {
                        pool: self.pool.clone(),
                        idle: Vec::new(),
                        waiting: VecDeque::new(),
                        fetching: false,
                    }),
                    tally: Arc::default(),
                    store: Arc::downgrade(self),
                    wanting: Arc::clone(&self.wanting),
                });
                entries.push(Entry { store: Arc::downgrade(self), runtime, local: Arc::downgrade(&local) });
                runtimes.push((runtime, Arc::downgrade(&local)));
                drop(runtimes);
                drop(handle.spawn(tend(Arc::downgrade(self), Arc::clone(&local))));
                local
            })
            .ok()
    }
}

impl Held {
    fn new(connection: Connection) -> Self {
        Self { connection: Some(connection), succeeded: false }
    }

    /// The connection.
    pub(super) fn connection(&mut self) -> &mut PgConnection {
        match self.connection.as_mut().expect("a held connection is there until it is dropped") {
            Connection::Kept(kept, _) => kept.connection(),
            Connection::Pooled(pooled) => pooled,
        }
    }

    /// The operation is done, and its connection fit for the next one.
    pub(super) fn succeeded(&mut self) {
        self.succeeded = true;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Failed or cut short, a connection goes back to the pool, which
        // checks it.
        if let Some(Connection::Kept(connection, local)) = self.connection.take()
            && self.succeeded
        {
            give_back(&local, connection);
        }
    }
}
