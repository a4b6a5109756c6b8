//! The process-wide lease keeper: a loop on the runtime's own thread
//! (`background.rs`) renews every live lease of the process.
//!
//! Handlers run on the application's workers (single-threaded actix
//! workers); a handler that blocks its thread would starve a heartbeat
//! living there, and so would every handler sharing that worker. The keeper
//! runs elsewhere: a blocked worker keeps its leases. Renewals of one store
//! go out together, one [`Store::renew_many`] call per batch (one round trip
//! on Redis and Postgres), so the cost per request is a place in a list,
//! not a task and a timer.
//!
//! The list holds the live leases only: the holder takes its lease out when
//! it is done, so a lease is freed on the thread that made it. (Freed by the
//! keeper, thousands at a time, they made the workers wait for their own
//! allocator.) The keeper looks through the list when it wakes up, and
//! holds a lease of its own only while a renewal is on its way (a lease
//! whose holder finishes meanwhile is freed by the keeper: only leases
//! that live long enough to be renewed).
//!
//! The list is split in a few, each behind a lock of its own, and a
//! worker thread hands its leases to one of them: two workers taking and
//! giving back leases at the same time do not pass one lock, and the
//! memory it guards, back and forth between their cores.
//!
//! Handing a lease over wakes the keeper only when it would otherwise
//! sleep past the lease's first renewal. It never sleeps longer than a
//! second, so under load leases that end before their first renewal never
//! wake it (with the default 30 s lease), and a request costs no thread
//! switch.
//!
//! Schedule: a lease is renewed a third of the way through, counted from
//! when its last confirmed claim or renewal was *sent*; a lease due soon is
//! renewed with the batch that goes now. A failed renewal is tried again a
//! tenth of the lease (10 ms to 1 s) after it was sent: at once if it took
//! that long to fail (a timeout), so that the last third of the lease is
//! left for the retry. A lease whose deadline passes unconfirmed is lapsed,
//! not abandoned: it is renewed on at that pace while its execution runs,
//! until the store answers that the record still holds its token (confirmed
//! again) or does not (lost; see `lease.rs`).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::lease::LeaseState;
use crate::background;
use crate::observe::store_call;
use crate::scope::StorageKey;
use crate::store::{Fence, FencingToken, Renewal, Store, StoreError};

/// The keeper's list of leases, started with the first lease.
static KEEPER: OnceLock<Arc<Shared>> = OnceLock::new();

/// What the holders and the keeper share.
#[derive(Default)]
struct Shared {
    /// The list, in parts (see the module's docs).
    lists: [List; LISTS],
    /// Wakes the keeper (a permit is kept if it is not waiting).
    wake_up: Notify,
}

/// Ends the runtime's thread when the keeper's loop ends (it only ends by
/// a panic): claims are refused from then on, since nothing renews.
struct StopsTheThread;

impl Drop for StopsTheThread {
    fn drop(&mut self) {
        background::stop();
    }
}

/// Parts of the list of leases.
const LISTS: usize = 8;

/// One part of the list, alone on its cache lines.
#[derive(Default)]
#[repr(align(128))]
struct List(Mutex<Leases>);

/// The part of the list the current thread hands its leases to.
fn own_list() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static OWN: usize = NEXT.fetch_add(1, Ordering::Relaxed) % LISTS;
    }
    OWN.with(|own| *own)
}

/// Live leases of the process (those of one part of the list), and when
/// the keeper means to wake up next as of its last look at them.
#[derive(Default)]
struct Leases {
    /// A lease per slot, from [`Lease::hold`] until the lease is dropped.
    slots: Vec<Option<Arc<LeaseState>>>,
    /// Empty slots, taken before the list grows.
    vacant: Vec<usize>,
    /// The keeper's next wake-up (at most a second ahead once it has run).
    wake: Option<Instant>,
}

/// A lease's place in the keeper's list (its part, and its slot there).
struct Slot {
    list: usize,
    slot: usize,
}

/// Longest the keeper sleeps, even with no lease to renew.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// The keeper, its loop started on the runtime's thread on first use.
fn keeper() -> &'static Arc<Shared> {
    KEEPER.get_or_init(|| {
        let shared = Arc::new(Shared::default());
        let looping = Arc::clone(&shared);
        background::spawn(async move {
            let _stops = StopsTheThread;
            run(looping).await;
        });
        shared
    })
}

/// Whether the keeper runs (starting it on first use). Claims are refused
/// while it does not: nothing would renew their leases.
pub(crate) fn is_running() -> bool {
    keeper();
    background::is_running()
}

/// The holder's side of a lease: renewed by the process-wide keeper until
/// dropped.
pub(crate) struct Lease {
    state: Arc<LeaseState>,
    /// Its place among the keeper's leases (none if the keeper stopped).
    slot: Option<Slot>,
}

