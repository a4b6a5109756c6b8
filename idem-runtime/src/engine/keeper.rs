//! The process-wide lease keeper: one thread of its own, with a Tokio
//! runtime of its own, renews every live lease of the process.
//!
//! Handlers run on the application's workers (single-threaded actix
//! workers); a handler that blocks its thread would starve a heartbeat
//! living there, and so would every handler sharing that worker. The keeper
//! runs elsewhere: a blocked worker keeps its leases. Renewals of one store
//! go out together, one [`Store::renew_many`] call per batch (one round trip
//! on Redis and Postgres), so the cost per request is a push on a list, not
//! a task and a timer.
//!
//! Handing a lease over wakes the keeper only when it would otherwise
//! sleep past the lease's first renewal (or when the list holds a batch's
//! worth). It never sleeps longer than a second, so under load leases that
//! end before their first renewal never wake it (with the default 30 s
//! lease), and a request costs no thread switch.
//!
//! Schedule: a lease is renewed a third of the way through, counted from
//! when its last confirmed claim or renewal was *sent*; a lease due soon is
//! renewed with the batch that goes now. A failed renewal is tried again
//! after a tenth of the lease (10 ms to 1 s). A lease whose deadline passes
//! unconfirmed is lost (see `lease.rs`).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::lease::LeaseState;
use crate::observe::store_call;
use crate::store::{Fence, Renewal, StoreError};

/// The keeper's inbox, started with the first lease.
static KEEPER: OnceLock<Keeper> = OnceLock::new();

/// The keeper's inbox and its runtime.
struct Keeper {
    inbox: Arc<Inbox>,
    runtime: tokio::runtime::Handle,
}

/// Leases handed over and not yet taken by the keeper, and when it means to
/// wake up next.
#[derive(Default)]
struct Inbox {
    state: Mutex<InboxState>,
    /// Wakes the keeper (a permit is kept if it is not waiting).
    wake_up: Notify,
    /// The keeper thread has ended (it panicked): nothing renews.
    stopped: AtomicBool,
}

/// Marks the inbox stopped when the keeper thread ends, however it ends.
struct Stopped(Arc<Inbox>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::Release);
    }
}

#[derive(Default)]
struct InboxState {
    leases: Vec<Arc<LeaseState>>,
    /// The keeper's next wake-up (at most a second ahead once it has run).
    wake: Option<Instant>,
}

/// Leases that wake the keeper whatever their schedule, so that leases
/// that ended are freed in batches.
const INBOX_BATCH: usize = 4096;

/// Longest the keeper sleeps, even with no lease to renew.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Hands a lease to the keeper, starting it on first use.
pub(crate) fn keep(lease: Arc<LeaseState>) {
    let keeper = KEEPER.get_or_init(start);
    if keeper.inbox.stopped.load(Ordering::Acquire) {
        // Nothing renews: the lease ends at its deadline and the
        // completion is refused by its fence.
        tracing::error!("the idempotency lease keeper is not running; this lease will not be renewed");
        return;
    }
    let due = first_renewal(&lease);
    let mut inbox = keeper.inbox.state.lock();
    inbox.leases.push(lease);
    let wake = inbox.wake.is_none_or(|wake| due < wake) || inbox.leases.len().is_multiple_of(INBOX_BATCH);
    if wake {
        // Later leases need not wake it again before it has looked.
        inbox.wake = Some(Instant::now());
    }
    drop(inbox);
    if wake {
        keeper.inbox.wake_up.notify_one();
    }
}

/// Runs `work` on the keeper's runtime, apart from the application's
/// workers: a completion still retrying when a worker stops goes on.
pub(crate) fn spawn(work: impl std::future::Future<Output = ()> + Send + 'static) {
    KEEPER.get_or_init(start).runtime.spawn(work);
}

/// Like [`spawn`], with a handle to await `work`'s output from anywhere.
/// Dropping the handle does not cancel `work`.
pub(crate) fn spawn_joined<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    KEEPER.get_or_init(start).runtime.spawn(work)
}

fn start() -> Keeper {
    let inbox = Arc::new(Inbox::default());
    let leases = Arc::clone(&inbox);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("idem-lease-keeper")
        .build()
        .expect("building the lease keeper's Tokio runtime");
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("idem-lease-keeper".into())
        .spawn(move || {
            let _stopped = Stopped(Arc::clone(&leases));
            runtime.block_on(run(leases));
        })
        .expect("starting the lease keeper thread");
    Keeper { inbox, runtime: handle }
}

/// A lease as the keeper tracks it.
struct Kept {
    state: Arc<LeaseState>,
    /// When to renew next.
    due: Instant,
    /// A renewal is on its way.
    renewing: bool,
}

/// When a lease is renewed next: a third of the way through.
fn first_renewal(state: &LeaseState) -> Instant {
    state.confirmed_sent() + state.lease / 3
}

impl Kept {
    fn new(state: Arc<LeaseState>) -> Self {
        let due = first_renewal(&state);
        Self { state, due, renewing: false }
    }

    /// How early a lease may be renewed to join a batch.
    fn slack(&self) -> Duration {
        self.state.lease / 6
    }

