//! The operations a sequence is made of, in plain data that prints as the
//! Rust that builds it (a shrunk failing sequence pastes into a regression
//! case), and the concrete values each one stands for.

use std::time::Duration;

use bytes::Bytes;

use super::super::cases::fingerprint;
use crate::store::{FencingToken, Fingerprint, OnLapse, Step, StoredResponse};

/// The short lease of a sequence's claims and renewals (its grace, as
/// [`grace`](crate::store::grace) gives it, is a second).
pub const SHORT_LEASE: u64 = 250;
/// A lease no sequence outlives.
pub const LONG_LEASE: u64 = 20_000;
/// A record TTL that runs out within a sequence.
pub const SHORT_TTL: u64 = 700;
/// A record TTL no sequence outlives.
pub const LONG_TTL: u64 = 60_000;
/// The names of the durable steps a sequence records.
pub const STEP_NAMES: [&str; 3] = ["charge", "ship", "notify"];
/// The routes a claim names, besides none.
pub const ROUTES: [&str; 2] = ["POST /orders", "POST /orders/{id}/payments"];

/// One of the two requests a sequence sends: their fingerprints differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The usual one.
    A,
    /// Another request reusing a key: a mismatch while the record lives.
    B,
}

impl Request {
    /// Its fingerprint.
    pub fn fingerprint(self) -> Fingerprint {
        match self {
            Request::A => fingerprint("a"),
            Request::B => fingerprint("b"),
        }
    }

    /// The other one.
    pub fn other(self) -> Request {
        match self {
            Request::A => Request::B,
            Request::B => Request::A,
        }
    }
}

/// A fencing token of a sequence, by number: the `n`th handed to a claim.
/// Tokens never meet across keys, so sequences on different keys share
/// numbers freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u32);

impl Token {
    /// The fencing token it stands for: its number in the leading bytes,
    /// which is what a token's `Debug` shows.
    pub fn fencing(self) -> FencingToken {
        FencingToken::from_bytes(((u128::from(self.0) << 96) | 0x1de3).to_be_bytes())
    }
}

/// How far a [`Op::Wait`] goes. The reference turns it into a time that
/// is clear of every lease and record end by a margin (see the module's
/// documentation), so that no answer depends on a race with the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// A moment (tens of milliseconds), within what is running.
    Brief,
    /// Past the next lease or record end (within a second and a half),
    /// where one runs out: a lapse, the end of a grace, an expiry.
    PastNext,
    /// Past the end of this key's lease (or grace), if it runs out within
    /// a second and a half; else as [`Pause::PastNext`].
    PastLease(usize),
}

/// One operation of a sequence. Keys are the sequence's, by index;
/// leases and TTLs in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// [`Store::claim_with`](crate::store::Store::claim_with).
    Claim {
        /// The key.
        key: usize,
        /// The claiming request.
        request: Request,
        /// The new owner's token.
        token: Token,
        /// The new owner's lease.
        lease: u64,
        /// The record's TTL.
        ttl: u64,
        /// What to do with a lapsed execution.
        on_lapse: OnLapse,
        /// The route kept in the record.
        route: Option<&'static str>,
    },
    /// [`Store::record_step`](crate::store::Store::record_step).
    RecordStep {
        /// The key.
        key: usize,
        /// The writer's token.
        token: Token,
        /// The step's name.
        name: &'static str,
        /// Its result (see [`step`]).
        result: u8,
    },
    /// [`Store::renew`](crate::store::Store::renew).
    Renew {
        /// The key.
        key: usize,
        /// The renewing token.
        token: Token,
        /// The new lease.
        lease: u64,
    },
    /// [`Store::renew_many`](crate::store::Store::renew_many): key,
    /// token and lease of each renewal.
    RenewMany(Vec<(usize, Token, u64)>),
    /// [`Store::complete`](crate::store::Store::complete).
    Complete {
        /// The key.
        key: usize,
        /// The completing token.
        token: Token,
        /// Which response (see [`response`]).
        response: u8,
        /// The completed record's TTL.
        ttl: u64,
    },
    /// [`Store::release`](crate::store::Store::release).
    Release {
        /// The key.
        key: usize,
        /// The releasing token.
        token: Token,
    },
    /// [`Store::get`](crate::store::Store::get).
    Get {
        /// The key.
        key: usize,
    },
    /// Time passes.
    Wait(Pause),
}

impl Op {
    /// Whether it is sent to the store (everything but a wait).
    pub fn is_sent(&self) -> bool {
        !matches!(self, Op::Wait(_))
    }

    /// The keys it names.
    pub fn keys(&self) -> Vec<usize> {
        match self {
            Op::Claim { key, .. }
            | Op::RecordStep { key, .. }
            | Op::Renew { key, .. }
            | Op::Complete { key, .. }
            | Op::Release { key, .. }
            | Op::Get { key } => vec![*key],
            Op::RenewMany(renewals) => renewals.iter().map(|(key, ..)| *key).collect(),
            Op::Wait(Pause::PastLease(key)) => vec![*key],
            Op::Wait(_) => Vec::new(),
        }
    }

    /// The token it is sent with, if it names one.
    pub fn token(&self) -> Option<Token> {
        match self {
            Op::Claim { token, .. }
            | Op::RecordStep { token, .. }
            | Op::Renew { token, .. }
            | Op::Complete { token, .. }
            | Op::Release { token, .. } => Some(*token),
            Op::RenewMany(_) | Op::Get { .. } | Op::Wait(_) => None,
        }
    }

    /// The claim's terms, for a claim.
    pub fn terms(&self) -> Option<crate::store::ClaimTerms> {
        let Op::Claim { lease, ttl, on_lapse, route, .. } = *self else { return None };
        let terms = crate::store::ClaimTerms::new(millis(lease), millis(ttl)).on_lapse(on_lapse);
        Some(match route {
            Some(route) => terms.route(route),
            None => terms,
        })
    }
}

/// `ms` milliseconds.
pub fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The step `name` with result number `result`.
pub fn step(name: &str, result: u8) -> Step {
    Step { name: name.to_owned(), result: Bytes::from(format!("{{\"result\":{result}}}")) }
}

/// Response number `n`: its status, a header and a binary body tell it.
pub fn response(n: u8) -> StoredResponse {
    StoredResponse {
        status: 200 + u16::from(n),
        headers: vec![("x-response".into(), vec![b'0' + n % 10]), ("x-multi".into(), b"\x00\xff".to_vec())],
        body: Bytes::from(vec![n, 0, 0xff, b'\n']),
    }
}
