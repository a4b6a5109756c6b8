//! The replay cache (`Idem::replay_cache`) in front of a real store,
//! checked the same way on every store: requests through a real actix-web
//! server, the claims that reach the store counted in front of it.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use idem_runtime::store::Store;
use idem_runtime::{Idem, ReplayCache};

use crate::burst::{CLIENT_TIMEOUT, Reply, post, serve};
use crate::faults::FaultyStore;
use crate::http::{client, fresh_key};

/// How long an entry answers: long enough for a few local requests, short
/// enough to wait out.
const MAX_AGE: Duration = Duration::from_secs(2);

fn same_response(reply: &Reply, first: &Reply) {
    assert!(reply.replayed, "not marked replayed: {reply:?}");
    assert_eq!(
        (reply.status, &reply.order, &reply.multi, &reply.content_type, &reply.body),
        (first.status, &first.order, &first.multi, &first.content_type, &first.body),
        "a replay differs from the first response"
    );
}

/// With the cache on `store`: a completion fills it, so its replays send no
/// claim; another body under the key still gets the store's 422; past
/// `max_age` the store is asked again, once, and its replay fills the cache
/// again. The handler runs once.
pub async fn assert_replays_skip_the_store(store: Arc<dyn Store>) {
    let counted = Arc::new(FaultyStore::over(store));
    let idem = Idem::from_arc(counted.clone()).replay_cache(ReplayCache::new(1_000).max_age(MAX_AGE));
    let (server, hits) = serve(idem);
    let (url, client, key) = (server.at("/orders"), client(CLIENT_TIMEOUT), fresh_key());

    let created = post(&client, &url, &key, "2 coffees").await;
    assert_eq!((created.status, created.replayed), (StatusCode::CREATED, false), "{created:?}");
    assert_eq!(counted.claims_sent(), 1, "the first execution's claim");

    for _ in 0..3 {
        same_response(&post(&client, &url, &key, "2 coffees").await, &created);
    }
    assert_eq!(counted.claims_sent(), 1, "replays of a completion this process stored need no claim");

    let reused = post(&client, &url, &key, "3 coffees").await;
    assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY, "another request under the key: {reused:?}");
    let asked = counted.claims_sent();
    assert!(asked > 1, "the store decides a request the cache does not hold");

    tokio::time::sleep(MAX_AGE + Duration::from_millis(200)).await;
    same_response(&post(&client, &url, &key, "2 coffees").await, &created);
    assert_eq!(counted.claims_sent(), asked + 1, "past max_age, the store is asked again");
    same_response(&post(&client, &url, &key, "2 coffees").await, &created);
    assert_eq!(counted.claims_sent(), asked + 1, "the store's replay filled the cache again");

    assert_eq!(hits.get(), 1, "the handler ran more than once");
    server.stop().await;
}
