//! What the checker verifies in every reachable state (`always`), and what
//! it must reach at least once (`sometimes`), so that the `always` ones are
//! not true of a world where nothing happens.

use stateright::Property;

use crate::bounds::OnLapse;
use crate::execution::Execution;
use crate::history::Broken;
use crate::model::{Protocol, State};
use crate::network::{Answer, Party};
use crate::record::{Attempt, ClaimAnswer, RecordState};

/// Under `hold`, no handler runs twice: since the last tombstone (a
/// release by the holder or by an operator, after which the same request
/// may run again) at most one execution started the handler, and no
/// step's side effect ran twice.
pub const HOLD_RUNS_ONCE: &str = "under hold, no handler runs twice";
/// A takeover follows a lapse and its grace, of an execution that neither
/// completed nor was held, never under `hold`, and never while its holder
/// still has a confirmed lease.
pub const TAKEOVER_AFTER_LAPSE: &str = "a takeover comes only after a lapse and its grace, never to a live holder";
/// The handler starts (its code outside durable steps runs), and a step's
/// side effect runs, only in the execution whose token the record holds in
/// flight: the first holder never acts after a takeover (or an operator's
/// write), and a held execution starts nothing.
pub const EFFECTS_BY_OWNER: &str = "a handler starts and its steps run only in the execution that owns the record";
/// Once completed, the record keeps its first response.
pub const COMPLETED_KEPT: &str = "a completed record is never replaced";
/// A step recorded (and not forgotten by an operator) never runs again.
pub const RECORDED_NOT_RERUN: &str = "a recorded step never runs again";
/// An operator's write applies only to the record as inspected: the same
/// token, in the same state.
pub const SETTLE_AS_INSPECTED: &str = "an operator write applies only to the record it inspected";

/// A claim takes a lapsed execution over.
pub const A_TAKEOVER: &str = "a takeover happens";
/// A claim holds a lapsed execution for an operator.
pub const A_HOLD: &str = "an execution is held";
/// A claim gets the stored response back.
pub const A_REPLAY: &str = "a replay happens";
/// An operator's release lands.
pub const AN_OPERATOR_RELEASE: &str = "an operator release happens";
/// A claim after a takeover or a release gets recorded steps back.
pub const STEPS_HANDED_BACK: &str = "a claim gets recorded steps back";
/// A claim of another request with the key is refused.
pub const A_MISMATCH: &str = "another request with the key is refused";
/// A lease that lapsed is renewed into life by its holder.
pub const LAPSE_RENEWED: &str = "a lapsed lease is renewed back into life";

/// The properties `protocol` is checked for.
pub fn of(protocol: &Protocol) -> Vec<Property<Protocol>> {
    let mut properties = vec![
        Property::always(HOLD_RUNS_ONCE, hold_runs_once),
        Property::always(TAKEOVER_AFTER_LAPSE, |_, s: &State| !s.history.broken.has(Broken::EARLY_TAKEOVER)),
        Property::always(EFFECTS_BY_OWNER, |_, s: &State| !s.history.broken.has(Broken::NOT_OWNER)),
        Property::always(COMPLETED_KEPT, completed_kept),
        Property::always(RECORDED_NOT_RERUN, |_, s: &State| !s.history.broken.has(Broken::RERUN)),
        Property::always(SETTLE_AS_INSPECTED, |_, s: &State| !s.history.broken.has(Broken::STALE_SETTLE)),
        Property::sometimes(A_REPLAY, |_, s: &State| answered(s, ClaimAnswer::Replay)),
        Property::sometimes(LAPSE_RENEWED, lapse_renewed),
    ];
    let b = &protocol.bounds;
    // Under hold, only a release makes way for another execution.
    if protocol.on_lapse == OnLapse::Takeover || b.operator_looks > 0 || b.retryable {
        properties.push(Property::sometimes(STEPS_HANDED_BACK, steps_handed_back));
    }
    if b.other_request {
        properties.push(Property::sometimes(A_MISMATCH, |_, s: &State| answered(s, ClaimAnswer::Mismatch)));
    }
    properties.push(match protocol.on_lapse {
        OnLapse::Takeover => Property::sometimes(A_TAKEOVER, took_over),
        OnLapse::Hold => Property::sometimes(A_HOLD, |_, s: &State| s.record.state == RecordState::Held),
    });
    if b.operator_looks > 0 {
        properties.push(Property::sometimes(AN_OPERATOR_RELEASE, operator_released));
    }
    properties
}

fn hold_runs_once(protocol: &Protocol, s: &State) -> bool {
    protocol.on_lapse != OnLapse::Hold || (s.history.runs <= 1 && s.history.effects.iter().all(|&n| n <= 1))
}

fn completed_kept(_: &Protocol, s: &State) -> bool {
    s.history.response.is_none_or(|response| s.record.state == RecordState::Completed(response))
}

/// Whether a claim's answer `answer` is on its way to an execution.
fn answered(s: &State, answer: ClaimAnswer) -> bool {
    (0..s.executions.len()).any(|i| s.network.carries(Party::Execution(i as u8), |a| *a == Answer::Claim(answer)))
}

fn took_over(_: &Protocol, s: &State) -> bool {
    (0..s.executions.len()).any(|i| {
        s.network.carries(Party::Execution(i as u8), |answer| {
            matches!(answer, Answer::Claim(ClaimAnswer::Acquired { attempt: Attempt::Takeover, .. }))
        })
    })
}

fn steps_handed_back(_: &Protocol, s: &State) -> bool {
    (0..s.executions.len()).any(|i| {
        s.network.carries(Party::Execution(i as u8), |answer| {
            matches!(answer, Answer::Claim(ClaimAnswer::Acquired { attempt, steps })
                if *attempt != Attempt::First && *steps != 0)
        })
    })
}

fn lapse_renewed(_: &Protocol, s: &State) -> bool {
    s.executions.iter().enumerate().any(|(i, e)| {
        e.has_lease()
            && e.lease.lapsed_once
            && s.record.token == Execution::token(i)
            && matches!(s.record.state, RecordState::InFlight { lease_left, .. } if lease_left > 0)
    })
}

fn operator_released(_: &Protocol, s: &State) -> bool {
    s.history.operator_released
}
