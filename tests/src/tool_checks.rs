//! The operator's tool, `idem` (§14), run as a process against a real store:
//! each check makes records through the store's own API, runs the binary on
//! them and reads what it prints, its exit status, and the store afterwards.
//! Every check works on a route of its own, so that listings on a shared
//! server see its records alone.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use idem_runtime::sealing::{self, Keyring, RecordsKey};
use idem_runtime::store::{
    Attempt, Claim, ClaimTerms, Fence, FencingToken, Fingerprint, IdempotencyKey, OnLapse, Operable, RecordState,
    RequestParts, Scope, StateName, Step, StorageKey, StoredResponse, grace,
};
use serde_json::{Value, json};

use crate::backend::scratch_dir;
use crate::port::reserved_ports;

/// The lease of records that must stay in flight through a check.
const LONG: Duration = Duration::from_secs(60);
/// Every record's TTL.
const TTL: Duration = Duration::from_secs(600);
/// The lease of records that become held.
const SHORT: Duration = Duration::from_secs(1);

/// The `idem` binary: the path in `IDEM_BIN` (set by `scripts/test`), else
/// built with cargo into a target directory of its own (`target/tests/idem`).
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(path) = std::env::var_os("IDEM_BIN").filter(|p| !p.is_empty()) {
            return PathBuf::from(path);
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        let target = target.join("tests").join("idem");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "idem-runtime", "--features", "cli", "--bin", "idem", "--target-dir"])
            .arg(&target)
            .current_dir(root)
            .status()
            .unwrap_or_else(|e| panic!("running cargo build --bin idem: {e}"));
        assert!(status.success(), "cargo build -p idem-runtime --features cli --bin idem failed");
        target.join("debug").join("idem")
    })
}

/// How a run of the tool is told its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Flag,
    Environment,
    Nothing,
}

/// The tool, pointed at one store.
#[derive(Debug, Clone)]
pub struct Tool {
    store: String,
}

impl Tool {
    /// The tool on the store at `url`.
    pub fn on(url: &str) -> Self {
        Self { store: url.to_owned() }
    }

    /// `idem --store URL args...`.
    pub async fn run(&self, args: &[&str]) -> Run {
        self.spawn(Via::Flag, args, None).await
    }

    /// `IDEM_RECORDS_KEY=KEYS idem --store URL args...` (without the
    /// variable when `keys` is `None`).
    pub async fn run_with_records_keys(&self, keys: Option<&str>, args: &[&str]) -> Run {
        self.spawn(Via::Flag, args, keys).await
    }

    /// `IDEM_STORE=URL idem args...`.
    pub async fn run_with_environment(&self, args: &[&str]) -> Run {
        self.spawn(Via::Environment, args, None).await
    }

    /// `idem args...`, with neither `--store` nor `IDEM_STORE`.
    pub async fn run_without_store(args: &[&str]) -> Run {
        Self::on("").spawn(Via::Nothing, args, None).await
    }

    async fn spawn(&self, via: Via, args: &[&str], records_keys: Option<&str>) -> Run {
        let (store, args) = (self.store.clone(), args.iter().map(|&arg| arg.to_owned()).collect::<Vec<_>>());
        let records_keys = records_keys.map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let mut command = Command::new(binary());
            command.env_remove("IDEM_STORE").env_remove("IDEM_RECORDS_KEY").env("RUST_LOG", "off");
            if let Some(keys) = records_keys {
                command.env("IDEM_RECORDS_KEY", keys);
            }
            match via {
                Via::Flag => {
                    command.args(["--store", &store]);
                }
                Via::Environment => {
                    command.env("IDEM_STORE", &store);
                }
                Via::Nothing => {}
            }
            let output = command.args(&args).output().expect("running idem");
            Run {
                args,
                code: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            }
        })
        .await
        .expect("the tool's runner")
    }
}

