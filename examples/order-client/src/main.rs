//! `order-client`: places N orders and pays each through idem's retrying
//! client, then prints one JSON line:
//! `{"orders": N, "payments": N, "retries": R, "replays": P}`. Exits 0
//! only if every intent ended in its 201 (first answer or replay).
//!
//! ```text
//! order-client --base-url http://127.0.0.1:8080 --user alice --orders 20
//! ```
//!
//! Given several `--base-url`s, each attempt goes to the next one (a load
//! balancer in front of a fleet); `--history FILE` appends one JSON line per
//! intent with its keys and answers, for a checker.

mod history;
mod spread;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use futures_util::StreamExt;
use idem_runtime::client::{GaveUp, IdempotencyMiddleware, Report, RetryPolicy};
use reqwest::StatusCode;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use serde_json::{Value, json};

use crate::history::{Answer, History, Intent};
use crate::spread::Spread;

/// The client's flags.
#[derive(Debug, Parser)]
#[command(name = "order-client", version, about = "Places and pays orders through idem's retrying client.")]
struct Config {
    /// The order service, such as `http://127.0.0.1:8080`. Given more than
    /// once, each attempt goes to the next.
    #[arg(long, required = true)]
    base_url: Vec<String>,
    /// The caller (`X-User-ID`).
    #[arg(long)]
    user: String,
    /// How many orders to place and pay.
    #[arg(long)]
    orders: usize,
    /// How many intents run at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// How long one attempt may take before it counts as lost.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Attempts per request, the first included.
    #[arg(long, default_value_t = 12)]
    attempts: u32,
    /// How long one request may keep retrying.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    deadline: Duration,
    /// Appends one JSON line per intent to this file: its idempotency keys,
    /// what it sent and the answers it ended with.
    #[arg(long)]
    history: Option<PathBuf>,
    /// For tests only: a new key on every attempt (a broken client).
    #[arg(long, hide = true)]
    new_key_per_attempt: bool,
}

/// How one request of an intent ended.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    retries: u64,
    replays: u64,
}

