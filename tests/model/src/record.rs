//! The store's record of the one key, and the store's operations on it:
//! each one atomic, as claim.lua, renew.lua, step.lua, complete.lua,
//! release.lua, get.lua and settle.lua are.
//!
//! Ownership is the token: every operation of a holder is fenced by it, its
//! lease lapsed or not, and only a takeover (a claim after a lapse and its
//! grace) gives the record another token. Record expiry (the TTL) is left
//! out: every record outlives the explored runs.

use crate::bounds::{OnLapse, SettleFence};
use crate::mutants::Mutant;

/// A fencing token: the number of the execution whose claim made it (each
/// execution claims with one token of its own); 0 for none.
pub type Token = u8;

/// What the record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordState {
    /// No record.
    Free,
    /// A handler runs, or ran, under a lease (`l` and `g` of layout.lua).
    InFlight {
        /// Ticks left on the lease (by the store's clock); 0 once lapsed.
        lease_left: u8,
        /// A claim found the lease lapsed and gave its holder a grace
        /// (`g`): the next claim to find it lapsed takes over or holds.
        graced: bool,
    },
    /// Lapsed past its grace under `hold`: kept for an operator (`h`).
    Held,
    /// The response is kept (`c`).
    Completed(Response),
    /// A tombstone: the same request may run again (`r`).
    Released,
}

/// Whose response a completed record keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Response {
    /// The handler's, as the execution with this token completed it.
    Handler(Token),
    /// The one an operator established (`idem resolve`).
    Operator,
}

/// Which execution of the key a won claim starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attempt {
    /// The key held no record.
    First,
    /// The key held a tombstone of the same request.
    AfterRelease,
    /// The key held a lapsed execution of the same request.
    Takeover,
}

/// The state of a record by its name, as reads and operators see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StateName {
    /// No record.
    Free,
    /// In flight, graced or not.
    InFlight,
    /// Held.
    Held,
    /// Completed.
    Completed,
    /// Released.
    Released,
}

/// The key's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// What it holds.
    pub state: RecordState,
    /// The request it is for (0 with no record).
    pub fingerprint: u8,
    /// The holder's token (completed or released: the last holder's).
    pub token: Token,
    /// The durable steps recorded, as a set (bit `k` for step `k`).
    pub steps: u8,
}

/// The answer to a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClaimAnswer {
    /// The claim owns the key now.
    Acquired {
        /// Which execution this is.
        attempt: Attempt,
        /// The steps recorded before it, handed back.
        steps: u8,
    },
    /// A completed response of the same request.
    Replay,
    /// The same request runs under a live lease (or its grace).
    InFlight,
    /// Another request's record.
    Mismatch,
    /// Held for an operator.
    Held,
}

/// What a read of the record sees (get.lua).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct View {
    /// The record's state.
    pub state: StateName,
    /// Its token.
    pub token: Token,
    /// In flight with time left on its lease (a grace included).
    pub lease_live: bool,
}

/// What an operator settles an execution with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Settlement {
    /// A tombstone; with `forget_steps`, without the recorded steps.
    Release {
        /// Drop the recorded steps too.
        forget_steps: bool,
    },
    /// Completed with the operator's response.
    Resolve,
}

/// The rules a store applies: the route's terms and its faults, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rules {
    /// A new owner's lease, in ticks.
    pub lease: u8,
    /// The grace a claim gives a lapsed lease, in ticks.
    pub grace: u8,
    /// What a claim does after a lapse and its grace.
    pub on_lapse: OnLapse,
    /// How an operator's write is fenced.
    pub settle: SettleFence,
    /// The fault, if any.
    pub mutant: Option<Mutant>,
}

impl Rules {
    fn has(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }
}

impl RecordState {
    /// Its name.
    pub fn name(self) -> StateName {
        match self {
            Self::Free => StateName::Free,
            Self::InFlight { .. } => StateName::InFlight,
            Self::Held => StateName::Held,
            Self::Completed(_) => StateName::Completed,
            Self::Released => StateName::Released,
        }
    }

    /// In flight or held: a holder may renew, record, complete or release.
    pub fn is_running(self) -> bool {
        matches!(self, Self::InFlight { .. } | Self::Held)
    }
}

impl Record {
    /// No record.
    pub const FREE: Record = Record { state: RecordState::Free, fingerprint: 0, token: 0, steps: 0 };

    fn owned_by(&self, token: Token) -> bool {
        self.state.is_running() && self.token == token
    }

    /// One lease tick of the store's clock.
    pub fn tick(&mut self) -> bool {
        match &mut self.state {
            RecordState::InFlight { lease_left, .. } if *lease_left > 0 => {
                *lease_left -= 1;
                true
            }
            _ => false,
        }
    }