impl Lease {
    /// Starts keeping the lease of a claim that was sent at `sent` and won
    /// (unless the keeper has stopped: the lease then lapses at its
    /// deadline).
    pub(crate) fn hold(
        store: Arc<dyn Store>,
        key: StorageKey,
        token: FencingToken,
        lease: Duration,
        timeout: Duration,
        sent: Instant,
    ) -> Self {
        let state = Arc::new(LeaseState::new(store, key, token, lease, timeout, sent));
        if !is_running() {
            // Nothing renews. (Claims are refused once the keeper has
            // stopped; this is one that was sent just before.)
            tracing::error!("the idempotency lease keeper is not running; this lease will not be renewed");
            return Self { state, slot: None };
        }
        let (slot, _) = keeper().hand_over(own_list(), &state);
        Self { state, slot: Some(slot) }
    }

    /// The lease's state, which the keeper shares.
    pub(crate) fn state(&self) -> &LeaseState {
        &self.state
    }

    /// The lease, shared: for the execution's durable steps, which record
    /// with its token while it is held.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn shared(&self) -> Arc<LeaseState> {
        Arc::clone(&self.state)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.state.finish();
        // Out of the keeper's list here, so that the lease is freed on this
        // thread, not on the keeper's (which would contend for this
        // thread's allocator).
        let (Some(slot), Some(keeper)) = (self.slot.take(), KEEPER.get()) else { return };
        let lease = {
            let mut leases = keeper.lists[slot.list].0.lock();
            let lease = leases.slots[slot.slot].take();
            leases.vacant.push(slot.slot);
            lease
        };
        drop(lease);
    }
}

/// How early a lease may be renewed to join a batch.
fn slack(lease: &LeaseState) -> Duration {
    lease.lease / 6
}

