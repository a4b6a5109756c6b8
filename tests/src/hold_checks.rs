//! Executions held for an operator (§14 of the contract): a service started
//! with `--on-lapse hold` is killed while two payments wait on the provider.
//! After a restart, their retries wait out the dead owner's lease and its
//! grace, then are held (409 `execution-held`, no `Retry-After`) and nothing
//! runs, until the operator's tool, `idem`, releases one (its next retry
//! runs once) and resolves the other (its retries replay the operator's
//! response).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use awc::http::StatusCode;
use serde_json::Value;

use crate::http::{Reply, fresh_key, send, try_send};
use crate::order_checks::{create_order, stats};
use crate::service::OrderService;
use crate::tool_checks::{Run, Tool};

/// The payer of the held payments: no other payment of the checks is hers.
const PAYER: &str = "hana";
/// The payment route, as the records name it.
const PAYMENTS: &str = "POST /orders/{id}/payments";
/// How long the payments may take to reach their handler.
const REACH_LIMIT: Duration = Duration::from_secs(20);
/// A retry held, at the latest, this long after the payment was sent: the
/// 30 s lease, the 15 s grace, retries a second apart, and slack.
const HELD_LIMIT: Duration = Duration::from_secs(75);

/// One payment: where it goes, with which key and body; its record's id.
struct Payment {
    url: String,
    key: String,
    body: &'static str,
    id: String,
}

impl Payment {
    async fn retry(&self) -> Reply {
        send(&self.url, Some(PAYER), Some(&self.key), Some(self.body)).await
    }
}

