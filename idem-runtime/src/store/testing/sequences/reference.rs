//! The reference store: what the [`Store`](crate::store::Store) contract
//! answers, as plain data, on an explicit clock. Pure: the same operations
//! at the same times always give the same answers, so a store's answers
//! can be compared with it one by one.
//!
//! It follows the claim table of [`Store::claim`](crate::store::Store::claim)
//! and the documentation of each operation; where several answers are
//! right, [`Answer`] says which.

use std::time::Duration;

use super::ops::{Op, Pause, Request, Token, millis, response, step};
use crate::store::{Attempt, Claim, Fence, OnLapse, Record, RecordState, grace};

/// The least a wait lands clear of every lease and record end, on either
/// side: the runner sends each operation within less than this of its
/// time (or calls the run inconclusive), so that no answer depends on
/// which side of an end it fell.
pub const MARGIN: Duration = Duration::from_millis(120);
/// How long a [`Pause::Brief`] is, at least.
pub const BRIEF: Duration = Duration::from_millis(60);
/// How far ahead a [`Pause::PastNext`] looks for an end to pass.
pub const HORIZON: Duration = Duration::from_millis(1_500);

/// Where the contract leaves a store a choice, the one it made: the
/// reference answers as that store should.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Choices {
    /// A renewal never shortens a lease: it runs `lease` from now, or as
    /// long as it already ran if that is later (Postgres: "renewals never
    /// shorten a lease"). Otherwise a renewal sets it to `lease` from now,
    /// as [`Store::renew`](crate::store::Store::renew) says, even within a
    /// grace that ran longer.
    pub renewals_never_shorten: bool,
}

impl Choices {
    /// The choices of a store whose renewals never shorten a lease.
    pub fn renewals_never_shorten() -> Self {
        Self { renewals_never_shorten: true }
    }
}

/// What the reference answers to an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A claim's answer (an in-flight answer's time left is the model's).
    Claim(Claim),
    /// A fenced operation's answer.
    Fence(Fence),
    /// The completion of a completed record sent again by the token that
    /// completed it, with the same response: [`Fence::Lost`] (the record no
    /// longer holds the token) or [`Fence::Held`] (Redis: so that a `WAIT`
    /// after it covers the record). The runtime settles either by reading
    /// the record; nothing changes.
    HeldOrLost,
    /// One fence per renewal.
    Fences(Vec<Fence>),
    /// What `get` finds, and when (model time) its execution was claimed.
    Record(Option<(Record, Duration)>),
    /// A wait: nothing to compare.
    Waited,
}

/// What happened in a sequence, to tell that it explored something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Events {
    /// Operations that met a lapsed lease: a claim giving a grace, a
    /// holder writing to its lapsed lease.
    pub lapses: u64,
    /// Claims that gave a lapsed lease's holder a grace.
    pub graces: u64,
    /// Claims that took a lapsed execution over.
    pub takeovers: u64,
    /// Claims that held a lapsed execution ([`OnLapse::Hold`]).
    pub holds: u64,
    /// Claims that found a record past its TTL.
    pub expiries: u64,
    /// Claims of a tombstone.
    pub after_releases: u64,
    /// Replays.
    pub replays: u64,
}

