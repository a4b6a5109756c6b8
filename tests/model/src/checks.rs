//! The checks: every state within the bounds explored, breadth first,
//! under both lapse policies; then the findings (the protocol as
//! implemented, where it breaks a property) and the mutants (each fault
//! found, by the property it breaks).
//!
//! Each check prints its configuration, the unique states it visited and
//! its time (`cargo test -p idem-model -- --nocapture`).

mod findings;
mod mutants;

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use crate::{Action, Bounds, OnLapse, Protocol, State};

/// The protocol as implemented (both findings' fixes included: a record
/// read before a handler starts on a lease that lapsed once, and an
/// operator's write to an in-flight record only after a grace).
fn implemented(on_lapse: OnLapse, bounds: Bounds) -> Protocol {
    Protocol::new(on_lapse, bounds)
}

/// Two executions, a handler of two steps, one failed call, an operator
/// who settles held and lapsed executions.
const WIDE: Bounds = Bounds { steps: 2, failures: 1, ..Bounds::small() };

fn describe(protocol: &Protocol) -> String {
    let b = &protocol.bounds;
    format!(
        "{:?}, settle {:?}, start {:?}{}: {} executions, {} steps, lease {} grace {} timeout {}, {} failed calls, \
         {} operator looks at {:?}{}{}",
        protocol.on_lapse,
        protocol.settle,
        protocol.start,
        protocol.mutant.map(|m| format!(", mutant {m:?}")).unwrap_or_default(),
        b.executions,
        b.steps,
        b.lease,
        b.grace,
        b.timeout,
        b.failures,
        b.operator_looks,
        b.targets,
        if b.retryable { ", retryable" } else { "" },
        if b.other_request { ", another request" } else { "" },
    )
}

/// Explores every state of `protocol` and asserts that every `always`
/// property holds and every `sometimes` one is reached.
fn check(protocol: Protocol) {
    let started = Instant::now();
    let checked = protocol.with_symmetry().checker().spawn_bfs().join();
    println!(
        "{}\n  {} unique states (up to symmetry), depth {}, {:.1?}",
        describe(&protocol),
        checked.unique_state_count(),
        checked.max_depth(),
        started.elapsed()
    );
    checked.assert_properties();
}

/// A run of `protocol` that breaks `property`: the actions up to the first
/// state that breaks it. Panics if there is none within the bounds.
fn counterexample(protocol: Protocol, property: &'static str) -> Vec<Action> {
    let started = Instant::now();
    let checked = protocol.checker().finish_when(HasDiscoveries::AnyOf([property].into())).spawn_bfs().join();
    let elapsed: Duration = started.elapsed();
    let Some(path) = checked.discovery(property) else {
        panic!("no run of {} breaks \"{property}\"", describe(&protocol));
    };
    let condition = protocol.property(property).condition;
    let mut actions = Vec::new();
    for (state, action) in path.into_vec() {
        if !condition(&protocol, &state) {
            break;
        }
        actions.extend(action);
    }
    println!(
        "{}\n  breaks \"{property}\" in {} steps ({} unique states visited, {:.1?}):",
        describe(&protocol),
        actions.len(),
        checked.unique_state_count(),
        elapsed
    );
    for action in &actions {
        println!("    {action:?}");
    }
    actions
}

/// The last state of `actions` from the initial state.
fn replay(protocol: &Protocol, actions: &[Action]) -> State {
    let mut state = protocol.init_states().remove(0);
    for action in actions {
        state = protocol.next_state(&state, *action).expect("a counterexample replays");
    }
    state
}

#[test]
fn under_hold_no_handler_runs_twice() {
    check(implemented(OnLapse::Hold, WIDE));
}

#[test]
fn under_hold_a_retryable_handler_runs_again_only_after_its_release() {
    check(implemented(OnLapse::Hold, Bounds { retryable: true, ..Bounds::small() }));
}

#[test]
fn under_hold_three_requests_run_one_handler() {
    check(implemented(OnLapse::Hold, Bounds { executions: 3, operator_looks: 0, ..Bounds::small() }));
}

#[test]
fn under_takeover_a_second_run_comes_only_after_a_lapse() {
    check(implemented(OnLapse::Takeover, Bounds { steps: 2, ..Bounds::small() }));
}

#[test]
fn under_takeover_a_failed_call_changes_nothing() {
    check(implemented(OnLapse::Takeover, Bounds { failures: 1, ..Bounds::small() }));
}

#[test]
fn under_takeover_another_request_with_the_key_is_refused() {
    let bounds = Bounds { executions: 3, other_request: true, operator_looks: 0, ..Bounds::small() };
    check(implemented(OnLapse::Takeover, bounds));
}

#[test]
fn takeover_as_implemented_keeps_every_promise_without_an_operator() {
    check(Protocol::new(OnLapse::Takeover, Bounds { operator_looks: 0, ..WIDE }));
}
