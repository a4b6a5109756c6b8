//! A memory store with injected faults, standing in for a flapping network
//! in glue-level tests (the Redis and Postgres suites stop real servers).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idem_runtime::store::{
    Claim, ClaimTerms, Fence, FencingToken, Fingerprint, Record, Step, StorageKey, Store, StoredResponse,
};
use idem_runtime::{MemoryStore, StoreError};

/// What claims do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claims {
    Work,
    Refused,
    Hang,
}

/// A store (a [`MemoryStore`] unless [`FaultyStore::over`] another)
/// whose calls fail as configured.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    claims: Claims,
    renew_outage: Option<(Duration, Duration)>,
    failing_completions: AtomicUsize,
    completion_outage: Option<Duration>,
    claim_delay: Option<Duration>,
    late_answers: Option<Duration>,
    renewal_panics: AtomicUsize,
    lost_completion_answers: AtomicUsize,
    largest_response: Option<usize>,
    claimed_at: Mutex<Option<Instant>>,
    /// Claims that reached it, answered or not.
    claims_sent: AtomicUsize,
}

impl Default for FaultyStore {
    fn default() -> Self {
        Self {
            inner: Arc::new(MemoryStore::new()),
            claims: Claims::Work,
            renew_outage: None,
            failing_completions: AtomicUsize::new(0),
            completion_outage: None,
            claim_delay: None,
            late_answers: None,
            renewal_panics: AtomicUsize::new(0),
            lost_completion_answers: AtomicUsize::new(0),
            largest_response: None,
            claimed_at: Mutex::new(None),
            claims_sent: AtomicUsize::new(0),
        }
    }
}

fn outage(kind: std::io::ErrorKind) -> StoreError {
    StoreError::unavailable("faulty", std::io::Error::from(kind))
}

impl std::fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStore").field("inner", &self.inner.kind()).finish_non_exhaustive()
    }
}

impl FaultyStore {
    /// Faults injected in front of a real store (Redis, Postgres).
    pub fn over(inner: Arc<dyn Store>) -> Self {
        Self { inner, ..Self::default() }
    }

    /// Every claim fails as a refused connection would.
    pub fn down() -> Self {
        Self { claims: Claims::Refused, ..Self::default() }
    }

    /// Claims never answer.
    pub fn hanging() -> Self {
        Self { claims: Claims::Hang, ..Self::default() }
    }

    /// Renewals fail from `from` to `until` after the first claim.
    pub fn renewals_fail_between(mut self, from: Duration, until: Duration) -> Self {
        self.renew_outage = Some((from, until));
        self
    }

    /// Completions fail until `until` after the first claim.
    pub fn completions_fail_for(mut self, until: Duration) -> Self {
        self.completion_outage = Some(until);
        self
    }

    /// Every claim after the first takes `delay` (a slow network).
    pub fn later_claims_take(mut self, delay: Duration) -> Self {
        self.claim_delay = Some(delay);
        self
    }

    /// Claims are applied at once, but their answers take `delay` to come
    /// back (a slow network on the way back).
    pub fn claim_answers_take(mut self, delay: Duration) -> Self {
        self.late_answers = Some(delay);
        self
    }

    /// The first `count` renewals panic (a store bug).
    pub fn first_renewals_panic(self, count: usize) -> Self {
        self.renewal_panics.store(count, Ordering::SeqCst);
        self
    }

    /// Claims sent to it so far (each a round trip to the store it fronts).
    pub fn claims_sent(&self) -> usize {
        self.claims_sent.load(Ordering::SeqCst)
    }

    fn since_first_claim(&self) -> Duration {
        self.claimed_at.lock().unwrap().map(|at| at.elapsed()).unwrap_or_default()
    }

    /// The first `count` completions fail.
    pub fn first_completions_fail(self, count: usize) -> Self {
        self.failing_completions.store(count, Ordering::SeqCst);
        self
    }

    /// The first `count` completions that reach the store are applied, but
    /// their answers are lost (a connection that broke on the way back).
    pub fn first_completion_answers_lost(self, count: usize) -> Self {
        self.lost_completion_answers.store(count, Ordering::SeqCst);
        self
    }

    /// Responses whose body is over `bytes` are refused for good
    /// ([`StoreError::Full`]), as a store that has a limit on values.
    pub fn refuses_bodies_over(mut self, bytes: usize) -> Self {
        self.largest_response = Some(bytes);
        self
    }
}

#[async_trait]
impl Store for FaultyStore {
    fn kind(&self) -> &'static str {
        "faulty"
    }

    async fn claim_with(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        token: FencingToken,
        terms: &ClaimTerms,
    ) -> Result<Claim, StoreError> {
        self.claims_sent.fetch_add(1, Ordering::SeqCst);
        match self.claims {
            Claims::Refused => return Err(outage(std::io::ErrorKind::ConnectionRefused)),
            Claims::Hang => std::future::pending::<()>().await,
            Claims::Work => {}
        }
        let later = {
            let mut first = self.claimed_at.lock().unwrap();
            let later = first.is_some();
            first.get_or_insert_with(Instant::now);
            later
        };
        if let Some(delay) = self.claim_delay.filter(|_| later) {
            tokio::time::sleep(delay).await;
        }
        let claim = self.inner.claim_with(key, fingerprint, token, terms).await;
        if let Some(delay) = self.late_answers {
            tokio::time::sleep(delay).await;
        }
        claim
    }

    async fn record_step(&self, key: &StorageKey, token: FencingToken, step: &Step) -> Result<Fence, StoreError> {
        self.inner.record_step(key, token, step).await
    }

    async fn renew(&self, key: &StorageKey, token: FencingToken, lease: Duration) -> Result<Fence, StoreError> {
        if self.renewal_panics.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            panic!("a store bug: renewing panicked");
        }
        let since = self.since_first_claim();
        if self.renew_outage.is_some_and(|(from, until)| since > from && since < until) {
            return Err(outage(std::io::ErrorKind::ConnectionReset));
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
        let failing = self.failing_completions.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() || self.completion_outage.is_some_and(|until| self.since_first_claim() < until) {
            return Err(outage(std::io::ErrorKind::ConnectionReset));
        }
        if self.largest_response.is_some_and(|largest| response.body.len() > largest) {
            return Err(StoreError::Full { store: "faulty", detail: "a value over the store's limit".into() });
        }
        let fence = self.inner.complete(key, token, response, ttl).await;
        let lost = self.lost_completion_answers.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if lost.is_ok() {
            return Err(outage(std::io::ErrorKind::ConnectionReset));
        }
        fence
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
