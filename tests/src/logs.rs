//! Log lines captured from a test's own thread: the one log collector of
//! the tests.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// Collects formatted log lines; cheap to clone (clones share the lines).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures the events of the test's thread at `level` and above,
    /// without time or colour, until the guard is dropped. (A test on a
    /// multi-threaded runtime sees only what runs on its own thread.)
    pub fn capture(&self, level: tracing::Level) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_max_level(level)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The distinct lines captured, each with how often it came (the first
    /// twenty), for a failure message.
    pub fn summary(&self) -> String {
        let text = self.text();
        let mut seen: Vec<(&str, usize)> = Vec::new();
        for line in text.lines() {
            match seen.iter_mut().find(|(known, _)| *known == line) {
                Some((_, count)) => *count += 1,
                None => seen.push((line, 1)),
            }
        }
        seen.iter().take(20).map(|(line, count)| format!("{count} x {line}\n")).collect()
    }
}