impl Tally {
    fn add(&mut self, outcome: Option<&Report>) {
        if let Some(outcome) = outcome {
            self.retries += u64::from(outcome.attempts.saturating_sub(1));
            self.replays += u64::from(outcome.replayed);
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse();
    let client = match client(&config) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("order-client: {error}");
            return ExitCode::FAILURE;
        }
    };
    let history = match config.history.as_deref().map(History::open).transpose() {
        Ok(history) => history,
        Err(error) => {
            eprintln!("order-client: the history file: {error}");
            return ExitCode::FAILURE;
        }
    };
    let base = config.base_url[0].trim_end_matches('/').to_owned();
    let intents = futures_util::stream::iter(0..config.orders)
        .map(|n| {
            let (client, base, user, history) = (&client, &base, &config.user, &history);
            async move {
                let mut record = Intent::new(n, user);
                let ended = intent(client, base, &mut record).await;
                if let Some(history) = history {
                    history.append(&record);
                }
                (n, ended)
            }
        })
        .buffer_unordered(config.concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let (mut orders, mut payments, mut tally, mut failures) = (0, 0, Tally::default(), Vec::new());
    for (n, ended) in intents {
        let (placed, paid, counted, failure) = ended;
        orders += usize::from(placed);
        payments += usize::from(paid);
        tally.retries += counted.retries;
        tally.replays += counted.replays;
        if let Some(failure) = failure {
            failures.push(format!("intent {n}: {failure}"));
        }
    }
    let line = json!({"orders": orders, "payments": payments, "retries": tally.retries, "replays": tally.replays});
    println!("{line}");
    for failure in &failures {
        eprintln!("order-client: {failure}");
    }
    if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn client(config: &Config) -> Result<ClientWithMiddleware, reqwest::Error> {
    let http = reqwest::Client::builder().timeout(config.timeout).build()?;
    let policy = RetryPolicy::default().max_attempts(config.attempts).deadline(config.deadline);
    let mut builder = ClientBuilder::new(http).with(IdempotencyMiddleware::new(policy));
    // After the retrying middleware: these run once per attempt.
    if config.base_url.len() > 1 {
        builder = builder.with(Spread::new(&config.base_url));
    }
    if config.new_key_per_attempt {
        builder = builder.with(NewKeyPerAttempt);
    }
    Ok(builder.build())
}

/// Breaks the client on purpose, for the tests only: every attempt gets a
/// new key, so a retry is a new request, which is what one key per intent
/// prevents.
struct NewKeyPerAttempt;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for NewKeyPerAttempt {
    async fn handle(
        &self,
        mut req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let key = reqwest::header::HeaderValue::from_str(&idem_runtime::client::new_key()).expect("a UUID");
        req.headers_mut().insert(idem_runtime::client::IDEMPOTENCY_KEY, key);
        next.run(req, extensions).await
    }
}

/// One intent: place order `n`, then pay it. (placed, paid, tally, failure)
async fn intent(client: &ClientWithMiddleware, base: &str, record: &mut Intent) -> (bool, bool, Tally, Option<String>) {
    let mut tally = Tally::default();
    let n = record.n;
    let amount = 1000 + n as i64;
    let order = json!({"customer_id": format!("cus_{n}"), "amount_cents": amount, "currency": "EUR"});
    let placed = post(client, &format!("{base}/orders"), &record.user, &order, &mut tally).await;
    record.order = Some(placed.answer.clone());
    let id = match placed.created() {
        Ok(body) => match body["id"].as_str() {
            Some(id) => id.to_owned(),
            None => return (false, false, tally, Some(format!("an order without an id: {body}"))),
        },
        Err(failure) => return (false, false, tally, Some(format!("placing the order: {failure}"))),
    };
    let payment = json!({"amount_cents": amount});
    let paid = post(client, &format!("{base}/orders/{id}/payments"), &record.user, &payment, &mut tally).await;
    record.payment = Some(paid.answer.clone());
    match paid.created() {
        Ok(_) => (true, true, tally, None),
        Err(failure) => (true, false, tally, Some(format!("paying order {id}: {failure}"))),
    }
}

/// How one POST ended.
struct Posted {
    answer: Answer,
}

impl Posted {
    /// The 201's body, or why the POST ended otherwise.
    fn created(&self) -> Result<Value, String> {
        match (self.answer.status, &self.answer.text) {
            (Some(201), Some(text)) => serde_json::from_str(text).map_err(|e| format!("an unreadable 201: {e}")),
            (Some(status), text) => Err(format!(
                "{}: {}",
                StatusCode::from_u16(status).map_or_else(|_| status.to_string(), |s| s.to_string()),
                text.as_deref().unwrap_or("")
            )),
            (None, _) => Err(self.answer.error.clone().unwrap_or_default()),
        }
    }
}

/// POSTs `body` with a key of its own, kept through every retry.
async fn post(client: &ClientWithMiddleware, url: &str, user: &str, body: &Value, tally: &mut Tally) -> Posted {
    let key = idem_runtime::client::new_key();
    let mut answer = Answer { key: key.clone(), request: body.clone(), status: None, text: None, error: None };
    let sent = client
        .post(url)
        .header("X-User-ID", user)
        .header(idem_runtime::client::IDEMPOTENCY_KEY, key)
        .json(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => {
            if let Some(gave_up) = GaveUp::of(&error) {
                tally.retries += u64::from(gave_up.attempts.saturating_sub(1));
            }
            answer.error = Some(error.to_string());
            return Posted { answer };
        }
    };
    tally.add(Report::of(&response));
    let status = response.status().as_u16();
    match response.text().await {
        Ok(text) => {
            answer.status = Some(status);
            answer.text = Some(text);
        }
        Err(error) => answer.error = Some(format!("reading the answer: {error}")),
    }
    Posted { answer }
}
