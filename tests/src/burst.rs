//! Same-key bursts through `#[idempotent]` on a real actix-web server (four
//! workers, real sockets), shared by the Redis and Postgres suites.

use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, post, web};
use bytes::Bytes;
use futures_util::future::join_all;
use idem_runtime::{Idem, idempotent};

use crate::counter::Counter;
use crate::http::{client, fresh_key};
use crate::server::TestServer;

/// How many clients send the same request at once.
pub const BURST: usize = 200;

/// How long a client waits for a response.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

async fn create(hits: &Counter, body: &str) -> HttpResponse {
    let n = hits.next();
    tokio::time::sleep(Duration::from_millis(300)).await;
    HttpResponse::Created()
        .insert_header(("x-order", n.to_string()))
        .insert_header(("x-multi", "one"))
        .append_header(("x-multi", "two"))
        .body(format!("order {n}: {body}"))
}

/// A slow order creation, so that a burst finds it in flight (409 mode).
/// Route scope: the bursts come from one anonymous caller.
#[idempotent(scope = "route")]
#[post("/orders")]
pub async fn create_order(hits: web::Data<Counter>, body: String) -> HttpResponse {
    create(&hits, &body).await
}

/// The same, where duplicates wait for the first response.
#[idempotent(scope = "route", in_flight = "wait", wait = "10s")]
#[post("/orders/waiting")]
pub async fn create_order_waiting(hits: web::Data<Counter>, body: String) -> HttpResponse {
    create(&hits, &body).await
}

/// Serves both routes with `idem` on a free loopback port (four workers);
/// returns the server and the execution counter.
pub fn serve(idem: Idem) -> (TestServer, web::Data<Counter>) {
    let hits = web::Data::new(Counter::default());
    let shared = hits.clone();
    let server = TestServer::with_workers(4, idem, move |config| {
        config.app_data(shared.clone()).service(create_order_waiting).service(create_order);
    });
    (server, hits)
}

/// What a test looks at in one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// `X-Order`: which execution produced the response.
    pub order: Option<String>,
    /// Every `X-Multi` value, in order.
    pub multi: Vec<String>,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// Whether `Retry-After` is present.
    pub retry_after: bool,
    /// Body bytes.
    pub body: Bytes,
}

/// POSTs `body` with idempotency key `key`.
pub async fn post(client: &awc::Client, url: &str, key: &str, body: &'static str) -> Reply {
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

async fn burst(url: &str, key: &str) -> Vec<Reply> {
    let client = client(CLIENT_TIMEOUT);
    join_all((0..BURST).map(|_| post(&client, url, key, "2 coffees"))).await
}

/// The one response that ran the handler: the first order, both header values.
fn the_execution(replies: &[Reply]) -> Reply {
    let executed: Vec<_> = replies.iter().filter(|r| r.status == StatusCode::CREATED && !r.replayed).collect();
    assert_eq!(executed.len(), 1, "exactly one response may come from running the handler: {executed:?}");
    let first = executed[0].clone();
    assert_eq!((first.order.as_deref(), &first.multi[..]), (Some("1"), &["one".to_owned(), "two".to_owned()][..]));
    first
}

fn same_response(reply: &Reply, first: &Reply) {
    assert_eq!(
        (reply.status, &reply.order, &reply.multi, &reply.body),
        (first.status, &first.order, &first.multi, &first.body),
        "a replay differs from the first response"
    );
}

/// A burst in 409 mode at `base`: one execution; every other reply is an
/// identical replay or a 409 problem with `Retry-After`; then all replays.
pub async fn assert_burst_runs_once(base: &str, hits: &Counter) {
    let (url, key) = (format!("{base}/orders"), fresh_key());
    let replies = burst(&url, &key).await;
    assert_eq!(hits.get(), 1, "the handler ran more than once");
    let first = the_execution(&replies);
    let mut conflicts = 0;
    for reply in &replies {
        if reply.status == StatusCode::CONFLICT {
            assert!(reply.retry_after, "409 without Retry-After: {reply:?}");
            assert_eq!(reply.content_type.as_deref(), Some("application/problem+json"));
            conflicts += 1;
        } else if reply.replayed {
            same_response(reply, &first);
        } else {
            assert_eq!(reply, &first, "a second non-replayed response");
        }
    }
    assert!(conflicts > 0, "the burst never found the request in flight");
    // Once complete, every retry is the stored response, byte for byte.
    for reply in burst(&url, &key).await {
        assert!(reply.replayed, "{reply:?}");
        same_response(&reply, &first);
    }
    assert_eq!(hits.get(), 1);
}

/// A burst in wait mode at `base`: one execution, one response for all.
pub async fn assert_burst_waits(base: &str, hits: &Counter) {
    let (url, key) = (format!("{base}/orders/waiting"), fresh_key());
    let replies = burst(&url, &key).await;
    assert_eq!(hits.get(), 1, "the handler ran more than once");
    let first = the_execution(&replies);
    for reply in &replies {
        same_response(reply, &first);
    }
}

/// While the store is down: fresh keys get a fast 503 problem with
/// `Retry-After`, and the handler does not run.
pub async fn assert_outage_is_503(base: &str, hits: &Counter) {
    let (url, client, ran) = (format!("{base}/orders"), client(CLIENT_TIMEOUT), hits.get());
    for _ in 0..3 {
        let started = Instant::now();
        let reply = post(&client, &url, &fresh_key(), "during the outage").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert_eq!(reply.content_type.as_deref(), Some("application/problem+json"));
        assert!(reply.retry_after, "503 without Retry-After");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
    assert_eq!(hits.get(), ran, "the handler ran without the store");
}
