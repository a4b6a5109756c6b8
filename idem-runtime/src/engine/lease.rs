//! A lease as the process sees it: confirmed until its local deadline, which
//! only a confirmed renewal moves; owned until the store says otherwise.
//!
//! The deadline is counted from when the claim (or the renewal) was *sent*,
//! never from when its answer arrived: the store started the lease somewhere
//! in between, so the local deadline always ends no later than the store's.
//!
//! A lease whose deadline passed unconfirmed (the store did not answer in
//! time) is *lapsed*, not lost: the record still holds its token unless
//! another claim took the key over, and the store accepts renewals and
//! completions from the token it holds (§6 of the behaviour contract). The
//! keeper goes on renewing it, and a renewal answered held, however late,
//! confirms it again from when that renewal was sent: the store renewed it
//! at some moment after, and no takeover came before (it would have
//! changed the token). Only the store's answer that the record no longer
//! holds the token loses it, for good. A lapsed lease is not held: the
//! handler does not start on one, and the transactional mode does not
//! commit on one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::later;
use crate::observe::store_call;
use crate::record::RecordState;
use crate::scope::StorageKey;
use crate::store::{FencingToken, Store, StoreError};

/// Whether an execution may act as its key's owner, as its record says
/// after a lapse ([`LeaseState::standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Its lease is confirmed and the record is its own, in flight.
    Owner,
    /// Its record was held for an operator while the lease had lapsed
    /// (`on_lapse = "hold"`): it starts nothing; the operator settles the
    /// record on what it saw.
    Held,
    /// Another execution owns the key, or the record is gone or settled.
    Lost,
    /// Not known by the deadline given: the lease was not confirmed, or the
    /// record could not be read (the store is away).
    Unknown,
}

/// One live lease, shared by its holder and the keeper.
pub(crate) struct LeaseState {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) key: StorageKey,
    pub(crate) token: FencingToken,
    /// The lease length asked at every renewal.
    pub(crate) lease: Duration,
    /// Longest wait for one renewal round trip.
    pub(crate) timeout: Duration,
    times: Mutex<Times>,
    lost: AtomicBool,
    /// A renewal sent after the deadline was confirmed: the lease lapsed
    /// once, and another claim may have found it so (a held record).
    lapsed_once: AtomicBool,
    /// The holder is done with it (completed, released or gone): the keeper
    /// leaves it alone.
    done: AtomicBool,
    /// The keeper's own schedule for it (only the keeper uses it).
    pub(crate) plan: Mutex<Plan>,
}

/// When the keeper renews a lease next, and whether a renewal is on its way.
pub(crate) struct Plan {
    pub(crate) due: Instant,
    pub(crate) renewing: bool,
    /// The last renewal failed: the next one waits until `due`, without
    /// the slack that lets a lease join an earlier batch.
    pub(crate) retrying: bool,
    /// Its deadline passed unconfirmed (logged once), and a renewal has
    /// not confirmed it since.
    pub(crate) lapsed: bool,
}

#[derive(Clone, Copy)]
struct Times {
    /// When the last confirmed claim or renewal was sent.
    confirmed_sent: Instant,
    /// The lease ends here unless a renewal is confirmed first.
    deadline: Instant,
}

