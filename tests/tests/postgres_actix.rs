//! `#[idempotent]` with the Postgres store on a real actix-web server (four
//! workers, real sockets): 200 concurrent same-key requests run the handler
//! once, and a PostgreSQL outage is answered 503 problem+json without
//! running the handler, then recovers without restarting the app.
#![cfg(feature = "postgres")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, HttpServer, post, web};
use bytes::Bytes;
use futures_util::future::join_all;
use idem_runtime::{FencingToken, Idem, PostgresStore, idempotent};
use idem_tests::postgres_server::PostgresServer;

/// How many clients send the same request at once.
const BURST: usize = 200;

#[derive(Default)]
struct Hits(AtomicUsize);

/// A slow order creation, so that the burst finds it in flight.
#[idempotent]
#[post("/orders")]
async fn create_order(hits: web::Data<Hits>, body: String) -> HttpResponse {
    let n = hits.0.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(300)).await;
    HttpResponse::Created()
        .insert_header(("x-order", n.to_string()))
        .insert_header(("x-multi", "one"))
        .append_header(("x-multi", "two"))
        .body(format!("order {n}: {body}"))
}

/// Serves the route on a free loopback port; returns its base URL.
fn serve(store: PostgresStore, hits: web::Data<Hits>) -> (String, ServerHandle) {
    let idem = Idem::new(store);
    let server =
        HttpServer::new(move || App::new().app_data(idem.clone()).app_data(hits.clone()).service(create_order))
            .workers(4)
            .bind(("127.0.0.1", 0))
            .expect("binding a loopback port");
    let address = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    (format!("http://{address}/orders"), handle)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Reply {
    status: StatusCode,
    replayed: bool,
    order: Option<String>,
    multi: Vec<String>,
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
    let multi = response.headers().get_all("x-multi").map(|v| v.to_str().unwrap_or("?").to_owned()).collect();
    let body = response.body().await.expect("reading the body");
    Reply {
        status: response.status(),
        replayed: replayed.as_deref() == Some("true"),
        order,
        multi,
        content_type,
        retry_after,
        body,
    }
}

fn client() -> awc::Client {
    awc::Client::builder().timeout(Duration::from_secs(30)).connector(awc::Connector::new().limit(0)).finish()
}

async fn burst(url: &str, key: &str) -> Vec<Reply> {
    let client = client();
    join_all((0..BURST).map(|_| post(&client, url, key, "2 coffees"))).await
}

#[actix_web::test]
async fn a_burst_of_same_key_requests_runs_the_handler_once() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_actix burst") else {
        return;
    };
    let options = PostgresStore::pool_options().max_connections(32);
    let store = PostgresStore::connect_with(&url, options).await.expect("connecting");
    store.migrate().await.expect("migrating");
    let hits = web::Data::new(Hits::default());
    let (url, server) = serve(store, hits.clone());
    let key = FencingToken::generate().to_hex();

    let replies = burst(&url, &key).await;
    assert_eq!(hits.0.load(Ordering::SeqCst), 1, "the handler ran more than once");
    let executed: Vec<_> = replies.iter().filter(|r| r.status == StatusCode::CREATED && !r.replayed).collect();
    assert_eq!(executed.len(), 1, "exactly one response may come from the handler: {executed:?}");
    let first = executed[0].clone();
    assert_eq!((first.order.as_deref(), &first.multi[..]), (Some("1"), &["one".to_owned(), "two".to_owned()][..]));
    let mut conflicts = 0;
    for reply in &replies {
        if reply.status == StatusCode::CONFLICT {
            assert!(reply.retry_after, "409 without Retry-After: {reply:?}");
            assert_eq!(reply.content_type.as_deref(), Some("application/problem+json"));
            conflicts += 1;
        } else if reply.replayed {
            assert_eq!(
                (reply.status, &reply.order, &reply.multi, &reply.body),
                (first.status, &first.order, &first.multi, &first.body)
            );
        } else {
            assert_eq!(reply, &first, "a second non-replayed response");
        }
    }
    assert!(conflicts > 0, "the burst never found the request in flight");

    // Once complete, every retry is the stored response, byte for byte.
    let again = burst(&url, &key).await;
    for reply in &again {
        assert!(reply.replayed, "{reply:?}");
        assert_eq!(
            (reply.status, &reply.order, &reply.multi, &reply.body),
            (first.status, &first.order, &first.multi, &first.body)
        );
    }
    assert_eq!(hits.0.load(Ordering::SeqCst), 1);
    server.stop(true).await;
}

#[actix_web::test]
async fn a_postgres_outage_is_503_without_running_the_handler_and_recovers() {
    if idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_actix outage").is_none() {
        return;
    }
    let Some(postgres) = PostgresServer::start("postgres_actix outage", &[]) else {
        return;
    };
    let store = PostgresStore::connect(&postgres.url("postgres")).await.expect("connecting");
    store.migrate().await.expect("migrating");
    let hits = web::Data::new(Hits::default());
    let (url, server) = serve(store, hits.clone());
    let client = client();

    // Works before the outage.
    let before = FencingToken::generate().to_hex();
    let created = post(&client, &url, &before, "before").await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");
    assert_eq!(hits.0.load(Ordering::SeqCst), 1);

    postgres.stop();
    for _ in 0..3 {
        let started = Instant::now();
        let reply = post(&client, &url, &FencingToken::generate().to_hex(), "during the outage").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert_eq!(reply.content_type.as_deref(), Some("application/problem+json"));
        assert!(reply.retry_after, "503 without Retry-After");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
    // A retry of the request completed before the outage cannot be
    // replayed either: 503, and the handler does not run again.
    let reply = post(&client, &url, &before, "before").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert_eq!(hits.0.load(Ordering::SeqCst), 1, "the handler ran without the store");

    // PostgreSQL comes back: the same app serves again, no restart, and the
    // record stored before the outage is still replayed.
    postgres.restart();
    let replay = post(&client, &url, &before, "before").await;
    assert!(replay.replayed && replay.body == created.body, "{replay:?}");
    let key = FencingToken::generate().to_hex();
    let after = post(&client, &url, &key, "after the outage").await;
    assert_eq!(after.status, StatusCode::CREATED, "{after:?}");
    assert!(!after.replayed);
    assert_eq!(hits.0.load(Ordering::SeqCst), 2);
    let replay = post(&client, &url, &key, "after the outage").await;
    assert!(replay.replayed && replay.body == after.body, "{replay:?}");
    assert_eq!(hits.0.load(Ordering::SeqCst), 2);
    server.stop(true).await;
}
