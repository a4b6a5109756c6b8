//! The `memory` example really serves: started from its own source on a free
//! loopback port and driven over TCP, a retry is replayed and charges once.

use std::net::{SocketAddr, TcpListener};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "../examples/memory.rs"]
#[allow(dead_code, reason = "the example's `main` is not called: the test binds its own port")]
mod memory;

#[cfg(feature = "axum")]
#[path = "../examples/axum_memory.rs"]
#[allow(dead_code, reason = "the example's `main` is not called: the test binds its own port")]
mod axum_memory;

/// Sends `POST /payments` with `headers` (each ending in CRLF) and returns
/// the response head, lower-cased, and the body.
async fn post_payment(addr: SocketAddr, headers: &str, body: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connecting to the example");
    let request = format!(
        "POST /payments HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("sending the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("reading the response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end: {response:?}"));
    (head.to_ascii_lowercase(), body.to_owned())
}

#[actix_rt::test]
async fn memory_example_replays_a_retry() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port");
    let addr = listener.local_addr().expect("local address");
    let server = memory::serve(listener).expect("starting the example");
    let handle = server.handle();
    actix_rt::spawn(server);
    a_retry_is_replayed_and_callers_are_apart(addr).await;
    handle.stop(true).await;
}

#[cfg(feature = "axum")]
#[tokio::test]
async fn the_axum_memory_example_replays_a_retry() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a free loopback port");
    let addr = listener.local_addr().expect("local address");
    let server = tokio::spawn(async move { axum::serve(listener, axum_memory::app()).await });
    a_retry_is_replayed_and_callers_are_apart(addr).await;
    server.abort();
}

/// What both examples answer: a retry replayed, each user's key their own,
/// a request without a user refused.
async fn a_retry_is_replayed_and_callers_are_apart(addr: SocketAddr) {
    let alice = "X-User-ID: alice\r\nIdempotency-Key: pay-1\r\n";
    let (head, first) = post_payment(addr, alice, r#"{"amount_cents":1500}"#).await;
    assert!(head.starts_with("http/1.1 201"), "{head}");
    assert!(!head.contains("idempotent-replayed"), "{head}");
    assert!(first.contains(r#""amount_cents":1500"#) && first.contains(r#""status":"captured""#), "{first}");

    let (head, retry) = post_payment(addr, alice, r#"{"amount_cents":1500}"#).await;
    assert!(head.starts_with("http/1.1 201"), "{head}");
    assert!(head.contains("\r\nidempotent-replayed: true"), "{head}");
    assert_eq!(retry, first, "the retry gets the first payment back, not a new one");

    // The key is per user (`scope = "user"`): bob's pay-1 is a charge of its own.
    let (head, bobs) =
        post_payment(addr, "X-User-ID: bob\r\nIdempotency-Key: pay-1\r\n", r#"{"amount_cents":1500}"#).await;
    assert!(head.starts_with("http/1.1 201") && !head.contains("idempotent-replayed"), "{head}");
    assert_ne!(bobs, first);

    // Without the header the subject resolver finds no user.
    let (head, _) = post_payment(addr, "Idempotency-Key: pay-2\r\n", r#"{"amount_cents":1500}"#).await;
    assert!(head.starts_with("http/1.1 401"), "{head}");
}
