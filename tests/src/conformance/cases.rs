//! The conformance cases: each starts the app on a framework, drives it
//! over HTTP and counts what its handlers ran.

use std::time::Duration;

use serde_json::{Value, json};

use super::{BODY_LIMIT, Framework, Running, start};
use crate::http::fresh_key;

/// An answer, as the client got it.
#[derive(Debug)]
pub struct Answer {
    /// Its status.
    pub status: u16,
    /// Its headers.
    pub headers: reqwest::header::HeaderMap,
    /// Its body.
    pub body: Vec<u8>,
}

impl Answer {
    /// Its body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }

    /// Whether it is a replay.
    pub fn replayed(&self) -> bool {
        self.headers.get("idempotent-replayed").is_some_and(|value| value == "true")
    }

    /// Its problem's type slug, after checking it is a problem of `status`.
    pub fn problem(&self, status: u16) -> String {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.headers.get("content-type").map(|v| v.to_str().unwrap()), Some("application/problem+json"));
        let problem = self.json();
        assert_eq!(problem["status"], status);
        problem["type"].as_str().unwrap_or_default().trim_start_matches("urn:idem:problem:").to_owned()
    }
}

/// A request to send.
#[derive(Clone, Debug, Default)]
pub struct Send {
    /// Its path (and query).
    pub path: String,
    /// Its `X-User-ID`.
    pub user: Option<String>,
    /// Its `Idempotency-Key`.
    pub key: Option<String>,
    /// Its other headers.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: String,
    /// How long the client waits for the answer (20 s by default).
    pub timeout: Option<Duration>,
}

/// A JSON `POST` of `body` to `path` as user `u1` with `key`.
pub fn post(path: &str, key: &str, body: Value) -> Send {
    Send {
        path: path.to_owned(),
        user: Some("u1".to_owned()),
        key: Some(key.to_owned()),
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string(),
        timeout: None,
    }
}

impl Send {
    /// The same request as user `user`.
    pub fn by(mut self, user: &str) -> Self {
        self.user = Some(user.to_owned());
        self
    }

    /// The same request without a user.
    pub fn anonymous(mut self) -> Self {
        self.user = None;
        self
    }

    /// The same request without a key header.
    pub fn keyless(mut self) -> Self {
        self.key = None;
        self
    }

    /// The same request with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same request with this raw body.
    pub fn raw(mut self, body: &str) -> Self {
        self.body = body.to_owned();
        self
    }

    /// The same request, given up after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends it to `app`.
    pub async fn to(&self, app: &Running) -> Answer {
        self.try_to(app).await.unwrap_or_else(|error| panic!("{} failed: {error}", self.path))
    }

    /// Sends it to `app`; an error if no answer came.
    pub async fn try_to(&self, app: &Running) -> Result<Answer, reqwest::Error> {
        let client = reqwest::Client::builder().timeout(self.timeout.unwrap_or(Duration::from_secs(20))).build()?;
        let mut request = client.post(app.at(&self.path)).body(self.body.clone());
        if let Some(user) = &self.user {
            request = request.header("x-user-id", user);
        }
        if let Some(key) = &self.key {
            request = request.header("idempotency-key", key);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let response = request.send().await?;
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        let body = response.bytes().await?.to_vec();
        Ok(Answer { status, headers, body })
    }
}

/// Waits until `app` counted `name` `count` times, at most 10 s.
async fn until_counted(app: &Running, name: &str, count: u64) {
    for _ in 0..1000 {
        if app.calls.count(name) >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} was counted {} times, not {count}", app.calls.count(name));
}

/// A retry gets the first response replayed.
pub async fn a_retry_gets_the_first_response_replayed<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/orders", &fresh_key(), json!({"customer": "c1", "cents": 500}));
    let first = request.to(&app).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let again = request.to(&app).await;
    assert_eq!((again.status, again.replayed()), (201, true), "{again:?}");
    assert_eq!(again.body, first.body, "byte for byte");
    assert_eq!(again.headers.get("content-type"), first.headers.get("content-type"));
    assert_eq!(app.calls.count("orders"), 1, "{}", F::NAME);
}

/// A reserialized body is the same request.
pub async fn a_reserialized_body_is_the_same_request<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let first = post("/orders", &key, json!({})).raw(r#"{"customer":"c1","cents":500}"#).to(&app).await;
    let again = post("/orders", &key, json!({})).raw("{ \"cents\" : 500,\n \"customer\": \"c1\" }").to(&app).await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(app.calls.count("orders"), 1);
}

