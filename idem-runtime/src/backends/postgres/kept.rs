//! Connections a runtime keeps from one operation to the next.
//!
//! Through sqlx's pool, every statement costs more than its own round trip:
//! a connection given back is pinged, on a task spawned for it, before
//! anyone else may have it (and, unless `test_before_acquire` is off, once
//! more before it is handed out). And the pool's connections go to every
//! actix worker, while each is driven by the reactor of the runtime that
//! opened it: a worker using another's connection waits for a thread
//! switch on every reply.
//!
//! So each single-threaded runtime (an actix worker, the lease keeper) keeps
//! the connections its operations took from the pool, for [`HOLD`], and
//! hands them from one operation to the next directly: no ping, no task, no
//! thread switch. An operation that finds none free takes one the pool has
//! free, or an idle one another runtime keeps, or else waits for whichever
//! comes first: one of its runtime's coming back, or one a task of its
//! runtime takes from the pool for it (a task of its own, because sqlx
//! closes a connection whose acquiring is cut short while it pings or
//! opens it). On this project's 2-core benchmark machine the store served
//! about 1.4 times the replays and first executions this way (see the
//! CHANGELOG).
//!
//! A kept connection is still checked out of the pool, so the pool's bound
//! holds. It goes back to the pool when it is given back after [`HOLD`] from
//! when it was taken, or lies unused that long; at once when it is given back
//! while another runtime's operations or the store's own (a transactional
//! handler's transaction) wait for the pool and that one keeps at least two
//! fewer (the store's own wait keeps none), or one fewer once the connection
//! has had its [`TURN`] (so the holdings of those who wait level out, and a
//! pool smaller than the number of runtimes goes round them a turn at a
//! time: one that waits gets a connection when a busier one ends an
//! operation, or within a turn, not a quarter of a second later; and a
//! transaction that finds the pool full first gets one idle connection a
//! runtime keeps back to the pool); at once when it is given back while the
//! pool has none free and
//! no operation of its runtime waits (someone else may wait for the pool:
//! the sweeper, the application's own queries); at once when its operation
//! failed or was cut short (its state is unknown; the pool pings it or
//! closes it); and when its runtime shuts down or the store is dropped
//! (closed on a thread of its own, if that happens outside a Tokio runtime,
//! where sqlx cannot give it back). So what else waits for the pool waits at
//! most about twice [`HOLD`] for the connections a runtime keeps, as long as
//! that runtime runs: the connections of a runtime that is blocked (a
//! handler blocking its worker thread) stay with it until it runs again,
//! and are taken by others only when the pool cannot open another (each is
//! driven by its runtime's reactor: used elsewhere, it would wait for the
//! blocked one). Keeping pays off when the pool has room: once every
//! connection is kept or in use, one given back with nobody waiting on its
//! runtime goes to the pool. Outside a single-threaded runtime (a
//! multi-threaded one shares its reactor between its threads already),
//! operations use the pool as it is.
//!
//! Like any of sqlx's connections, one is driven by the runtime that opened
//! it: once that runtime has ended, its next statement fails (the
//! operation is unavailable, and the connection closed), wherever it is kept.
//! A runtime whose fetch waits for the pool while the runtime is blocked
//! stays counted as waiting until it runs again; the others give way to it
//! only while the pool has no connection idle (the pool hands one to the
//! blocked fetch, where it lies unused) and no room for another.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sqlx::PgConnection;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgPool, PgQueryResult, PgRow, Postgres};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

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

/// One runtime's part of one store.
struct Local {
    free: Mutex<Free>,
    /// What the others see of it.
    tally: Arc<Tally>,
    store: Weak<Kept>,
    /// The store's [`Kept::wanting`].
    wanting: Arc<AtomicUsize>,
}

/// How much of the pool a runtime has, read by the others without its lock.
#[derive(Default)]
struct Tally {
    /// Connections it keeps: idle, or in use by its operations.
    held: AtomicUsize,
    /// Its fetch waits for the pool.
    wants: AtomicBool,
}

/// A connection a runtime keeps: back to the pool when dropped.
struct KeptConnection {
    /// Always there but while it is dropped.
    connection: Option<PoolConnection<Postgres>>,
    /// When it was taken from the pool.
    taken: Instant,
    /// Its runtime's count.
    tally: Arc<Tally>,
}

