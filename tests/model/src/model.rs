//! The whole world of one key as a stateright [`Model`]: the record, the
//! executions with their keepers, the operator and the network, and what
//! each of them may do next.
//!
//! Everything a part may do is always a choice, never an obligation: an
//! execution that does not act is paused (or its keeper stopped), one that
//! never acts again has crashed, a message that is never delivered is lost.
//! Only the clock forces anything: a call older than the timeout has failed.
//!
//! What an execution does at each of its events is in `engine.rs`.

mod engine;

use stateright::{Model, Property};

use crate::bounds::{Bounds, MAX_EXECUTIONS, OnLapse, SettleFence, StartCheck};
use crate::execution::{Call, Execution, Phase, Renewal, Stage};
use crate::history::History;
use crate::mutants::Mutant;
use crate::network::{Message, Network, Op, Party};
use crate::operator::{self, Operator};
use crate::record::{Record, Rules, Settlement};
use crate::store::Store;
use crate::symmetry::representative;

/// The protocol of one key, under one lapse policy, within `bounds`, with
/// at most one fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Protocol {
    /// The route's lapse policy.
    pub on_lapse: OnLapse,
    /// The size of the explored world.
    pub bounds: Bounds,
    /// How the store fences an operator's write.
    pub settle: SettleFence,
    /// What an execution checks before it starts its handler.
    pub start: StartCheck,
    /// The fault, if any.
    pub mutant: Option<Mutant>,
    /// Whether states that differ only by the numbering of executions of
    /// the same request are explored once ([`crate::symmetry`]).
    pub symmetry: bool,
}

/// A state of the world.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The key's record in the store.
    pub record: Record,
    /// The requests of the key (those past `bounds.executions` never
    /// arrive).
    pub executions: [Execution; MAX_EXECUTIONS],
    /// The operator.
    pub operator: Operator,
    /// The messages on their way.
    pub network: Network,
    /// Calls that may still fail.
    pub failures_left: u8,
    /// The observer's notes.
    pub history: History,
}

/// One step of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// Execution `i` arrives and claims the key.
    Arrive(u8),
    /// Execution `i` starts the handler (or, its lease lapsed, releases).
    Start(u8),
    /// Execution `i`, its lease lapsed once, reads its record before a step.
    Read(u8),
    /// Execution `i` runs its step's side effect, then records it.
    Effect(u8),
    /// Execution `i` completes.
    Complete(u8),
    /// Execution `i` releases (its response is retryable).
    Release(u8),
    /// Execution `i` acts on its failed call: sends it again, or gives up.
    Retry(u8),
    /// Execution `i`'s process dies.
    Crash(u8),
    /// The keeper renews execution `i`'s lease.
    Renew(u8),
    /// The operator reads the record (and sees an execution to settle, or
    /// not).
    Inspect,
    /// The operator writes, expecting the record as inspected.
    Settle(Settlement),
    /// The network delivers a message.
    Deliver(Message),
}

impl Protocol {
    /// The protocol as the stores and the engine implement it.
    pub fn new(on_lapse: OnLapse, bounds: Bounds) -> Self {
        bounds.check();
        Self {
            on_lapse,
            bounds,
            settle: SettleFence::AfterGrace,
            start: StartCheck::ReadAfterLapse,
            mutant: None,
            symmetry: false,
        }
    }

    /// The same, exploring once the states that differ only by the
    /// numbering of executions of the same request.
    pub fn with_symmetry(self) -> Self {
        Self { symmetry: true, ..self }
    }

    /// The same, with the handler started after `start`.
    pub fn with_start(self, start: StartCheck) -> Self {
        Self { start, ..self }
    }

    /// The same, with `mutant`.
    pub fn with_mutant(self, mutant: Mutant) -> Self {
        Self { mutant: Some(mutant), ..self }
    }

    /// The same, with the operator's writes fenced as `settle`.
    pub fn with_settle(self, settle: SettleFence) -> Self {
        Self { settle, ..self }
    }