/// Another body under the key is refused.
pub async fn another_body_under_the_key_is_refused<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    assert_eq!(post("/orders", &key, json!({"cents": 500})).to(&app).await.status, 201);
    let other = post("/orders", &key, json!({"cents": 900})).to(&app).await;
    assert_eq!(other.problem(422), "key-reused");
    assert_eq!(app.calls.count("orders"), 1);
}

/// A route under a scope or a nested router with a parameter of its own
/// counts the whole path, the parameter's part included: the same key for
/// another shop is another request.
pub async fn a_nested_route_counts_the_whole_path<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let first = post("/shops/A/items", &key, json!({})).to(&app).await;
    assert_eq!((first.status, first.json()["shop"].as_str()), (200, Some("A")), "{first:?}");
    let other = post("/shops/B/items", &key, json!({})).to(&app).await;
    assert_eq!(other.problem(422), "key-reused", "never shop A's answer for shop B");
    assert!(post("/shops/A/items", &key, json!({})).to(&app).await.replayed());
    assert_eq!(app.calls.count("shop-items"), 1);
}

/// Another path or query under the key is refused.
pub async fn another_path_or_query_under_the_key_is_refused<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let first = post("/items/A", &key, json!({})).to(&app).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["id"], "A");
    assert_eq!(post("/items/B", &key, json!({})).to(&app).await.problem(422), "key-reused");
    assert_eq!(post("/items/A?x=1", &key, json!({})).to(&app).await.problem(422), "key-reused");
    assert!(post("/items/A", &key, json!({})).to(&app).await.replayed());
    assert_eq!(app.calls.count("items"), 1);
}

/// A concurrent duplicate gets 409 and never runs.
pub async fn a_concurrent_duplicate_gets_409_and_never_runs<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/slow", &fresh_key(), json!({"delay_ms": 1500}));
    let (first, duplicate) = tokio::join!(request.to(&app), async {
        until_counted(&app, "slow", 1).await;
        request.to(&app).await
    });
    assert_eq!(duplicate.problem(409), "in-flight");
    assert!(duplicate.headers.get("retry-after").is_some(), "{duplicate:?}");
    assert_eq!(first.status, 200);
    let again = request.to(&app).await;
    assert!(again.replayed());
    assert_eq!(app.calls.count("slow"), 1);
}

/// A waiting duplicate gets the first response.
pub async fn a_waiting_duplicate_gets_the_first_response<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/wait", &fresh_key(), json!({"delay_ms": 800}));
    let (first, waited) = tokio::join!(request.to(&app), async {
        until_counted(&app, "wait", 1).await;
        request.to(&app).await
    });
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!((waited.status, waited.replayed()), (200, true), "{waited:?}");
    assert_eq!(waited.body, first.body);
    assert_eq!(app.calls.count("wait"), 1);
}

/// Keys are read as sf strings and tokens.
pub async fn keys_are_read_as_sf_strings_and_tokens<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let quoted = format!("\"{key}\";v=1");
    assert_eq!(post("/orders", &quoted, json!({"n": 1})).to(&app).await.status, 201);
    assert!(post("/orders", &key, json!({"n": 1})).to(&app).await.replayed(), "a token is the same key");
    assert_eq!(app.calls.count("orders"), 1);
}

/// Missing and malformed keys are refused before anything runs.
pub async fn missing_and_malformed_keys_are_refused_before_anything_runs<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/orders", "k", json!({"n": 1}));
    assert_eq!(request.clone().keyless().to(&app).await.problem(400), "missing-key");
    for bad in ["two words", "\"unterminated", &"k".repeat(256), ""] {
        assert_eq!(post("/orders", bad, json!({"n": 1})).to(&app).await.problem(400), "invalid-key", "{bad:?}");
    }
    assert_eq!(app.calls.count("orders"), 0);
}

/// A repeated key header is refused.
pub async fn a_repeated_key_header_is_refused<F: Framework>(framework: F) {
    let app = start(framework).await;
    let answer = post("/orders", "a", json!({})).header("idempotency-key", "b").to(&app).await;
    assert_eq!(answer.problem(400), "invalid-key");
    assert_eq!(app.calls.count("orders"), 0);
}

