//! What the conformance app's handlers do, whatever the framework: each
//! counts its executions and says what to answer.

use std::collections::HashMap;
use std::time::Duration;

use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};

/// How many times each route's handler (or a part of one) ran.
#[derive(Debug, Default)]
pub struct Calls(Mutex<HashMap<&'static str, u64>>);

impl Calls {
    /// The counts; a handler that panics on purpose (`/panic`) never holds
    /// the lock, and poisoning would not matter.
    fn counts(&self) -> MutexGuard<'_, HashMap<&'static str, u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one more run of `name` and returns its number, from 1.
    pub fn hit(&self, name: &'static str) -> u64 {
        let mut counts = self.counts();
        let count = counts.entry(name).or_default();
        *count += 1;
        *count
    }

    /// Runs of `name` so far.
    pub fn count(&self, name: &str) -> u64 {
        self.counts().get(name).copied().unwrap_or(0)
    }
}

/// What a handler answers.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Its status.
    pub status: u16,
    /// Its JSON body.
    pub body: Value,
    /// Marked retryable ("nothing happened").
    pub retryable: bool,
    /// Headers the handler sets.
    pub headers: Vec<(&'static str, &'static str)>,
}

impl Reply {
    fn new(status: u16, body: Value) -> Self {
        Self { status, body, retryable: false, headers: Vec::new() }
    }
}

/// `POST /orders` (scope `user`): 201 with the order as sent.
pub fn orders(calls: &Calls, order: Value) -> Reply {
    Reply::new(201, json!({"call": calls.hit("orders"), "order": order}))
}

/// `POST /items/{id}` (scope `route`).
pub fn items(calls: &Calls, id: &str) -> Reply {
    Reply::new(200, json!({"call": calls.hit("items"), "id": id}))
}

/// `POST /shops/{shop}/items` (scope `route`, in a nested router or scope).
pub fn shop_items(calls: &Calls, shop: &str) -> Reply {
    Reply::new(200, json!({"call": calls.hit("shop-items"), "shop": shop}))
}

/// `POST /global` (scope `global`).
pub fn global(calls: &Calls) -> Reply {
    Reply::new(200, json!({"call": calls.hit("global")}))
}

/// `POST /natural/{order_id}/pay` (key `path:order_id`).
pub fn natural(calls: &Calls, order_id: &str) -> Reply {
    Reply::new(201, json!({"call": calls.hit("natural"), "order": order_id}))
}

/// `POST /events` (key `json:/id`, scope `global`).
pub fn events(calls: &Calls, event: &Value) -> Reply {
    Reply::new(200, json!({"call": calls.hit("events"), "id": event["id"]}))
}

/// `POST /deliveries` (scope `route`, `/attempt` and `/meta/sent_at` left
/// out of the fingerprint): the delivery as the first one sent it.
pub fn deliveries(calls: &Calls, delivery: &Value) -> Reply {
    Reply::new(200, json!({"call": calls.hit("deliveries"), "attempt": delivery["attempt"]}))
}

/// `POST /lines/{order_id}` (key `["path:order_id", "json:/line_id"]`).
pub fn lines(calls: &Calls, order_id: &str, line: &Value) -> Reply {
    Reply::new(201, json!({"call": calls.hit("lines"), "order": order_id, "line": line["line_id"]}))
}

/// `POST /transfers` (key `["header", "json:/account"]`, not required).
pub fn transfers(calls: &Calls, transfer: &Value) -> Reply {
    Reply::new(201, json!({"call": calls.hit("transfers"), "account": transfer["account"]}))
}

/// `POST /receipts` (key computed by [`invoice_key`], not required).
pub fn receipts(calls: &Calls, receipt: &Value) -> Reply {
    Reply::new(201, json!({"call": calls.hit("receipts"), "number": receipt["number"]}))
}

