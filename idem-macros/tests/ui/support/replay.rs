//! Shared by the pass cases that run: the app executes a request once, and
//! the same request again is replayed, byte for byte.

use actix_web::web::ServiceConfig;
use actix_web::{App, test};
use idem_runtime::{Idem, MemoryStore};

/// Sends `POST uri` with `body` twice under one key: the first answer is a
/// 2xx the handler made, the second its replay.
pub fn execute_then_replay(configure: impl FnOnce(&mut ServiceConfig), uri: &str, body: &'static str) {
    actix_rt::System::new().block_on(async {
        let idem = Idem::new(MemoryStore::new()).subject(|_| Some("alice".to_owned()));
        let app = test::init_service(App::new().app_data(idem).configure(configure)).await;
        let request = || {
            test::TestRequest::post()
                .uri(uri)
                .insert_header(("idempotency-key", "k-1"))
                .insert_header(("content-type", "application/json"))
                .set_payload(body)
                .to_request()
        };
        let first = test::call_service(&app, request()).await;
        assert!(first.status().is_success(), "{}", first.status());
        assert!(first.headers().get("idempotent-replayed").is_none());
        let first = test::read_body(first).await;
        let replay = test::call_service(&app, request()).await;
        assert_eq!(replay.headers().get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]));
        assert_eq!(test::read_body(replay).await, first);
    });
}
