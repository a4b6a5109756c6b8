//! The generation of sequences: a [`ReferenceStateMachine`] whose state is
//! the [`Reference`] store, so that each operation is drawn knowing what
//! the keys hold (which token owns a key, which tokens were handed out),
//! and proptest shrinks a failing sequence to a short one.

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest_state_machine::ReferenceStateMachine;

use super::ops::{LONG_LEASE, LONG_TTL, Op, Pause, ROUTES, Request, SHORT_LEASE, SHORT_TTL, STEP_NAMES, Token};
use super::reference::{Choices, Reference};
use crate::store::OnLapse;

/// The state sequences are drawn from: the reference store, the claims
/// made so far (each with a token of its own) and the last operation sent
/// (sent again, as after a lost answer).
#[derive(Debug, Clone)]
pub struct Drawn {
    /// The reference store, after the operations drawn so far.
    pub reference: Reference,
    /// Every claim so far, once each, in order.
    claims: Vec<Op>,
    /// The last operation sent to the store.
    last: Option<Op>,
}

impl Drawn {
    /// Nothing drawn yet, over `keys` keys.
    pub fn new(keys: usize) -> Self {
        Self { reference: Reference::new(keys, Choices::default()), claims: Vec::new(), last: None }
    }

    /// A token for a fenced operation on `key`: mostly its holder's, else
    /// one handed out before (stale, or another key's) or one never handed
    /// out (forged).
    fn token_for(&self, key: usize) -> BoxedStrategy<Token> {
        let forged = Token(self.fresh().0 + 1_000);
        let mut known: Vec<Token> = self.claims.iter().filter_map(Op::token).collect();
        known.push(forged);
        match self.reference.holder(key) {
            Some(holder) => prop_oneof![6 => Just(holder), 1 => select(known)].boxed(),
            None => select(known).boxed(),
        }
    }

    /// The token no claim has had yet.
    fn fresh(&self) -> Token {
        Token(self.claims.iter().filter_map(Op::token).map(|token| token.0 + 1).max().unwrap_or(1))
    }
}

/// Sequences of store operations over one to three keys, drawn from the
/// [`Reference`] store.
#[derive(Debug, Clone, Copy)]
pub struct Sequences;

/// Lease lengths, mostly short.
fn lease() -> impl Strategy<Value = u64> {
    prop_oneof![6 => Just(SHORT_LEASE), 1 => Just(LONG_LEASE)]
}

/// Record TTLs, mostly long.
fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![3 => Just(LONG_TTL), 1 => Just(SHORT_TTL)]
}

impl ReferenceStateMachine for Sequences {
    type State = Drawn;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Drawn> {
        (1..=3usize).prop_map(Drawn::new).boxed()
    }

