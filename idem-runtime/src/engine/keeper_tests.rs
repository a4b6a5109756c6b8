//! The keeper: its wake-up rule over the parts of its list, and its
//! schedule against a memory store whose renewals can be made to fail (a
//! store that refuses connections answers at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::Lease;
use super::{IDLE_LOOK, LISTS, Shared};
use crate::backends::MemoryStore;
use crate::engine::lease::LeaseState;
use crate::fingerprint::{Fingerprint, RequestParts};
use crate::key::IdempotencyKey;
use crate::record::{Record, StoredResponse};
use crate::scope::{Scope, StorageKey};
use crate::store::{Claim, ClaimTerms, Fence, FencingToken, Renewal, Step, Store, StoreError};

/// A memory store that counts renewal batches, and refuses them while
/// `refusing` is set, or answers the first one only after `stall_first`.
#[derive(Default)]
struct Flaky {
    inner: MemoryStore,
    refusing: AtomicBool,
    batches: AtomicUsize,
    stall_first: Option<Duration>,
    /// When each batch was sent.
    sent: parking_lot::Mutex<Vec<Instant>>,
}

#[async_trait]
impl Store for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }

    async fn claim_with(
        &self,
        key: &StorageKey,
        fp: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError> {
        self.inner.claim_with(key, fp, token, terms).await
    }

    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError> {
        self.inner.record_step(key, token, step).await
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        self.inner.renew(key, token, lease).await
    }

    async fn renew_many(&self, renewals: &[Renewal]) -> Result<Vec<Fence>, StoreError> {
        self.sent.lock().push(Instant::now());
        if self.batches.fetch_add(1, Ordering::SeqCst) == 0
            && let Some(stall) = self.stall_first
        {
            tokio::time::sleep(stall).await;
        }
        if self.refusing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable { store: "flaky", message: "connection refused".into(), source: None });
        }
        self.inner.renew_many(renewals).await
    }

    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError> {
        self.inner.complete(key, token, response, ttl).await
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.inner.release(key, token).await
    }

    async fn release_unless_held(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.inner.release_unless_held(key, token).await
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
}

/// A store that refuses renewals until told otherwise.
fn refusing() -> Arc<Flaky> {
    let store = Arc::new(Flaky::default());
    store.refusing.store(true, Ordering::SeqCst);
    store
}

/// Claims a new key on `store` (its record living ten leases) and hands its
/// lease to the keeper.
fn hold(store: &Arc<Flaky>, lease: Duration) -> Lease {
    let key = format!("keeper-{}", FencingToken::generate().to_hex());
    let key = StorageKey::new(Scope::Route, None, "POST", "/k", &IdempotencyKey::parse(key.as_bytes()).unwrap());
    let parts =
        RequestParts { method: "POST", path: "/k", query: "", headers: &[], host: None, content_type: None, body: b"" };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sent = Instant::now();
    let Claim::Acquired { token, .. } =
        runtime.block_on(store.claim(&key, &Fingerprint::of(&parts), lease, lease * 10)).unwrap()
    else {
        panic!("a new key is acquired")
    };
    let store: Arc<dyn Store> = Arc::clone(store) as Arc<dyn Store>;
    Lease::hold(store, key, token, lease, lease / 4, sent)
}

#[test]
fn a_failed_renewal_waits_a_tenth_of_the_lease_before_it_is_tried_again() {
    let store = refusing();
    // Due after a third (1 s); from then on, retries a tenth apart (300 ms).
    let lease = hold(&store, Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(1_700));
    let batches = store.batches.load(Ordering::SeqCst);
    drop(lease);
    // The first at a third (1 s), then about every 300 ms: 3 or so.
    // Without the pause, tens of thousands.
    assert!((1..=6).contains(&batches), "{batches} renewal batches in 1.7 s");
}

#[test]
fn a_lease_renewed_after_failures_is_kept() {
    let store = refusing();
    // Due at 400 ms; refused until 500 ms (retried every 120 ms), then
    // answered: renewed with about 700 ms to spare.
    let lease = hold(&store, Duration::from_millis(1_200));
    std::thread::sleep(Duration::from_millis(500));
    store.refusing.store(false, Ordering::SeqCst);
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        assert!(lease.state().is_held(), "renewed in time once the store answers");
    }
}

