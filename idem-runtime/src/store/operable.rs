//! What operators need of a store (§14 of the behaviour contract): listing
//! records, finding one by its id, and settling an execution that will not
//! finish by itself.

use std::time::Duration;

use async_trait::async_trait;

use super::{FencingToken, Record, StateName, StorageKey, Store, StoreError, StoredResponse};

/// Which records [`Operable::list`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListFilter {
    /// Only records in this state.
    pub state: Option<StateName>,
    /// Only records whose execution was claimed longer ago than this.
    pub older_than: Option<Duration>,
    /// Only records claimed on this route (`POST /orders`).
    pub route: Option<String>,
    /// At most this many records.
    pub limit: usize,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self { state: None, older_than: None, route: None, limit: 100 }
    }
}

impl ListFilter {
    /// Every record, at most `limit`.
    pub fn new(limit: usize) -> Self {
        Self { limit, ..Self::default() }
    }

    /// Only records in `state`.
    pub fn state(mut self, state: StateName) -> Self {
        self.state = Some(state);
        self
    }

    /// Only records claimed longer than `age` ago.
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Only records of `route` (`POST /orders`).
    pub fn route(mut self, route: impl Into<String>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// Whether `record` passes the filter (for stores that filter as they
    /// read).
    pub fn admits(&self, record: &Record) -> bool {
        self.state.is_none_or(|state| record.state_name() == state)
            && self.route.as_deref().is_none_or(|route| record.route.as_deref() == Some(route))
            && self.older_than.is_none_or(|age| record.age().is_some_and(|its| its > age))
    }
}

/// What an operator settles an execution with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// Ends it without a response, leaving a tombstone: the same request
    /// may run again, another one is refused. The next execution gets the
    /// recorded steps back (they recorded effects that happened), unless
    /// `forget_steps`: then it runs every step again.
    Release {
        /// Drop the recorded steps too.
        forget_steps: bool,
    },
    /// Completes it with the response the operator established: retries
    /// replay it. The record keeps its expiry.
    Resolve(StoredResponse),
}

/// What [`Operable::settle`] does with an execution in flight (a held one
/// is settled at once: a claim already waited out its grace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InFlightSettle {
    /// Only as a claim takes a lapsed lease over: refused while its lease is
    /// live (a grace included); the first settle to find it lapsed gives
    /// its holder this grace (as a claim's does: a renewal within it takes
    /// the record back to live) and is refused; one after the grace
    /// applies. A holder whose renewal was on its way when the operator
    /// looked is never settled under its feet.
    AfterGrace(Duration),
    /// Whatever its lease: the operator knows its process is gone.
    Force,
}

/// What [`Operable::settle`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// It was settled.
    Applied,
    /// The record changed since the operator inspected it (or is gone):
    /// nothing was written.
    Changed,
    /// In flight under a live lease (or within a grace), `lease_left` of
    /// it left: its holder may be running. Nothing was written.
    Running {
        /// What is left of the lease (or grace).
        lease_left: Duration,
    },
    /// In flight, its lease lapsed, and nothing had given its holder a
    /// grace yet: this settle gave it one, of `grace`, and wrote nothing
    /// else. A settle after the grace applies, unless the holder renewed.
    Graced {
        /// The grace given.
        grace: Duration,
    },
}

/// A store an operator can look into and repair: the `idem` tool and
/// [`Operator`](crate::Operator) work through it. Every store of this crate
/// implements it.
#[async_trait]
pub trait Operable: Store {
    /// Live records that `filter` admits, at most `filter.limit` of them.
    /// Stores say in their docs what a listing costs.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<(StorageKey, Record)>, StoreError>;

    /// The storage key of the live record whose id
    /// ([`StorageKey::record_id`]) is `id`, if there is one.
    async fn find(&self, id: &str) -> Result<Option<StorageKey>, StoreError>;

    /// Settles the record of `key` if it still is as the operator inspected
    /// it: held by `token`, in `state` ([`StateName::InFlight`] or
    /// [`StateName::Held`]); in flight, besides, as `in_flight` says, in
    /// the same atomic step (the lease as the operator read it may have
    /// been renewed since). [`Settle::Changed`] when the record changed
    /// meanwhile (or is gone).
    async fn settle(
        &self,
        key: &StorageKey,
        token: FencingToken,
        state: StateName,
        settlement: &Settlement,
        in_flight: InFlightSettle,
    ) -> Result<Settle, StoreError>;
}
