//! Encrypted records (`Idem::encrypt_records`), checked the same way on
//! every store: apps in process over one store, each with its own keys,
//! their handlers counting executions and charges. What the store holds is
//! read back as the store keeps it (the caller's raw dump of every byte it
//! holds, and the records through `Store::get`), never through the runtime
//! that sealed it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::operate::{Operator, Target};
use idem_runtime::sealing::{Keyring, RecordsKey, sealed_with};
use idem_runtime::store::{Claim, Fence, IdempotencyKey, Operable, RecordState, Scope, StorageKey};
use idem_runtime::{ExecutionContext, Idem, MarkRetryable, idempotent};
use serde_json::{Value, json};

use crate::counter::Counter;
use crate::http::fresh_key;

/// What the handler answers and records, none of which may reach the
/// store in the clear.
const SECRETS: [&str; 4] = ["4242-SECRET-CARD", "pay_SECRET_ID", "ch_SECRET_CHARGE", "cus_SECRET_CUSTOMER"];

/// Handler runs and charges (the durable step's work), per app.
#[derive(Default)]
struct Counts {
    runs: Counter,
    charges: Counter,
}

/// Charges once (the durable step `charge`), then answers 201 with the
/// card, the customer and the charge, and a `Location` naming the payment.
/// With `"release_first": true`, the first execution stops after the step
/// with a retryable 503 ("nothing happened" for the response; the step's
/// result stays recorded).
#[idempotent(scope = "route")]
#[post("/payments")]
async fn pay(counts: web::Data<Counts>, execution: ExecutionContext, body: web::Json<Value>) -> HttpResponse {
    let first = execution.steps_recorded() == 0;
    let charge = execution
        .step("charge", async {
            counts.charges.next();
            "ch_SECRET_CHARGE".to_owned()
        })
        .await;
    let charge = match charge {
        Ok(charge) => charge,
        Err(error) => return HttpResponse::InternalServerError().body(error.to_string()),
    };
    if first && body["release_first"] == true {
        return HttpResponse::ServiceUnavailable().finish().retryable();
    }
    let run = counts.runs.next();
    HttpResponse::Created()
        .insert_header(("location", "/payments/pay_SECRET_ID"))
        .json(json!({"id": "pay_SECRET_ID", "card": body["card"], "customer": "cus_SECRET_CUSTOMER", "charge": charge, "run": run}))
}

/// An answer: its status, whether replayed, the problem's type slug if it
/// is one, and its body (shown as text).
struct Reply(StatusCode, bool, String, Vec<u8>);

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} replayed={} {}", self.0, self.1, String::from_utf8_lossy(&self.3))
    }
}

/// Sends the payment `body` with `key` to `app`.
async fn send<S, B>(app: &S, key: &str, body: &Value) -> Reply
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let request = TestRequest::post()
        .uri("/payments")
        .insert_header(("content-type", "application/json"))
        .insert_header(("idempotency-key", key))
        .set_payload(body.to_string());
    let response = call_service(app, request.to_request()).await;
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = read_body(response).await.to_vec();
    let slug = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|problem| problem["type"].as_str().map(|t| t.trim_start_matches("urn:idem:problem:").to_owned()))
        .unwrap_or_default();
    Reply(status, replayed, slug, body)
}

/// The key `key`'s record as the store holds it.
async fn record_of(operator: &Operator, key: &str) -> idem_runtime::operate::Inspection {
    let target =
        Target::Key { route: "POST /payments".to_owned(), scope: Scope::Route, subject: None, key: key.to_owned() };
    operator.inspect(&target).await.unwrap_or_else(|error| panic!("the record of {key}: {error}"))
}

/// Whether `haystack` holds `needle`, or its hexadecimal form (as a
/// database prints bytes).
fn holds(haystack: &[u8], needle: &str) -> bool {
    let hexed = hex::encode(needle);
    [needle.as_bytes(), hexed.as_bytes()].iter().any(|n| haystack.windows(n.len()).any(|w| w == *n))
}

