//! A private redis-server for tests that stop and start it, or that count
//! its commands without other tests adding to the count.
//!
//! The server listens on a free loopback port with a throwaway directory,
//! no persistence and `maxmemory-policy noeviction`. The binary is
//! `$IDEM_REDIS_SERVER` (set by `scripts/test`), else `redis-server` from
//! `PATH`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::backend;
use crate::port::free_port;

/// How long a starting server may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A redis-server process owned by one test; killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    /// Extra `redis-server` arguments.
    args: Vec<String>,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a private server for `test`, or returns `None` after printing
    /// a skip line when no redis-server binary is found (a failure under
    /// `scripts/test`).
    pub fn start(test: &str) -> Option<Self> {
        Self::start_with(test, &[])
    }

    /// [`RedisServer::start`] with extra `redis-server` arguments (such as
    /// `["--rename-command", "CONFIG", ""]`), kept across restarts.
    pub fn start_with(test: &str, args: &[&str]) -> Option<Self> {
        let Some(binary) = backend::binary("IDEM_REDIS_SERVER", "redis-server") else {
            let missing = "no redis-server binary (IDEM_REDIS_SERVER unset and none on PATH)";
            backend::skip(test, missing, "scripts/test sets IDEM_REDIS_SERVER");
            return None;
        };
        let dir = backend::scratch_dir("idem-redis");
        // Another process may take the free port between our probe and the
        // server's bind: try a few ports.
        let args = args.iter().map(|&arg| arg.to_owned()).collect();
        let mut server = Self { binary, args, port: 0, dir, child: None };
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn().is_ok() {
                return Some(server);
            }
        }
        panic!("{test}: redis-server did not start; see {}", server.dir.join("redis.log").display());
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server at once (SIGKILL, like a crash) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Suspends the server (SIGSTOP): connections stay open but nothing
    /// answers, like a server stuck in a long command or a network stall.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Resumes a [`RedisServer::freeze`]d server (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is running");
        let status = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("running kill");
        assert!(status.success(), "kill {signal} {} failed: {status}", child.id());
    }

    /// Starts the server again on the same port, empty (no persistence).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + START_TIMEOUT;
        // The port can stay busy for a moment after the kill.
        while let Err(error) = self.spawn() {
            assert!(Instant::now() < deadline, "redis-server did not restart on port {}: {error}", self.port);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = self.dir.join("redis.log");
        let child = Command::new(&self.binary)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"])
            .arg("--logfile")
            .arg(&log)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("running {}: {e}", self.binary.display()))?;
        self.child = Some(answering(child, self.port)?);
        Ok(())
    }
}

/// Waits until `child`, a redis-server just spawned, answers on `port`
/// (another process may answer there: it must be this child); kills it if
/// it does not within the start timeout.
pub(crate) fn answering(mut child: Child, port: u16) -> Result<Child, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if server_pid(port) == Some(child.id()) {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server exited with {status}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("redis-server did not answer in time".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process id of the server answering on `port`, from `INFO server`.
fn server_pid(port: u16) -> Option<u32> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    // The reply is one bulk string; `process_id` sits in its first lines.
    while reply.len() < 64 * 1024 {
        let read = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        reply.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&reply);
        if let Some((_, rest)) = text.split_once("\r\nprocess_id:")
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.parse().ok();
        }
    }
    None
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
