//! A Redis outage at the store level: while the server is down every
//! operation fails fast with a store error (never hangs), and once it is
//! back the same `RedisStore` works again, without a restart; and a claim
//! whose answer a frozen server lost is released once it answers again.

use std::future::Future;
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, post, web};
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, Store};
use idem_runtime::{Idem, RedisStore, StoreError, idempotent};
use idem_tests::counter::Counter;
use idem_tests::http::post_with;
use idem_tests::redis_server::RedisServer;
use idem_tests::server::TestServer;

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(600);
/// How long an operation may take to fail while Redis is down.
const FAIL_WITHIN: Duration = Duration::from_secs(5);
/// How long the store may take to work again once Redis is back.
const RECOVER_WITHIN: Duration = Duration::from_secs(10);

/// Runs `operation` and checks it fails, with a store error, in time.
async fn fails_fast<T: std::fmt::Debug>(what: &str, operation: impl Future<Output = Result<T, StoreError>>) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(FAIL_WITHIN * 2, operation).await;
    let elapsed = started.elapsed();
    match outcome {
        Err(_) => panic!("{what} hung for {:?} while Redis was down", FAIL_WITHIN * 2),
        Ok(Ok(value)) => panic!("{what} succeeded while Redis was down: {value:?}"),
        Ok(Err(error)) => {
            assert!(elapsed < FAIL_WITHIN, "{what} took {elapsed:?} to fail: {error}");
            assert!(matches!(error, StoreError::Unavailable { .. } | StoreError::Timeout { .. }), "{what}: {error:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn store_fails_fast_while_redis_is_down_and_recovers_after() {
    let Some(mut server) = RedisServer::start("store_fails_fast_while_redis_is_down_and_recovers_after") else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.expect("connecting the store");
    let (key, request) = (fresh_key(), fingerprint("before the outage"));
    let token = match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    };

    server.stop();
    let down = fresh_key();
    fails_fast("claim", store.claim(&down, &request, LEASE, TTL)).await;
    fails_fast("renew", store.renew(&key, token, LEASE)).await;
    fails_fast("complete", store.complete(&key, token, &response(b"lost"), LEASE)).await;
    fails_fast("release", store.release(&key, token)).await;
    fails_fast("get", store.get(&key)).await;
    // Still failing, still fast, on a later attempt (no growing backoff).
    fails_fast("claim again", store.claim(&down, &request, LEASE, TTL)).await;

    server.restart();
    let (key, request) = (fresh_key(), fingerprint("after the outage"));
    let started = Instant::now();
    let token = loop {
        match store.claim(&key, &request, LEASE, TTL).await {
            Ok(Claim::Acquired { token, .. }) => break token,
            Ok(other) => panic!("expected the key to be acquired, got {other:?}"),
            Err(error) => {
                assert!(started.elapsed() < RECOVER_WITHIN, "the store did not recover: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // The restarted server lost its scripts: EVALSHA's NOSCRIPT fallback
    // reloads them, and every operation works on the same store.
    assert_eq!(store.renew(&key, token, LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.complete(&key, token, &response(b"ok"), LEASE).await.unwrap(), Fence::Held);
    assert_eq!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::Replay(response(b"ok")));
}

#[tokio::test(flavor = "multi_thread")]
async fn connecting_to_a_stopped_server_fails_fast() {
    let Some(mut server) = RedisServer::start("connecting_to_a_stopped_server_fails_fast") else {
        return;
    };
    server.stop();
    let started = Instant::now();
    let error = RedisStore::connect(&server.url()).await.expect_err("nothing listens");
    assert!(started.elapsed() < FAIL_WITHIN, "{:?}", started.elapsed());
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(error.to_string().contains(&format!("127.0.0.1:{}", server.port())), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_server_times_out_and_the_connection_survives() {
    let Some(server) = RedisServer::start("a_hung_server_times_out_and_the_connection_survives") else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.expect("connecting the store");
    let (key, request) = (fresh_key(), fingerprint("while hung"));

    // The server stops answering but keeps its connections open: only the
    // response timeout can end the wait.
    server.freeze();
    let started = Instant::now();
    let outcome = tokio::time::timeout(FAIL_WITHIN * 2, store.claim(&key, &request, LEASE, TTL)).await;
    let elapsed = started.elapsed();
    server.thaw();
    match outcome {
        Ok(Err(StoreError::Timeout { after, .. })) => {
            assert_eq!(after, idem_runtime::RedisStore::DEFAULT_RESPONSE_TIMEOUT);
            assert!(elapsed < FAIL_WITHIN, "{elapsed:?}");
        }
        other => {
            panic!("expected a timeout within {FAIL_WITHIN:?}, got {other:?} after {elapsed:?}")
        }
    }

    // The claim that timed out reached the server and ran once it woke up:
    // an ambiguous failure, which the lease resolves. Later replies are not
    // confused with the late one.
    match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
        Claim::InFlight { retry_after } => assert!(retry_after > LEASE - Duration::from_secs(10), "{retry_after:?}"),
        other => panic!("expected the timed-out claim to hold the key, got {other:?}"),
    }
    let key = fresh_key();
    assert!(matches!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::Acquired { .. }));
    assert_eq!(store.claim(&key, &fingerprint("other"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
}

/// Counts its runs.
#[idempotent(scope = "route")]
#[post("/pay")]
async fn pay(runs: web::Data<Counter>) -> HttpResponse {
    HttpResponse::Created().body(format!("run {}", runs.next()))
}

/// A claim whose answer is lost (the server froze while it was on its way,
/// and ran it once it resumed) holds its key, under a token nobody was
/// told of. The runtime releases it with that token once the server
/// answers again: the retry runs the request, instead of answering 409
/// until the whole lease (30 s) runs out.
#[actix_web::test]
async fn a_claim_whose_answer_was_lost_is_released_not_left_in_flight() {
    let Some(server) = RedisServer::start("a_claim_whose_answer_was_lost_is_released_not_left_in_flight") else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.expect("connecting the store");
    let runs = web::Data::new(Counter::default());
    let shared = runs.clone();
    let idem = Idem::new(store).store_timeout(Duration::from_millis(300));
    let app = TestServer::start(idem, move |config| {
        config.app_data(shared.clone()).service(pay);
    });
    let key = idem_tests::http::fresh_key();
    server.freeze();
    let lost = post_with(&app.at("/pay"), &[("idempotency-key", &key)], "{}").await;
    lost.assert_problem(503);
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.thaw();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let retry = post_with(&app.at("/pay"), &[("idempotency-key", &key)], "{}").await;
    assert_eq!(retry.status.as_u16(), 201, "the retry runs: the lost claim was released ({retry:?})");
    assert_eq!(runs.get(), 1);
    app.stop().await;
}
