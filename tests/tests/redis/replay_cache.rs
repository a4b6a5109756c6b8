//! The replay cache in front of the shared Redis: replays of a completed
//! record send no claim until `max_age`, and the store still answers 422
//! for another request under the key.

use std::sync::Arc;

use idem_tests::backend::redis_store;

#[actix_web::test]
async fn replays_from_the_cache_send_no_claim_to_redis() {
    let Some(store) = redis_store("replays_from_the_cache_send_no_claim_to_redis").await else { return };
    idem_tests::replay_cache_checks::assert_replays_skip_the_store(Arc::new(store)).await;
}