/// User scope keeps callers apart.
pub async fn user_scope_keeps_callers_apart<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/orders", &fresh_key(), json!({"n": 1}));
    let first = request.to(&app).await;
    let other = request.clone().by("u2").to(&app).await;
    assert_eq!((other.status, other.replayed()), (201, false), "another caller's key is their own: {other:?}");
    assert_ne!(other.json()["call"], first.json()["call"]);
    assert_eq!(app.calls.count("orders"), 2);
}

/// Route and global scopes share keys across callers.
pub async fn route_and_global_scopes_share_keys_across_callers<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/global", &fresh_key(), json!({}));
    assert_eq!(request.to(&app).await.status, 200);
    assert!(request.clone().by("u2").to(&app).await.replayed());
    assert!(request.clone().anonymous().to(&app).await.replayed(), "no subject needed");
    assert_eq!(app.calls.count("global"), 1);
}

/// A request without a subject is refused.
pub async fn a_request_without_a_subject_is_refused<F: Framework>(framework: F) {
    let app = start(framework).await;
    let answer = post("/orders", &fresh_key(), json!({})).anonymous().to(&app).await;
    assert_eq!(answer.problem(401), "missing-subject");
    assert_eq!(app.calls.count("orders"), 0);
}

/// A body over the limit is refused.
pub async fn a_body_over_the_limit_is_refused<F: Framework>(framework: F) {
    let app = start(framework).await;
    let big = json!({"pad": "x".repeat(BODY_LIMIT)});
    assert_eq!(post("/orders", &fresh_key(), big).to(&app).await.problem(413), "body-too-large");
    assert_eq!(app.calls.count("orders"), 0);
}

/// A compressed body is refused with 415.
pub async fn a_compressed_body_is_refused_with_415<F: Framework>(framework: F) {
    let app = start(framework).await;
    let answer = post("/orders", &fresh_key(), json!({})).header("content-encoding", "gzip").to(&app).await;
    assert_eq!(answer.problem(415), "unsupported-content-encoding");
    assert_eq!(answer.headers.get("accept-encoding").map(|v| v.to_str().unwrap()), Some("identity"));
    assert_eq!(app.calls.count("orders"), 0);
}

/// An extractor refusal keeps nothing.
pub async fn an_extractor_refusal_keeps_nothing<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let refused = post("/orders", &key, json!({})).raw("{not json").to(&app).await;
    assert!((400..500).contains(&refused.status), "the extractor's own refusal: {refused:?}");
    let fixed = post("/orders", &key, json!({"n": 1})).to(&app).await;
    assert_eq!((fixed.status, fixed.replayed()), (201, false), "the key is still free: {fixed:?}");
    assert_eq!(app.calls.count("orders"), 1);
}

/// Failures are stored and replayed.
pub async fn failures_are_stored_and_replayed<F: Framework>(framework: F) {
    let app = start(framework).await;
    for status in [402, 500] {
        let request = post("/status", &fresh_key(), json!({"status": status}));
        assert_eq!(request.to(&app).await.status, status);
        let again = request.to(&app).await;
        assert_eq!((again.status, again.replayed()), (status, true), "{again:?}");
    }
    assert_eq!(app.calls.count("status"), 2);
}

/// A retryable failure releases the key.
pub async fn a_retryable_failure_releases_the_key<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let request = post("/status", &key, json!({"status": 503, "retryable": true}));
    assert_eq!(request.to(&app).await.status, 503);
    let again = request.to(&app).await;
    assert_eq!((again.status, again.replayed()), (503, false), "run again: {again:?}");
    assert_eq!(app.calls.count("status"), 2);
    let other = post("/status", &key, json!({"status": 200})).to(&app).await;
    assert_eq!(other.problem(422), "key-reused", "a released key keeps its fingerprint");
}

/// A panic is stored as a 500 problem.
pub async fn a_panic_is_stored_as_a_500_problem<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/panic", &fresh_key(), json!({}));
    assert_eq!(request.to(&app).await.problem(500), "handler-panicked");
    let again = request.to(&app).await;
    assert!(again.replayed());
    assert_eq!(again.problem(500), "handler-panicked");
    assert_eq!(app.calls.count("panic"), 1);
}