#[test]
fn a_renewal_that_timed_out_is_sent_again_at_once() {
    // Due at 2 s; the first batch times out (the lease's timeout, 1.5 s);
    // the second must go at once, the last third of the lease being all
    // that is left for it, not a tenth of the lease (600 ms) later.
    let store = Arc::new(Flaky { stall_first: Some(Duration::from_secs(3)), ..Flaky::default() });
    let lease = hold(&store, Duration::from_secs(6));
    let started = Instant::now();
    while store.sent.lock().len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(6), "the renewal was not sent again");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = store.sent.lock().clone();
    let gap = sent[1] - sent[0];
    assert!(
        gap < Duration::from_millis(1_500 + 300),
        "sent again {gap:?} after the first, which timed out after 1.5 s"
    );
    assert!(lease.state().is_held());
}

#[test]
fn leases_handed_over_from_many_threads_at_once_are_all_renewed() {
    // Twice as many threads as parts of the list, each handing over a short
    // lease (due at 200 ms, before the keeper's idle look of a second) while
    // the others take leases in and out of the list: none may go unseen.
    let store = Arc::new(Flaky::default());
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(i * 7));
                for _ in 0..20 {
                    drop(hold(&store, Duration::from_secs(30)));
                }
                let lease = hold(&store, Duration::from_millis(600));
                for _ in 0..15 {
                    std::thread::sleep(Duration::from_millis(100));
                    assert!(lease.state().is_held(), "a lease handed over from thread {i} was not renewed in time");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(store.batches.load(Ordering::SeqCst) >= 3, "the leases were renewed");
}

/// A lease of `length` claimed at `sent`: first renewal due a third in.
fn lease(length: Duration, sent: Instant) -> Arc<LeaseState> {
    let key = StorageKey::new(Scope::Global, None, "POST", "/", &IdempotencyKey::parse(b"k").unwrap());
    let store = Arc::new(crate::backends::MemoryStore::new());
    Arc::new(LeaseState::new(store, key, FencingToken::generate(), length, length / 3, sent))
}

/// Whatever part holds the lease the keeper's next look is set by, and
/// whatever part a later lease is handed to: a lease due before that
/// look wakes the keeper (else it would sleep past the lease's renewal,
/// the lease would run out, and a retry could take the key over and run
/// the handler again).
#[test]
fn a_lease_due_before_the_keepers_next_look_wakes_it_whatever_its_part() {
    let now = Instant::now();
    for soonest_in in 0..LISTS {
        for part in 0..LISTS {
            let shared = Shared::default();
            // Every part holds a lease due in 3 s, `soonest_in`'s in 600 ms.
            let held: Vec<_> = (0..LISTS)
                .map(|p| {
                    let length = if p == soonest_in { Duration::from_millis(1_800) } else { Duration::from_secs(9) };
                    lease(length, now)
                })
                .collect();
            for (p, lease) in held.iter().enumerate() {
                shared.hand_over(p, lease);
            }
            let look = shared.look(now);
            assert_eq!(look.soonest, now + Duration::from_millis(600));
            assert!(look.due.is_empty() && look.ran_out.is_empty());
            // Due in 300 ms, before the look the keeper now sleeps until.
            let (_, woke) = shared.hand_over(part, &lease(Duration::from_millis(900), now));
            assert!(woke, "a lease handed to part {part} (the soonest in part {soonest_in}) did not wake the keeper");
        }
    }
}

/// A lease due after the keeper's next look needs no wake-up: under
/// load, handing leases over costs no thread switch.
#[test]
fn a_lease_due_after_the_keepers_next_look_does_not_wake_it() {
    let now = Instant::now();
    let shared = Shared::default();
    assert!(shared.hand_over(0, &lease(Duration::from_secs(30), now)).1, "the first hand-over wakes it");
    let look = shared.look(now);
    assert_eq!(look.soonest, now + IDLE_LOOK);
    for part in 0..LISTS {
        assert!(!shared.hand_over(part, &lease(Duration::from_secs(30), now)).1, "part {part}");
    }
}

