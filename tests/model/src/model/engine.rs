//! What the engine does for an execution at each of its events: its
//! calls, the answers it gets, its keeper's renewals, the start of its
//! handler, each step's side effect, and the end (`engine/mod.rs`,
//! `engine/steps.rs`, `engine/lease.rs` and `actix/execute.rs` of
//! `idem-runtime`).

use super::{Protocol, State};
use crate::bounds::{MAX_EXECUTIONS, OnLapse, StartCheck};
use crate::execution::{Call, Execution, Phase, Renewal, Stage};
use crate::history::Broken;
use crate::mutants::Mutant;
use crate::network::{Answer, Op, Party};
use crate::record::{ClaimAnswer, StateName};

impl Protocol {
    /// Execution `i` sends `op`, waiting for its answer.
    pub(super) fn call(s: &mut State, i: usize, op: Op) {
        s.executions[i].call = Call::Waiting { age: 0 };
        s.network.request(Party::Execution(i as u8), Execution::token(i), op);
    }

    /// Execution `i` does nothing more; its keeper leaves its lease alone.
    pub(super) fn end(s: &mut State, i: usize, phase: Phase) {
        // What it knew goes with it: ended executions compare equal.
        s.executions[i] = Execution { phase, ..Execution::IDLE };
        s.network.forget(Party::Execution(i as u8));
        s.network.forget(Party::Keeper(i as u8));
    }

    /// Ends execution `i` if its lease is lost where it would notice.
    fn notice_loss(s: &mut State, i: usize) {
        if s.executions[i].stops_lost() {
            Self::end(s, i, Phase::Ended);
        }
    }

    /// Whether execution `i` owns the record, in flight.
    fn owns(s: &State, i: usize) -> bool {
        s.record.token == Execution::token(i) && s.record.state.name() == StateName::InFlight
    }

    /// Execution `i` runs step `step`'s side effect and sends its record.
    pub(super) fn effect(&self, s: &mut State, i: usize, step: u8) {
        if !Self::owns(s, i) {
            s.history.broken.note(Broken::NOT_OWNER);
        }
        s.history.effect(step, self.on_lapse == OnLapse::Hold);
        s.executions[i].phase = Phase::Step { index: step, stage: Stage::Recording };
        Self::call(s, i, Op::RecordStep(step));
    }

    /// Execution `i` starts its handler.
    fn run(&self, s: &mut State, i: usize) {
        if !Self::owns(s, i) {
            s.history.broken.note(Broken::NOT_OWNER);
        }
        s.history.run(self.on_lapse == OnLapse::Hold);
        s.executions[i].phase = Phase::Step { index: 0, stage: Stage::Ready };
        s.executions[i].skip_known(self.bounds.steps);
    }

    /// Execution `i` starts its handler if its lease is confirmed (and, if
    /// the engine checks so, its record still its own after a lapse), or
    /// leaves a tombstone.
    pub(super) fn start(&self, s: &mut State, i: usize) {
        let e = s.executions[i];
        if !e.confirmed() {
            // Answered, or started, after the lease's end: never start; a
            // tombstone, if the record still holds the claim.
            s.network.orphan(Party::Execution(i as u8), Execution::token(i), Op::Release);
            Self::end(s, i, Phase::Ended);
        } else if e.lease.lapsed_once && self.start == StartCheck::ReadAfterLapse {
            s.executions[i].phase = Phase::Starting { reading: true };
            Self::call(s, i, Op::Read);
        } else {
            self.run(s, i);
        }
    }

    /// Puts executions where their next step is not a choice: a handler
    /// that returned completes at once (a pause there is the same as a
    /// slow request) unless it may release; and an execution that completes
    /// acts on its lease no more (it only waits for its completion, or
    /// sends it again unless the lease is lost), so its view of the lease
    /// is forgotten, and such states compare equal.
    pub(super) fn settle_phases(&self, s: &mut State) {
        for i in 0..MAX_EXECUTIONS {
            if s.executions[i].phase == Phase::Finishing && !self.bounds.retryable {
                s.executions[i].phase = Phase::Completing;
                Self::call(s, i, Op::Complete);
            }
            let e = &mut s.executions[i];
            if e.phase == Phase::Completing {
                e.lease.left = 0;
                e.lease.lapsed_once = false;
                if let Renewal::Waiting { age, .. } = e.renewal {
                    e.renewal = Renewal::Waiting { age, lapsed: false };
                }
            }
        }
    }