/// Without a key an optional route runs every time.
pub async fn without_a_key_an_optional_route_runs_every_time<F: Framework>(framework: F) {
    let app = start(framework).await;
    let keyless = post("/optional", "", json!({})).keyless();
    assert_eq!(keyless.to(&app).await.status, 200);
    assert_eq!(keyless.to(&app).await.status, 200);
    assert_eq!(app.calls.count("optional"), 2);
    let keyed = post("/optional", &fresh_key(), json!({}));
    assert_eq!(keyed.to(&app).await.status, 200);
    assert!(keyed.to(&app).await.replayed());
    assert_eq!(app.calls.count("optional"), 3);
}

/// Natural keys from the path and the body.
pub async fn natural_keys_from_the_path_and_the_body<F: Framework>(framework: F) {
    let app = start(framework).await;
    let order = fresh_key();
    let pay = post(&format!("/natural/{order}/pay"), "", json!({})).keyless();
    assert_eq!(pay.to(&app).await.status, 201);
    assert!(pay.to(&app).await.replayed());
    assert_eq!(app.calls.count("natural"), 1);
    let event = json!({"id": fresh_key(), "type": "charge.refunded"});
    let deliver = post("/events", "", event.clone()).keyless();
    assert_eq!(deliver.to(&app).await.status, 200);
    assert!(deliver.clone().by("someone-else").to(&app).await.replayed());
    let changed = post("/events", "", json!({"id": event["id"], "type": "other"})).keyless();
    assert_eq!(changed.to(&app).await.problem(422), "key-reused");
    assert_eq!(post("/events", "", json!({"type": "no id"})).keyless().to(&app).await.problem(400), "missing-key");
    assert_eq!(app.calls.count("events"), 1);
}

/// Fingerprint headers count.
pub async fn fingerprint_headers_count<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/accounts", &fresh_key(), json!({}));
    assert_eq!(request.clone().header("x-account-id", "a").to(&app).await.status, 200);
    assert!(request.clone().header("X-Account-ID", "a").to(&app).await.replayed());
    assert_eq!(request.clone().header("x-account-id", "b").to(&app).await.problem(422), "key-reused");
    assert_eq!(request.to(&app).await.problem(422), "key-reused", "absent differs");
    assert_eq!(app.calls.count("accounts"), 1);
}

/// Excluded fields are never compared: a redelivery that bumps them is
/// the same request, a change anywhere else is not.
pub async fn excluded_fields_are_never_compared<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let delivery = |attempt: u64, sent_at: &str, amount: u64| {
        post(
            "/deliveries",
            &key,
            json!({"amount": amount, "attempt": attempt, "meta": {"sent_at": sent_at, "id": "m1"}}),
        )
    };
    let first = delivery(1, "10:00", 500).to(&app).await;
    assert_eq!((first.status, first.json()["attempt"].as_u64()), (200, Some(1)), "{first:?}");
    let again = delivery(2, "10:05", 500).to(&app).await;
    assert!(again.replayed(), "a bumped counter and send time: {again:?}");
    assert_eq!(again.body, first.body, "the first delivery's answer");
    let bare = post("/deliveries", &key, json!({"amount": 500, "meta": {"id": "m1"}})).to(&app).await;
    assert!(bare.replayed(), "without the excluded members: {bare:?}");
    assert_eq!(delivery(3, "10:10", 900).to(&app).await.problem(422), "key-reused", "another amount");
    let other_meta = post("/deliveries", &key, json!({"amount": 500, "attempt": 4, "meta": {"id": "m2"}}));
    assert_eq!(other_meta.to(&app).await.problem(422), "key-reused", "a member beside an excluded one");
    assert_eq!(app.calls.count("deliveries"), 1);
}

/// A composite key is its parts together: another value of any part is
/// another key, a missing part is refused.
pub async fn composite_keys_join_their_parts<F: Framework>(framework: F) {
    let app = start(framework).await;
    let order = fresh_key();
    let line = |order: &str, line: Value| post(&format!("/lines/{order}"), "", json!({"line_id": line})).keyless();
    let first = line(&order, json!("l1")).to(&app).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(line(&order, json!("l1")).to(&app).await.replayed());
    assert!(!line(&order, json!("l2")).to(&app).await.replayed(), "another line of the order");
    let other_order = fresh_key();
    assert!(!line(&other_order, json!("l1")).to(&app).await.replayed(), "the same line of another order");
    assert_eq!(line(&order, json!(7)).to(&app).await.status, 201, "an integer part");
    let seven = line(&order, json!("7")).to(&app).await;
    assert_eq!(seven.problem(422), "key-reused", "\"7\" is the key 7, sent in another body");
    let missing = post(&format!("/lines/{order}"), "", json!({})).keyless().to(&app).await;
    assert_eq!(missing.problem(400), "missing-key");
    assert_eq!(app.calls.count("lines"), 4);
}