/// What one run of the tool did.
#[derive(Debug)]
pub struct Run {
    /// Its arguments, after the store.
    pub args: Vec<String>,
    /// Its exit status.
    pub code: Option<i32>,
    /// What it printed.
    pub stdout: String,
    /// What it complained about.
    pub stderr: String,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "idem {:?} exited {:?}\n--- stdout\n{}--- stderr\n{}", self.args, self.code, self.stdout, self.stderr)
    }
}

impl Run {
    /// Panics unless it exited with `code`.
    #[track_caller]
    pub fn exited(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "{self}");
        self
    }

    /// Its output lines.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    /// Its output lines, each a JSON value.
    #[track_caller]
    pub fn json_lines(&self) -> Vec<Value> {
        self.lines().iter().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {self}"))).collect()
    }

    /// Its output, one JSON value.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self}"))
    }
}

/// A route no other check (or run) uses: `POST /tool-<random>`.
struct Route {
    pattern: String,
}

impl Route {
    fn fresh() -> Self {
        Self { pattern: format!("/tool-{}", FencingToken::generate().to_hex()) }
    }

    /// `POST /tool-...`, as the runtime records it and the tool takes it.
    fn name(&self) -> String {
        format!("POST {}", self.pattern)
    }

    /// The storage key of idempotency key `key`, sent by alice.
    fn key(&self, key: &str) -> StorageKey {
        let key = IdempotencyKey::parse(key.as_bytes()).expect("a valid idempotency key");
        StorageKey::new(Scope::User, Some("alice"), "POST", &self.pattern, &key)
    }

    /// The fingerprint of a request on this route with `body`.
    fn fingerprint(&self, body: &str) -> Fingerprint {
        Fingerprint::of(&RequestParts {
            method: "POST",
            path: &self.pattern,
            query: "",
            headers: &[],
            host: None,
            content_type: Some("application/json"),
            body: body.as_bytes(),
        })
    }

    /// Terms of a claim on this route that holds a lapsed execution.
    fn terms(&self, lease: Duration) -> ClaimTerms {
        ClaimTerms::new(lease, TTL).on_lapse(OnLapse::Hold).route(self.name())
    }

    /// Claims `key` for the request with `body` under a `lease`: its storage
    /// key and token.
    async fn claim(&self, store: &dyn Operable, key: &str, body: &str, lease: Duration) -> (StorageKey, FencingToken) {
        let (storage_key, fingerprint, terms) = (self.key(key), self.fingerprint(body), self.terms(lease));
        match store.claim_with(&storage_key, &fingerprint, FencingToken::generate(), &terms).await.expect("claim") {
            Claim::Acquired { token, .. } => (storage_key, token),
            other => panic!("expected {key} to be acquired, got {other:?}"),
        }
    }

    /// Claims `key` again for the request with `body`, as a retry would.
    async fn retry(&self, store: &dyn Operable, key: &StorageKey, body: &str) -> Claim {
        self.retry_with(store, key, body, LONG).await
    }

    /// [`Self::retry`] under a `lease`, which sets the grace it gives a
    /// lapsed holder.
    async fn retry_with(&self, store: &dyn Operable, key: &StorageKey, body: &str, lease: Duration) -> Claim {
        let terms = self.terms(lease);
        store.claim_with(key, &self.fingerprint(body), FencingToken::generate(), &terms).await.expect("claim")
    }

    /// Claims `key` with a short lease, records a step, and lets the lease
    /// lapse past its grace: a retry then holds the record. Its storage key
    /// and holder's token. About three seconds.
    async fn held(&self, store: &dyn Operable, key: &str, body: &str) -> (StorageKey, FencingToken) {
        self.held_after(store, key, body, |_| charge()).await
    }