/// When a failed renewal is tried again.
fn after_failure(lease: &LeaseState) -> Duration {
    (lease.lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// What a batch whose renewal panicked is answered.
const PANICKED: &str = "renew_many panicked";

/// The answer to one batch of renewals.
struct Answer {
    leases: Vec<Arc<LeaseState>>,
    sent: Instant,
    fences: Result<Vec<Fence>, StoreError>,
}

async fn run(shared: Arc<Shared>) {
    let (answers_tx, mut answers) = unbounded_channel::<Answer>();
    let mut wake: Option<Instant> = None;
    loop {
        tokio::select! {
            () = shared.wake_up.notified() => {}
            Some(answer) = answers.recv() => apply(answer),
            () = sleep_until(wake) => {}
        }
        let Look { soonest, due, ran_out } = shared.look(Instant::now());
        // Logged outside the lock, which every claim and completion takes.
        for lease in ran_out {
            tracing::warn!(
                key = %lease.key.hash_tag(),
                "a lease ran out before a renewal could be confirmed; renewing it on while its execution runs"
            );
        }
        wake = Some(soonest);
        renew(due, &answers_tx);
    }
}

/// What one look through the list found.
struct Look {
    /// When to look again.
    soonest: Instant,
    /// Leases to renew now (marked as being renewed).
    due: Vec<Arc<LeaseState>>,
    /// Leases whose deadline just passed unconfirmed (lapsed).
    ran_out: Vec<Arc<LeaseState>>,
}

impl Shared {
    /// Puts `lease` in part `list` of the list, and wakes the keeper if it
    /// would otherwise sleep past the lease's first renewal (returning
    /// whether it did).
    fn hand_over(&self, list: usize, lease: &Arc<LeaseState>) -> (Slot, bool) {
        let due = lease.next_renewal();
        let mut leases = self.lists[list].0.lock();
        let slot = match leases.vacant.pop() {
            Some(slot) => {
                leases.slots[slot] = Some(Arc::clone(lease));
                slot
            }
            None => {
                leases.slots.push(Some(Arc::clone(lease)));
                leases.slots.len() - 1
            }
        };
        let wake = leases.wake.is_none_or(|wake| due < wake);
        if wake {
            // Later leases need not wake it again before it has looked.
            leases.wake = Some(Instant::now());
        }
        drop(leases);
        if wake {
            self.wake_up.notify_one();
        }
        (Slot { list, slot }, wake)
    }

    /// One look through every part of the list at `now`.
    fn look(&self, now: Instant) -> Look {
        // Never later than a second from now, even with nothing kept: a
        // lease handed over meanwhile whose first renewal is due after that
        // (most: a third of 30 s by default) then needs no wake-up, and
        // under load the keeper looks once a second instead of once per
        // lease handed over after an empty pass.
        let mut soonest = now + IDLE_LOOK;
        let mut due = Vec::new();
        let mut ran_out = Vec::new();
        // One look at each part under its lock, short (the live leases
        // only), so that a lease handed over before it is in it, and one
        // handed over after it compares with the wake-up found so far: no
        // earlier than the one this look ends with, so a lease due before
        // that wakes the keeper, and one due after finds it awake by then.
        for list in &self.lists {
            let mut leases = list.0.lock();
            for lease in leases.slots.iter().flatten() {
                if lease.is_done() || lease.is_lost() {
                    continue;
                }
                let mut plan = lease.plan.lock();
                let deadline = lease.deadline();
                if now >= deadline {
                    // Lapsed, not lost: the record holds the token until
                    // another claim takes the key over, so it is renewed on
                    // (at the pace of a failed renewal) until the store
                    // answers either way (see `lease.rs`).
                    if !plan.lapsed {
                        plan.lapsed = true;
                        ran_out.push(Arc::clone(lease));
                    }
                    if !plan.renewing && plan.due <= now {
                        plan.renewing = true;
                        due.push(Arc::clone(lease));
                    }
                    if !plan.renewing {
                        soonest = soonest.min(plan.due);
                    }
                    continue;
                }
                // A retry after a failure waits its whole pause: with the
                // slack (a sixth of the lease, more than the pause) it would
                // go again at once, in a loop for as long as the store is down.
                let early = if plan.retrying { Duration::ZERO } else { slack(lease) };
                if !plan.renewing && plan.due <= now + early {
                    plan.renewing = true;
                    due.push(Arc::clone(lease));
                }
                if !plan.renewing {
                    soonest = soonest.min(plan.due);
                }
                soonest = soonest.min(deadline);
            }
            leases.wake = Some(soonest);
        }
        Look { soonest, due, ran_out }
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Sends one batch per store of the leases that are due (or nearly).
fn renew(due: Vec<Arc<LeaseState>>, answers: &UnboundedSender<Answer>) {
    let mut batches: HashMap<*const (), Vec<Arc<LeaseState>>> = HashMap::new();
    for lease in due {
        batches.entry(Arc::as_ptr(&lease.store).cast::<()>()).or_default().push(lease);
    }
    for leases in batches.into_values() {
        let timeout = leases.iter().map(|lease| lease.timeout).min().unwrap_or(Duration::MAX);
        let renewals: Vec<Renewal> = leases
            .iter()
            .map(|lease| Renewal { key: lease.key.clone(), token: lease.token, lease: lease.lease })
            .collect();
        let store = Arc::clone(&leases[0].store);
        let answers = answers.clone();
        tokio::spawn(async move {
            let sent = Instant::now();
            let call = AssertUnwindSafe(store_call(store.kind(), "renew", timeout, store.renew_many(&renewals)));
            // A store that panics (or a tracing layer logging its failure)
            // must not leave its leases waiting for an answer forever: that
            // would stop their renewals for good. Nothing is logged here,
            // outside the catch: `apply` says it.
            let fences = call
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(StoreError::Corrupt { store: store.kind(), message: PANICKED.into() }));
            // The keeper outlives every batch; a send can only fail at exit.
            let _ = answers.send(Answer { leases, sent, fences });
        });
    }
}

fn apply(answer: Answer) {
    let Answer { leases, sent, fences } = answer;
    let fences = match fences {
        Ok(fences) if fences.len() == leases.len() => Some(fences),
        Ok(fences) => {
            tracing::error!(
                asked = leases.len(),
                answered = fences.len(),
                "the store answered a renewal batch wrongly"
            );
            None
        }
        Err(StoreError::Corrupt { message, .. }) if message == PANICKED => {
            tracing::error!("the store panicked while renewing leases (or a tracing layer did while logging it)");
            None
        }
        Err(_) => None, // logged by store_call
    };
    for (i, lease) in leases.iter().enumerate() {
        let mut plan = lease.plan.lock();
        plan.renewing = false;
        match fences.as_ref().map(|f| f[i]).filter(|fence| *fence != Fence::Unknown) {
            Some(Fence::Held) => {
                lease.confirm(sent);
                plan.due = lease.next_renewal();
                plan.retrying = false;
                if plan.lapsed && lease.is_held() {
                    plan.lapsed = false;
                    tracing::info!(key = %lease.key.hash_tag(), "a lapsed lease was renewed again; nobody took it over");
                }
            }
            Some(_) => {
                if !lease.is_done() {
                    tracing::warn!(key = %lease.key.hash_tag(), "the lease was lost while the handler ran");
                }
                lease.lose();
            }
            None => {
                // Counted from when the failed attempt was sent: one that
                // failed at once waits its pause (no loop while the store
                // refuses), one that timed out goes again at once (a third
                // of the lease is left for it, no more).
                plan.due = sent + after_failure(lease);
                plan.retrying = true;
            }
        }
    }
}

#[cfg(all(test, feature = "memory"))]
#[path = "keeper_tests.rs"]
mod tests;
