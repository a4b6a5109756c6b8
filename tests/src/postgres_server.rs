//! A private PostgreSQL server for tests that stop and start it, or that
//! count the statements it runs without other tests adding to the count.
//!
//! The server gets a throwaway data directory (`initdb -U idem
//! --auth=trust`), listens on a free loopback port and keeps its socket and
//! log in that directory. Binaries come from `$IDEM_PG_BIN` (set by
//! `scripts/test`), else the newest `/usr/lib/postgresql/*/bin`, else `PATH`.
//! PostgreSQL refuses to run as root: when we are root it runs as
//! `$IDEM_PG_USER` (default `postgres`) through `runuser`, as `scripts/test`
//! does.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::backend;
use crate::port::free_port;

/// The superuser `initdb` creates; it logs in without a password.
pub const USER: &str = "idem";

/// A PostgreSQL server owned by one test; stopped and deleted when dropped.
#[derive(Debug)]
pub struct PostgresServer {
    bin: PathBuf,
    /// Who runs the server when we are root.
    run_as: Option<String>,
    dir: PathBuf,
    port: u16,
    settings: Vec<String>,
}

/// The directory holding `initdb` and `pg_ctl`.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("IDEM_PG_BIN").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_tools(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| has_tools(dir))
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

impl PostgresServer {
    /// Starts a private server for `test` with extra `postgres -c`
    /// `settings`, or returns `None` after printing a skip line when no
    /// PostgreSQL binaries are found (a failure under `scripts/test`).
    pub fn start(test: &str, settings: &[(&str, &str)]) -> Option<Self> {
        let Some(bin) = bin_dir() else {
            let missing = "no PostgreSQL binaries (IDEM_PG_BIN unset, none in /usr/lib/postgresql or on PATH)";
            backend::skip(test, missing, "scripts/test sets IDEM_PG_BIN");
            return None;
        };
        let run_as = running_as_root()
            .then(|| std::env::var("IDEM_PG_USER").ok().filter(|u| !u.is_empty()))
            .map(|user| user.unwrap_or_else(|| "postgres".to_owned()));
        let dir = backend::scratch_dir("idem-pg");
        let mut server = Self {
            bin,
            run_as,
            dir,
            port: 0,
            settings: settings.iter().map(|(name, value)| format!("-c {name}={value}")).collect(),
        };
        if let Some(user) = &server.run_as {
            let status = Command::new("chown").arg(user).arg(&server.dir).status().expect("running chown");
            assert!(status.success(), "{test}: chown {user} {} failed", server.dir.display());
        }
        let initdb_log = File::create(server.dir.join("initdb.log")).expect("creating initdb.log");
        let status = server
            .command("initdb")
            .arg("-D")
            .arg(server.data())
            .args(["-U", USER, "--auth=trust", "--no-sync", "-E", "UTF8"])
            .stdout(initdb_log.try_clone().expect("cloning a file handle"))
            .stderr(initdb_log)
            .status()
            .expect("running initdb");
        assert!(status.success(), "{test}: initdb failed; see {}", server.dir.join("initdb.log").display());
        // Another process may take the free port between our probe and the
        // server's bind: try a few ports.
        for _ in 0..5 {
            server.port = free_port();
            if server.pg_ctl_start() {
                return Some(server);
            }
        }
        panic!("{test}: PostgreSQL did not start; see {}", server.log().display());
    }

