//! Sequences the random runs shrunk, kept as plain cases: each is run on
//! every store by [`store_sequence_tests!`](crate::store::testing::store_sequence_tests),
//! under the store's [`Choices`].

use std::sync::Arc;

use super::ops::Op::{self, *};
use super::ops::Pause::*;
use super::ops::Request::*;
use super::ops::Token;
use super::{Choices, replay};
use crate::store::OnLapse::*;
use crate::store::Store;

/// A claim of request A on key 0 with `token` and `lease`, a long TTL.
fn claim(token: u32, lease: u64) -> Op {
    Claim { key: 0, request: A, token: Token(token), lease, ttl: 60_000, on_lapse: Takeover, route: None }
}

/// A holder renews its long lease for a short one: the next claim finds
/// the short one (a lease set to `lease` from now) or, on a store whose
/// renewals never shorten a lease, the long one. Found on Postgres, which
/// answered a 20 s `retry_after` where the reference said 250 ms.
pub async fn renewing_a_long_lease_for_less(store: Arc<dyn Store>, choices: Choices) {
    let ops = vec![claim(1, 20_000), Renew { key: 0, token: Token(1), lease: 250 }, claim(3, 250)];
    replay(store, choices, 1, ops).await;
}

/// A holder renews within the grace a claim gave it, by itself and in a
/// batch: the grace ends, its lease runs 250 ms from the renewal (or to
/// the grace's end, on a store whose renewals never shorten a lease), and
/// a claim after it lapses again gives a grace again. Found on Postgres,
/// which answered a `retry_after` of the grace's second where the
/// reference said 250 ms.
pub async fn renewing_within_a_grace(store: Arc<dyn Store>, choices: Choices) {
    let ops = vec![
        claim(1, 250),
        Wait(PastNext),
        claim(2, 250),
        RenewMany(vec![(0, Token(1), 250)]),
        claim(3, 250),
        Renew { key: 0, token: Token(1), lease: 250 },
        Wait(PastNext),
        claim(4, 250),
        Wait(PastNext),
        claim(5, 250),
    ];
    replay(store, choices, 1, ops).await;
}

/// A completion sent again by its token, as after a lost answer: held or
/// lost (Redis says held), never a change; with another response, lost;
/// the first response is what replays.
pub async fn completing_twice(store: Arc<dyn Store>, choices: Choices) {
    let complete = |response| Complete { key: 0, token: Token(1), response, ttl: 60_000 };
    let ops = vec![claim(1, 250), complete(1), complete(1), complete(2), Wait(PastNext), complete(1), claim(2, 250)];
    replay(store, choices, 1, ops).await;
}