/// Every check, on `store`; `raw` dumps every byte the store holds at the
/// storage keys given (`None` for a store that lives in this process: its
/// records are then read through `Store::get` only).
pub async fn assert_sealed_records<S, D, F>(store: Arc<S>, raw: Option<D>)
where
    S: Operable + 'static,
    D: Fn(Vec<StorageKey>) -> F,
    F: Future<Output = Vec<u8>>,
{
    let (old, new, other) = (RecordsKey::new([0x11; 32]), RecordsKey::new([0x22; 32]), RecordsKey::new([0x33; 32]));
    let counts = web::Data::new(Counts::default());
    let operator = Operator::new(store.clone());
    macro_rules! app {
        ($idem:expr) => {
            init_service(App::new().app_data($idem).app_data(counts.clone()).service(pay)).await
        };
    }
    let idem = || Idem::from_arc(store.clone());
    let sealing_old = app!(idem().encrypt_records(Keyring::new(old.clone())));
    let rotated = app!(idem().encrypt_records(Keyring::new(new.clone()).with_previous(old.clone())));
    let only_new = app!(idem().encrypt_records(Keyring::new(new.clone())));
    let wrong = app!(idem().encrypt_records(Keyring::new(other.clone())));
    let plain = app!(idem());
    let migrating = app!(idem().encrypt_records(Keyring::new(old.clone()).accept_unsealed(true)));
    let payment = json!({"card": "4242-SECRET-CARD", "cents": 500});

    // Sealed: nothing of the response or the step's result in the clear,
    // and the replay byte for byte.
    let k1 = fresh_key();
    let first = send(&sealing_old, &k1, &payment).await;
    assert_eq!(first.0, StatusCode::CREATED, "{first:?}");
    let again = send(&sealing_old, &k1, &payment).await;
    assert!(again.1 && again.3 == first.3, "a replay, byte for byte: {again:?}");
    let held = record_of(&operator, &k1).await;
    let RecordState::Completed { response, .. } = &held.record.state else {
        panic!("completed: {:?}", held.record.state)
    };
    assert_eq!(sealed_with(response), Some(Ok(old.id())), "sealed with the current key");
    let mut kept = response.to_bytes();
    for step in &held.record.steps {
        kept.extend_from_slice(&step.result);
    }
    if let Some(raw) = &raw {
        kept.extend(raw(vec![held.key.clone()]).await);
    }
    for secret in SECRETS {
        assert!(!holds(&kept, secret), "the store holds {secret} in the clear");
    }
    assert_eq!((counts.runs.get(), counts.charges.get()), (1, 1));

    // Moved: the sealed response copied under another key, with the same
    // request's fingerprint, does not open there; nothing runs.
    let k2 = fresh_key();
    let target = record_of(&operator, &k1).await;
    let moved_key = storage_key_of(&store, &k2).await;
    let RecordState::Completed { response, .. } = &target.record.state else { unreachable!() };
    let (lease, ttl) = (Duration::from_secs(30), Duration::from_secs(600));
    let Ok(Claim::Acquired { token, .. }) = store.claim(&moved_key, &held.record.fingerprint, lease, ttl).await else {
        panic!("a fresh key is acquired")
    };
    assert_eq!(store.complete(&moved_key, token, response, ttl).await.ok(), Some(Fence::Held));
    let moved = send(&sealing_old, &k2, &payment).await;
    assert_eq!((moved.0, moved.2.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "record-sealed"), "{moved:?}");
    assert_eq!((counts.runs.get(), counts.charges.get()), (1, 1), "nothing ran");

    // Rotation: what the old key sealed still replays; new records use the
    // new key.
    let rotated_replay = send(&rotated, &k1, &payment).await;
    assert!(rotated_replay.1 && rotated_replay.3 == first.3, "{rotated_replay:?}");
    let k3 = fresh_key();
    assert_eq!(send(&rotated, &k3, &payment).await.0, StatusCode::CREATED);
    let held = record_of(&operator, &k3).await;
    let RecordState::Completed { response, .. } = &held.record.state else { unreachable!() };
    assert_eq!(sealed_with(response), Some(Ok(new.id())));
    assert_eq!((counts.runs.get(), counts.charges.get()), (2, 2));

    // A key that does not open a record fails closed: the old key retired,
    // another key, no key at all. Nothing runs.
    for (app, key) in [(&only_new, &k1), (&wrong, &k1), (&wrong, &k3), (&plain, &k3)] {
        let refused = send(app, key, &payment).await;
        assert_eq!(
            (refused.0, refused.2.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, "record-sealed"),
            "{refused:?}"
        );
    }
    assert_eq!((counts.runs.get(), counts.charges.get()), (2, 2), "nothing ran");

    // A recorded step that does not open stops a takeover before its
    // handler: the step never runs again. With the key, it is handed back.
    let k4 = fresh_key();
    let staged = json!({"card": "4242-SECRET-CARD", "cents": 700, "release_first": true});
    assert_eq!(send(&sealing_old, &k4, &staged).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!((counts.runs.get(), counts.charges.get()), (2, 3), "charged, then released");
    let refused = until_settled(&wrong, &k4, &staged).await;
    assert_eq!((refused.0, refused.2.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "record-sealed"), "{refused:?}");
    assert_eq!((counts.runs.get(), counts.charges.get()), (2, 3), "the step did not run again");
    let resumed = until_settled(&rotated, &k4, &staged).await;
    assert_eq!(resumed.0, StatusCode::CREATED, "{resumed:?}");
    let resumed: Value = serde_json::from_slice(&resumed.3).expect("JSON");
    assert_eq!(resumed["charge"], "ch_SECRET_CHARGE", "the recorded result, opened");
    assert_eq!((counts.runs.get(), counts.charges.get()), (3, 3), "ran once more, charged no more");

    // A record kept in the clear is refused by a keyring that seals, unless
    // it accepts such records for a migration.
    let k5 = fresh_key();
    let clear = send(&plain, &k5, &payment).await;
    assert_eq!(clear.0, StatusCode::CREATED);
    let strict = send(&sealing_old, &k5, &payment).await;
    assert_eq!((strict.0, strict.2.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "record-sealed"), "{strict:?}");
    let migrated = send(&migrating, &k5, &payment).await;
    assert!(migrated.1 && migrated.3 == clear.3, "{migrated:?}");
    assert_eq!(counts.runs.get(), 4);

    // Every sealed record, as the store holds it: the step's result too.
    if let Some(raw) = &raw {
        let mut sealed = Vec::new();
        for key in [&k1, &k2, &k3, &k4] {
            sealed.push(record_of(&operator, key).await.key);
        }
        let kept = raw(sealed).await;
        for secret in SECRETS {
            assert!(!holds(&kept, secret), "the store holds {secret} in the clear");
        }
        let clear = raw(vec![record_of(&operator, &k5).await.key]).await;
        assert!(holds(&clear, "pay_SECRET_ID"), "the check finds what a record keeps in the clear");
    }
}

/// The storage key the runtime derives for `key` on the payments route
/// (scope `route`, no subject, `POST /payments`), where nothing is yet.
async fn storage_key_of<S: Operable + 'static>(store: &Arc<S>, key: &str) -> StorageKey {
    let key = IdempotencyKey::parse(key.as_bytes()).expect("a key");
    let derived = StorageKey::new(Scope::Route, None, "POST", "/payments", &key);
    assert!(store.get(&derived).await.expect("a read").is_none(), "a fresh key has no record");
    derived
}

