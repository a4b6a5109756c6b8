//! The operator's operations (§14 of the behaviour contract): list, inspect,
//! release and resolve idempotency records, without SQL or Lua by hand.
//!
//! The `idem` command-line tool is a thin shell over [`Operator`]; an
//! application may call it too (the memory store, which lives in the
//! application's process, is reachable only this way), or mount its actix
//! service behind a guard of its own (`operate::service`, feature `actix`).
//!
//! Every write is fenced: it applies only to the record as inspected (its
//! token and state), and is refused with [`OperatorError::Changed`] when the
//! record changed meanwhile. An execution in flight is settled only as a
//! claim takes a lapsed lease over: refused while its lease is live
//! ([`OperatorError::Running`]), and, when its lease has lapsed, only after
//! a grace that the first write gives its holder
//! ([`OperatorError::Graced`]): its renewal may have been on its way when
//! the operator looked. `force` settles it whatever its lease.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use idem_runtime::MemoryStore;
//! use idem_runtime::operate::{Expect, Operator, Target};
//! use idem_runtime::store::{ListFilter, StateName};
//!
//! let operator = Operator::new(Arc::new(MemoryStore::new()));
//! for held in operator.list(&ListFilter::new(50).state(StateName::Held)).await? {
//!     println!("{} {} {:?}", held.id(), held.record.state_name(), held.record.route);
//!     operator.release(&Target::Id(held.id().to_owned()), &Expect::as_inspected(&held), false).await?;
//! }
//! # Ok(()) }
//! ```

mod json;
#[cfg(feature = "actix")]
pub mod service;
mod text;

use std::sync::Arc;
use std::time::Duration;

pub use self::json::to_json;
pub use self::text::{detail_lines, summary_line};
use crate::key::IdempotencyKey;
use crate::record::{Record, RecordState, StoredResponse};
use crate::scope::{Scope, StorageKey};
use crate::sealing::{self, Keyring};
use crate::store::{FencingToken, InFlightSettle, ListFilter, Operable, Settle, Settlement, StateName, StoreError};

/// Which record an operation is about.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// Its id ([`StorageKey::record_id`]: 32 hex digits), as `idem list` and
    /// the request's span (`record`) show it.
    Id(String),
    /// What the runtime derives its storage key from.
    Key {
        /// The route as `METHOD /pattern` (`POST /orders/{id}/payments`).
        route: String,
        /// The route's scope.
        scope: Scope,
        /// The subject, for [`Scope::User`].
        subject: Option<String>,
        /// The idempotency key as the client sent it (unquoted).
        key: String,
    },
}

impl Target {
    /// The storage key this target names directly, if it names one.
    fn storage_key(&self) -> Result<Option<StorageKey>, OperatorError> {
        let Self::Key { route, scope, subject, key } = self else { return Ok(None) };
        let (method, pattern) = route.split_once(' ').ok_or_else(|| {
            OperatorError::InvalidTarget(format!("a route is `METHOD /pattern`, such as `POST /orders`: {route:?}"))
        })?;
        if *scope == Scope::User && subject.is_none() {
            return Err(OperatorError::InvalidTarget("scope user needs the subject".to_owned()));
        }
        let key = IdempotencyKey::natural(key).map_err(|error| OperatorError::InvalidTarget(error.to_string()))?;
        Ok(Some(StorageKey::new(*scope, subject.as_deref(), method, pattern.trim(), &key)))
    }
}

/// A record as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// Its storage key.
    pub key: StorageKey,
    /// What it holds.
    pub record: Record,
}

impl Inspection {
    /// Its id ([`StorageKey::record_id`]).
    pub fn id(&self) -> &str {
        self.key.record_id()
    }
}

/// What a write expects the record to still be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expect {
    /// Its execution's token.
    pub token: Option<FencingToken>,
    /// Its state.
    pub state: Option<StateName>,
    /// Settle an in-flight execution whatever its lease: a live one (its
    /// holder is running, or was a moment ago, and its completion would be
    /// refused, so a retry could run it a second time), or a lapsed one
    /// without first giving its holder a grace. For an operator who knows
    /// the holder's process is gone. Refused without.
    pub force: bool,
}

impl Expect {
    /// The record exactly as `inspection` found it.
    pub fn as_inspected(inspection: &Inspection) -> Self {
        Self { token: inspection.record.token(), state: Some(inspection.record.state_name()), force: false }
    }
}