/// What a runtime's waiting operation is handed: a connection, or the
/// pool's failure to give one.
type Handed = Result<KeptConnection, sqlx::Error>;

/// One runtime's kept connections of one store, and its operations waiting.
struct Free {
    /// The store's pool: a connection nobody here waits for goes back to
    /// it at once when it has none free.
    pool: PgPool,
    /// Not in use; the most recently given back last.
    idle: Vec<KeptConnection>,
    /// Operations of this runtime waiting for a connection, oldest first.
    waiting: VecDeque<oneshot::Sender<Handed>>,
    /// A task takes connections from the pool for those waiting.
    fetching: bool,
}

/// Where this thread finds a runtime's [`Local`] for a store. Weak: the task
/// that [`Kept::local`] spawns holds it, so that its connections are
/// dropped on their runtime (giving one back to the pool needs a runtime),
/// never in a thread-local destructor.
struct Entry {
    store: Weak<Kept>,
    runtime: tokio::runtime::Id,
    local: Weak<Local>,
}

thread_local! {
    static ENTRIES: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
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
        let (fresh, stale) = take(&mut local.free.lock());
        // Back to the pool, outside the lock.
        drop(stale);
        if let Some(connection) = fresh {
            return Ok(Held::new(Connection::Kept(connection, local)));
        }
        if let Some(connection) = self.pool.try_acquire() {
            return Ok(Held::new(Connection::Kept(KeptConnection::taken(connection, &local.tally), local)));
        }
        if self.pool.size() >= self.pool.options().get_max_connections()
            && let Some(connection) = self.take_elsewhere(&local)
        {
            return Ok(Held::new(Connection::Kept(connection, local)));
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

impl KeptConnection {
    fn taken(connection: PoolConnection<Postgres>, tally: &Arc<Tally>) -> Self {
        tally.held.fetch_add(1, Ordering::AcqRel);
        Self { connection: Some(connection), taken: Instant::now(), tally: Arc::clone(tally) }
    }

    /// Kept by the runtime of `tally` from now on.
    fn moved_to(mut self, tally: &Arc<Tally>) -> Self {
        tally.held.fetch_add(1, Ordering::AcqRel);
        let left = std::mem::replace(&mut self.tally, Arc::clone(tally));
        left.held.fetch_sub(1, Ordering::AcqRel);
        self
    }

    fn connection(&mut self) -> &mut PoolConnection<Postgres> {
        self.connection.as_mut().expect("a kept connection is there until it is dropped")
    }

    fn is_due(&self) -> bool {
        self.taken.elapsed() >= HOLD
    }
}

/// The most recently given back of `free`'s idle connections, unless it is
/// due back to the pool; then it and every other are (to be dropped by the
/// caller, after unlocking).
fn take(free: &mut Free) -> (Option<KeptConnection>, Vec<KeptConnection>) {
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
fn give_back(local: &Local, connection: KeptConnection) {
    // Cheap first: does anyone wait for the pool but this runtime?
    let others_want = local.wanting.load(Ordering::Acquire) > usize::from(local.tally.wants.load(Ordering::Acquire));
    if others_want && local.store.upgrade().is_some_and(|store| store.gives_way(&local.tally, &connection)) {
        return;
    }
    keep(local, connection);
}

/// Hands `connection` to the oldest operation of its runtime waiting for
/// one, or puts it with the idle ones; back to the pool if it is due.
fn keep(local: &Local, mut connection: KeptConnection) {
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
fn again(error: &sqlx::Error) -> sqlx::Error {
    match error {
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        other => sqlx::Error::Io(std::io::Error::other(other.to_string())),
    }
}

/// Counts a wait for the pool while it lasts (dropped with it when its task
/// ends, however).
struct Wants<'a> {
    wanting: &'a AtomicUsize,
    tally: Option<&'a Tally>,
}

impl<'a> Wants<'a> {
    fn new(wanting: &'a AtomicUsize, tally: Option<&'a Tally>) -> Self {
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
async fn fetch(pool: PgPool, local: Arc<Local>) {
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
async fn tend(store: Weak<Kept>, local: Arc<Local>) {
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
