//! Each mutant is found, by the property it breaks: the checks can fail.

use super::{counterexample, implemented};
use crate::properties::{
    COMPLETED_KEPT, EFFECTS_BY_OWNER, HOLD_RUNS_ONCE, RECORDED_NOT_RERUN, SETTLE_AS_INSPECTED, TAKEOVER_AFTER_LAPSE,
};
use crate::{Bounds, Mutant, OnLapse};

/// One step, no failed call, no operator: the smallest world that shows
/// most faults.
const NARROW: Bounds = Bounds { operator_looks: 0, ..Bounds::small() };

#[test]
fn a_completion_without_the_fence_replaces_a_completed_record() {
    counterexample(implemented(OnLapse::Takeover, NARROW).with_mutant(Mutant::CompleteUnfenced), COMPLETED_KEPT);
}

#[test]
fn a_takeover_without_the_grace_is_found() {
    counterexample(implemented(OnLapse::Takeover, NARROW).with_mutant(Mutant::NoGrace), TAKEOVER_AFTER_LAPSE);
}

#[test]
fn a_takeover_under_hold_runs_the_handler_twice() {
    counterexample(implemented(OnLapse::Hold, NARROW).with_mutant(Mutant::TakeoverUnderHold), HOLD_RUNS_ONCE);
}

#[test]
fn a_takeover_that_drops_the_steps_runs_a_recorded_step_again() {
    counterexample(implemented(OnLapse::Takeover, NARROW).with_mutant(Mutant::TakeoverDropsSteps), RECORDED_NOT_RERUN);
}

#[test]
fn an_operator_write_without_expectations_settles_another_execution() {
    let bounds = Bounds { operator_looks: 1, ..NARROW };
    counterexample(implemented(OnLapse::Takeover, bounds).with_mutant(Mutant::SettleUnfenced), SETTLE_AS_INSPECTED);
}

#[test]
fn a_step_after_a_lapse_without_reading_the_record_runs_on_a_held_record() {
    counterexample(implemented(OnLapse::Hold, NARROW).with_mutant(Mutant::NoReadAfterLapse), EFFECTS_BY_OWNER);
}

#[test]
fn a_lease_counted_from_the_answer_outlives_the_store_s() {
    counterexample(implemented(OnLapse::Takeover, NARROW).with_mutant(Mutant::LeaseFromAnswer), EFFECTS_BY_OWNER);
}
