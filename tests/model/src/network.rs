//! Calls to the store and their answers, as messages: a request lands (the
//! store applies it, atomically) whenever the network delivers it, and its
//! answer travels back the same way. Nothing is delivered in order, a call
//! whose answer is late has failed (its answer is thrown away when it
//! comes), and its request may still land later, or never.

use crate::record::{ClaimAnswer, Settlement, StateName, Token, View};

/// Who sends a request and waits for its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Party {
    /// An execution (its handler and the engine around it), by index.
    Execution(u8),
    /// The lease keeper, renewing the lease of the execution of this index.
    Keeper(u8),
    /// The operator (`idem inspect`, `idem release`, `idem resolve`).
    Operator,
}

/// A store operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Claim the key for the request with this fingerprint.
    Claim(u8),
    /// Renew the lease.
    Renew,
    /// Record the durable step of this index.
    RecordStep(u8),
    /// Store the handler's response.
    Complete,
    /// Leave a tombstone.
    Release,
    /// Read the record.
    Read,
    /// An operator's write, expecting the inspected token and state.
    Settle {
        /// The state inspected.
        state: StateName,
        /// What to write.
        settlement: Settlement,
    },
}

/// The store's answer to an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// To a claim.
    Claim(ClaimAnswer),
    /// To a fenced operation: whether the record held the token.
    Fence(bool),
    /// To a read.
    View(View),
}

/// A message on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Message {
    /// A request to the store.
    Request {
        /// Its sender.
        from: Party,
        /// The token it carries (the expected one, for an operator's write).
        token: Token,
        /// The operation.
        op: Op,
        /// Nobody waits for its answer any more (the call failed, or its
        /// sender is gone): the store applies it, and answers nobody.
        orphan: bool,
    },
    /// An answer on its way back.
    Reply {
        /// Who waits for it.
        to: Party,
        /// The answer.
        answer: Answer,
    },
}

/// The messages on their way: a multiset, kept sorted so that equal sets
/// are equal states.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Network(Vec<Message>);

impl Network {
    /// Sends `message`.
    pub fn send(&mut self, message: Message) {
        let at = self.0.partition_point(|m| *m <= message);
        self.0.insert(at, message);
    }

    /// Sends `op` from `from` with `token`, waited for.
    pub fn request(&mut self, from: Party, token: Token, op: Op) {
        self.send(Message::Request { from, token, op, orphan: false });
    }

    /// Sends `op` from `from` with `token`, answered to nobody (fire and
    /// forget).
    pub fn orphan(&mut self, from: Party, token: Token, op: Op) {
        self.send(Message::Request { from, token, op, orphan: true });
    }

    /// The messages, in their order.
    pub fn messages(&self) -> &[Message] {
        &self.0
    }

    /// Takes the message at `index` off the network.
    pub fn take(&mut self, index: usize) -> Message {
        self.0.remove(index)
    }

    /// `party` waits for nothing any more: its requests are orphans, its
    /// answers are dropped.
    pub fn forget(&mut self, party: Party) {
        let mut changed = false;
        self.0.retain_mut(|message| match message {
            Message::Request { from, orphan, .. } if *from == party && !*orphan => {
                *orphan = true;
                changed = true;
                true
            }
            Message::Reply { to, .. } if *to == party => {
                changed = true;
                false
            }
            _ => true,
        });
        if changed {
            self.0.sort_unstable();
        }
    }

    /// Keeps the orphan requests for which `keep(token, op)` holds, and
    /// every other message.
    pub fn retain_orphans(&mut self, keep: impl Fn(Token, Op) -> bool) {
        self.0.retain(|message| match *message {
            Message::Request { token, op, orphan: true, .. } => keep(token, op),
            _ => true,
        });
    }

    /// Whether a claim with `token` is on its way.
    pub fn claims(&self, token: Token) -> bool {
        self.0.iter().any(|m| matches!(m, Message::Request { token: t, op: Op::Claim(_), .. } if *t == token))
    }

    /// Whether an answer `answer` is on its way to `to`.
    pub fn carries(&self, to: Party, answer: impl Fn(&Answer) -> bool) -> bool {
        self.0.iter().any(|message| matches!(message, Message::Reply { to: t, answer: a } if *t == to && answer(a)))
    }
}