impl LeaseState {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        key: StorageKey,
        token: FencingToken,
        lease: Duration,
        timeout: Duration,
        sent: Instant,
    ) -> Self {
        Self {
            store,
            key,
            token,
            lease,
            timeout,
            times: Mutex::new(Times { confirmed_sent: sent, deadline: later(sent, lease) }),
            lost: AtomicBool::new(false),
            lapsed_once: AtomicBool::new(false),
            done: AtomicBool::new(false),
            plan: Mutex::new(Plan { due: later(sent, lease / 3), renewing: false, retrying: false, lapsed: false }),
        }
    }

    /// The local deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.times.lock().deadline
    }

    /// When the last confirmed claim or renewal was sent.
    pub(crate) fn confirmed_sent(&self) -> Instant {
        self.times.lock().confirmed_sent
    }

    /// Whether the lease is confirmed live: the holder may act as the
    /// owner, and no other claim can take the key before the deadline.
    pub(crate) fn is_held(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && Instant::now() < self.deadline()
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Its holder is done with it: the keeper leaves it alone.
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }

    /// Whether the lease lapsed at some point and was confirmed again: its
    /// record may have been held for an operator meanwhile.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn has_lapsed(&self) -> bool {
        self.lapsed_once.load(Ordering::Acquire)
    }

    /// Whether the store said the record no longer holds the token.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// When it is renewed next, counted from its last confirmed claim or
    /// renewal: a third of the way through.
    pub(crate) fn next_renewal(&self) -> Instant {
        later(self.confirmed_sent(), self.lease / 3)
    }

    /// A renewal sent at `sent` was answered held: the lease now runs to
    /// `sent + lease` at least, however late the answer came (a lapsed
    /// lease is confirmed again; see the module's docs).
    pub(crate) fn confirm(&self, sent: Instant) {
        let mut times = self.times.lock();
        if self.lost.load(Ordering::Acquire) {
            return;
        }
        if sent > times.confirmed_sent {
            if sent >= times.deadline {
                self.lapsed_once.store(true, Ordering::Release);
            }
            times.confirmed_sent = sent;
            times.deadline = times.deadline.max(later(sent, self.lease));
        }
    }

    /// Waits until the lease is confirmed live, before the execution starts
    /// something its record does not know of (its handler, a durable step):
    /// a holder that was frozen, or cut off from the store, past its lease
    /// may have been taken over meanwhile. The keeper renews a lapsed lease
    /// at least once a second, so this waits as long as the store is away,
    /// up to `ends` (for a durable step the record's TTL; for a start, a
    /// lease: a request does not wait out an outage before its handler).
    ///
    /// A renewal of a record held for an operator (`on_lapse = "hold"`) is
    /// answered held, so that its holder may still complete: it confirms
    /// the lease. So a lease that lapsed once has its record read (a round
    /// trip, only after a lapse), and a held one starts nothing.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) async fn standing(&self, ends: Instant) -> Standing {
        loop {
            while !self.is_held() {
                if self.is_lost() {
                    return Standing::Lost;
                }
                if Instant::now() >= ends {
                    return Standing::Unknown;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if !self.has_lapsed() {
                return Standing::Owner;
            }
            match self.read_standing().await {
                Ok(standing) => return standing,
                // Unknown: looked at again, while the lease holds.
                Err(_) if Instant::now() < ends => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(_) => return Standing::Unknown,
            }
        }
    }

    /// What the record says of this lease, in one read: its own (in
    /// flight), held for an operator, or another's (or gone).
    pub(crate) async fn read_standing(&self) -> Result<Standing, StoreError> {
        let record = store_call(self.store.kind(), "get", self.timeout, self.store.get(&self.key)).await?;
        Ok(match record.map(|record| record.state) {
            Some(RecordState::Held { token, .. }) if token == self.token => Standing::Held,
            Some(RecordState::InFlight { token, .. }) if token == self.token => Standing::Owner,
            _ => Standing::Lost,
        })
    }

    /// The store said the record no longer holds the token.
    pub(crate) fn lose(&self) {
        self.lost.store(true, Ordering::Release);
    }
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::*;
    use crate::key::IdempotencyKey;
    use crate::scope::Scope;

    fn state(lease: Duration, sent: Instant) -> LeaseState {
        let key = StorageKey::new(Scope::Global, None, "POST", "/", &IdempotencyKey::parse(b"k").unwrap());
        let store = Arc::new(crate::backends::MemoryStore::new());
        LeaseState::new(store, key, FencingToken::generate(), lease, lease / 3, sent)
    }

    #[test]
    fn the_deadline_counts_from_when_the_claim_was_sent() {
        let sent = Instant::now() - Duration::from_millis(400);
        let lease = state(Duration::from_millis(500), sent);
        assert_eq!(lease.deadline(), sent + Duration::from_millis(500));
        assert!(lease.is_held());
        let old = state(Duration::from_millis(300), sent);
        assert!(!old.is_held(), "300 ms from a claim sent 400 ms ago is over, whenever it was answered");
    }

    #[test]
    fn a_confirmed_renewal_moves_the_deadline_from_its_sending() {
        let start = Instant::now();
        let lease = state(Duration::from_secs(3), start);
        let sent = start + Duration::from_secs(1);
        lease.confirm(sent);
        assert_eq!(lease.deadline(), sent + Duration::from_secs(3));
        // An older renewal answered later never moves it back.
        lease.confirm(start + Duration::from_millis(500));
        assert_eq!(lease.deadline(), sent + Duration::from_secs(3));
        assert!(lease.is_held());
    }

    #[test]
    fn a_lapsed_lease_is_confirmed_again_from_when_its_renewal_was_sent() {
        let start = Instant::now() - Duration::from_secs(5);
        let lease = state(Duration::from_secs(1), start);
        assert!(!lease.is_held() && !lease.is_lost(), "lapsed, not lost");
        // A renewal sent just now, answered held: live again for a lease
        // from its sending.
        let sent = Instant::now();
        lease.confirm(sent);
        assert!(lease.is_held());
        assert_eq!(lease.deadline(), sent + Duration::from_secs(1));
    }

    #[test]
    fn a_lost_lease_is_lost_for_good() {
        let start = Instant::now();
        let lease = state(Duration::from_secs(10), start);
        lease.lose();
        assert!(!lease.is_held() && lease.is_lost());
        lease.confirm(Instant::now());
        assert!(!lease.is_held(), "a late held answer never brings back a lost lease");
    }
}
