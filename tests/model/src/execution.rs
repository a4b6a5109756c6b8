//! One request of the key as its process sees it: the engine's claim, the
//! handler's durable steps, the completion or release, the process's view
//! of its lease, and the keeper that renews it.
//!
//! The lease is counted from when the claim or renewal was *sent*
//! (`lease.rs`): its local end comes no later than the store's. A lease
//! whose local end passed is lapsed, not lost: the keeper renews it on, and
//! a renewal answered held confirms it again (and marks it as having lapsed
//! once, so that each later step reads the record first). Only an answer
//! that the record no longer holds the token loses it.

use crate::record::Token;

/// Where an execution is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Not arrived yet.
    Idle,
    /// Its claim is on its way.
    Claiming,
    /// Acquired, the handler not started: it starts only on a confirmed
    /// lease (`execute.rs`), or releases.
    Starting {
        /// Its record is being read first (the lease lapsed once).
        reading: bool,
    },
    /// In the handler, at durable step `index`.
    Step {
        /// The step.
        index: u8,
        /// How far it is.
        stage: Stage,
    },
    /// The handler returned: it completes, or (retryable) releases.
    Finishing,
    /// Its completion is on its way.
    Completing,
    /// Its release is on its way.
    Releasing,
    /// Answered, gave up, lost its key or stopped for an operator: it does
    /// nothing more.
    Ended,
    /// Its process died: it does nothing more.
    Crashed,
}

/// How far a durable step is (`Steps::confirmed`, then the effect, then
/// `Steps::record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Not started: waits for a confirmed lease.
    Ready,
    /// The lease lapsed once: the record is read before the step runs.
    Reading,
    /// The side effect ran; its record is on its way.
    Recording,
}

/// The execution's own call to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    /// None.
    None,
    /// Sent `age` ticks ago.
    Waiting {
        /// Ticks since it was sent.
        age: u8,
    },
    /// It timed out; the execution decides what next.
    Failed,
}

/// The keeper's renewal of this execution's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Renewal {
    /// None on its way.
    None,
    /// Sent `age` ticks ago.
    Waiting {
        /// Ticks since it was sent.
        age: u8,
        /// Sent after the local lease had lapsed.
        lapsed: bool,
    },
}

/// The process's view of its lease (`LeaseState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// Ticks to its local end; 0 once lapsed.
    pub left: u8,
    /// A renewal sent after a lapse was confirmed.
    pub lapsed_once: bool,
    /// The store said the record no longer holds the token.
    pub lost: bool,
}

/// One execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Execution {
    /// Where it is.
    pub phase: Phase,
    /// Its own call.
    pub call: Call,
    /// Its lease, as its process sees it.
    pub lease: Lease,
    /// Its keeper's renewal.
    pub renewal: Renewal,
    /// The steps it knows recorded (handed back by its claim, or its own).
    pub known: u8,
}

impl Execution {
    /// Not arrived yet.
    pub const IDLE: Execution = Execution {
        phase: Phase::Idle,
        call: Call::None,
        lease: Lease { left: 0, lapsed_once: false, lost: false },
        renewal: Renewal::None,
        known: 0,
    };

    /// The token of execution `index`.
    pub fn token(index: usize) -> Token {
        // At most MAX_EXECUTIONS, far below u8::MAX.
        index as Token + 1
    }

    /// Whether it holds an acquired lease, which its keeper renews.
    pub fn has_lease(&self) -> bool {
        matches!(
            self.phase,
            Phase::Starting { .. } | Phase::Step { .. } | Phase::Finishing | Phase::Completing | Phase::Releasing
        )
    }

    /// Whether its lease is confirmed live (`LeaseState::is_held`).
    pub fn confirmed(&self) -> bool {
        self.lease.left > 0 && !self.lease.lost
    }

    /// Whether it still acts (not ended, not crashed, arrived).
    pub fn is_active(&self) -> bool {
        !matches!(self.phase, Phase::Idle | Phase::Ended | Phase::Crashed)
    }

    /// Moves past the steps it knows recorded (their results are handed
    /// back, not run again) to the next one, or to the handler's end.
    pub fn skip_known(&mut self, steps: u8) {
        if let Phase::Step { mut index, stage: Stage::Ready } = self.phase {
            while index < steps && self.known & (1 << index) != 0 {
                index += 1;
            }
            self.phase = if index == steps { Phase::Finishing } else { Phase::Step { index, stage: Stage::Ready } };
        }
    }

    /// Whether it stops here because its lease is lost: at a step's start
    /// (`StepError::Lost`), or at the handler's end (its completion would
    /// be refused by the fence).
    pub fn stops_lost(&self) -> bool {
        self.lease.lost
            && matches!(
                self.phase,
                Phase::Starting { reading: false } | Phase::Step { stage: Stage::Ready, .. } | Phase::Finishing
            )
    }
}
