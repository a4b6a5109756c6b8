//! The operator (§14 of the behaviour contract): inspects the record, and
//! settles an execution that will not finish by itself with a write that
//! expects the record as inspected (its token and state), as
//! `Operator::settle` in `operate.rs` does. An in-flight execution whose
//! lease is live (its grace included) is refused there as running.
//!
//! The inspection is a snapshot taken in one step: a read whose answer
//! comes late is the same as an operator who takes longer to write. The
//! write's answer is not waited for: it tells the operator only whether to
//! look again, which a later look does anyway.

use crate::bounds::Targets;
use crate::record::{StateName, Token, View};

/// Where the operator is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Between looks.
    Idle,
    /// It saw an execution it may settle.
    Inspected {
        /// Its holder's token.
        token: Token,
        /// Its state.
        state: StateName,
    },
}

/// The operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Operator {
    /// Where it is.
    pub phase: Phase,
    /// Records it may still inspect.
    pub looks_left: u8,
}

impl Operator {
    /// An operator who may inspect `looks` records.
    pub fn new(looks: u8) -> Self {
        Self { phase: Phase::Idle, looks_left: looks }
    }

    /// Whether `view` shows an execution the operator settles: held, or
    /// (if it `targets` them) in flight with its lease lapsed.
    pub fn settleable(view: &View, targets: Targets) -> bool {
        match view.state {
            StateName::Held => true,
            StateName::InFlight => targets == Targets::HeldAndLapsed && !view.lease_live,
            _ => false,
        }
    }
}
