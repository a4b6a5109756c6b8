//! A worker thread stopped between a won claim and its handler's start.
//!
//! Nothing the application writes runs there: the claim's answer, the
//! lease handed to the keeper and the check that starts the handler follow
//! one another in one poll. Only the tracing subscriber is called in
//! between, when the execution's work enters the request's `idempotent`
//! span inside the request's own entry of it. A [`StartGate`] installed as
//! a worker thread's subscriber blocks that thread there, once, until the
//! test opens it: a process frozen (or starved of CPU) at that instant,
//! while its keeper thread goes on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tracing::span::Id;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Stops the first execution on the thread it is installed on, between its
/// claim and its start; shared with the test that opens it.
#[derive(Clone, Default)]
pub struct StartGate(Arc<Shared>);

#[derive(Default)]
struct Shared {
    /// An execution stopped at the gate.
    reached: AtomicBool,
    /// The test opened the gate.
    open: Mutex<bool>,
    opened: Condvar,
    /// How deep each `idempotent` span is entered on this thread.
    depth: Mutex<HashMap<Id, usize>>,
}

impl StartGate {
    /// Makes the gate this thread's subscriber for as long as the thread
    /// lives: call it on the worker thread, as its `App` is built.
    pub fn install_here(&self) {
        let subscriber = tracing_subscriber::registry().with(Gate(self.clone()));
        std::mem::forget(tracing::subscriber::set_default(subscriber));
        // A callsite first met while no subscriber of another test's thread
        // wanted it may have cached "never": asked again, now with this one.
        tracing::callsite::rebuild_interest_cache();
    }

    /// Waits (polling) until an execution stopped at the gate, or until
    /// `request`, the task whose execution should stop there, ended first:
    /// then its answer is returned (a claim that timed out on a loaded
    /// machine answers 503 and never reaches the gate, which stays set for
    /// the next try).
    pub async fn reached_before<T>(&self, request: &mut tokio::task::JoinHandle<T>) -> Result<(), T> {
        for _ in 0..1_000 {
            if self.0.reached.load(Ordering::SeqCst) {
                return Ok(());
            }
            if request.is_finished() {
                return Err(request.await.expect("the request's task"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no execution reached the start gate within 10 s, and its request is still waiting");
    }

    /// Lets the stopped execution go on.
    pub fn open(&self) {
        *self.0.open.lock().unwrap() = true;
        self.0.opened.notify_all();
    }
}

struct Gate(StartGate);

impl<S> Layer<S> for Gate
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if ctx.span(id).is_none_or(|span| span.name() != "idempotent") {
            return;
        }
        let shared = &(self.0).0;
        let depth = {
            let mut depths = shared.depth.lock().unwrap();
            let depth = depths.entry(id.clone()).or_default();
            *depth += 1;
            *depth
        };
        // The request's own entry is the first; the execution's work, polled
        // inside it right after the claim was won, the second.
        if depth == 2 && !shared.reached.swap(true, Ordering::SeqCst) {
            let mut open = shared.open.lock().unwrap();
            while !*open {
                open = shared.opened.wait(open).unwrap();
            }
        }
    }

    fn on_exit(&self, id: &Id, _: Context<'_, S>) {
        if let Some(depth) = (self.0).0.depth.lock().unwrap().get_mut(id) {
            *depth = depth.saturating_sub(1);
        }
    }
}