    fn acquire(&mut self, fingerprint: u8, token: Token, attempt: Attempt, steps: u8, rules: &Rules) -> ClaimAnswer {
        let state = RecordState::InFlight { lease_left: rules.lease, graced: false };
        *self = Record { state, fingerprint, token, steps };
        ClaimAnswer::Acquired { attempt, steps }
    }

    /// A claim of the request `fingerprint` with a fresh `token`
    /// (claim.lua, the table of `Store::claim`). The engine sends each
    /// claim once, with a token of its own, so the answer to a claim sent
    /// again with the token the record holds is left out.
    pub fn claim(&mut self, fingerprint: u8, token: Token, rules: &Rules) -> ClaimAnswer {
        match self.state {
            RecordState::Free => return self.acquire(fingerprint, token, Attempt::First, 0, rules),
            _ if self.fingerprint != fingerprint => return ClaimAnswer::Mismatch,
            RecordState::Completed(_) => return ClaimAnswer::Replay,
            RecordState::Released => return self.acquire(fingerprint, token, Attempt::AfterRelease, self.steps, rules),
            RecordState::InFlight { .. } | RecordState::Held => {}
        }
        let RecordState::InFlight { lease_left, graced } = self.state else { return ClaimAnswer::Held };
        if lease_left > 0 {
            return ClaimAnswer::InFlight;
        }
        if !graced && !rules.has(Mutant::NoGrace) {
            self.state = RecordState::InFlight { lease_left: rules.grace, graced: true };
            return ClaimAnswer::InFlight;
        }
        if rules.on_lapse == OnLapse::Hold && !rules.has(Mutant::TakeoverUnderHold) {
            self.state = RecordState::Held;
            return ClaimAnswer::Held;
        }
        let steps = if rules.has(Mutant::TakeoverDropsSteps) { 0 } else { self.steps };
        self.acquire(fingerprint, token, Attempt::Takeover, steps, rules)
    }

    /// A renewal by `token` (renew.lua): back to a live lease, a grace
    /// ended; a held record stays held.
    pub fn renew(&mut self, token: Token, rules: &Rules) -> bool {
        if !self.owned_by(token) {
            return false;
        }
        if let RecordState::InFlight { .. } = self.state {
            self.state = RecordState::InFlight { lease_left: rules.lease, graced: false };
        }
        true
    }

    /// Step `step` recorded by `token` (step.lua): a fenced append.
    pub fn record_step(&mut self, token: Token, step: u8) -> bool {
        if !self.owned_by(token) {
            return false;
        }
        self.steps |= 1 << step;
        true
    }

    /// The handler's response stored by `token` (complete.lua); the same
    /// completion sent again is answered held.
    pub fn complete(&mut self, token: Token, rules: &Rules) -> bool {
        let response = Response::Handler(token);
        let unfenced = rules.has(Mutant::CompleteUnfenced)
            && matches!(self.state, RecordState::InFlight { .. } | RecordState::Held | RecordState::Completed(_));
        if self.owned_by(token) || unfenced {
            self.state = RecordState::Completed(response);
            self.steps = 0;
            return true;
        }
        self.token == token && self.state == RecordState::Completed(response)
    }

    /// A tombstone left by `token` (release.lua), keeping the steps.
    pub fn release(&mut self, token: Token) -> bool {
        if !self.owned_by(token) {
            return false;
        }
        self.state = RecordState::Released;
        true
    }

    /// What a read sees (get.lua).
    pub fn view(&self) -> View {
        let lease_live = matches!(self.state, RecordState::InFlight { lease_left, .. } if lease_left > 0);
        View { state: self.state.name(), token: self.token, lease_live }
    }

    /// An operator's write, if the record is still as inspected: held by
    /// `token`, in `state` (settle.lua); an in-flight record, besides, as
    /// `rules.settle` says (a write under [`SettleFence::AfterGrace`] that
    /// finds the lease lapsed with no grace given gives one, and is
    /// refused).
    pub fn settle(&mut self, token: Token, state: StateName, settlement: Settlement, rules: &Rules) -> bool {
        if !self.state.is_running() {
            return false;
        }
        if !rules.has(Mutant::SettleUnfenced) {
            if self.token != token || self.state.name() != state {
                return false;
            }
            if let RecordState::InFlight { lease_left, graced } = self.state {
                match rules.settle {
                    SettleFence::AsInspected => {}
                    SettleFence::LiveRefused | SettleFence::AfterGrace if lease_left > 0 => return false,
                    SettleFence::LiveRefused => {}
                    SettleFence::AfterGrace if !graced => {
                        self.state = RecordState::InFlight { lease_left: rules.grace, graced: true };
                        return false;
                    }
                    SettleFence::AfterGrace => {}
                }
            }
        }
        match settlement {
            Settlement::Release { forget_steps } => {
                self.state = RecordState::Released;
                if forget_steps {
                    self.steps = 0;
                }
            }
            Settlement::Resolve => {
                self.state = RecordState::Completed(Response::Operator);
                self.steps = 0;
            }
        }
        true
    }
}