#[test]
fn a_lease_that_lapsed_while_the_store_refused_is_renewed_back_when_it_answers() {
    // Refused for twice the lease: the lease lapses, but nobody took the key
    // over, so its token still holds the record. Once the store answers,
    // the keeper renews it back into life (it never gave up on it).
    let store = refusing();
    let lease = hold(&store, Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(1_200));
    assert!(!lease.state().is_held() && !lease.state().is_lost(), "lapsed, not lost");
    store.refusing.store(false, Ordering::SeqCst);
    let started = Instant::now();
    while !lease.state().is_held() {
        assert!(started.elapsed() < Duration::from_secs(2), "the lapsed lease was renewed back");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A wrapper store that does not forward `renew_many` (so it gets the
/// trait's default), whose renewals of one key fail.
struct NoBatch {
    inner: MemoryStore,
    failing: StorageKey,
}

#[async_trait]
impl Store for NoBatch {
    fn kind(&self) -> &'static str {
        "no-batch"
    }

    async fn claim_with(
        &self,
        key: &StorageKey,
        fp: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError> {
        self.inner.claim_with(key, fp, token, terms).await
    }

    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError> {
        self.inner.record_step(key, token, step).await
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        if *key == self.failing {
            return Err(StoreError::Unavailable {
                store: "no-batch",
                message: "connection reset".into(),
                source: None,
            });
        }
        self.inner.renew(key, token, lease).await
    }

    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<Fence, StoreError> {
        self.inner.complete(key, token, response, ttl).await
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.inner.release(key, token).await
    }

    async fn release_unless_held(&self, key: &StorageKey, token: FencingToken) -> Result<Fence, StoreError> {
        self.inner.release_unless_held(key, token).await
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
}

#[test]
fn one_failed_renewal_of_the_default_batch_leaves_the_others_renewed() {
    let key = |name: &str| {
        StorageKey::new(Scope::Route, None, "POST", "/k", &IdempotencyKey::parse(name.as_bytes()).unwrap())
    };
    let store = NoBatch { inner: MemoryStore::new(), failing: key("failing") };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let fingerprint = Fingerprint::of(&RequestParts {
            method: "POST",
            path: "/k",
            query: "",
            headers: &[],
            host: None,
            content_type: None,
            body: b"",
        });
        let lease = Duration::from_secs(30);
        let mut renewals = Vec::new();
        for name in ["held", "failing", "also-held"] {
            let Claim::Acquired { token, .. } = store.claim(&key(name), &fingerprint, lease, lease).await.unwrap()
            else {
                panic!("a new key is acquired");
            };
            renewals.push(Renewal { key: key(name), token, lease });
        }
        let fences = store.renew_many(&renewals).await.expect("the batch is answered");
        assert_eq!(fences, [Fence::Held, Fence::Unknown, Fence::Held]);
        let failing = NoBatch { inner: MemoryStore::new(), failing: key("held") };
        let error = failing.renew_many(&renewals[..1]).await;
        assert!(error.is_err(), "a batch none of whose renewals was answered fails: {error:?}");
    });
}

#[test]
fn a_lease_let_go_is_freed_by_its_holder_not_the_keeper() {
    let key = StorageKey::new(Scope::Global, None, "POST", "/", &IdempotencyKey::parse(b"k").unwrap());
    let store: Arc<dyn Store> = Arc::new(crate::backends::MemoryStore::new());
    let lease = Lease::hold(
        store,
        key,
        FencingToken::generate(),
        Duration::from_secs(30),
        Duration::from_secs(1),
        Instant::now(),
    );
    let state = Arc::clone(&lease.state);
    assert_eq!(Arc::strong_count(&state), 3, "the holder, the keeper's list and this test");
    drop(lease);
    // The keeper's reference went with the holder's: whoever drops
    // the last one frees the state, on its own thread.
    assert_eq!(Arc::strong_count(&state), 1);
    assert!(state.is_done());
}