/// One key's record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    request: Request,
    expires_at: Duration,
    state: State,
    route: Option<&'static str>,
    claimed_at: Duration,
    attempt: Attempt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    InFlight { token: Token, lease_until: Duration, graced: bool, held: bool, steps: Vec<(&'static str, u8)> },
    Completed { response: u8, by: Token },
    Released { steps: Vec<(&'static str, u8)> },
}

/// The reference store over a sequence's keys, at model time `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    choices: Choices,
    now: Duration,
    records: Vec<Option<Entry>>,
    events: Events,
}

impl Reference {
    /// No records, over `keys` keys, at time zero, for a store that made
    /// `choices`.
    pub fn new(keys: usize, choices: Choices) -> Self {
        Self { choices, now: Duration::ZERO, records: vec![None; keys], events: Events::default() }
    }

    /// How many keys.
    pub fn keys(&self) -> usize {
        self.records.len()
    }

    /// The model's time: since the sequence began.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// What happened so far.
    pub fn events(&self) -> Events {
        self.events
    }

    /// The token of `key`'s execution (in flight, lapsed or held), if any.
    pub fn holder(&self, key: usize) -> Option<Token> {
        match self.live(key)?.state {
            State::InFlight { token, .. } => Some(token),
            _ => None,
        }
    }

    /// The request of each key whose execution's lease lapsed (held or
    /// not): what a claim takes over, holds or gives a grace.
    pub fn lapsed(&self) -> Vec<(usize, Request)> {
        (0..self.keys())
            .filter_map(|key| {
                let entry = self.live(key)?;
                match entry.state {
                    State::InFlight { lease_until, .. } if lease_until <= self.now => Some((key, entry.request)),
                    _ => None,
                }
            })
            .collect()
    }

    /// The keys whose execution's lease (or grace) runs out within
    /// [`HORIZON`].
    pub fn running_out(&self) -> Vec<usize> {
        (0..self.keys()).filter(|&key| self.lease_end(key).is_some()).collect()
    }

    /// The end of `key`'s lease (or grace), if it comes within [`HORIZON`].
    fn lease_end(&self, key: usize) -> Option<Duration> {
        match self.live(key)?.state {
            State::InFlight { lease_until, held: false, .. }
                if lease_until > self.now && lease_until <= self.now + HORIZON =>
            {
                Some(lease_until)
            }
            _ => None,
        }
    }

    /// Applies `op` at the current time: its answer.
    pub fn apply(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Claim { key, request, token, lease, ttl, on_lapse, route } => {
                Answer::Claim(self.claim(key, request, token, (millis(lease), millis(ttl)), on_lapse, route))
            }
            Op::RecordStep { key, token, name, result } => Answer::Fence(self.record_step(key, token, name, result)),
            Op::Renew { key, token, lease } => Answer::Fence(self.renew(key, token, millis(lease))),
            Op::RenewMany(ref renewals) => Answer::Fences(
                renewals.iter().map(|&(key, token, lease)| self.renew(key, token, millis(lease))).collect(),
            ),
            Op::Complete { key, token, response, ttl } => self.complete(key, token, response, millis(ttl)),
            Op::Release { key, token } => Answer::Fence(self.release(key, token)),
            Op::Get { key } => Answer::Record(self.get(key)),
            Op::Wait(pause) => {
                self.now = self.after(pause);
                Answer::Waited
            }
        }
    }

    /// `key`'s record, if it lives.
    fn live(&self, key: usize) -> Option<&Entry> {
        self.records[key].as_ref().filter(|entry| entry.expires_at > self.now)
    }

    /// The time a wait of `pause` ends: the first at or after what it asks
    /// for that is clear of every lease and record end by [`MARGIN`].
    fn after(&self, pause: Pause) -> Duration {
        let mut ends: Vec<Duration> = self
            .records
            .iter()
            .flatten()
            .flat_map(|entry| {
                let lease = match entry.state {
                    State::InFlight { lease_until, held: false, .. } => Some(lease_until),
                    _ => None,
                };
                [Some(entry.expires_at), lease]
            })
            .flatten()
            .filter(|&end| end > self.now)
            .collect();
        ends.sort();
        let next = ends.first().copied().filter(|&end| end <= self.now + HORIZON);
        let mut at = match pause {
            Pause::Brief => self.now + BRIEF,
            Pause::PastLease(key) => self.lease_end(key).or(next).map_or(self.now + BRIEF, |end| end + MARGIN),
            Pause::PastNext => next.map_or(self.now + BRIEF, |end| end + MARGIN),
        };
        for end in ends {
            if at < end + MARGIN && end < at + MARGIN {
                at = end + MARGIN;
            }
        }
        at
    }

    fn claim(
        &mut self,
        key: usize,
        request: Request,
        token: Token,
        (lease, ttl): (Duration, Duration),
        on_lapse: OnLapse,
        route: Option<&'static str>,
    ) -> Claim {
        let now = self.now;
        let lease_until = now + lease;
        let expires_at = (now + ttl).max(lease_until);
        let events = &mut self.events;
        let Some(entry) = self.records[key].as_mut().filter(|entry| entry.expires_at > now) else {
            if self.records[key].is_some() {
                events.expiries += 1;
            }
            let state = State::InFlight { token, lease_until, graced: false, held: false, steps: Vec::new() };
            let attempt = Attempt::First;
            self.records[key] = Some(Entry { request, expires_at, state, route, claimed_at: now, attempt });
            return Claim::Acquired { token: token.fencing(), attempt, steps: Vec::new() };
        };
        if entry.request != request {
            return Claim::Mismatch;
        }
        let (attempt, steps) = match &mut entry.state {
            State::Completed { response: n, .. } => {
                events.replays += 1;
                return Claim::Replay(response(*n));
            }
            // The same claim sent again: its own, as the attempt it was.
            State::InFlight { token: held, steps, .. } if *held == token => {
                return Claim::Acquired { token: token.fencing(), attempt: entry.attempt, steps: concrete(steps) };
            }
            State::InFlight { held: true, .. } => return Claim::Held { newly: false },
            State::InFlight { lease_until, .. } if *lease_until > now => {
                return Claim::InFlight { retry_after: *lease_until - now };
            }
            State::InFlight { lease_until, graced: graced @ false, .. } => {
                let grace = grace(lease);
                *lease_until = now + grace;
                *graced = true;
                entry.expires_at = entry.expires_at.max(now + grace);
                events.lapses += 1;
                events.graces += 1;
                return Claim::InFlight { retry_after: grace };
            }
            State::InFlight { held, .. } if on_lapse == OnLapse::Hold => {
                *held = true;
                events.holds += 1;
                return Claim::Held { newly: true };
            }
            State::InFlight { steps, .. } => {
                events.takeovers += 1;
                (Attempt::Takeover, std::mem::take(steps))
            }
            State::Released { steps } => {
                events.after_releases += 1;
                (Attempt::AfterRelease, std::mem::take(steps))
            }
        };
        let answer = Claim::Acquired { token: token.fencing(), attempt, steps: concrete(&steps) };
        entry.state = State::InFlight { token, lease_until, graced: false, held: false, steps };
        entry.expires_at = expires_at;
        entry.attempt = attempt;
        entry.route = route;
        entry.claimed_at = now;
        answer
    }

    /// `key`'s execution, if `token` holds it (its lease running or not,
    /// held or not); counts a write to a lapsed lease.
    fn owned(&mut self, key: usize, token: Token) -> Option<&mut Entry> {
        let now = self.now;
        let entry = self.records[key].as_mut().filter(|entry| entry.expires_at > now)?;
        match entry.state {
            State::InFlight { token: held, lease_until, held: is_held, .. } if held == token => {
                if !is_held && lease_until <= now {
                    self.events.lapses += 1;
                }
                Some(entry)
            }
            _ => None,
        }
    }

    fn record_step(&mut self, key: usize, token: Token, name: &'static str, result: u8) -> Fence {
        let Some(entry) = self.owned(key, token) else { return Fence::Lost };
        if let State::InFlight { steps, .. } = &mut entry.state
            && !steps.iter().any(|(kept, _)| *kept == name)
        {
            steps.push((name, result));
        }
        Fence::Held
    }

    fn renew(&mut self, key: usize, token: Token, lease: Duration) -> Fence {
        let (now, never_shorten) = (self.now, self.choices.renewals_never_shorten);
        let Some(entry) = self.owned(key, token) else { return Fence::Lost };
        if let State::InFlight { lease_until, graced, held: false, .. } = &mut entry.state {
            *lease_until = if never_shorten { (*lease_until).max(now + lease) } else { now + lease };
            *graced = false;
        }
        entry.expires_at = entry.expires_at.max(now + lease);
        Fence::Held
    }

    fn complete(&mut self, key: usize, token: Token, n: u8, ttl: Duration) -> Answer {
        let now = self.now;
        if let Some(entry) = self.owned(key, token) {
            entry.state = State::Completed { response: n, by: token };
            entry.expires_at = now + ttl;
            return Answer::Fence(Fence::Held);
        }
        match self.live(key).map(|entry| &entry.state) {
            Some(&State::Completed { response, by }) if by == token && response == n => Answer::HeldOrLost,
            _ => Answer::Fence(Fence::Lost),
        }
    }

    fn release(&mut self, key: usize, token: Token) -> Fence {
        let Some(entry) = self.owned(key, token) else { return Fence::Lost };
        if let State::InFlight { steps, .. } = &mut entry.state {
            entry.state = State::Released { steps: std::mem::take(steps) };
        }
        Fence::Held
    }

    fn get(&self, key: usize) -> Option<(Record, Duration)> {
        let entry = self.live(key)?;
        let ttl_left = entry.expires_at - self.now;
        let (state, steps) = match &entry.state {
            &State::InFlight { token, held: true, ref steps, .. } => {
                (RecordState::Held { token: token.fencing(), ttl_left }, concrete(steps))
            }
            &State::InFlight { token, lease_until, ref steps, .. } => {
                let lease_left = lease_until.saturating_sub(self.now);
                (RecordState::InFlight { token: token.fencing(), lease_left, ttl_left }, concrete(steps))
            }
            State::Completed { response: n, .. } => {
                (RecordState::Completed { response: response(*n), ttl_left }, Vec::new())
            }
            State::Released { steps } => (RecordState::Released { ttl_left }, concrete(steps)),
        };
        let mut record = Record::new(entry.request.fingerprint(), state);
        record.route = entry.route.map(str::to_owned);
        record.attempt = Some(entry.attempt);
        record.steps = steps;
        Some((record, entry.claimed_at))
    }
}

/// The steps as a store keeps them.
fn concrete(steps: &[(&'static str, u8)]) -> Vec<crate::store::Step> {
    steps.iter().map(|&(name, result)| step(name, result)).collect()
}