/// Sends until the answer is not 409 (a release in the background may not
/// have landed yet), for at most 10 s.
async fn until_settled<S, B>(app: &S, key: &str, body: &Value) -> Reply
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let started = Instant::now();
    loop {
        let answer = send(app, key, body).await;
        if answer.0 != StatusCode::CONFLICT || started.elapsed() > Duration::from_secs(10) {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every value the Redis server at `url` holds at `keys` (the store keeps
/// a record whole at its storage key), read by its type (never `DUMP`,
/// which may compress what it holds).
#[cfg(feature = "redis")]
pub async fn redis_dump(url: &str, keys: Vec<StorageKey>) -> Vec<u8> {
    use redis::AsyncCommands;
    let client = redis::Client::open(url).expect("a Redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connecting to Redis");
    let mut out = Vec::new();
    for key in keys.iter().map(StorageKey::as_str) {
        let kind: String = redis::cmd("TYPE").arg(key).query_async(&mut connection).await.expect("TYPE");
        let values: Vec<Vec<u8>> = match kind.as_str() {
            "string" => connection.get::<_, Option<Vec<u8>>>(key).await.expect("GET").into_iter().collect(),
            "hash" => connection.hgetall::<_, Vec<Vec<u8>>>(key).await.expect("HGETALL"),
            "list" => connection.lrange(key, 0, -1).await.expect("LRANGE"),
            other => panic!("a record is a string, not a {other}"),
        };
        assert!(!values.is_empty(), "the record at {key} is there");
        for value in values {
            out.extend_from_slice(&value);
            out.push(b'\n');
        }
    }
    out
}

/// The rows of the records table `idem_records` at `keys` on the Postgres
/// server at `url`, as text (bytes in hexadecimal, which `holds` looks for
/// too).
#[cfg(feature = "postgres")]
pub async fn postgres_dump(url: &str, keys: Vec<StorageKey>) -> Vec<u8> {
    use sqlx::Connection;
    let mut connection = sqlx::PgConnection::connect(url).await.expect("connecting to Postgres");
    let keys: Vec<&str> = keys.iter().map(StorageKey::as_str).collect();
    let rows: Vec<String> = sqlx::query_scalar("SELECT t::text FROM idem_records t WHERE key = ANY($1)")
        .bind(&keys)
        .fetch_all(&mut connection)
        .await
        .expect("reading the records");
    assert_eq!(rows.len(), keys.len(), "every record is there");
    rows.join("\n").into_bytes()
}

/// The order service on its own Redis at `redis_url`, started with
/// `ORDER_SERVICE_RECORDS_KEY` set to [`SERVICE_KEY`]: no idempotency record
/// holds the order's id, its customer or the payment's body in the clear,
/// replays are byte for byte, and a restart with another key (or none)
/// answers 500 without charging or ordering again; the key back, it
/// replays again.
#[cfg(feature = "redis")]
pub async fn sealed_order_service(service: &mut crate::service::OrderService, redis_url: &str) {
    use crate::http::send;
    use crate::order_checks::stats;

    let order_body = r#"{"customer_id":"cus_sealed_4242","amount_cents":1500,"currency":"EUR"}"#;
    let (order_key, payment_key) = (fresh_key(), fresh_key());
    let created = send(&service.at("/orders"), Some("alice"), Some(&order_key), Some(order_body)).await;
    assert_eq!(created.status.as_u16(), 201, "{created:?}");
    let order_id = created.json()["id"].as_str().expect("an order id").to_owned();
    let payments = service.at(&format!("/orders/{order_id}/payments"));
    let paid = send(&payments, Some("alice"), Some(&payment_key), Some(r#"{"amount_cents":1500}"#)).await;
    assert_eq!(paid.status.as_u16(), 201, "{paid:?}");
    let payment_id = paid.json()["id"].as_str().expect("a payment id").to_owned();
    let replays = |service: &crate::service::OrderService| {
        let (orders, payments) = (service.at("/orders"), payments.clone());
        let (order_key, payment_key) = (order_key.clone(), payment_key.clone());
        async move {
            let order = send(&orders, Some("alice"), Some(&order_key), Some(order_body)).await;
            let payment = send(&payments, Some("alice"), Some(&payment_key), Some(r#"{"amount_cents":1500}"#)).await;
            (order, payment)
        }
    };
    let (order, payment) = replays(service).await;
    assert_eq!(
        (order.replayed.as_deref(), &order.body, &order.location),
        (Some("true"), &created.body, &created.location)
    );
    assert_eq!((payment.replayed.as_deref(), &payment.body), (Some("true"), &paid.body));
    assert_eq!(stats(service).await, (1, 1));

    // What Redis holds: the records under `idem:v1:` sealed; the service's
    // own data (the order itself) in the clear, where the search finds it.
    let client = redis::Client::open(redis_url).expect("a Redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connecting to Redis");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut connection).await.expect("KEYS");
    let records: Vec<StorageKey> = keys
        .iter()
        .filter(|key| key.starts_with("idem:v1:"))
        .map(|key| StorageKey::from_stored(key).unwrap_or_else(|| panic!("{key} is a storage key")))
        .collect();
    assert!(records.len() >= 2, "the order's and the payment's records: {keys:?}");
    let sealed = redis_dump(redis_url, records).await;
    for secret in [order_id.as_bytes(), b"cus_sealed_4242", payment_id.as_bytes(), &paid.body[..]] {
        let shown = String::from_utf8_lossy(secret);
        assert!(!holds(&sealed, &shown), "an idempotency record holds {shown} in the clear");
    }
    let mut everything = Vec::new();
    for key in keys.iter().filter(|key| !key.starts_with("idem:v1:")) {
        let kind: String = redis::cmd("TYPE").arg(key).query_async(&mut connection).await.expect("TYPE");
        if kind == "string" {
            let value: Vec<u8> = redis::cmd("GET").arg(key).query_async(&mut connection).await.expect("GET");
            everything.extend(value);
        } else if kind == "hash" {
            let values: Vec<Vec<u8>> =
                redis::cmd("HGETALL").arg(key).query_async(&mut connection).await.expect("HGETALL");
            everything.extend(values.concat());
        }
    }
    assert!(holds(&everything, &order_id), "the order itself is the service's data, in the clear");

    // Another key, then none: 500, nothing runs again.
    let other = "22".repeat(32);
    for env in [vec![(RECORDS_KEY, other.as_str())], Vec::new()] {
        service.restart_with(&[], &env).await;
        let (order, payment) = replays(service).await;
        for refused in [&order, &payment] {
            let problem = refused.assert_problem(500);
            assert_eq!(problem["type"], "urn:idem:problem:record-sealed", "{problem}");
        }
        assert_eq!(stats(service).await, (1, 1), "nothing ran again");
    }
    // The key back: the same answers, byte for byte.
    service.restart_with(&[], &[(RECORDS_KEY, SERVICE_KEY)]).await;
    let (order, payment) = replays(service).await;
    assert_eq!((order.body, payment.body), (created.body, paid.body));
    assert_eq!(stats(service).await, (1, 1));
}

/// The variable the order service reads its records key from.
pub const RECORDS_KEY: &str = "ORDER_SERVICE_RECORDS_KEY";

/// The records key [`sealed_order_service`] expects the service to start
/// with.
pub const SERVICE_KEY: &str = "1111111111111111111111111111111111111111111111111111111111111111";
