//! How many times something ran: the one execution counter of the tests.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts executions (of a handler, of a part of one); shared with handlers
/// as `web::Data<Counter>` or as a field of a larger app state.
#[derive(Debug, Default)]
pub struct Counter(AtomicUsize);

impl Counter {
    /// Counts one more execution and returns its number, starting at 1.
    pub fn next(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Executions so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