/// A composite key that is not required: a request with none of the parts
/// a client sends runs without a key; one with some of them is refused,
/// never run without the key its sender meant to give.
pub async fn a_partial_composite_key_is_refused<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let both = post("/transfers", &key, json!({"account": "acc-1"}));
    assert_eq!(both.to(&app).await.status, 201);
    assert!(both.to(&app).await.replayed());
    let no_account = post("/transfers", &key, json!({"amount": 5})).to(&app).await;
    assert_eq!(no_account.problem(400), "missing-key", "the header without the body's part");
    let detail = no_account.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("/account"), "names the missing part: {detail}");
    let null_account = post("/transfers", &key, json!({"account": null})).to(&app).await;
    assert_eq!(null_account.problem(400), "missing-key", "null is absent");
    let no_header = post("/transfers", "", json!({"account": "acc-1"})).keyless().to(&app).await;
    assert_eq!(no_header.problem(400), "missing-key", "the body's part without the header");
    let neither = post("/transfers", "", json!({"amount": 5})).keyless();
    assert!(!neither.to(&app).await.replayed() && !neither.to(&app).await.replayed(), "no key: runs each time");
    assert_eq!(app.calls.count("transfers"), 3);
}

/// A computed key is what the route's function makes of the request.
pub async fn computed_keys_come_from_the_function<F: Framework>(framework: F) {
    let app = start(framework).await;
    let number = fresh_key();
    let invoice = |tenant: &str| {
        post("/invoices", "", json!({"number": number, "cents": 100})).keyless().header("x-tenant-id", tenant)
    };
    let first = invoice("t1").to(&app).await;
    assert_eq!(first.status, 201, "{first:?}");
    let again = invoice("t1").by("another-user").to(&app).await;
    assert!(again.replayed(), "scope global: {again:?}");
    assert!(!invoice("t2").to(&app).await.replayed(), "another tenant's invoice of that number");
    let untenanted = post("/invoices", "", json!({"number": number})).keyless().to(&app).await;
    assert_eq!(untenanted.problem(400), "missing-key");
    assert!(
        untenanted.json()["detail"].as_str().unwrap_or_default().contains("business::invoice_key"),
        "{untenanted:?}"
    );
    let unnumbered = post("/invoices", "", json!({"cents": 1})).keyless().header("x-tenant-id", "t1");
    assert_eq!(unnumbered.to(&app).await.problem(400), "missing-key");
    // Another layer may trust the second value: the key never takes the first.
    let two_tenants = invoice("t1").header("x-tenant-id", "t2").to(&app).await;
    assert_eq!(two_tenants.problem(400), "invalid-key", "a repeated header is no value: {two_tenants:?}");
    // Not required: no key runs keyless, but a key the function could not
    // read (its header sent twice) is refused, never run without it.
    let receipt = |tenants: &[&str]| {
        tenants.iter().fold(post("/receipts", "", json!({"number": number})).keyless(), |send, tenant| {
            send.header("x-tenant-id", tenant)
        })
    };
    assert!(receipt(&["t1"]).to(&app).await.status == 201 && receipt(&["t1"]).to(&app).await.replayed());
    assert_eq!(receipt(&["t1", "t2"]).to(&app).await.problem(400), "invalid-key");
    assert!(!receipt(&[]).to(&app).await.replayed(), "no tenant: no key, runs");
    assert_eq!(app.calls.count("receipts"), 2);
    assert_eq!(app.calls.count("invoices"), 2);
}

/// The handler owns the replayed header.
pub async fn the_handler_owns_the_replayed_header<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/replayed-header", &fresh_key(), json!({}));
    let first = request.to(&app).await;
    assert!(first.headers.get("idempotent-replayed").is_none(), "removed from the first response: {first:?}");
    let again = request.to(&app).await;
    let values: Vec<_> = again.headers.get_all("idempotent-replayed").iter().collect();
    assert_eq!(values, ["true"], "the runtime's own, once");
}