    fn transitions(state: &Drawn) -> BoxedStrategy<Op> {
        let keys = 0..state.reference.keys();
        let key = || keys.clone();
        let fresh = state.fresh();
        let request = prop_oneof![4 => Just(Request::A), 1 => Just(Request::B)];
        let on_lapse = prop_oneof![Just(OnLapse::Takeover), Just(OnLapse::Hold)];
        let route = prop_oneof![Just(None), select(ROUTES.to_vec()).prop_map(Some)];
        let lapsed = state.reference.lapsed();
        // The same request again on a key whose lease lapsed: a grace, a
        // takeover or a hold, which random claims would seldom reach.
        let retry = (!lapsed.is_empty()).then(|| {
            (select(lapsed), ttl(), on_lapse.clone(), route.clone()).prop_map(
                move |((key, request), ttl, on_lapse, route)| Op::Claim {
                    key,
                    request,
                    token: fresh,
                    lease: SHORT_LEASE,
                    ttl,
                    on_lapse,
                    route,
                },
            )
        });
        let claim = (key(), request, lease(), ttl(), on_lapse, route).prop_map(
            move |(key, request, lease, ttl, on_lapse, route)| Op::Claim {
                key,
                request,
                token: fresh,
                lease,
                ttl,
                on_lapse,
                route,
            },
        );
        let drawn = state.clone();
        let fenced = move |key: usize| drawn.token_for(key).prop_map(move |token| (key, token));
        let step = (key().prop_flat_map(fenced.clone()), select(STEP_NAMES.to_vec()), 0..3u8)
            .prop_map(|((key, token), name, result)| Op::RecordStep { key, token, name, result });
        let renew = (key().prop_flat_map(fenced.clone()), lease()).prop_map(|((key, token), lease)| Op::Renew {
            key,
            token,
            lease,
        });
        let renewal =
            (key().prop_flat_map(fenced.clone()), lease()).prop_map(|((key, token), lease)| (key, token, lease));
        let renew_many = proptest::collection::vec(renewal, 1..=4).prop_map(Op::RenewMany);
        let complete = (key().prop_flat_map(fenced.clone()), 0..3u8, ttl())
            .prop_map(|((key, token), response, ttl)| Op::Complete { key, token, response, ttl });
        let release = key().prop_flat_map(fenced).prop_map(|(key, token)| Op::Release { key, token });
        let get = key().prop_map(|key| Op::Get { key });
        let mut choices: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (24, claim.boxed()),
            (8, step.boxed()),
            (5, renew.boxed()),
            (3, renew_many.boxed()),
            (7, complete.boxed()),
            (4, release.boxed()),
            (8, get.boxed()),
            (12, Just(Op::Wait(Pause::PastNext)).boxed()),
            (3, Just(Op::Wait(Pause::Brief)).boxed()),
        ];
        if let Some(last) = &state.last {
            choices.push((6, Just(last.clone()).boxed()));
        }
        if let Some(retry) = retry {
            choices.push((40, retry.boxed()));
        }
        let running_out = state.reference.running_out();
        if !running_out.is_empty() {
            choices.push((12, select(running_out).prop_map(|key| Op::Wait(Pause::PastLease(key))).boxed()));
        }
        // A claim sent again later, its answer lost: its lease may have
        // lapsed, or another claim taken it over, meanwhile. And its token
        // sent by the other request: a mismatch while the record lives.
        if !state.claims.is_empty() {
            choices.push((4, select(state.claims.clone()).boxed()));
            choices.push((2, select(state.claims.clone()).prop_map(|claim| by_the_other_request(&claim)).boxed()));
        }
        Union::new_weighted(choices).boxed()
    }

    fn preconditions(state: &Drawn, op: &Op) -> bool {
        let keys = state.reference.keys();
        // A claim's token is its own: another claim never sends it (the
        // same claim sent again does, and so may the other request).
        let own_token = !matches!(op, Op::Claim { .. })
            || state
                .claims
                .iter()
                .all(|claim| claim.token() != op.token() || claim == op || by_the_other_request(claim) == *op);
        let renewals_agree = match op {
            // One lease per key and token in a batch: a store may apply
            // a batch's renewals of one lease in any order.
            Op::RenewMany(renewals) => renewals.iter().all(|&(key, token, lease)| {
                renewals.iter().all(|&(other, with, length)| (other, with) != (key, token) || length == lease)
            }),
            _ => true,
        };
        own_token
            && renewals_agree
            && op.keys().iter().all(|&key| key < keys)
            && !matches!(op, Op::RenewMany(r) if r.is_empty())
    }

    fn apply(mut state: Drawn, op: &Op) -> Drawn {
        state.reference.apply(op);
        if matches!(op, Op::Claim { .. }) && !state.claims.contains(op) {
            state.claims.push(op.clone());
        }
        if op.is_sent() {
            state.last = Some(op.clone());
        }
        state
    }
}

/// `claim` sent by the other request, with the same token and terms.
fn by_the_other_request(claim: &Op) -> Op {
    match *claim {
        Op::Claim { key, request, token, lease, ttl, on_lapse, route } => {
            Op::Claim { key, request: request.other(), token, lease, ttl, on_lapse, route }
        }
        ref other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    use super::*;

    /// What a store's run draws, played on the reference alone (no store,
    /// no waiting): it meets graces, takeovers and holds, and waits about
    /// a second and a half per sequence.
    #[test]
    fn drawn_sequences_meet_graces_takeovers_and_holds() {
        let mut runner = TestRunner::deterministic();
        let strategy = Sequences::sequential_strategy(super::super::LENGTH);
        let (mut events, mut waited) = (Vec::new(), std::time::Duration::ZERO);
        let sequences = super::super::LANES * super::super::SEQUENCES as usize;
        for _ in 0..sequences {
            let (drawn, ops, _) = strategy.new_tree(&mut runner).expect("a sequence").current();
            let mut reference = Reference::new(drawn.reference.keys(), Choices::default());
            for op in &ops {
                reference.apply(op);
            }
            events.push(reference.events());
            waited += reference.now();
        }
        let count = |event: fn(&super::super::reference::Events) -> u64| events.iter().map(event).sum::<u64>();
        let (graces, takeovers, holds) = (count(|e| e.graces), count(|e| e.takeovers), count(|e| e.holds));
        assert!(graces > 50 && takeovers > 10 && holds > 10, "{graces} graces, {takeovers} takeovers, {holds} holds");
        let per_sequence = waited / sequences as u32;
        assert!(per_sequence < std::time::Duration::from_secs(2), "{per_sequence:?} of waits per sequence");
    }
}
