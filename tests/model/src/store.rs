//! The store applying a request that lands, and the observer's notes on
//! what it changed: takeovers, recorded steps, completions, tombstones and
//! operators' writes.

use crate::bounds::OnLapse;
use crate::execution::Execution;
use crate::history::{Broken, History};
use crate::network::{Answer, Op};
use crate::record::{Attempt, ClaimAnswer, Record, RecordState, Response, Rules, Settlement, Token};

/// What the store holds, and what the observer sees of the world as a
/// request lands.
pub struct Store<'a> {
    /// The rules it applies.
    pub rules: Rules,
    /// The key's record.
    pub record: &'a mut Record,
    /// The observer's notes.
    pub history: &'a mut History,
    /// The executions, as they are when the request lands (for the notes
    /// only: the store never sees them).
    pub executions: &'a [Execution],
}

impl Store<'_> {
    /// Applies `op`, sent with `token`, and answers it.
    pub fn apply(&mut self, token: Token, op: Op) -> Answer {
        let rules = self.rules;
        match op {
            Op::Claim(fingerprint) => {
                let before = *self.record;
                let answer = self.record.claim(fingerprint, token, &rules);
                if matches!(answer, ClaimAnswer::Acquired { attempt: Attempt::Takeover, .. }) && before.token != token {
                    self.took_over(&before);
                }
                Answer::Claim(answer)
            }
            Op::Renew => Answer::Fence(self.record.renew(token, &rules)),
            Op::RecordStep(step) => {
                let held = self.record.record_step(token, step);
                if held {
                    self.history.recorded |= 1 << step;
                }
                Answer::Fence(held)
            }
            Op::Complete => {
                let held = self.record.complete(token, &rules);
                if held {
                    self.history.completed(Response::Handler(token));
                }
                Answer::Fence(held)
            }
            Op::Release => {
                let held = self.record.release(token);
                if held {
                    self.history.tombstone();
                }
                Answer::Fence(held)
            }
            Op::Read => Answer::View(self.record.view()),
            Op::Settle { state, settlement } => {
                let before = *self.record;
                let held = self.record.settle(token, state, settlement, &rules);
                if held {
                    if before.token != token || before.state.name() != state {
                        self.history.broken.note(Broken::STALE_SETTLE);
                    }
                    match settlement {
                        Settlement::Release { forget_steps } => {
                            self.history.tombstone();
                            self.history.operator_released = true;
                            if forget_steps {
                                self.history.recorded = 0;
                            }
                        }
                        Settlement::Resolve => self.history.completed(Response::Operator),
                    }
                }
                Answer::Fence(held)
            }
        }
    }

    /// A claim took `before` over: only after a lapse past its grace, never
    /// under `hold`, never while its holder's lease is confirmed.
    fn took_over(&mut self, before: &Record) {
        let past_grace = before.state == RecordState::InFlight { lease_left: 0, graced: true };
        let holder = usize::from(before.token).checked_sub(1).and_then(|i| self.executions.get(i));
        let holder_confirmed = holder.is_some_and(|e| e.has_lease() && e.confirmed());
        if !past_grace || self.rules.on_lapse == OnLapse::Hold || holder_confirmed {
            self.history.broken.note(Broken::EARLY_TAKEOVER);
        }
    }
}