/// Why an operation was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// No live record for the target.
    #[error("no live record {0}")]
    NotFound(String),
    /// The target could not name a record.
    #[error("invalid record: {0}")]
    InvalidTarget(String),
    /// The response of a resolve is not one HTTP can carry: nothing was
    /// written.
    #[error("invalid response: {0}")]
    InvalidResponse(String),
    /// The record is not in flight or held: there is no execution to settle.
    #[error("record {id} is {state}: only an in-flight or held execution can be released or resolved")]
    NotSettleable {
        /// The record's id.
        id: String,
        /// Its state.
        state: StateName,
    },
    /// The execution is in flight under a live lease: its holder is
    /// running, so settling it would race the holder (give `force` to do it
    /// anyway). Nothing was written.
    #[error(
        "record {id} is in flight with {lease_ms} ms left on its lease: its execution is running; wait for it, or force"
    )]
    Running {
        /// The record's id.
        id: String,
        /// Time left on its lease, in milliseconds.
        lease_ms: u128,
    },
    /// The execution is in flight and its lease had lapsed, but nothing had
    /// given its holder a grace yet: its renewal may have been on its way
    /// when the operator looked, and a holder that never saw its lease
    /// lapse goes on without reading its record. The write gave it a grace
    /// (a renewal within it shows the holder alive: the record is then
    /// running again), and wrote nothing else: the same write after the
    /// grace applies (or give `force`, if its process is gone).
    #[error(
        "record {id} is in flight and its lease lapsed only now: its holder gets a grace; nothing was written; \
         try again in {} s (or force, if its process is gone)",
        grace_ms.div_ceil(1000)
    )]
    Graced {
        /// The record's id.
        id: String,
        /// The grace given, in milliseconds.
        grace_ms: u128,
    },
    /// The record is not as expected, or changed between the inspection and
    /// the write: nothing was written.
    #[error("record {id} changed: {what}; nothing was written (inspect it again)")]
    Changed {
        /// The record's id.
        id: String,
        /// What differs.
        what: String,
    },
    /// The record's step results are sealed (`Idem::encrypt_records`) and
    /// the operator has no key that opens them: a response written in the
    /// clear would not open for the services that seal. Give the records
    /// key ([`Operator::with_records_keys`]). Nothing was written.
    #[error("record {id} is sealed: give the records key to resolve it; nothing was written")]
    Sealed {
        /// The record's id.
        id: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OperatorError {
    /// Whether this is a refusal about the record (not found, not
    /// settleable, changed: the tool's exit status 1) rather than a usage
    /// or store error (exit status 2).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::NotFound(_)
                | Self::NotSettleable { .. }
                | Self::Changed { .. }
                | Self::Running { .. }
                | Self::Graced { .. }
                | Self::Sealed { .. }
        )
    }

    /// When the same write may apply: after the lease of a running
    /// execution, or the grace just given; `None` for other errors.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            &Self::Running { lease_ms: ms, .. } | &Self::Graced { grace_ms: ms, .. } => {
                Some(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
            }
            _ => None,
        }
    }
}

/// What a release or resolve did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The record's id.
    pub id: String,
    /// Its state before.
    pub was: StateName,
    /// Its state now.
    pub now: StateName,
}

/// Whether `response` is one a replay can send: a status from 100 to 599,
/// header names of token characters (lower case, as stored), values
/// without control characters other than tab.
fn check_response(response: &StoredResponse) -> Result<(), String> {
    if !(100..=599).contains(&response.status) {
        return Err(format!("status {} is not from 100 to 599", response.status));
    }
    for (name, value) in &response.headers {
        let token = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(format!("`{name}` is not a lower-case header name"));
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(format!("the value of `{name}` has a control character"));
        }
    }
    Ok(())
}

/// The operations, over one store.
#[derive(Clone)]
pub struct Operator {
    store: Arc<dyn Operable>,
    grace: Duration,
    records: Option<Arc<Keyring>>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("store", &self.store.kind()).field("grace", &self.grace).finish()
    }
}

impl Operator {
    /// The grace a write gives the holder of an in-flight execution whose
    /// lease it finds lapsed ([`OperatorError::Graced`]): a claim's grace
    /// for a `lock_ttl` of a minute ([`crate::store::grace`]).
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

