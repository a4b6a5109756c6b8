//! Executions of the same request are interchangeable: a state and the
//! same state with two such executions swapped (their numbers, tokens and
//! messages) have the same futures, up to the swap, and the properties do
//! not tell them apart. The checker keeps one of each such set, the least:
//! up to half (two executions) or a sixth (three) of the states.
//!
//! A counterexample found this way may swap two executions' numbers
//! between its steps; the checks that print one explore without it.

use crate::bounds::Bounds;
use crate::model::State;
use crate::network::{Answer, Message, Network, Party};
use crate::operator;
use crate::record::{RecordState, Response, Token};

/// The orderings of two and three executions, but the identity: `p[i]` is
/// the new number of execution `i`.
const SWAPS_OF_TWO: [[usize; 3]; 1] = [[1, 0, 2]];
const SWAPS_OF_THREE: [[usize; 3]; 5] = [[0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// The least of the states that differ from `state` only by the numbering
/// of executions of the same request.
pub fn representative(state: State, bounds: &Bounds) -> State {
    let same = usize::from(bounds.executions) - usize::from(bounds.other_request);
    let swaps: &[[usize; 3]] = match same {
        2 => &SWAPS_OF_TWO,
        3 => &SWAPS_OF_THREE,
        _ => &[],
    };
    let mut least = state;
    for swap in swaps {
        let swapped = renumber(&least, swap);
        if swapped < least {
            least = swapped;
        }
    }
    least
}

/// `state` with execution `i` numbered `to[i]`.
fn renumber(state: &State, to: &[usize; 3]) -> State {
    let token = |t: Token| if t == 0 { 0 } else { to[usize::from(t) - 1] as Token + 1 };
    let party = |p: Party| match p {
        Party::Execution(i) => Party::Execution(to[usize::from(i)] as u8),
        Party::Keeper(i) => Party::Keeper(to[usize::from(i)] as u8),
        Party::Operator => Party::Operator,
    };
    let response = |r: Response| match r {
        Response::Handler(t) => Response::Handler(token(t)),
        Response::Operator => Response::Operator,
    };
    let mut s = state.clone();
    for (i, execution) in state.executions.iter().enumerate() {
        s.executions[to[i]] = *execution;
    }
    s.record.token = token(s.record.token);
    if let RecordState::Completed(r) = s.record.state {
        s.record.state = RecordState::Completed(response(r));
    }
    s.history.response = s.history.response.map(response);
    if let operator::Phase::Inspected { token: t, state } = s.operator.phase {
        s.operator.phase = operator::Phase::Inspected { token: token(t), state };
    }
    let mut network = Network::default();
    for message in state.network.messages() {
        network.send(match *message {
            Message::Request { from, token: t, op, orphan } => {
                Message::Request { from: party(from), token: token(t), op, orphan }
            }
            Message::Reply { to, answer: Answer::View(mut view) } => {
                view.token = token(view.token);
                Message::Reply { to: party(to), answer: Answer::View(view) }
            }
            Message::Reply { to, answer } => Message::Reply { to: party(to), answer },
        });
    }
    s.network = network;
    s
}