    /// [`Self::held`], its record holding the step `step` makes of its
    /// storage key.
    async fn held_after(
        &self,
        store: &dyn Operable,
        key: &str,
        body: &str,
        step: impl FnOnce(&StorageKey) -> Step,
    ) -> (StorageKey, FencingToken) {
        let (storage_key, token) = self.claim(store, key, body, SHORT).await;
        let step = step(&storage_key);
        assert_eq!(store.record_step(&storage_key, token, &step).await.expect("record_step"), Fence::Held);
        tokio::time::sleep(SHORT + Duration::from_millis(800)).await;
        let claim = self.retry_with(store, &storage_key, body, SHORT).await;
        assert!(matches!(claim, Claim::InFlight { .. }), "the holder's grace: {claim:?}");
        tokio::time::sleep(grace(SHORT) + Duration::from_millis(300)).await;
        let claim = self.retry_with(store, &storage_key, body, SHORT).await;
        assert_eq!(claim, Claim::Held { newly: true });
        (storage_key, token)
    }
}

/// The step every held record has recorded.
fn charge() -> Step {
    Step { name: "charge".to_owned(), result: Bytes::from_static(br#"{"charge":"ch_1","amount":4200}"#) }
}

/// Names and values, in the order the tool printed them.
type Pairs<'a> = Vec<(&'a str, &'a str)>;

/// The fields of `idem inspect`'s text (`name  value` lines), and its steps
/// (the indented `name: result` lines under `steps`).
fn fields(run: &Run) -> (Pairs<'_>, Pairs<'_>) {
    let (mut fields, mut steps) = (Vec::new(), Vec::new());
    for line in run.lines() {
        match line.strip_prefix("  ") {
            Some(step) => steps.push(step.split_once(": ").unwrap_or_else(|| panic!("a step line: {run}"))),
            None => fields.push(line.split_once(' ').map_or((line, ""), |(name, value)| (name, value.trim()))),
        }
    }
    (fields, steps)
}

/// The value of field `name` in `idem inspect`'s text.
#[track_caller]
fn field<'a>(fields: &[(&str, &'a str)], name: &str) -> &'a str {
    fields.iter().find(|(found, _)| *found == name).map(|(_, value)| *value).unwrap_or_else(|| panic!("no {name}"))
}