/// The execution context gives stable derived keys.
pub async fn the_execution_context_gives_stable_derived_keys<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/context", &fresh_key(), json!({}));
    let first = request.to(&app).await.json();
    let derived = first["derived"].as_str().unwrap().to_owned();
    assert_eq!(derived.len(), 64);
    assert_eq!(first["attempt"], "First");
    let other = post("/context", &fresh_key(), json!({})).to(&app).await.json();
    assert_ne!(other["derived"], first["derived"]);
    let again = request.to(&app).await;
    assert!(again.replayed());
    assert_eq!(again.json()["derived"], derived.as_str());
}

/// A durable step runs once.
pub async fn a_durable_step_runs_once<F: Framework>(framework: F) {
    let app = start(framework).await;
    let key = fresh_key();
    let retryable = post("/steps", &key, json!({"status": 503}));
    // A 503 is kept (not marked retryable): the step ran once.
    assert_eq!(retryable.to(&app).await.status, 503);
    assert!(retryable.to(&app).await.replayed());
    let request = post("/steps", &fresh_key(), json!({"status": 201}));
    let first = request.to(&app).await;
    assert_eq!(first.status, 201);
    assert!(request.to(&app).await.replayed());
    assert_eq!(app.calls.count("charges"), 2);
}

/// A client that hangs up does not cancel the execution.
pub async fn a_client_that_hangs_up_does_not_cancel_the_execution<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/slow", &fresh_key(), json!({"delay_ms": 800}));
    let gone = request.clone().timeout(Duration::from_millis(250)).try_to(&app).await;
    assert!(gone.is_err(), "the client gave up: {gone:?}");
    until_counted(&app, "slow-done", 1).await;
    // Its completion lands right after the handler returns.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = request.to(&app).await;
    assert_eq!((again.status, again.replayed()), (200, true), "{again:?}");
    assert_eq!(app.calls.count("slow"), 1);
}

/// A handler blocking its thread keeps its lease.
pub async fn a_handler_blocking_its_thread_keeps_its_lease<F: Framework>(framework: F) {
    let app = start(framework).await;
    // A lease of 3 s; the handler blocks its thread for 6 s. A lease nobody
    // renewed would lapse at 3 s, the first retry after that would give its
    // holder a grace of 1.5 s, and the next one would take the key over.
    let request = post("/blocking", &fresh_key(), json!({"delay_ms": 6000}));
    let (first, retries) = tokio::join!(request.to(&app), async {
        until_counted(&app, "blocking", 1).await;
        let mut retries = Vec::new();
        for after in [3500, 1600] {
            tokio::time::sleep(Duration::from_millis(after)).await;
            retries.push(request.to(&app).await);
        }
        retries
    });
    assert_eq!(first.status, 200, "{first:?}");
    // Refused while it runs, or, on a worker it blocked, answered once it
    // is done (or timed out there by the server before it was read: actix
    // gives a request's head 5 s): never run twice.
    for retry in retries {
        assert!(matches!(retry.status, 408 | 409) || retry.replayed(), "{retry:?}");
    }
    assert_eq!(app.calls.count("blocking"), 1, "{}", F::NAME);
}

/// Shutdown drains running executions.
pub async fn shutdown_drains_running_executions<F: Framework>(framework: F) {
    let app = start(framework).await;
    let request = post("/slow", &fresh_key(), json!({"delay_ms": 700}));
    let gone = request.clone().timeout(Duration::from_millis(200)).try_to(&app).await;
    assert!(gone.is_err(), "the client gave up: {gone:?}");
    let calls = std::sync::Arc::clone(&app.calls);
    let drained = app.shut_down().await;
    assert_eq!(drained.still_running, 0, "{drained:?}");
    assert_eq!(calls.count("slow-done"), 1, "the execution finished before the server stopped");
}

/// A route without a configuration answers 500.
pub async fn a_route_without_a_configuration_answers_500<F: Framework>(framework: F) {
    let app = framework.start(None, std::sync::Arc::default()).await;
    let answer = post("/orders", &fresh_key(), json!({})).to(&app).await;
    assert_eq!(answer.problem(500), "not-configured");
    assert_eq!(app.calls.count("orders"), 0);
}