    /// Execution `i` acts on its failed call, as the engine does: a claim
    /// gives up (503) and releases what it may have taken; a read is tried
    /// again by the step's wait; a step's record and a completion are sent
    /// again unless the lease is lost; a release while the lease holds.
    pub(super) fn retry(&self, s: &mut State, i: usize) {
        let e = s.executions[i];
        s.executions[i].call = Call::None;
        match e.phase {
            Phase::Claiming => {
                // 503; what the claim took, if it landed, is released.
                s.network.orphan(Party::Execution(i as u8), Execution::token(i), Op::Release);
                Self::end(s, i, Phase::Ended);
            }
            Phase::Starting { reading: true } => s.executions[i].phase = Phase::Starting { reading: false },
            Phase::Step { index, stage: Stage::Reading } => {
                s.executions[i].phase = Phase::Step { index, stage: Stage::Ready };
            }
            Phase::Step { index, stage: Stage::Recording } if !e.lease.lost => Self::call(s, i, Op::RecordStep(index)),
            Phase::Completing if !e.lease.lost => Self::call(s, i, Op::Complete),
            Phase::Releasing if e.confirmed() => Self::call(s, i, Op::Release),
            _ => Self::end(s, i, Phase::Ended),
        }
    }

    /// Execution `i` gets the answer to its call.
    pub(super) fn answered(&self, s: &mut State, i: usize, answer: Answer) {
        let e = &mut s.executions[i];
        let age = match e.call {
            Call::Waiting { age } => age,
            _ => unreachable!("answers go only to a waiting call"),
        };
        e.call = Call::None;
        match (e.phase, answer) {
            (Phase::Claiming, Answer::Claim(ClaimAnswer::Acquired { steps, .. })) => {
                e.phase = Phase::Starting { reading: false };
                e.known = steps;
                // Counted from when the claim was sent.
                e.lease.left = self.bounds.lease.saturating_sub(age);
            }
            (Phase::Claiming, Answer::Claim(ClaimAnswer::InFlight | ClaimAnswer::Held)) => {
                // 409: the client retries later, as a new request with a
                // new token (no record ever held this one).
                e.phase = Phase::Idle;
            }
            (Phase::Starting { reading: true }, Answer::View(view)) => {
                if view.state == StateName::InFlight && view.token == Execution::token(i) {
                    self.run(s, i);
                } else {
                    Self::end(s, i, Phase::Ended);
                }
            }
            (Phase::Step { index, stage: Stage::Reading }, Answer::View(view)) => {
                if view.state == StateName::InFlight && view.token == Execution::token(i) {
                    self.effect(s, i, index);
                } else {
                    // Held for an operator, or another's: it stops.
                    Self::end(s, i, Phase::Ended);
                }
            }
            (Phase::Step { index, stage: Stage::Recording }, Answer::Fence(true)) => {
                e.known |= 1 << index;
                e.phase = Phase::Step { index: index + 1, stage: Stage::Ready };
                e.skip_known(self.bounds.steps);
            }
            _ => Self::end(s, i, Phase::Ended),
        }
        Self::notice_loss(s, i);
    }

    /// The keeper gets the answer to execution `i`'s renewal.
    pub(super) fn renewed(&self, s: &mut State, i: usize, answer: Answer) {
        let e = &mut s.executions[i];
        let Renewal::Waiting { age, lapsed } = e.renewal else { unreachable!("answers go only to a waiting renewal") };
        e.renewal = Renewal::None;
        if answer == Answer::Fence(true) {
            // Confirmed from when it was sent.
            let since = if self.has(Mutant::LeaseFromAnswer) { 0 } else { age };
            e.lease.left = e.lease.left.max(self.bounds.lease.saturating_sub(since));
            e.lease.lapsed_once |= lapsed;
        } else {
            e.lease.lost = true;
        }
        Self::notice_loss(s, i);
    }
}
