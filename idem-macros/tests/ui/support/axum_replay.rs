//! Shared by the axum pass cases that run: the router executes a request
//! once, and the same request again is replayed, byte for byte.

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use idem_runtime::{Idem, MemoryStore};
use tower::ServiceExt;

/// Sends `POST uri` with `body` twice under one key through `router`: the
/// first answer is a 2xx the handler made, the second its replay.
pub fn execute_then_replay(router: Router, uri: &str, body: &'static str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let idem = Idem::new(MemoryStore::new()).subject(|_| Some("alice".to_owned()));
        let app = router.layer(idem.layer());
        let request = || {
            Request::post(uri)
                .header("idempotency-key", "k-1")
                .header("content-type", "application/json")
                .body(Body::from(body))
                .expect("a request")
        };
        let first = app.clone().oneshot(request()).await.expect("infallible");
        assert!(first.status().is_success(), "{}", first.status());
        assert!(first.headers().get("idempotent-replayed").is_none());
        let first = first.into_body().collect().await.expect("a body").to_bytes();
        let replay = app.oneshot(request()).await.expect("infallible");
        assert_eq!(replay.headers().get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]));
        assert_eq!(replay.into_body().collect().await.expect("a body").to_bytes(), first);
    });
}