    /// The rules the store applies.
    pub fn rules(&self) -> Rules {
        Rules {
            lease: self.bounds.lease,
            grace: self.bounds.grace,
            on_lapse: self.on_lapse,
            settle: self.settle,
            mutant: self.mutant,
        }
    }

    fn has(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    fn tick(&self, s: &mut State) -> Option<()> {
        let timeout = self.bounds.timeout;
        let failing = s.executions.iter().fold(0, |n, e| {
            let call = matches!(e.call, Call::Waiting { age } if age >= timeout);
            let renewal = matches!(e.renewal, Renewal::Waiting { age, .. } if age >= timeout);
            n + u8::from(call) + u8::from(renewal)
        });
        // A network within its budget of failures answers in time.
        s.failures_left = s.failures_left.checked_sub(failing)?;
        let mut changed = s.record.tick();
        for (i, e) in s.executions.iter_mut().enumerate() {
            if e.has_lease() && e.lease.left > 0 {
                e.lease.left -= 1;
                changed = true;
            }
            if let Call::Waiting { age } = e.call {
                changed = true;
                e.call = if age >= timeout { Call::Failed } else { Call::Waiting { age: age + 1 } };
                if age >= timeout {
                    s.network.forget(Party::Execution(i as u8));
                }
            }
            if let Renewal::Waiting { age, lapsed } = e.renewal {
                changed = true;
                e.renewal = if age >= timeout { Renewal::None } else { Renewal::Waiting { age: age + 1, lapsed } };
                if age >= timeout {
                    s.network.forget(Party::Keeper(i as u8));
                }
            }
        }
        changed.then_some(())
    }

    /// Drops the orphan requests that can never change anything: reads,
    /// and fenced operations of a token the record does not hold and no
    /// claim on its way can give it again.
    fn sweep(s: &mut State) {
        let record = s.record;
        let claims: [bool; MAX_EXECUTIONS] = std::array::from_fn(|i| s.network.claims(Execution::token(i)));
        s.network.retain_orphans(|token, op| match op {
            Op::Read => false,
            Op::Claim(_) | Op::Settle { .. } => true,
            Op::Renew | Op::RecordStep(_) | Op::Complete | Op::Release => {
                (record.state.is_running() && record.token == token)
                    || claims.get(usize::from(token).wrapping_sub(1)).copied().unwrap_or(false)
            }
        });
    }

    fn deliver(&self, s: &mut State, message: Message) -> Option<()> {
        let at = s.network.messages().binary_search(&message).ok()?;
        match s.network.take(at) {
            Message::Request { from, token, op, orphan } => {
                let mut store = Store {
                    rules: self.rules(),
                    record: &mut s.record,
                    history: &mut s.history,
                    executions: &s.executions,
                };
                let answer = store.apply(token, op);
                if !orphan {
                    s.network.send(Message::Reply { to: from, answer });
                }
            }
            Message::Reply { to: Party::Execution(i), answer } => self.answered(s, usize::from(i), answer),
            Message::Reply { to: Party::Keeper(i), answer } => self.renewed(s, usize::from(i), answer),
            Message::Reply { to: Party::Operator, .. } => unreachable!("the operator waits for no answer"),
        }
        Some(())
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            record: Record::FREE,
            executions: [Execution::IDLE; MAX_EXECUTIONS],
            operator: Operator::new(self.bounds.operator_looks),
            network: Network::default(),
            failures_left: self.bounds.failures,
            history: History::default(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        actions.push(Action::Tick);
        for (i, e) in s.executions.iter().enumerate().take(usize::from(self.bounds.executions)) {
            let i = i as u8;
            match e.phase {
                Phase::Idle => actions.push(Action::Arrive(i)),
                Phase::Starting { reading: false } => actions.push(Action::Start(i)),
                Phase::Step { stage: Stage::Ready, .. } if e.confirmed() => {
                    let reads = e.lease.lapsed_once && !self.has(Mutant::NoReadAfterLapse);
                    actions.push(if reads { Action::Read(i) } else { Action::Effect(i) });
                }
                Phase::Finishing => {
                    actions.push(Action::Complete(i));
                    if self.bounds.retryable {
                        actions.push(Action::Release(i));
                    }
                }
                _ => {}
            }
            if e.call == Call::Failed {
                actions.push(Action::Retry(i));
            }
            // The keeper renews a third of the way through a lease, never
            // right after its claim or renewal was confirmed.
            if e.has_lease() && e.renewal == Renewal::None && e.lease.left < self.bounds.lease {
                actions.push(Action::Renew(i));
            }
            if e.is_active() {
                actions.push(Action::Crash(i));
            }
        }
        match s.operator.phase {
            operator::Phase::Idle if s.operator.looks_left > 0 => actions.push(Action::Inspect),
            operator::Phase::Inspected { .. } => {
                actions.push(Action::Settle(Settlement::Release { forget_steps: false }));
                actions.push(Action::Settle(Settlement::Release { forget_steps: true }));
                actions.push(Action::Settle(Settlement::Resolve));
            }
            _ => {}
        }
        let messages = s.network.messages();
        for (at, message) in messages.iter().enumerate() {
            if at == 0 || messages[at - 1] != *message {
                actions.push(Action::Deliver(*message));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => self.tick(&mut s)?,
            Action::Arrive(i) => {
                let i = usize::from(i);
                s.executions[i].phase = Phase::Claiming;
                Self::call(&mut s, i, Op::Claim(self.bounds.fingerprint(i)));
            }
            Action::Start(i) => self.start(&mut s, usize::from(i)),
            Action::Read(i) => {
                let i = usize::from(i);
                if let Phase::Step { index, .. } = s.executions[i].phase {
                    s.executions[i].phase = Phase::Step { index, stage: Stage::Reading };
                    Self::call(&mut s, i, Op::Read);
                }
            }
            Action::Effect(i) => {
                if let Phase::Step { index, .. } = s.executions[usize::from(i)].phase {
                    self.effect(&mut s, usize::from(i), index);
                }
            }
            Action::Complete(i) => {
                s.executions[usize::from(i)].phase = Phase::Completing;
                Self::call(&mut s, usize::from(i), Op::Complete);
            }
            Action::Release(i) => {
                s.executions[usize::from(i)].phase = Phase::Releasing;
                Self::call(&mut s, usize::from(i), Op::Release);
            }
            Action::Retry(i) => self.retry(&mut s, usize::from(i)),
            Action::Crash(i) => Self::end(&mut s, usize::from(i), Phase::Crashed),
            Action::Renew(i) => {
                let e = &mut s.executions[usize::from(i)];
                e.renewal = Renewal::Waiting { age: 0, lapsed: e.lease.left == 0 };
                s.network.request(Party::Keeper(i), Execution::token(usize::from(i)), Op::Renew);
            }
            Action::Inspect => {
                // A look that finds nothing to settle changes nothing: the
                // operator may look again.
                let view = s.record.view();
                if !Operator::settleable(&view, self.bounds.targets) {
                    return None;
                }
                s.operator.looks_left -= 1;
                s.operator.phase = operator::Phase::Inspected { token: view.token, state: view.state };
            }
            Action::Settle(settlement) => {
                let operator::Phase::Inspected { token, state } = s.operator.phase else { return None };
                // Whatever its answer, the operator is done with this look.
                s.operator.phase = operator::Phase::Idle;
                s.network.orphan(Party::Operator, token, Op::Settle { state, settlement });
            }
            Action::Deliver(message) => self.deliver(&mut s, message)?,
        }
        Self::sweep(&mut s);
        self.settle_phases(&mut s);
        Some(if self.symmetry { representative(s, &self.bounds) } else { s })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        crate::properties::of(self)
    }
}
