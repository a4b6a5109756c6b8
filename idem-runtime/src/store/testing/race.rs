//! Concurrent conformance cases: many claimers, one key.

use std::sync::Arc;

use tokio::sync::Barrier;

use super::cases::{LONG, TTL, acquire, fingerprint, fresh_key, response};
use crate::store::{Claim, Fence, StorageKey, Store};

/// How many tasks race for one key.
pub const CLAIMERS: usize = 64;

async fn race(store: &Arc<dyn Store>, key: &StorageKey) -> Vec<Claim> {
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|_| {
            let (store, key, barrier) = (Arc::clone(store), key.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(&key, &fingerprint("race"), LONG, TTL).await.expect("claim")
            })
        })
        .collect();
    let mut claims = Vec::with_capacity(CLAIMERS);
    for task in tasks {
        claims.push(task.await.expect("claimer task"));
    }
    claims
}

fn assert_one_winner(claims: &[Claim]) {
    let winners = claims.iter().filter(|c| matches!(c, Claim::Acquired { .. })).count();
    let in_flight = claims.iter().filter(|c| matches!(c, Claim::InFlight { .. })).count();
    assert_eq!(winners, 1, "exactly one claimer may win: {claims:?}");
    assert_eq!(in_flight, CLAIMERS - 1, "the others see the winner in flight: {claims:?}");
}

/// 64 tasks claim one free key at once: exactly one wins, the others see
/// the winner's request in flight.
pub async fn sixty_four_claimers_one_winner(store: Arc<dyn Store>) {
    assert_one_winner(&race(&store, &fresh_key()).await);
}

/// 64 tasks claim a released key at once with its own request: exactly one
/// takes the tombstone over.
pub async fn sixty_four_claimers_take_over_a_tombstone_once(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("race"), LONG, TTL).await;
    assert_eq!(store.release(&key, token).await.unwrap(), Fence::Held);
    assert_one_winner(&race(&store, &key).await);
}

/// 64 tasks claim a completed key at once: every one gets the replay.
pub async fn concurrent_claims_after_completion_all_replay(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("race"), LONG, TTL).await;
    assert_eq!(store.complete(&key, token, &response(b"done"), LONG).await.unwrap(), Fence::Held);
    let claims = race(&store, &key).await;
    assert!(claims.iter().all(|c| *c == Claim::Replay(response(b"done"))), "{claims:?}");
}

/// 64 tasks claim one free key at once, half with one request and half
/// with another: exactly one wins; its request's other claimers see it in
/// flight, the other request's all get a mismatch.
pub async fn different_requests_racing_for_one_key_one_wins(store: Arc<dyn Store>) {
    let key = fresh_key();
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|i| {
            let (store, key, barrier) = (Arc::clone(&store), key.clone(), Arc::clone(&barrier));
            let body = if i % 2 == 0 { "even" } else { "odd" };
            tokio::spawn(async move {
                barrier.wait().await;
                (body, store.claim(&key, &fingerprint(body), LONG, TTL).await.expect("claim"))
            })
        })
        .collect();
    let mut claims = Vec::with_capacity(CLAIMERS);
    for task in tasks {
        claims.push(task.await.expect("claimer task"));
    }
    let winners: Vec<_> = claims.iter().filter(|(_, c)| matches!(c, Claim::Acquired { .. })).collect();
    assert_eq!(winners.len(), 1, "exactly one claimer may win: {claims:?}");
    let winner = winners[0].0;
    for (body, claim) in &claims {
        match claim {
            Claim::Acquired { .. } => {}
            Claim::InFlight { .. } => assert_eq!(*body, winner, "only the winner's request waits: {claims:?}"),
            Claim::Mismatch => assert_ne!(*body, winner, "the winner's own request is no mismatch: {claims:?}"),
            other => panic!("unexpected {other:?}"),
        }
    }
}