    /// Operations on `store`.
    pub fn new(store: Arc<dyn Operable>) -> Self {
        Self { store, grace: Self::DEFAULT_GRACE, records: None }
    }

    /// The same, with the keys of services that seal their records
    /// (`Idem::encrypt_records`): records are shown opened (those that do
    /// not open stay sealed), and a resolve seals its response with the
    /// keyring's current key. Without them, sealed parts show as sealed,
    /// and a record with sealed steps cannot be resolved.
    pub fn with_records_keys(self, keyring: Keyring) -> Self {
        Self { records: Some(Arc::new(keyring)), ..self }
    }

    /// The same, giving the holder of a lapsed lease `grace` (at least a
    /// second, as a claim gives) before a write settles it. Its holder
    /// must be able to renew within it: as a claim's grace, at least half
    /// the route's `lock_ttl`, and longer than the store timeout of the
    /// services that hold such records (a renewal may take that long to
    /// land). A claim after this grace takes the record over (or holds it)
    /// without a grace of its own, so a grace shorter than the claims'
    /// would shorten theirs.
    pub fn with_grace(self, grace: Duration) -> Self {
        Self { grace: grace.max(Duration::from_secs(1)), ..self }
    }

    /// The records `filter` admits.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Inspection>, StoreError> {
        let found = self.store.list(filter).await?;
        Ok(found.into_iter().map(|(key, record)| self.opened(Inspection { key, record })).collect())
    }

    /// `inspection` with what its keys open opened.
    fn opened(&self, mut inspection: Inspection) -> Inspection {
        let Some(keyring) = self.records.as_deref() else { return inspection };
        let key = &inspection.key;
        for step in &mut inspection.record.steps {
            if sealing::is_sealed_step(&step.result)
                && let Ok(opened) = sealing::open_step(Some(keyring), key, &step.name, &step.result)
            {
                step.result = opened.into();
            }
        }
        if let RecordState::Completed { response, .. } = &mut inspection.record.state
            && sealing::sealed_with(response).is_some()
            && let Ok(opened) = sealing::open_response(Some(keyring), key, response.clone())
        {
            *response = opened;
        }
        inspection
    }

    /// The record `target` names.
    pub async fn inspect(&self, target: &Target) -> Result<Inspection, OperatorError> {
        let key = match (target.storage_key()?, target) {
            (Some(key), _) => key,
            (None, Target::Id(id)) => {
                let id = id.trim().to_ascii_lowercase();
                self.store.find(&id).await?.ok_or_else(|| OperatorError::NotFound(id.clone()))?
            }
            (None, _) => return Err(OperatorError::InvalidTarget("no record named".to_owned())),
        };
        let record = self.store.get(&key).await?.ok_or_else(|| OperatorError::NotFound(key.record_id().to_owned()))?;
        Ok(self.opened(Inspection { key, record }))
    }

    /// Ends the in-flight or held execution of `target` without a response,
    /// leaving a tombstone: the same request may run again, another one is
    /// refused. The next execution gets the recorded steps back (their
    /// effects happened) and runs the rest; with `forget_steps` it runs
    /// every step again (for an effect the operator undid, such as a
    /// refunded charge).
    pub async fn release(
        &self,
        target: &Target,
        expect: &Expect,
        forget_steps: bool,
    ) -> Result<Settled, OperatorError> {
        self.settle(target, expect, &Settlement::Release { forget_steps }).await
    }

    /// Completes the in-flight or held execution of `target` with
    /// `response`: retries replay it.
    pub async fn resolve(
        &self,
        target: &Target,
        response: StoredResponse,
        expect: &Expect,
    ) -> Result<Settled, OperatorError> {
        check_response(&response).map_err(OperatorError::InvalidResponse)?;
        self.settle(target, expect, &Settlement::Resolve(response)).await
    }

    async fn settle(
        &self,
        target: &Target,
        expect: &Expect,
        settlement: &Settlement,
    ) -> Result<Settled, OperatorError> {
        let inspection = self.inspect(target).await?;
        let id = inspection.id().to_owned();
        let was = inspection.record.state_name();
        let changed = |what: String| OperatorError::Changed { id: id.clone(), what };
        if let Some(state) = expect.state.filter(|&state| state != was) {
            return Err(changed(format!("it is {was}, not {state}")));
        }
        let token = inspection.record.token();
        if let Some(expected) = expect.token.filter(|&expected| Some(expected) != token) {
            return Err(changed(match token {
                Some(token) => format!("its execution's token is {}, not {}", token.to_hex(), expected.to_hex()),
                None => format!("it is {was}: the execution with token {} ended", expected.to_hex()),
            }));
        }
        let Some(token) = token else {
            return Err(OperatorError::NotSettleable { id, state: was });
        };
        if let crate::record::RecordState::InFlight { lease_left, .. } = inspection.record.state
            && !lease_left.is_zero()
            && !expect.force
        {
            return Err(OperatorError::Running { id, lease_ms: lease_left.as_millis() });
        }
        // The lease as read above may have been renewed since: the store
        // checks it again in the write itself, and gives a lapsed one a
        // grace first.
        let in_flight = if expect.force { InFlightSettle::Force } else { InFlightSettle::AfterGrace(self.grace) };
        // A response is sealed as the services' own are; without the keys,
        // one written in the clear beside sealed steps would not open.
        let settlement = match (settlement, self.records.as_deref()) {
            (Settlement::Resolve(response), Some(keyring)) => {
                Settlement::Resolve(sealing::seal_response(keyring, &inspection.key, response))
            }
            (Settlement::Resolve(_), None)
                if inspection.record.steps.iter().any(|step| sealing::is_sealed_step(&step.result)) =>
            {
                return Err(OperatorError::Sealed { id });
            }
            (settlement, _) => settlement.clone(),
        };
        let settlement = &settlement;
        match self.store.settle(&inspection.key, token, was, settlement, in_flight).await? {
            Settle::Applied => {
                let now = match settlement {
                    Settlement::Release { .. } => StateName::Released,
                    _ => StateName::Completed,
                };
                tracing::warn!(record = %id, %was, %now, "an operator settled an idempotency record");
                Ok(Settled { id, was, now })
            }
            Settle::Running { lease_left } => Err(OperatorError::Running { id, lease_ms: lease_left.as_millis() }),
            Settle::Graced { grace } => {
                tracing::info!(record = %id, grace_ms = grace.as_millis(), "an operator's write gave a lapsed lease a grace");
                Err(OperatorError::Graced { id, grace_ms: grace.as_millis() })
            }
            _ => Err(changed("it changed between its inspection and the write".to_owned())),
        }
    }
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::MemoryStore;
    use crate::fingerprint::{Fingerprint, RequestParts};
    use crate::store::{Claim, Fence, Store};

    /// An execution that ended after the operator read its token is
    /// reported as a change (the operator's view is stale), not as a record
    /// that simply has nothing to settle.
    #[tokio::test]
    async fn a_write_expecting_an_execution_that_ended_says_the_record_changed() {
        let store = Arc::new(MemoryStore::new());
        let key = StorageKey::new(Scope::Route, None, "POST", "/orders", &IdempotencyKey::parse(b"k-1").unwrap());
        let parts = RequestParts {
            method: "POST",
            path: "/orders",
            query: "",
            headers: &[],
            host: None,
            content_type: None,
            body: b"{}",
        };
        let (lease, ttl) = (Duration::from_secs(60), Duration::from_secs(600));
        let Claim::Acquired { token, .. } = store.claim(&key, &Fingerprint::of(&parts), lease, ttl).await.unwrap()
        else {
            panic!("a free key is acquired")
        };
        let response = StoredResponse { status: 200, headers: vec![], body: bytes::Bytes::from_static(b"done") };
        assert_eq!(store.complete(&key, token, &response, ttl).await.unwrap(), Fence::Held);
        let operator = Operator::new(store);
        let target = Target::Id(key.record_id().to_owned());
        let stale = Expect { token: Some(token), state: None, force: false };
        let refused = operator.release(&target, &stale, false).await.unwrap_err();
        assert!(matches!(refused, OperatorError::Changed { .. }), "{refused}");
        assert!(refused.to_string().contains(&token.to_hex()), "{refused}");
        let refused = operator.release(&target, &Expect::default(), false).await.unwrap_err();
        assert!(matches!(refused, OperatorError::NotSettleable { state: StateName::Completed, .. }), "{refused}");
    }
}
