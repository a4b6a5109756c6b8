//! Where the protocol as implemented breaks a property, each with its
//! counterexample, and the change that the checks in `checks.rs` verify
//! instead. When the runtime changes, these tests fail: the implemented
//! protocol then joins the checks there.

use super::{counterexample, replay};
use crate::network::{Message, Op};
use crate::properties::{EFFECTS_BY_OWNER, HOLD_RUNS_ONCE};
use crate::record::{RecordState, Response};
use crate::{Action, Bounds, OnLapse, Protocol, SettleFence, StartCheck, Targets};

/// One step, no failed call, an operator.
const NARROW: Bounds = Bounds::small();

/// Fixed; kept to show what the fix closes. settle.lua, the memory store
/// and settle.sql fenced an operator's write by the token and state
/// inspected, but not by the lease ([`SettleFence::AsInspected`]): the operator
/// sees an in-flight execution lapsed (its renewal still on its way), the
/// renewal lands, and the write then settles the execution of a holder
/// that never saw its lease lapse, so it goes on (starts its handler, runs
/// its next step) without reading its record: beside a retry that claims
/// the tombstone, or against the response the operator established.
#[test]
fn an_operator_release_races_a_renewal_that_lands_first() {
    let protocol = Protocol::new(OnLapse::Takeover, NARROW)
        .with_settle(SettleFence::AsInspected)
        .with_start(StartCheck::ReadAfterLapse);
    let actions = counterexample(protocol, EFFECTS_BY_OWNER);
    let settled = replay(&protocol, &actions).record.state;
    assert!(
        matches!(settled, RecordState::Released | RecordState::Completed(Response::Operator)),
        "the operator settled it: {settled:?}"
    );
    let read = |action: &Action| matches!(action, Action::Deliver(Message::Request { op: Op::Read, .. }));
    assert!(!actions.iter().any(read), "the holder never read its record");
}

/// Refusing a live lease in the write itself is not enough: a holder whose
/// lease lapsed once reads its record before a step and runs the step on
/// the answer; the lease may lapse, and the operator's write land, between
/// the read and the step. A grace longer than the store timeout, as a
/// takeover waits, closes that gap too.
#[test]
fn refusing_a_live_lease_at_the_write_leaves_the_read_of_a_holder_open() {
    let protocol = Protocol::new(OnLapse::Takeover, Bounds { failures: 1, ..NARROW })
        .with_settle(SettleFence::LiveRefused)
        .with_start(StartCheck::ReadAfterLapse);
    let actions = counterexample(protocol, EFFECTS_BY_OWNER);
    let read = |action: &Action| matches!(action, Action::Deliver(Message::Request { op: Op::Read, .. }));
    assert!(actions.iter().any(read), "the holder read its record first");
}

/// Fixed; kept to show what the fix closes. The engine started a handler on
/// a confirmed lease without reading the record, even after the lease
/// lapsed ([`StartCheck::Lease`]); and a renewal of a held record answers
/// held (so that its holder may still complete) and so confirms the lease.
/// A holder whose handler had not started when its record was held started
/// it anyway: its code outside durable steps ran on a record the operator
/// is settling on what it saw. The engine now reads the record first
/// ([`StartCheck::ReadAfterLapse`], which `Protocol::new` models).
#[test]
fn a_handler_starts_on_a_held_record() {
    let protocol = Protocol::new(OnLapse::Hold, Bounds { operator_looks: 0, ..NARROW })
        .with_settle(SettleFence::AfterGrace)
        .with_start(StartCheck::Lease);
    let actions = counterexample(protocol, EFFECTS_BY_OWNER);
    assert!(matches!(actions.last(), Some(Action::Start(_))), "it is the start");
    assert_eq!(replay(&protocol, &actions).record.state, RecordState::Held);
}

/// Fixed, as the last: with an operator who releases the held record, the
/// late start ran the handler a second time beside the retry that claimed
/// the tombstone.
#[test]
fn under_hold_a_late_start_runs_beside_the_retry_after_a_release() {
    let bounds = Bounds { targets: Targets::Held, ..NARROW };
    let protocol =
        Protocol::new(OnLapse::Hold, bounds).with_settle(SettleFence::AfterGrace).with_start(StartCheck::Lease);
    let actions = counterexample(protocol, HOLD_RUNS_ONCE);
    assert!(replay(&protocol, &actions).history.operator_released);
}
