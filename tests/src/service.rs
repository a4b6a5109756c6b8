//! The real `order-service` binary, spawned for black-box tests.
//!
//! `scripts/test` builds it and names it in `ORDER_SERVICE_BIN`. Otherwise
//! the first test that needs it builds it with cargo into a target
//! directory of its own (`target/tests/order-service`), since the running
//! `cargo test` holds the lock of the main one.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::http;
use crate::port::free_port;

/// A running order-service process; killed when dropped.
pub struct OrderService {
    child: Child,
    /// Base URL, such as `http://127.0.0.1:41234`.
    pub url: String,
    port: u16,
    launch: Launch,
}

/// How a process is started: its store, its charge delay, and extra flags
/// and environment variables (the fault knobs).
#[derive(Debug, Clone)]
struct Launch {
    store: String,
    charge_delay_ms: u64,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Launch {
    fn new(store: &str, charge_delay_ms: u64, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self {
            store: store.to_owned(),
            charge_delay_ms,
            args: args.iter().map(|&arg| arg.to_owned()).collect(),
            env: env.iter().map(|&(name, value)| (name.to_owned(), value.to_owned())).collect(),
        }
    }
}

/// The signal number of SIGABRT, which `std::process::abort` raises.
const SIGABRT: i32 = 6;

/// The two builds of the order service: one HTTP contract, served by
/// actix-web (`order-service`) or by axum (`order-service-axum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// `order-service`.
    Actix,
    /// `order-service-axum`.
    Axum,
}

thread_local! {
    /// The build the tests of this thread start (see [`use_build`]).
    static BUILD: std::cell::Cell<Build> = const { std::cell::Cell::new(Build::Actix) };
}

/// Makes the tests of this thread start `build` (the black-box tests run
/// on one thread each, an actix system's).
pub fn use_build(build: Build) {
    BUILD.set(build);
}

/// The order-service binary of the build this thread uses, built if need be.
pub fn binary() -> &'static Path {
    static ACTIX: OnceLock<PathBuf> = OnceLock::new();
    static AXUM: OnceLock<PathBuf> = OnceLock::new();
    match BUILD.get() {
        Build::Actix => ACTIX.get_or_init(|| example_binary("order-service", "ORDER_SERVICE_BIN")),
        Build::Axum => {
            AXUM.get_or_init(|| example_binary_named("order-service", "order-service-axum", "ORDER_SERVICE_AXUM_BIN"))
        }
    }
}

/// Instantiates black-box tests for the builds of the order service: each
/// named `async fn` (no arguments) before the `;` becomes
/// `actix_build::<name>` and `axum_build::<name>`, each one after it
/// `actix_build::<name>` only (what the store does, whatever the web
/// framework: a restart, a failover, the outbox), tests of the module it is
/// written in.
#[macro_export]
macro_rules! both_builds {
    ($($test:ident),* $(,)? $(; $($actix_only:ident),* $(,)?)?) => {
        mod actix_build {
            $(
                #[actix_web::test]
                async fn $test() {
                    $crate::service::use_build($crate::service::Build::Actix);
                    super::$test().await;
                }
            )*
            $($(
                #[actix_web::test]
                async fn $actix_only() {
                    $crate::service::use_build($crate::service::Build::Actix);
                    super::$actix_only().await;
                }
            )*)?
        }

        mod axum_build {
            $(
                #[actix_web::test]
                async fn $test() {
                    $crate::service::use_build($crate::service::Build::Axum);
                    super::$test().await;
                }
            )*
        }
    };
}

/// The binary of the example package `package`: the path in `$variable`
/// (set by `scripts/test`), else built with cargo into a target directory
/// of its own (`target/tests/<package>`).
pub fn example_binary(package: &str, variable: &str) -> PathBuf {
    example_binary_named(package, package, variable)
}

/// [`example_binary`] for the binary `name` of `package`.
pub fn example_binary_named(package: &str, name: &str, variable: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let target = target.join("tests").join(package);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", package, "--target-dir"])
        .arg(&target)
        .current_dir(root)
        .status()
        .unwrap_or_else(|e| panic!("running cargo build -p {package}: {e}"));
    assert!(status.success(), "cargo build -p {package} failed");
    target.join("debug").join(name)
}

impl OrderService {
    /// Starts the service on a free port with `--store store` and the given
    /// charge delay, and waits until `/healthz` answers.
    pub async fn start(store: &str, charge_delay_ms: u64) -> Self {
        Self::start_with(store, charge_delay_ms, &[], &[]).await
    }

    /// Like [`Self::start`], with extra flags `args` and environment
    /// variables `env`, such as `--crash-after-charge` or
    /// `ORDER_SERVICE_CRASH_AFTER_CHARGE=1`.
    pub async fn start_with(store: &str, charge_delay_ms: u64, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_on(free_port(), Launch::new(store, charge_delay_ms, args, env)).await
    }

    async fn start_on(port: u16, launch: Launch) -> Self {
        let child = Command::new(binary())
            .args(["--addr", &format!("127.0.0.1:{port}"), "--store", &launch.store])
            .args(["--charge-delay-ms", &launch.charge_delay_ms.to_string()])
            .args(&launch.args)
            .envs(launch.env.iter().map(|(name, value)| (name, value)))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawning order-service");
        let mut service = Self { child, url: format!("http://127.0.0.1:{port}"), port, launch };
        service.wait_healthy().await;
        service
    }

    async fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = http::client(Duration::from_millis(500));
        loop {
            let response = client.get(self.at("/healthz")).send().await;
            if response.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("order-service exited during start-up: {status}");
            }
            assert!(Instant::now() < deadline, "order-service did not become healthy in 30 s");
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The `--store` it was started with.
    pub fn store(&self) -> &str {
        &self.launch.store
    }

    /// The address it listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The full URL of `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Kills the process with SIGKILL: no shutdown, no cleanup.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (a graceful shutdown) and waits up to `limit` for the
    /// process to exit; returns how long it took, or `None` if it was still
    /// running at `limit` (it is killed then).
    pub async fn terminate(&mut self, limit: Duration) -> Option<Duration> {
        let sent = Instant::now();
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM failed");
        while sent.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(sent.elapsed());
            }
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
        self.kill9();
        None
    }

    /// Waits up to `limit` for the process to end by itself, and asserts
    /// that it aborted (SIGABRT), as a fault knob makes it.
    pub async fn assert_aborts(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for order-service") {
                break status;
            }
            assert!(Instant::now() < deadline, "order-service still runs {limit:?} later: the knob did not abort it");
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(status.signal(), Some(SIGABRT), "order-service ended with {status}, not by abort()");
    }

    /// Starts the same service again, on the same port and with the same
    /// flags, after [`Self::kill9`] (or a crash).
    pub async fn restart(&mut self) {
        *self = Self::start_on(self.port, self.launch.clone()).await;
    }

    /// Starts the service again on the same port and store with other extra
    /// flags and environment (none: the knobs off); the running process,
    /// if any, is killed first.
    pub async fn restart_with(&mut self, args: &[&str], env: &[(&str, &str)]) {
        self.restart_with_delay(self.launch.charge_delay_ms, args, env).await;
    }

    /// Like [`Self::restart_with`], with another charge delay.
    pub async fn restart_with_delay(&mut self, charge_delay_ms: u64, args: &[&str], env: &[(&str, &str)]) {
        self.kill9();
        let launch = Launch::new(&self.launch.store, charge_delay_ms, args, env);
        *self = Self::start_on(self.port, launch).await;
    }
}

impl Drop for OrderService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
