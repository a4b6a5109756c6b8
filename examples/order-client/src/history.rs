//! The history file: one JSON line per intent, appended as each ends, for a
//! checker that compares what the client was told with what the service
//! keeps (`scripts/campaign`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

/// How one request of an intent ended.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The idempotency key of every attempt.
    pub key: String,
    /// The body sent.
    pub request: Value,
    /// The final status, if an answer came.
    pub status: Option<u16>,
    /// The final answer's body.
    pub text: Option<String>,
    /// Why no answer came (the client gave up).
    pub error: Option<String>,
}

/// One intent: an order, then its payment.
#[derive(Debug)]
pub struct Intent {
    /// Its number within this client's run.
    pub n: usize,
    /// The caller.
    pub user: String,
    /// Placing the order, once tried.
    pub order: Option<Answer>,
    /// Paying it, once tried.
    pub payment: Option<Answer>,
}

impl Intent {
    /// Intent `n` of `user`, not tried yet.
    pub fn new(n: usize, user: &str) -> Self {
        Self { n, user: user.to_owned(), order: None, payment: None }
    }
}

/// The open history file; each line is written whole, with one `write`.
pub struct History {
    file: Mutex<File>,
}

impl History {
    /// Opens `path` for appending, creating it.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(Self { file: Mutex::new(OpenOptions::new().create(true).append(true).open(path)?) })
    }

    /// Appends `intent` as one line. A failed write is reported, not fatal.
    pub fn append(&self, intent: &Intent) {
        let answer = |answer: &Option<Answer>| {
            answer.as_ref().map(
                |a| json!({"key": a.key, "request": a.request, "status": a.status, "text": a.text, "error": a.error}),
            )
        };
        let line = json!({
            "n": intent.n,
            "user": intent.user,
            "order": answer(&intent.order),
            "payment": answer(&intent.payment),
        });
        // One write of the whole line: with O_APPEND, the lines of several
        // clients sharing the file never interleave.
        let line = format!("{line}\n");
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(error) = file.write_all(line.as_bytes()) {
            eprintln!("order-client: writing the history: {error}");
        }
    }
}
