//! What the run did so far that no component remembers: the observer's
//! notes the properties read (history variables). None of it steers the
//! protocol.

use crate::bounds::MAX_STEPS;
use crate::record::Response;

/// Facts that must never be noted, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Broken(u8);

impl Broken {
    /// A claim took an execution over that had not lapsed past its grace,
    /// under `hold`, or whose holder still had a confirmed lease.
    pub const EARLY_TAKEOVER: Broken = Broken(1);
    /// A handler started, or a step's side effect ran, in an execution
    /// whose token the record did not hold in flight.
    pub const NOT_OWNER: Broken = Broken(2);
    /// A step's side effect ran again after it was recorded.
    pub const RERUN: Broken = Broken(4);
    /// An operator's write applied to a record other than the one
    /// inspected (another token or state).
    pub const STALE_SETTLE: Broken = Broken(8);

    /// Notes `fact`.
    pub fn note(&mut self, fact: Broken) {
        self.0 |= fact.0;
    }

    /// Whether `fact` was noted.
    pub fn has(self, fact: Broken) -> bool {
        self.0 & fact.0 != 0
    }
}

/// The notes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct History {
    /// Facts that must never be noted.
    pub broken: Broken,
    /// Executions that started the handler since the last tombstone (at
    /// most 2: more says nothing new).
    pub runs: u8,
    /// How often each step's side effect ran since the last tombstone (at
    /// most 2).
    pub effects: [u8; MAX_STEPS],
    /// The steps recorded, and neither forgotten by an operator nor dropped
    /// by a completion.
    pub recorded: u8,
    /// The first response the record kept.
    pub response: Option<Response>,
    /// An operator's release applied (for a `sometimes` property).
    pub operator_released: bool,
}

impl History {
    /// A handler started; `counted` under `hold` (the counts are read
    /// there only, and would only tell states apart elsewhere).
    pub fn run(&mut self, counted: bool) {
        if counted {
            self.runs = (self.runs + 1).min(2);
        }
    }

    /// The side effect of `step` ran; `counted` as [`History::run`].
    pub fn effect(&mut self, step: u8, counted: bool) {
        if counted {
            let count = &mut self.effects[usize::from(step)];
            *count = (*count + 1).min(2);
        }
        if self.recorded & (1 << step) != 0 {
            self.broken.note(Broken::RERUN);
        }
    }

    /// The record became a tombstone: the same request may run again.
    pub fn tombstone(&mut self) {
        self.runs = 0;
        self.effects = [0; MAX_STEPS];
    }

    /// The record kept `response`.
    pub fn completed(&mut self, response: Response) {
        self.response.get_or_insert(response);
        self.recorded = 0;
    }
}