/// On a service started with `--on-lapse hold` and a charge delay of a
/// minute (so that each payment still waits on the provider, before its
/// step `charge`, when the process is killed): two payments held, then
/// settled by an operator, one released and one resolved. The service is
/// restarted with `--on-lapse hold` and no charge delay.
pub async fn held_until_an_operator_settles(service: &mut OrderService) {
    let (first, second) = (create_order(service, PAYER).await, create_order(service, PAYER).await);
    let (orders, charges) = stats(service).await;
    let payment = |order: &Value, body| Payment {
        url: service.at(&format!("/orders/{}/payments", order["id"].as_str().expect("an order id"))),
        key: fresh_key(),
        body,
        id: String::new(),
    };
    let mut payments = [payment(&first, r#"{"amount_cents":900}"#), payment(&second, r#"{"amount_cents":901}"#)];
    let sent = Instant::now();
    let in_flight: Vec<_> = payments
        .iter()
        .map(|payment| {
            let (url, key, body) = (payment.url.clone(), payment.key.clone(), payment.body);
            actix_web::rt::spawn(async move { try_send(&url, Some(PAYER), Some(&key), Some(body)).await })
        })
        .collect();
    let tool = Tool::on(service.store());
    for payment in &mut payments {
        payment.id = reached(&tool, &payment.key).await;
    }
    let listed = ids(&tool.run(&["list", "--state", "in-flight", "--route", PAYMENTS, "--json"]).await);
    assert_eq!(listed, payments.iter().map(|p| p.id.clone()).collect(), "both in flight, and listed");

    service.kill9();
    for answer in in_flight {
        assert!(answer.await.expect("the request task").is_err(), "the killed process never answered");
    }
    service.restart_with_delay(0, &["--on-lapse", "hold"], &[]).await;
    assert_eq!(stats(service).await, (orders, charges), "the provider was never reached");

    wait_until_held(&payments, sent).await;
    for payment in &payments {
        held(&payment.retry().await);
    }
    assert_eq!(stats(service).await, (orders, charges), "nothing ran while held");
    let listed = tool.run(&["list", "--state", "held", "--route", PAYMENTS, "--json"]).await;
    assert_eq!(ids(&listed), payments.iter().map(|p| p.id.clone()).collect(), "both held: {listed}");

    // Released: the same request runs again, once.
    let [released, resolved] = &payments;
    tool.run(&["release", &released.id]).await.exited(0);
    let executed = released.retry().await;
    assert_eq!((executed.status, executed.replayed.as_deref()), (StatusCode::CREATED, None), "{executed:?}");
    assert_eq!(stats(service).await, (orders, charges + 1), "the released payment charged once");
    let replay = released.retry().await;
    assert_eq!((replay.status, replay.replayed.as_deref()), (StatusCode::CREATED, Some("true")), "{replay:?}");
    assert_eq!(replay.body, executed.body, "byte for byte");
    let again = tool.run(&["release", &released.id]).await;
    assert!(again.exited(1).stderr.contains("completed"), "refused: the record is completed now: {again}");

    // Resolved: retries replay the operator's response, and nothing runs.
    let body = format!(
        r#"{{"id":"pay_from_the_dashboard","order_id":"{}","amount_cents":901,"status":"captured"}}"#,
        second["id"].as_str().expect("an order id")
    );
    let file = crate::backend::scratch_dir("idem-resolve").join("body.json");
    std::fs::write(&file, &body).expect("writing the body file");
    let file = file.to_str().expect("a UTF-8 path");
    let header = "content-type: application/json";
    tool.run(&["resolve", &resolved.id, "--status", "201", "--header", header, "--body", file]).await.exited(0);
    for _ in 0..2 {
        let replay = resolved.retry().await;
        assert_eq!((replay.status, replay.replayed.as_deref()), (StatusCode::CREATED, Some("true")), "{replay:?}");
        assert_eq!((replay.content_type.as_deref(), &*replay.body), (Some("application/json"), body.as_bytes()));
    }
    assert_eq!(stats(service).await, (orders, charges + 1), "the resolved payment charged nothing");
}

/// The id of the payment sent with `key`, once its execution has claimed
/// the key: its record is in flight, with no step recorded (the handler
/// waits on the provider).
async fn reached(tool: &Tool, key: &str) -> String {
    let deadline = Instant::now() + REACH_LIMIT;
    loop {
        let args = ["inspect", "--route", PAYMENTS, "--subject", PAYER, "--key", key, "--json"];
        let inspected = tool.run(&args).await;
        if inspected.code == Some(0) {
            let record = inspected.json_lines().remove(0);
            assert_eq!((record["state"].as_str(), &record["steps"]), (Some("in-flight"), &Value::Array(vec![])));
            return record["id"].as_str().expect("an id").to_owned();
        }
        assert_eq!(inspected.code, Some(1), "not found yet, else done: {inspected}");
        assert!(Instant::now() < deadline, "the payment never reached its handler");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The ids of the records `idem list --json` printed.
fn ids(listed: &Run) -> BTreeSet<String> {
    listed.exited(0);
    listed.json_lines().iter().map(|record| record["id"].as_str().expect("an id").to_owned()).collect()
}

/// Retries every payment a second apart: 409 `in-flight` with `Retry-After`
/// while the dead owner's lease and its grace last, then 409
/// `execution-held` without it. Returns once every payment is held.
async fn wait_until_held(payments: &[Payment], sent: Instant) {
    let mut waiting = vec![true; payments.len()];
    let mut conflicts = 0;
    while waiting.contains(&true) {
        for (payment, waiting) in payments.iter().zip(&mut waiting).filter(|(_, waiting)| **waiting) {
            let reply = payment.retry().await;
            if reply.retry_after.is_some() {
                assert_eq!(reply.assert_problem(409)["type"], "urn:idem:problem:in-flight");
                conflicts += 1;
            } else {
                held(&reply);
                let after = sent.elapsed();
                assert!(after >= Duration::from_secs(40), "held {after:?} after the payment: before lease and grace");
                *waiting = false;
            }
        }
        assert!(sent.elapsed() < HELD_LIMIT, "never held");
        actix_web::rt::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(conflicts >= payments.len(), "the retries right after the restart met the dead owner's lease");
}

/// Asserts a 409 `execution-held`, without `Retry-After`: it will not run
/// again by itself.
fn held(reply: &Reply) {
    let problem = reply.assert_problem(409);
    assert_eq!(problem["type"], "urn:idem:problem:execution-held", "{problem}");
    assert_eq!(reply.retry_after, None, "{reply:?}");
}