/// `POST /invoices` (scope `global`, key computed by [`invoice_key`]).
pub fn invoices(calls: &Calls, invoice: &Value) -> Reply {
    Reply::new(201, json!({"call": calls.hit("invoices"), "number": invoice["number"]}))
}

/// The key of an invoice: its tenant (`X-Tenant-ID`) and its number in the
/// body, a key no single source names; none without either.
pub fn invoice_key(req: &idem_runtime::KeyRequest<'_>) -> Option<String> {
    let tenant = req.header("x-tenant-id")?;
    let invoice: Value = serde_json::from_slice(req.body()).ok()?;
    Some(format!("{tenant}/{}", invoice.get("number")?.as_str()?))
}

/// How long the body asks a handler to take (`"delay_ms"`).
fn delay(body: &Value) -> Duration {
    Duration::from_millis(body["delay_ms"].as_u64().unwrap_or(0))
}

/// `POST /slow` (scope `route`): counted at once, answered after the
/// body's `delay_ms`.
pub async fn slow(calls: &Calls, body: &Value, name: &'static str) -> Reply {
    let call = calls.hit(name);
    tokio::time::sleep(delay(body)).await;
    calls.hit(match name {
        "slow" => "slow-done",
        _ => "wait-done",
    });
    Reply::new(200, json!({"call": call}))
}

/// `POST /status` (scope `route`): the status the body asks for, marked
/// retryable if it says so.
pub fn status(calls: &Calls, body: &Value) -> Reply {
    let mut reply = Reply::new(body["status"].as_u64().unwrap_or(200) as u16, json!({"call": calls.hit("status")}));
    reply.retryable = body["retryable"].as_bool().unwrap_or(false);
    reply
}

/// `POST /panic` (scope `route`): counted, then panics.
pub fn panic(calls: &Calls) -> Reply {
    let call = calls.hit("panic");
    panic!("the /panic handler panics on purpose (call {call})");
}

/// `POST /optional` (scope `route`, `required = false`).
pub fn optional(calls: &Calls) -> Reply {
    Reply::new(200, json!({"call": calls.hit("optional")}))
}

/// `POST /accounts` (scope `route`, `X-Account-ID` in the fingerprint).
pub fn accounts(calls: &Calls) -> Reply {
    Reply::new(200, json!({"call": calls.hit("accounts")}))
}

/// `POST /blocking` (scope `route`, a 3 s lease): blocks its thread for the
/// body's `delay_ms`, as a handler calling blocking code does.
pub fn blocking(calls: &Calls, body: &Value) -> Reply {
    let call = calls.hit("blocking");
    std::thread::sleep(delay(body));
    Reply::new(200, json!({"call": call}))
}

/// `POST /replayed-header` (scope `route`): sets the runtime's own header.
pub fn replayed_header(calls: &Calls) -> Reply {
    let mut reply = Reply::new(200, json!({"call": calls.hit("replayed-header")}));
    reply.headers.push(("idempotent-replayed", "handler"));
    reply
}

/// `POST /context` (scope `route`): the execution's derived key.
pub fn context(calls: &Calls, execution: &idem_runtime::ExecutionContext) -> Reply {
    let body = json!({
        "call": calls.hit("context"),
        "derived": execution.derived_key("charge"),
        "attempt": format!("{:?}", execution.attempt()),
    });
    Reply::new(200, body)
}

/// `POST /steps` (scope `route`): a durable step `charge`, which counts
/// `charges`, then a failure if the body asks for one.
pub async fn steps(calls: &Calls, execution: &idem_runtime::ExecutionContext, body: &Value) -> Reply {
    let charge = match execution.step("charge", async { calls.hit("charges") }).await {
        Ok(charge) => charge,
        Err(error) => return Reply::new(500, json!({"error": error.to_string()})),
    };
    let status = body["status"].as_u64().unwrap_or(201) as u16;
    Reply::new(status, json!({"call": calls.hit("steps"), "charge": charge}))
}
