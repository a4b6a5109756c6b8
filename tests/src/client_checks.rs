//! At most once end to end through a network that loses responses (§11):
//! the real `order-client` binary, its requests through the chaos proxy,
//! the real order service behind it. With one key per intent kept across
//! retries, every intent ends in its 201 and the service counts exactly
//! one order and one charge per intent; a client that makes a new key per
//! attempt, through the same proxy, makes duplicates (which shows the
//! proxy really loses responses after the server acted).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::chaos::{Chaos, ChaosProxy};
use crate::order_checks::stats;
use crate::service::{OrderService, example_binary};

/// Intents per run.
const INTENTS: u64 = 200;

/// The client's timeout per attempt; the proxy holds a delayed response
/// longer.
const TIMEOUT: &str = "1s";

/// The order-client binary, built if need be.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| example_binary("order-client", "ORDER_CLIENT_BIN"))
}

/// One run of `order-client`: whether it exited 0, its JSON line, its
/// error output.
#[derive(Debug)]
pub struct ClientRun {
    /// Exit status 0.
    pub success: bool,
    /// The JSON line it printed.
    pub summary: Value,
    /// What it wrote to standard error.
    pub stderr: String,
}

/// Runs `order-client` against `base_url` as `user`, with `extra` flags.
pub fn order_client(base_url: &str, user: &str, orders: u64, extra: &[&str]) -> ClientRun {
    let output = Command::new(binary())
        .args(["--base-url", base_url, "--user", user, "--orders", &orders.to_string()])
        .args(["--concurrency", "8", "--timeout", TIMEOUT])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("running order-client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("order-client printed no JSON line ({e}): {stdout:?}"));
    ClientRun { success: output.status.success(), summary, stderr: String::from_utf8_lossy(&output.stderr).into() }
}

/// 200 intents through a proxy that loses 30 % of the responses: exactly
/// 200 orders and 200 charges more. Then the same with a key per attempt:
/// more orders or charges than intents.
pub async fn at_most_once_through_a_lossy_network(service: &OrderService, seed: u64) {
    let chaos = Chaos { loss: 0.3, seed, hold: Duration::from_millis(1_500) };
    let proxy = ChaosProxy::start(service.addr(), chaos);
    let (orders, charges) = stats(service).await;
    let url = proxy.url();
    let run = tokio::task::spawn_blocking(move || order_client(&url, "chaos", INTENTS, &[])).await.unwrap();
    assert!(run.success, "every intent ended in its 201: {run:?}");
    assert_eq!((run.summary["orders"].as_u64(), run.summary["payments"].as_u64()), (Some(INTENTS), Some(INTENTS)));
    let (responses, lost) = proxy.counts();
    assert!(lost * 5 > responses, "about 30 % of {responses} responses lost, not {lost}");
    assert!(run.summary["retries"].as_u64().unwrap() >= lost, "a retry per lost response: {run:?}");
    assert!(run.summary["replays"].as_u64().unwrap() > 0, "lost responses come back as replays: {run:?}");
    assert_eq!(stats(service).await, (orders + INTENTS, charges + INTENTS), "one order and one charge per intent");

    let url = proxy.url();
    let broken =
        tokio::task::spawn_blocking(move || order_client(&url, "chaos-broken", INTENTS, &["--new-key-per-attempt"]))
            .await
            .unwrap();
    let (after_orders, after_charges) = stats(service).await;
    let (more_orders, more_charges) = (after_orders - orders - INTENTS, after_charges - charges - INTENTS);
    println!(
        "chaos: {lost} of {responses} responses lost; one key per intent: {}; a key per attempt: {more_orders} \
         orders and {more_charges} charges for {INTENTS} intents",
        run.summary
    );
    assert!(
        more_orders > INTENTS || more_charges > INTENTS,
        "a new key per attempt duplicates: {more_orders} orders and {more_charges} charges for {INTENTS} intents \
         ({broken:?})"
    );
}

/// `order-client` against a port nothing listens on: it gives up, reports
/// each intent and exits non-zero.
pub fn a_failed_intent_exits_non_zero() {
    let url = format!("http://127.0.0.1:{}", crate::port::free_port());
    let run = order_client(&url, "nobody", 2, &["--attempts", "2"]);
    assert!(!run.success, "{run:?}");
    assert_eq!((run.summary["orders"].as_u64(), run.summary["payments"].as_u64()), (Some(0), Some(0)), "{run:?}");
    assert_eq!(run.summary["retries"].as_u64(), Some(2), "one retry per request, counted: {run:?}");
    assert!(run.stderr.contains("intent 0") && run.stderr.contains("intent 1"), "{}", run.stderr);
}
