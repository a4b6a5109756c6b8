//! How large a world one check explores, and the protocol's own numbers, in
//! ticks of the model's clock.
//!
//! Time is relative: the store's lease, each process's view of its lease and
//! the age of each call count down or up by one per tick and stop at their
//! bound, so the states are finite without a horizon, and a pause of any
//! length is one of them. The numbers keep the inequality the runtime's
//! safety rests on: an answer is waited for at most `timeout`, shorter than
//! the `grace` a claim gives a lapsed holder (the runtime keeps its store
//! timeout within a third of the lease, and the grace is half of it).

/// What a claim does with an execution of the same request whose lease
/// lapsed unfinished, past its grace (`OnLapse` in `idem-runtime`'s
/// `store.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnLapse {
    /// Take the key over and run the handler again, handing the recorded
    /// steps back.
    Takeover,
    /// Never run it again by itself: the record is held for an operator.
    Hold,
}

/// How the store fences an operator's write (`Operable::settle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleFence {
    /// As the stores implemented it before the fix of the first finding
    /// (`checks/findings.rs`): the record must still hold the inspected
    /// token, in the inspected state (in flight, graced or not, or held).
    /// Whether an in-flight lease is live is checked on the operator's read
    /// only.
    AsInspected,
    /// Besides, an in-flight record whose lease is live (a grace included)
    /// is refused in the same atomic step: the `Running` check of
    /// `Operator::settle`, moved into the store.
    LiveRefused,
    /// As the stores implement it (settle.lua, the memory store,
    /// settle.sql): besides, an in-flight record is settled as a takeover
    /// would take it: only after a grace. A write that finds the lease
    /// live is refused; one that finds it lapsed, with no grace given yet,
    /// gives one and is refused; one after the grace applies.
    AfterGrace,
}

/// What an execution checks before it starts its handler (`execute.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StartCheck {
    /// As the engine did before the second finding was fixed: a confirmed
    /// lease (`Execution::is_held`) only.
    Lease,
    /// As the engine does: besides, a lease that lapsed once has its record
    /// read first (`LeaseState::standing`, as before a step): a held record,
    /// or another's, starts nothing.
    ReadAfterLapse,
}

/// Which executions the operator settles (`idem list --state ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Targets {
    /// Held ones only.
    Held,
    /// Held ones, and in-flight ones whose lease lapsed (the tool refuses
    /// a live one as running).
    HeldAndLapsed,
}

/// The size of the explored world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Requests of the one key (each its own execution and token): 1 to
    /// [`MAX_EXECUTIONS`].
    pub executions: u8,
    /// Durable steps of the handler: 1 to [`MAX_STEPS`].
    pub steps: u8,
    /// A lease, in ticks.
    pub lease: u8,
    /// The grace a claim gives a lease it finds lapsed, in ticks.
    pub grace: u8,
    /// Longest wait for an answer, in ticks: a call older than this has
    /// failed, and its answer, if it comes, is thrown away.
    pub timeout: u8,
    /// Calls that may fail (time out) in one run: their request may still
    /// land late, or never; their answer is lost.
    pub failures: u8,
    /// Records the operator may inspect (each may end in a write).
    pub operator_looks: u8,
    /// Which executions the operator settles.
    pub targets: Targets,
    /// Whether the handler may end with a retryable response (a release:
    /// "nothing happened").
    pub retryable: bool,
    /// Whether the last execution is a different request (another
    /// fingerprint) with the same key.
    pub other_request: bool,
}

/// Most executions a state has room for.
pub const MAX_EXECUTIONS: usize = 3;

/// Most durable steps a handler has.
pub const MAX_STEPS: usize = 2;

impl Bounds {
    /// Two executions of a handler with one step, a lease of two ticks, a
    /// grace and a timeout of one, no failed call, one operator's look at
    /// held and lapsed executions.
    pub const fn small() -> Self {
        Self {
            executions: 2,
            steps: 1,
            lease: 2,
            grace: 1,
            timeout: 1,
            failures: 0,
            operator_looks: 1,
            targets: Targets::HeldAndLapsed,
            retryable: false,
            other_request: false,
        }
    }

    /// The fingerprint of execution `index`'s request.
    pub fn fingerprint(&self, index: usize) -> u8 {
        if self.other_request && index + 1 == usize::from(self.executions) { 2 } else { 1 }
    }

    /// All the handler's steps, as a set.
    pub fn all_steps(&self) -> u8 {
        (1u8 << self.steps) - 1
    }

    /// Panics with the bound at fault if these bounds cannot be explored.
    pub fn check(&self) {
        assert!((1..=MAX_EXECUTIONS).contains(&usize::from(self.executions)), "1 to {MAX_EXECUTIONS} executions");
        assert!((1..=MAX_STEPS).contains(&usize::from(self.steps)), "1 to {MAX_STEPS} steps");
        assert!(self.lease > self.timeout, "a claim answered within the timeout must leave some lease");
        assert!(self.grace >= 1 && self.timeout >= 1, "a grace and a timeout of at least one tick");
        assert!(!self.other_request || self.executions >= 2, "another request besides at least one");
    }
}
