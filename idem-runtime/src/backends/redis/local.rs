//! A connection per thread, for a store on a single server.
//!
//! The redis crate's multiplexed connection is driven by a task of its own,
//! on the runtime that opened it. Shared by every actix worker, it lives on
//! one thread (the one that called [`RedisStore::connect`]): each command
//! then costs two thread switches, the worker handing it to the driver's
//! thread and that thread waking the worker with the reply. On this
//! project's 2-core benchmark machine, a hand-written handler served about
//! 1.1 times the replays with a connection per worker (`scripts/bench`,
//! `hand-redis-per-worker`). So each thread that uses the store opens its own
//! connection, on its own runtime, the first time it needs one; the
//! driver then runs on the worker that waits for the reply.
//!
//! The connection is opened in the background: until it is ready, and
//! whenever it cannot be opened, the thread uses the store's shared
//! connection (which reconnects by itself), so opening it never delays a
//! request. A failed opening is tried again a second later. Like the shared
//! connection, a worker's notices a server restart on its next command,
//! which fails (503 before a handler runs) while it reconnects: after a
//! restart, the first command of each worker may fail.
//!
//! The connection belongs to the runtime that opened it, not only to the
//! thread: its driver runs only while that runtime does. So it is used only
//! from that runtime (by its id: another runtime started on the same thread
//! gets its own), and the task that opened it holds it until that runtime
//! shuts down, the store is dropped, or the thread forgets it (it ends, or
//! opens another). Only single-threaded runtimes (actix's workers, the lease
//! keeper's) get one: a multi-threaded runtime drives the shared connection
//! on its own threads already. A thread with no runtime, and a cluster (its
//! client keeps a connection per node already), use the shared connection.
//!
//! Never block a worker thread on a store call (`block_on` in a handler):
//! the reply waits for the driver, which runs on that very thread.
//!
//! [`RedisStore::connect`]: super::RedisStore::connect

use std::cell::RefCell;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::runtime::{Handle, RuntimeFlavor};

use super::connection::RedisConnection;

/// Pause before a thread tries again to open its connection.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a store opens its threads' connections from.
pub(super) struct LocalConnections {
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// Dropped with the store: ends every task that holds one of its
    /// connections, on every runtime.
    alive: tokio::sync::watch::Sender<()>,
}

/// A connection being opened, or opened, for one thread: held by the task
/// that opened it only, so that it closes when that task ends.
#[derive(Default)]
struct Opening {
    connection: OnceLock<RedisConnection>,
}

/// One runtime's connection to one store's server.
struct Local {
    /// The store's [`LocalConnections`]; dead once the store is dropped.
    store: Weak<LocalConnections>,
    /// The runtime that opened it.
    runtime: tokio::runtime::Id,
    /// Dead once the task that opened the connection is gone (its runtime
    /// shut down, the store dropped, this entry dropped, or the opening
    /// failed).
    opening: Weak<Opening>,
    /// When the opening failed.
    failed_at: Arc<Mutex<Option<Instant>>>,
    /// Dropped with the entry (forgotten, or this thread ending): ends the
    /// task, and the connection with it.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Local {
    fn serves(&self, store: &Arc<LocalConnections>, runtime: tokio::runtime::Id) -> bool {
        self.runtime == runtime && std::ptr::eq(self.store.as_ptr(), Arc::as_ptr(store))
    }
}

thread_local! {
    /// This thread's connections, one per store (most processes have one).
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

/// What this thread has for a store.
enum Found {
    Connection(RedisConnection),
    /// Being opened, or failed a moment ago: use the shared connection.
    NotYet,
    /// Nothing usable: open one.
    Nothing,
}

impl LocalConnections {
    pub(super) fn new(client: redis::Client, config: ConnectionManagerConfig) -> Arc<Self> {
        Arc::new(Self { client, config, alive: tokio::sync::watch::Sender::new(()) })
    }

    /// This runtime's connection to the store's server, or `shared` while
    /// it is being opened (the opening starts now if there is none), when it
    /// cannot be opened, or outside a single-threaded runtime.
    pub(super) fn here(self: &Arc<Self>, shared: &RedisConnection) -> RedisConnection {
        let Ok(handle) = Handle::try_current() else { return shared.clone() };
        if handle.runtime_flavor() != RuntimeFlavor::CurrentThread {
            return shared.clone();
        }
        let runtime = handle.id();
        match self.find(runtime) {
            Some(Found::Connection(connection)) => connection,
            Some(Found::NotYet) | None => shared.clone(),
            Some(Found::Nothing) => {
                self.open(&handle);
                shared.clone()
            }
        }
    }

    /// `None` when this thread's locals are gone (a TLS destructor).
    fn find(self: &Arc<Self>, runtime: tokio::runtime::Id) -> Option<Found> {
        LOCAL
            .try_with(|local| {
                let local = local.borrow();
                let Some(entry) = local.iter().find(|l| l.serves(self, runtime)) else {
                    return Found::Nothing;
                };
                if let Some(opening) = entry.opening.upgrade() {
                    return match opening.connection.get() {
                        Some(connection) => Found::Connection(connection.clone()),
                        None => Found::NotYet,
                    };
                }
                match *entry.failed_at.lock() {
                    Some(at) if at.elapsed() < RETRY_AFTER => Found::NotYet,
                    _ => Found::Nothing,
                }
            })
            .ok()
    }

    /// Starts opening a connection for the runtime of `handle` (this
    /// thread's).
    fn open(self: &Arc<Self>, handle: &Handle) {
        let opening = Arc::new(Opening::default());
        let failed_at = Arc::new(Mutex::new(None));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = handle.id();
        let pushed = LOCAL.try_with(|local| {
            let mut local = local.borrow_mut();
            local.retain(|l| {
                !l.serves(self, runtime)
                    && l.store.strong_count() > 0
                    && (l.opening.strong_count() > 0 || l.failed_at.lock().is_some_and(|at| at.elapsed() < RETRY_AFTER))
            });
            local.push(Local {
                store: Arc::downgrade(self),
                runtime,
                opening: Arc::downgrade(&opening),
                failed_at: Arc::clone(&failed_at),
                _stop: stop,
            });
        });
        if pushed.is_err() {
            return;
        }
        let (client, config) = (self.client.clone(), self.config.clone());
        let mut alive = self.alive.subscribe();
        drop(handle.spawn(async move {
            match ConnectionManager::new_with_config(client, config).await {
                Ok(manager) => {
                    let _ = opening.connection.set(RedisConnection::from(manager));
                    // Held while this runtime runs, the store lives and
                    // this thread keeps its entry.
                    tokio::select! {
                        _ = stopped => {}
                        _ = alive.changed() => {}
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "could not open this thread's Redis connection; using the shared one");
                    *failed_at.lock() = Some(Instant::now());
                }
            }
        }));
    }
}
