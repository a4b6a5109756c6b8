//! `#[idempotent]` with the Redis store on a real actix-web server (four
//! workers, real sockets): a burst of same-key requests runs the handler
//! once, and a Redis outage is answered 503 without running the handler,
//! then recovers without restarting the app.
#![cfg(feature = "redis")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, HttpServer, post, web};
use bytes::Bytes;
use futures_util::future::join_all;
use idem_runtime::{FencingToken, Idem, RedisStore, idempotent};
use idem_tests::redis_server::RedisServer;

/// How many clients send the same request at once.
const BURST: usize = 200;

#[derive(Default)]
struct Hits(AtomicUsize);

/// A slow order creation, so that the burst finds it in flight.
async fn create(hits: &Hits, body: &str) -> HttpResponse {
    let n = hits.0.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(300)).await;
    HttpResponse::Created().insert_header(("x-order", n.to_string())).body(format!("order {n}: {body}"))
}

#[idempotent]
#[post("/orders")]
async fn create_order(hits: web::Data<Hits>, body: String) -> HttpResponse {
    create(&hits, &body).await
}

#[idempotent(in_flight = "wait", wait = "10s")]
#[post("/orders/waiting")]
async fn create_order_waiting(hits: web::Data<Hits>, body: String) -> HttpResponse {
    create(&hits, &body).await
}

/// Serves the two routes on a free loopback port; returns its base URL.
fn serve(store: RedisStore, hits: web::Data<Hits>) -> (String, ServerHandle) {
    let idem = Idem::new(store);
    let server = HttpServer::new(move || {
        App::new().app_data(idem.clone()).app_data(hits.clone()).service(create_order_waiting).service(create_order)
    })
    .workers(4)
    .bind(("127.0.0.1", 0))
    .expect("binding a loopback port");
    let address = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    (format!("http://{address}"), handle)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Reply {
    status: StatusCode,
    replayed: bool,
    order: Option<String>,
    content_type: Option<String>,
    retry_after: bool,
    body: Bytes,
}

async fn post(client: &awc::Client, url: &str, key: &str, body: &'static str) -> Reply {
    let mut response = client
        .post(url)
        .insert_header(("idempotency-key", key))
        .send_body(body)
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap_or("?").to_owned());
    let (replayed, order) = (header("idempotent-replayed"), header("x-order"));
    let (content_type, retry_after) = (header("content-type"), header("retry-after").is_some());
    let body = response.body().await.expect("reading the body");
    Reply {
        status: response.status(),
        replayed: replayed.as_deref() == Some("true"),
        order,
        content_type,
        retry_after,
        body,
    }
}

fn client() -> awc::Client {
    awc::Client::builder().timeout(Duration::from_secs(30)).finish()
}

async fn burst(url: &str, key: &str) -> Vec<Reply> {
    let client = client();
    join_all((0..BURST).map(|_| post(&client, url, key, "2 coffees"))).await
}

async fn shared_store(test: &str) -> Option<RedisStore> {
    let url = idem_tests::backend::url("IDEM_REDIS_URL", test)?;
    Some(RedisStore::connect(&url).await.expect("connecting to Redis"))
}

/// The one response that ran the handler, checked to be the first order.
fn the_execution(replies: &[Reply]) -> &Reply {
    let executed: Vec<_> = replies.iter().filter(|r| r.status == StatusCode::CREATED && !r.replayed).collect();
    assert_eq!(executed.len(), 1, "exactly one response may come from running the handler: {executed:?}");
    assert_eq!(executed[0].order.as_deref(), Some("1"));
    executed[0]
}

#[actix_web::test]
async fn a_burst_of_same_key_requests_runs_the_handler_once() {
    let Some(store) = shared_store("a_burst_of_same_key_requests_runs_the_handler_once").await else {
        return;
    };
    let hits = web::Data::new(Hits::default());
    let (base, server) = serve(store, hits.clone());
    let (url, key) = (format!("{base}/orders"), FencingToken::generate().to_hex());

    let replies = burst(&url, &key).await;
    assert_eq!(hits.0.load(Ordering::SeqCst), 1, "the handler ran more than once");
    let first = the_execution(&replies).clone();
    let mut conflicts = 0;
    for reply in &replies {
        if reply.status == StatusCode::CONFLICT {
            assert!(reply.retry_after, "409 without Retry-After: {reply:?}");
            assert_eq!(reply.content_type.as_deref(), Some("application/problem+json"));
            conflicts += 1;
        } else if reply.replayed {
            assert_eq!((reply.status, &reply.order, &reply.body), (first.status, &first.order, &first.body));
        } else {
            assert_eq!(reply, &first, "a second non-replayed response");
        }
    }
    assert!(conflicts > 0, "the burst never found the request in flight");

    // Once complete, every retry is the stored response.
    let again = burst(&url, &key).await;
    assert!(again.iter().all(|r| r.replayed && r.body == first.body && r.status == first.status), "{again:?}");
    assert_eq!(hits.0.load(Ordering::SeqCst), 1);
    server.stop(true).await;
}

#[actix_web::test]
async fn a_burst_in_wait_mode_gets_one_response_for_all() {
    let Some(store) = shared_store("a_burst_in_wait_mode_gets_one_response_for_all").await else {
        return;
    };
    let hits = web::Data::new(Hits::default());
    let (base, server) = serve(store, hits.clone());
    let (url, key) = (format!("{base}/orders/waiting"), FencingToken::generate().to_hex());

    let replies = burst(&url, &key).await;
    assert_eq!(hits.0.load(Ordering::SeqCst), 1, "the handler ran more than once");
    let first = the_execution(&replies).clone();
    for reply in &replies {
        assert_eq!((reply.status, &reply.order, &reply.body), (first.status, &first.order, &first.body));
    }
    server.stop(true).await;
}

#[actix_web::test]
async fn a_redis_outage_is_503_without_running_the_handler_and_recovers() {
    let Some(mut redis) = RedisServer::start("a_redis_outage_is_503_without_running_the_handler_and_recovers") else {
        return;
    };
    let store = RedisStore::connect(&redis.url()).await.expect("connecting to the private Redis");
    let hits = web::Data::new(Hits::default());
    let (base, server) = serve(store, hits.clone());
    let (url, client) = (format!("{base}/orders"), client());

    redis.stop();
    for _ in 0..3 {
        let started = Instant::now();
        let reply = post(&client, &url, &FencingToken::generate().to_hex(), "during the outage").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert_eq!(reply.content_type.as_deref(), Some("application/problem+json"));
        assert!(reply.retry_after, "503 without Retry-After");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
    assert_eq!(hits.0.load(Ordering::SeqCst), 0, "the handler ran without the store");

    // Redis comes back (empty): the same app serves again, no restart.
    redis.restart();
    let key = FencingToken::generate().to_hex();
    let started = Instant::now();
    let created = loop {
        let reply = post(&client, &url, &key, "after the outage").await;
        match reply.status {
            StatusCode::CREATED => break reply,
            StatusCode::SERVICE_UNAVAILABLE if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => panic!("the app did not recover: {reply:?}"),
        }
    };
    assert!(!created.replayed);
    assert_eq!(hits.0.load(Ordering::SeqCst), 1);
    let replay = post(&client, &url, &key, "after the outage").await;
    assert!(replay.replayed && replay.body == created.body, "{replay:?}");
    assert_eq!(hits.0.load(Ordering::SeqCst), 1);
    server.stop(true).await;
}