/// `idem list` shows a route's records, one line each, in every state;
/// `--state held --json` the held one alone, with its token and steps;
/// `inspect` shows a record by its id or by what its key is derived from;
/// an unknown id is not found (exit 1).
pub async fn listing_and_inspecting_show_each_record(store: Arc<dyn Operable>, tool: &Tool) {
    let route = Route::fresh();
    let ((held, holder), others) = tokio::join!(route.held(&*store, "k-held", r#"{"n":4}"#), async {
        let (running, _) = route.claim(&*store, "k-running", r#"{"n":1}"#, LONG).await;
        let (completed, token) = route.claim(&*store, "k-completed", r#"{"n":2}"#, LONG).await;
        let response = StoredResponse { status: 201, headers: vec![], body: Bytes::from_static(b"{\"id\":2}") };
        assert_eq!(store.complete(&completed, token, &response, TTL).await.expect("complete"), Fence::Held);
        let (released, token) = route.claim(&*store, "k-released", r#"{"n":3}"#, LONG).await;
        assert_eq!(store.release(&released, token).await.expect("release"), Fence::Held);
        [(running, "in-flight"), (completed, "completed"), (released, "released")]
    });
    let mut expected: Vec<(String, &str)> =
        others.iter().map(|(key, state)| (key.record_id().to_owned(), *state)).collect();
    expected.push((held.record_id().to_owned(), "held"));
    expected.sort();

    let listed = tool.run(&["list", "--route", &route.name()]).await;
    let mut shown: Vec<(String, &str)> = listed
        .exited(0)
        .lines()
        .iter()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert!(line.contains(&route.name()), "the route on each line: {listed}");
            (words[0].to_owned(), words[1])
        })
        .collect();
    shown.sort();
    assert_eq!(shown, expected, "{listed}");
    let through_environment = tool.run_with_environment(&["list", "--route", &route.name()]).await;
    assert_eq!(through_environment.exited(0).lines().len(), 4, "IDEM_STORE names the store: {through_environment}");

    let only_held = tool.run(&["list", "--route", &route.name(), "--state", "held", "--json"]).await;
    let only_held = only_held.exited(0).json_lines();
    assert_eq!(only_held.len(), 1, "{only_held:?}");
    let record = &only_held[0];
    assert_eq!((&record["id"], &record["state"]), (&json!(held.record_id()), &json!("held")));
    assert_eq!((&record["route"], &record["token"]), (&json!(route.name()), &json!(holder.to_hex())));
    assert_eq!(record["steps"], json!([{"name": "charge", "result": {"charge": "ch_1", "amount": 4200}}]));

    let inspected = tool.run(&["inspect", held.record_id()]).await;
    let (shown, steps) = fields(inspected.exited(0));
    assert_eq!(field(&shown, "id"), held.record_id(), "{inspected}");
    assert_eq!(field(&shown, "state"), "held", "{inspected}");
    assert_eq!(field(&shown, "route"), route.name(), "{inspected}");
    assert_eq!(field(&shown, "attempt"), Attempt::First.as_str(), "{inspected}");
    assert_eq!(field(&shown, "token"), holder.to_hex(), "{inspected}");
    assert_eq!(field(&shown, "steps"), "1", "{inspected}");
    assert_eq!(steps, [("charge", r#"{"charge":"ch_1","amount":4200}"#)], "{inspected}");

    let by_key = ["inspect", "--route", &route.name(), "--scope", "user", "--subject", "alice", "--key", "k-held"];
    let by_key = tool.run(&[&by_key[..], &["--json"]].concat()).await.exited(0).json();
    assert_eq!((&by_key["id"], &by_key["key"]), (&json!(held.record_id()), &json!(held.as_str())));
    assert_eq!((&by_key["state"], &by_key["token"]), (&json!("held"), &json!(holder.to_hex())));

    let unknown = Route::fresh().key("k-never-claimed");
    let missing = tool.run(&["inspect", unknown.record_id()]).await;
    assert!(missing.exited(1).stderr.contains(unknown.record_id()), "says which record is missing: {missing}");
    let other_subject = ["inspect", "--route", &route.name(), "--subject", "bob", "--key", "k-held"];
    tool.run(&other_subject).await.exited(1);
}

/// `release` ends a held execution (a second release is refused: nothing
/// is held any more); `resolve` completes another one with the operator's
/// response, which a retry of the same request then replays.
pub async fn release_and_resolve_settle_held_executions(store: Arc<dyn Operable>, tool: &Tool) {
    let route = Route::fresh();
    let ((released, _), (resolved, _), (forgotten, _)) = tokio::join!(
        route.held(&*store, "k-release", r#"{"n":1}"#),
        route.held(&*store, "k-resolve", r#"{"n":2}"#),
        route.held(&*store, "k-forget", r#"{"n":3}"#)
    );

    let release = tool.run(&["release", released.record_id()]).await;
    assert!(release.exited(0).stdout.contains("held -> released"), "{release}");
    let record = store.get(&released).await.expect("get").expect("a tombstone");
    assert!(matches!(record.state, RecordState::Released { .. }), "{record:?}");
    let again = tool.run(&["release", released.record_id()]).await;
    assert!(again.exited(1).stderr.contains("released"), "says what the record is now: {again}");
    assert_eq!(route.retry(&*store, &released, r#"{"n":99}"#).await, Claim::Mismatch, "another request");
    // The next execution gets the recorded step back: its effect happened.
    let rerun = route.retry(&*store, &released, r#"{"n":1}"#).await;
    let kept = vec![charge()];
    assert!(matches!(rerun, Claim::Acquired { attempt: Attempt::AfterRelease, ref steps, .. } if *steps == kept));

    // `--forget-steps`: the next execution runs every step again.
    let forget = tool.run(&["release", forgotten.record_id(), "--forget-steps"]).await;
    assert!(forget.exited(0).stdout.contains("held -> released"), "{forget}");
    let rerun = route.retry(&*store, &forgotten, r#"{"n":3}"#).await;
    assert!(matches!(rerun, Claim::Acquired { attempt: Attempt::AfterRelease, ref steps, .. } if steps.is_empty()));

    let dir = scratch_dir("idem-tool-resolve");
    let body = dir.join("response.json");
    std::fs::write(&body, br#"{"order":"o_1","status":"paid"}"#).expect("writing the body file");
    let headers = ["--header", "Content-Type: application/json", "--header", "location: /orders/o_1"];
    let body = body.to_string_lossy();
    let resolve = ["resolve", resolved.record_id(), "--status", "201", "--body", &body];
    let resolve = tool.run(&[&resolve[..], &headers[..], &["--json"]].concat()).await;
    std::fs::remove_dir_all(&dir).expect("removing the scratch directory");
    let settled = resolve.exited(0).json();
    assert_eq!(settled, json!({"id": resolved.record_id(), "was": "held", "now": "completed"}), "{resolve}");
    let replay = StoredResponse {
        status: 201,
        headers: vec![
            ("content-type".to_owned(), b"application/json".to_vec()),
            ("location".to_owned(), b"/orders/o_1".to_vec()),
        ],
        body: Bytes::from_static(br#"{"order":"o_1","status":"paid"}"#),
    };
    assert_eq!(route.retry(&*store, &resolved, r#"{"n":2}"#).await, Claim::Replay(replay));
    tool.run(&["resolve", resolved.record_id(), "--status", "200", "--body", "/dev/null"]).await.exited(1);
}

/// A write applies only to the record as inspected: when its execution
/// ended, or another one took its place, since the operator read its token,
/// or it is not in the state the operator expects, the tool refuses (exit
/// 1), says the record changed, and writes nothing.
pub async fn a_record_that_changed_is_not_settled(store: Arc<dyn Operable>, tool: &Tool) {
    let route = Route::fresh();

    // Inspected, then completed by its holder.
    let (completed, token) = route.claim(&*store, "k-completed", r#"{"n":1}"#, LONG).await;
    let inspected = tool.run(&["inspect", completed.record_id(), "--json"]).await.exited(0).json();
    assert_eq!(inspected["token"], json!(token.to_hex()));
    let response = StoredResponse { status: 200, headers: vec![], body: Bytes::from_static(b"done") };
    assert_eq!(store.complete(&completed, token, &response, TTL).await.expect("complete"), Fence::Held);
    let refused = tool.run(&["release", completed.record_id(), "--expect-token", &token.to_hex(), "--json"]).await;
    assert!(refused.exited(1).stderr.contains("changed"), "{refused}");
    assert_eq!(refused.json()["error"], json!("changed"), "{refused}");
    let record = store.get(&completed).await.expect("get").expect("a record");
    assert_eq!(record.state_name(), StateName::Completed, "nothing written: {record:?}");

    // Inspected, then released by its holder and claimed again by a retry.
    let (retried, first) = route.claim(&*store, "k-retried", r#"{"n":2}"#, LONG).await;
    let inspected = tool.run(&["inspect", retried.record_id(), "--json"]).await.exited(0).json();
    assert_eq!(inspected["token"], json!(first.to_hex()));
    assert_eq!(store.release(&retried, first).await.expect("release"), Fence::Held);
    let Claim::Acquired { token: second, .. } = route.retry(&*store, &retried, r#"{"n":2}"#).await else {
        panic!("the retry runs again")
    };
    let refused = tool.run(&["release", retried.record_id(), "--expect-token", &first.to_hex()]).await;
    assert!(refused.exited(1).stderr.contains("changed"), "{refused}");
    assert_eq!(store.get(&retried).await.expect("get").expect("a record").token(), Some(second), "nothing written");

    // Expected held, found in flight.
    let refused = tool.run(&["release", retried.record_id(), "--expect-state", "held"]).await;
    assert!(refused.exited(1).stderr.contains("changed"), "{refused}");
    let record = store.get(&retried).await.expect("get").expect("a record");
    assert_eq!((record.state_name(), record.token()), (StateName::InFlight, Some(second)), "nothing written");

    // As inspected, but its lease is live (its holder runs): refused
    // unless forced.
    let args = ["release", retried.record_id(), "--expect-token", &second.to_hex(), "--expect-state", "in-flight"];
    let refused = tool.run(&args).await;
    assert!(refused.exited(1).stderr.contains("running"), "{refused}");
    assert_eq!(store.get(&retried).await.expect("get").expect("a record").token(), Some(second), "nothing written");
    tool.run(&[&args[..], &["--force"]].concat()).await.exited(0);
    let record = store.get(&retried).await.expect("get").expect("a tombstone");
    assert_eq!(record.state_name(), StateName::Released);
}

/// A service's sealed records (`Idem::encrypt_records`): without its keys
/// the tool shows them sealed and never their contents, and refuses to
/// resolve a record whose steps are sealed (a response in the clear would
/// not open); given the keys (`IDEM_RECORDS_KEY`, or `--records-key-file`
/// with the sealing key as a previous one) it opens them, and the response
/// it resolves is sealed with the current key. A key that opens nothing
/// leaves them sealed.
pub async fn sealed_records_open_only_with_the_keys(store: Arc<dyn Operable>, tool: &Tool) {
    let route = Route::fresh();
    let (key, newer, other) = ([0x3c; 32], [0x4d; 32], [0x5e; 32]);
    let keyring = Keyring::new(RecordsKey::new(key));
    let secret_step = br#"{"charge":"ch_secret_7f3a"}"#;
    let sealed_step = |at: &StorageKey| Step {
        name: "charge".to_owned(),
        result: Bytes::from(sealing::seal_step(&keyring, at, "charge", secret_step)),
    };
    let ((held, _), completed) = tokio::join!(route.held_after(&*store, "k-held", r#"{"n":1}"#, sealed_step), async {
        let (completed, token) = route.claim(&*store, "k-completed", r#"{"n":2}"#, LONG).await;
        let response =
            StoredResponse { status: 201, headers: vec![], body: Bytes::from_static(b"{\"card\":\"4242\"}") };
        let sealed = sealing::seal_response(&keyring, &completed, &response);
        assert_eq!(store.complete(&completed, token, &sealed, TTL).await.expect("complete"), Fence::Held);
        completed
    });
    let hex = |bytes: [u8; 32]| hex::encode(bytes);
    let key_id = RecordsKey::new(key).id().to_hex();

    for keys in [None, Some(hex(other))] {
        let shown = tool.run_with_records_keys(keys.as_deref(), &["inspect", held.record_id()]).await;
        let (_, steps) = fields(shown.exited(0));
        assert_eq!(steps, [("charge", "sealed (give the records key to read it)")], "{shown}");
        let shown = tool.run_with_records_keys(keys.as_deref(), &["inspect", completed.record_id()]).await;
        let (fields, _) = fields(shown.exited(0));
        assert!(field(&fields, "response").ends_with(&format!("sealed with key {key_id}")), "{shown}");
        assert!(!shown.stdout.contains("4242") && !shown.stdout.contains("ch_secret"), "{shown}");
    }
    let refused = tool.run(&["resolve", held.record_id(), "--status", "200", "--body", "/dev/null"]).await;
    assert!(refused.exited(1).stderr.contains("sealed"), "{refused}");
    assert_eq!(store.get(&held).await.expect("get").expect("a record").state_name(), StateName::Held, "{refused}");

    let keys = Some(hex(key));
    let opened = tool.run_with_records_keys(keys.as_deref(), &["inspect", held.record_id(), "--json"]).await;
    let steps = json!([{"name": "charge", "result": {"charge": "ch_secret_7f3a"}}]);
    assert_eq!(opened.exited(0).json()["steps"], steps, "{opened}");
    let opened = tool.run_with_records_keys(keys.as_deref(), &["inspect", completed.record_id(), "--json"]).await;
    assert_eq!(opened.exited(0).json()["response"]["body"], json!(r#"{"card":"4242"}"#), "{opened}");

    // Rotated: the newer key is current, the sealing one a previous one.
    let dir = scratch_dir("idem-tool-sealed");
    let (file, body) = (dir.join("records-keys"), dir.join("response.json"));
    std::fs::write(&file, format!("{}\n{}\n", hex(newer), hex(key))).expect("writing the keys file");
    std::fs::write(&body, br#"{"charge":"ch_secret_7f3a","status":"captured"}"#).expect("writing the body file");
    let (file, body) = (file.to_string_lossy(), body.to_string_lossy());
    let resolve = ["--records-key-file", &file, "resolve", held.record_id(), "--status", "201", "--body", &body];
    let resolved = tool.run(&resolve).await;
    std::fs::remove_dir_all(&dir).expect("removing the scratch directory");
    assert!(resolved.exited(0).stdout.contains("held -> completed"), "{resolved}");
    let record = store.get(&held).await.expect("get").expect("a record");
    let RecordState::Completed { response, .. } = record.state else { panic!("completed: {record:?}") };
    assert_eq!(sealing::sealed_with(&response), Some(Ok(RecordsKey::new(newer).id())), "sealed with the current key");
    assert!(!response.body.windows(9).any(|w| w == b"ch_secret"), "the resolved body is sealed");
    let rotated = Keyring::new(RecordsKey::new(newer));
    let opened = sealing::open_response(Some(&rotated), &held, response).expect("opens with the current key");
    assert_eq!(opened.body, Bytes::from_static(br#"{"charge":"ch_secret_7f3a","status":"captured"}"#));
}

/// Usage errors exit 2, before or after the store is reached: no store, a
/// record named neither by id nor by key, a route without a method, an
/// unknown state, a missing body file.
pub async fn usage_errors_exit_2(tool: &Tool) {
    let nowhere = Tool::run_without_store(&["list"]).await;
    assert!(nowhere.exited(2).stderr.contains("IDEM_STORE"), "says how to name a store: {nowhere}");
    tool.run(&["inspect"]).await.exited(2);
    tool.run(&["inspect", "--route", "POST/orders", "--subject", "alice", "--key", "k"]).await.exited(2);
    tool.run(&["inspect", "--route", "POST /orders", "--key", "k"]).await.exited(2);
    tool.run(&["list", "--state", "asleep"]).await.exited(2);
    let id = Route::fresh().key("k").record_id().to_owned();
    tool.run(&["resolve", &id, "--status", "200", "--body", "/nonexistent/idem-tool-body"]).await.exited(2);
}

/// A store the tool cannot reach is a connection error (exit 2), and the
/// password of its URL, `hunter2`, is printed nowhere. `url` names the
/// store, with `{port}` where its port goes (a closed one) and a
/// `hunter2` password.
pub async fn an_unreachable_store_exits_2_without_its_password(url: &str) {
    assert!(url.contains("hunter2") && url.contains("{port}"), "{url}");
    let port = reserved_ports(1)[0];
    let tool = Tool::on(&url.replace("{port}", &port.to_string()));
    let id = "0".repeat(32);
    let inspect = ["inspect", "--json", &id];
    let (listed, inspected) = tokio::join!(tool.run(&["list"]), tool.run_with_environment(&inspect));
    for run in [listed, inspected] {
        assert!(!run.stderr.is_empty(), "says why: {run}");
        assert!(!run.stdout.contains("hunter2") && !run.stderr.contains("hunter2"), "the password is printed: {run}");
        run.exited(2);
    }
}
