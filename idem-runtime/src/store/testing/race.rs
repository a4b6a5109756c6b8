//! Concurrent conformance cases: many claimers, one key.

use std::sync::Arc;

use tokio::sync::Barrier;

use super::cases::{LONG, acquire, fingerprint, fresh_key, response};
use crate::store::{Claim, Fence, Store};

/// How many tasks race for one key.
pub const CLAIMERS: usize = 64;

async fn race(store: &Arc<dyn Store>, key: &crate::store::StorageKey) -> Vec<Claim> {
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|_| {
            let (store, key, barrier) = (Arc::clone(store), key.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .claim(&key, &fingerprint("race"), LONG, std::time::Duration::from_secs(3600))
                    .await
                    .expect("claim")
            })
        })
        .collect();
    let mut claims = Vec::with_capacity(CLAIMERS);
    for task in tasks {
        claims.push(task.await.expect("claimer task"));
    }
    claims
}

/// 64 tasks claim one free key at once: exactly one wins, the others see
/// the winner's request in flight.
pub async fn sixty_four_claimers_one_winner(store: Arc<dyn Store>) {
    let key = fresh_key();
    let claims = race(&store, &key).await;
    let winners = claims.iter().filter(|c| matches!(c, Claim::Acquired { .. })).count();
    let in_flight = claims.iter().filter(|c| matches!(c, Claim::InFlight { .. })).count();
    assert_eq!(winners, 1, "exactly one claimer may win: {claims:?}");
    assert_eq!(in_flight, CLAIMERS - 1, "{claims:?}");
}

/// 64 tasks claim a completed key at once: every one gets the replay.
pub async fn concurrent_claims_after_completion_all_replay(store: Arc<dyn Store>) {
    let key = fresh_key();
    let token = acquire(&*store, &key, &fingerprint("race"), LONG).await;
    assert_eq!(store.complete(&key, token, &response(b"done"), LONG).await.unwrap(), Fence::Held);
    let claims = race(&store, &key).await;
    assert!(claims.iter().all(|c| *c == Claim::Replay(response(b"done"))), "{claims:?}");
}
