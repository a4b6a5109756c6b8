//! The real `order-notifier` binary, spawned for black-box tests.
//! `scripts/test` builds it and names it in `ORDER_NOTIFIER_BIN`; otherwise
//! the first test that needs it builds it.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::service::example_binary;

/// The visibility timeout and inbox lease the tests give notifiers: short,
/// so that redeliveries and takeovers happen within a test.
pub const FAST: [&str; 4] = ["--visibility", "1s", "--lease", "3s"];

/// The order-notifier binary, built if need be.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| example_binary("order-notifier", "ORDER_NOTIFIER_BIN"))
}

/// A running order-notifier process; killed when dropped.
pub struct Notifier {
    child: Child,
    store: String,
    args: Vec<String>,
}

impl Notifier {
    /// Starts a notifier on `store` with the [`FAST`] timings and extra
    /// flags `args`.
    pub fn start(store: &str, args: &[&str]) -> Self {
        let args: Vec<String> = FAST.iter().chain(args).map(|&arg| arg.to_owned()).collect();
        let child = Command::new(binary())
            .args(["--store", store])
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawning order-notifier");
        Self { child, store: store.to_owned(), args }
    }

    /// Kills the process with SIGKILL: no shutdown, nothing acknowledged.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the same notifier again (after [`Self::kill9`] or a crash),
    /// without the fault knobs.
    pub fn restart(&mut self) {
        self.kill9();
        let knobs = ["--crash-after-send", "--crash-before-ack"];
        let args: Vec<&str> =
            self.args.iter().skip(FAST.len()).map(String::as_str).filter(|arg| !knobs.contains(arg)).collect();
        *self = Self::start(&self.store.clone(), &args);
    }

    /// Sends SIGTERM and waits up to `limit` for a clean exit (status 0).
    pub fn terminate(&mut self, limit: Duration) {
        let sent = Instant::now();
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM failed");
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for order-notifier") {
                assert!(status.success(), "order-notifier ended with {status} after SIGTERM");
                return;
            }
            assert!(sent.elapsed() < limit, "order-notifier still runs {limit:?} after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `limit` for the process to abort (SIGABRT), as
    /// `--crash-after-send` and `--crash-before-ack` make it.
    pub fn assert_aborts(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for order-notifier") {
                assert_eq!(status.signal(), Some(6), "order-notifier ended with {status}, not by abort()");
                return;
            }
            assert!(Instant::now() < deadline, "order-notifier still runs {limit:?} later: the knob did not fire");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