    /// Starts a private streaming standby of `primary` for `test`: a base
    /// backup taken with `pg_basebackup -R` (which writes the standby's
    /// settings), started on a port of its own. It replicates
    /// asynchronously unless the primary's `synchronous_standby_names`
    /// names it.
    pub fn start_standby(test: &str, primary: &PostgresServer) -> Self {
        let dir = backend::scratch_dir("idem-pg-standby");
        let mut standby =
            Self { bin: primary.bin.clone(), run_as: primary.run_as.clone(), dir, port: 0, settings: Vec::new() };
        if let Some(user) = &standby.run_as {
            let status = Command::new("chown").arg(user).arg(&standby.dir).status().expect("running chown");
            assert!(status.success(), "{test}: chown {user} {} failed", standby.dir.display());
        }
        let log = File::create(standby.dir.join("basebackup.log")).expect("creating basebackup.log");
        let status = standby
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string(), "-U", USER, "-D"])
            .arg(standby.data())
            .args(["-R", "-X", "stream", "--no-sync"])
            .stdout(log.try_clone().expect("cloning a file handle"))
            .stderr(log)
            .status()
            .expect("running pg_basebackup");
        assert!(status.success(), "{test}: pg_basebackup failed; see {}", standby.dir.join("basebackup.log").display());
        for _ in 0..5 {
            standby.port = free_port();
            if standby.pg_ctl_start() {
                return standby;
            }
        }
        panic!("{test}: the standby did not start; see {}", standby.log().display());
    }

    /// `postgres://idem@127.0.0.1:<port>/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    /// The port the server listens on (kept across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server the way an operator would for a quick restart
    /// (`pg_ctl stop -m fast`: open sessions are terminated) and waits
    /// until it is down.
    pub fn stop(&self) {
        let status = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "-t", "30", "stop"])
            .stdout(Stdio::null())
            .status()
            .expect("running pg_ctl stop");
        assert!(status.success(), "pg_ctl stop failed: {status}; see {}", self.log().display());
    }

    /// Crashes the server (`pg_ctl stop -m immediate`: every process quits
    /// without a checkpoint, as after a power cut; the next start recovers
    /// from the write-ahead log) and waits until it is down.
    pub fn crash(&self) {
        let status = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "-t", "30", "stop"])
            .stdout(Stdio::null())
            .status()
            .expect("running pg_ctl stop");
        assert!(status.success(), "pg_ctl stop -m immediate failed: {status}; see {}", self.log().display());
    }

    /// Suspends the server (SIGSTOP to the postmaster, then to every one of
    /// its processes, the backends of open sessions included): connections
    /// stay open but nothing answers, and no new one is accepted. What
    /// clients send meanwhile waits in the sockets, and runs when
    /// [`thaw`](Self::thaw)ed.
    pub fn freeze(&self) {
        let postmaster = self.postmaster();
        signal("-STOP", postmaster);
        for child in children(postmaster) {
            signal("-STOP", child);
        }
    }

    /// Resumes a [`freeze`](Self::freeze)d server (SIGCONT to its
    /// processes, then to the postmaster).
    pub fn thaw(&self) {
        let postmaster = self.postmaster();
        for child in children(postmaster) {
            signal("-CONT", child);
        }
        signal("-CONT", postmaster);
    }

    /// The postmaster's process id, from `postmaster.pid`.
    fn postmaster(&self) -> u32 {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid")).expect("reading postmaster.pid");
        pid.lines().next().and_then(|line| line.trim().parse().ok()).expect("a process id in postmaster.pid")
    }

    /// Starts the stopped server again, on the same port and data directory.
    pub fn restart(&self) {
        assert!(self.pg_ctl_start(), "PostgreSQL did not restart on port {}; see {}", self.port, self.log().display());
    }

    fn pg_ctl_start(&self) -> bool {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off {}",
            self.port,
            self.dir.display(),
            self.settings.join(" ")
        );
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.log())
            .args(["-w", "-t", "30", "-o", &options, "start"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// A PostgreSQL program, run as the unprivileged user when we are root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

/// The process ids of `parent`'s children.
fn children(parent: u32) -> Vec<u32> {
    let output = Command::new("pgrep").args(["-P", &parent.to_string()]).output().expect("running pgrep");
    String::from_utf8_lossy(&output.stdout).lines().filter_map(|line| line.trim().parse().ok()).collect()
}

/// Sends `signal` (`-STOP`, `-CONT`) to process `pid`.
fn signal(signal: &str, pid: u32) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("running kill");
    assert!(status.success(), "kill {signal} {pid} failed: {status}");
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
