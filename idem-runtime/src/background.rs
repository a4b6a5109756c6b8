//! The runtime's own thread: one per process, named `idem-lease-keeper`,
//! with a Tokio runtime of its own, apart from the application's workers.
//!
//! The lease keeper runs its loop here, and so does work that must neither
//! be cancelled half way nor wait behind a blocked worker: completions
//! retried in the background, Postgres renewal connections, the `BEGIN`
//! and `COMMIT` of the transactional mode. The thread starts on first use
//! and ends only if its main task asks it to ([`stop`]: the keeper's loop
//! does when it panics, so that nothing seems to renew leases that no one
//! renews). Work spawned after that runs on the caller's runtime instead.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

/// The thread, started on first use.
static THREAD: OnceLock<Thread> = OnceLock::new();

/// The name of the thread (and of its runtime's thread).
pub(crate) const THREAD_NAME: &str = "idem-lease-keeper";

/// A handle on the thread's runtime, and whether it has ended.
struct Thread {
    runtime: tokio::runtime::Handle,
    state: Arc<State>,
}

/// What the thread and its callers share.
#[derive(Default)]
struct State {
    /// Asked to end (see [`stop`]).
    stop: Notify,
    /// It has ended, or is about to: nothing spawned on it runs any more.
    stopped: AtomicBool,
}

/// Marks the thread stopped when it ends, however it ends.
struct Stopped(Arc<State>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::Release);
    }
}

fn thread() -> &'static Thread {
    THREAD.get_or_init(|| {
        let state = Arc::new(State::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(THREAD_NAME)
            .build()
            .expect("building the idem runtime thread's Tokio runtime");
        let handle = runtime.handle().clone();
        let shared = Arc::clone(&state);
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                let _stopped = Stopped(Arc::clone(&shared));
                runtime.block_on(shared.stop.notified());
            })
            .expect("starting the idem runtime thread");
        Thread { runtime: handle, state }
    })
}

/// Whether the thread runs (starting it on first use).
pub(crate) fn is_running() -> bool {
    !thread().state.stopped.load(Ordering::Acquire)
}

/// Ends the thread: the tasks on it are dropped, and later work runs on
/// its callers' runtimes.
pub(crate) fn stop() {
    let state = &thread().state;
    state.stopped.store(true, Ordering::Release);
    state.stop.notify_one();
}

/// Runs `work` on the thread, apart from the application's workers.
pub(crate) fn spawn(work: impl Future<Output = ()> + Send + 'static) {
    drop(spawn_joined(work));
}

/// Like [`spawn`], with a handle to await `work`'s output from anywhere.
/// Dropping the handle does not cancel `work`. If the thread has stopped,
/// `work` runs on the caller's runtime instead (and that is logged): it is
/// never dropped unseen.
pub(crate) fn spawn_joined<T: Send + 'static>(
    work: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let thread = thread();
    if !thread.state.stopped.load(Ordering::Acquire) {
        return thread.runtime.spawn(work);
    }
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::error!(
            "the idempotency lease keeper has stopped; its work (completions retried in the background) runs on \
             the callers' runtimes instead, where a worker that stops cancels it"
        );
    }
    match tokio::runtime::Handle::try_current() {
        Ok(caller) => caller.spawn(work),
        // Nowhere to run it: the thread's own (shut down) runtime hands
        // back a handle that reports it cancelled.
        Err(_) => {
            tracing::error!("no runtime to run the stopped keeper's work on; it is dropped");
            thread.runtime.spawn(work)
        }
    }
}