    fn after_failure(&self) -> Duration {
        (self.state.lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// The answer to one batch of renewals.
struct Answer {
    ids: Vec<u64>,
    sent: Instant,
    answered: Instant,
    fences: Result<Vec<Fence>, StoreError>,
}

async fn run(inbox: Arc<Inbox>) {
    let mut kept: HashMap<u64, Kept> = HashMap::new();
    let mut next_id = 0u64;
    let (answers_tx, mut answers) = unbounded_channel::<Answer>();
    let mut wake: Option<Instant> = None;
    loop {
        tokio::select! {
            () = inbox.wake_up.notified() => {}
            Some(answer) = answers.recv() => apply(&mut kept, answer),
            () = sleep_until(wake) => {}
        }
        // Taken under the lock, filed after it: handing over never waits
        // for the filing.
        let handed_over = std::mem::take(&mut inbox.state.lock().leases);
        for lease in handed_over {
            kept.insert(next_id, Kept::new(lease));
            next_id += 1;
        }
        let now = Instant::now();
        kept.retain(|_, k| {
            if k.state.is_done() {
                return false;
            }
            if now >= k.state.deadline() {
                // Lost whether or not a renewal is on its way: a late
                // confirmation cannot bring it back (see `lease.rs`).
                k.state.lose();
                if !k.renewing {
                    tracing::warn!(key = %k.state.key.hash_tag(), "a lease ran out before a renewal could be confirmed");
                }
                return false;
            }
            true
        });
        renew_due(&mut kept, now, &answers_tx);
        // Never later than a second from now, even with nothing kept: a
        // lease handed over meanwhile whose first renewal is due after that
        // (most: a third of 30 s by default) then needs no wake-up, and
        // under load the keeper looks once a second (or every batch)
        // instead of once per lease handed over after an empty pass.
        let idle = now + IDLE_LOOK;
        let soonest =
            kept.values().filter(|k| !k.renewing).map(|k| k.due).chain(kept.values().map(|k| k.state.deadline())).min();
        wake = Some(soonest.map_or(idle, |at| at.min(idle)));
        // Published under the inbox's lock: a lease handed over after this
        // is compared with this wake-up; one handed over before it is still
        // in the list, and is taken at once.
        let mut state = inbox.state.lock();
        if state.leases.is_empty() {
            state.wake = wake;
        } else {
            drop(state);
            inbox.wake_up.notify_one();
        }
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Sends one batch per store for every lease that is due (or nearly).
fn renew_due(kept: &mut HashMap<u64, Kept>, now: Instant, answers: &UnboundedSender<Answer>) {
    let mut batches: HashMap<*const (), Vec<u64>> = HashMap::new();
    for (&id, k) in kept.iter() {
        if !k.renewing && k.due <= now + k.slack() {
            batches.entry(Arc::as_ptr(&k.state.store).cast::<()>()).or_default().push(id);
        }
    }
    for ids in batches.into_values() {
        let mut renewals = Vec::with_capacity(ids.len());
        let mut timeout = Duration::MAX;
        for id in &ids {
            let k = kept.get_mut(id).expect("batched ids are kept");
            k.renewing = true;
            timeout = timeout.min(k.state.timeout);
            renewals.push(Renewal { key: k.state.key.clone(), token: k.state.token, lease: k.state.lease });
        }
        let store = Arc::clone(&kept[&ids[0]].state.store);
        let answers = answers.clone();
        tokio::spawn(async move {
            let sent = Instant::now();
            let call = AssertUnwindSafe(store_call(store.kind(), "renew", timeout, store.renew_many(&renewals)));
            // A store that panics must not leave its leases waiting for an
            // answer forever: that would stop their renewals for good.
            let fences = call.catch_unwind().await.unwrap_or_else(|_| {
                tracing::error!(store = store.kind(), "the store panicked while renewing leases");
                Err(StoreError::Corrupt { store: store.kind(), message: "renew_many panicked".into() })
            });
            let answered = Instant::now();
            // The keeper outlives every batch; a send can only fail at exit.
            let _ = answers.send(Answer { ids, sent, answered, fences });
        });
    }
}

fn apply(kept: &mut HashMap<u64, Kept>, answer: Answer) {
    let Answer { ids, sent, answered, fences } = answer;
    let fences = match fences {
        Ok(fences) if fences.len() == ids.len() => Some(fences),
        Ok(fences) => {
            tracing::error!(asked = ids.len(), answered = fences.len(), "the store answered a renewal batch wrongly");
            None
        }
        Err(_) => None, // logged by store_call
    };
    for (i, id) in ids.iter().enumerate() {
        let Some(k) = kept.get_mut(id) else { continue };
        k.renewing = false;
        match fences.as_ref().map(|f| f[i]).filter(|fence| *fence != Fence::Unknown) {
            Some(Fence::Held) => {
                k.state.confirm(sent, answered);
                k.due = k.state.confirmed_sent() + k.state.lease / 3;
            }
            Some(_) => {
                if !k.state.is_done() {
                    tracing::warn!(key = %k.state.key.hash_tag(), "the lease was lost while the handler ran");
                }
                k.state.lose();
            }
            None => k.due = answered + k.after_failure(),
        }
        if !k.state.is_held() {
            k.state.lose();
            kept.remove(id);
        }
    }
}
