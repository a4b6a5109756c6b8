//! Random sequences of store operations, each answer compared with a
//! reference store: the conformance suite generalized (feature `testing`).
//!
//! A sequence is up to [`LENGTH`] operations over one to three fresh keys:
//! claims by two requests (a mismatch between them), each with a token of
//! its own, under both lapse policies, with and without a route, with
//! short (250 ms) and long leases and short (700 ms) and long TTLs; claims
//! retried on a lapsed lease (a grace, then a takeover or a hold);
//! durable steps, renewals, batches of renewals, completions and releases
//! by the key's holder, by stale tokens of earlier executions and by
//! forged ones; `get`; the last operation sent again as it was, and
//! earlier claims sent again later (their answers lost), or with their
//! token by the other request; and waits. Every answer is compared with
//! the [reference store](reference::Reference)'s: claims with their
//! attempt and steps, fences, and records whole (state, token,
//! fingerprint, route, attempt, steps, response), the times a store
//! reports (a claim's `retry_after`, a record's lease and TTL left, its
//! claim time) within how late the operations were sent.
//!
//! No store has a clock a test can move, so time is real and kept cheap:
//! leases lapse after 250 ms, a grace lasts a second
//! ([`grace`](crate::store::grace)). A wait never ends near a lease's or a
//! record's end: the reference places it at least
//! [`MARGIN`](reference::MARGIN) clear of every one, on either side, and
//! the runner sends each operation at its time. An answer that differs
//! while an operation was sent later than that margin allows (a stalled
//! machine) proves nothing: the sequence is counted inconclusive and
//! proptest draws another. So no answer depends on a race with the clock,
//! and a difference is a store's (or the reference's) error.
//!
//! Per store, [`sequences_agree_with_the_reference`] runs [`LANES`]
//! proptest runners side by side, each drawing [`SEQUENCES`] sequences on
//! keys of its own: 96 sequences, some 1,500 operations, in 10 to 15 s
//! (mostly waiting for leases to lapse), each run meeting about a hundred
//! graces, tens of takeovers, held executions and records past their TTL
//! (it fails if one of these never happened, so that it cannot pass
//! without testing them). A failing sequence is shrunk (for two and a half
//! minutes at most) and printed as the operations that build it: given to
//! [`replay`], it is a regression case (see [`regressions`]).
//!
//! Where the contract leaves a store a choice (a renewal that would
//! shorten a lease), the store's instantiation says which it made
//! ([`Choices`]), and the reference answers accordingly.

mod machine;
pub mod ops;
pub mod reference;
pub mod regressions;
mod runner;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use proptest_state_machine::ReferenceStateMachine;
use tokio::runtime::Handle;

use self::machine::Sequences;
use self::ops::Op;
pub use self::reference::Choices;
use self::runner::{Stop, Totals};
use crate::store::Store;

/// Proptest runners per store, side by side, each on keys of its own.
pub const LANES: usize = 16;
/// Sequences each runner draws.
pub const SEQUENCES: u32 = 6;
/// Operations per sequence.
pub const LENGTH: std::ops::RangeInclusive<usize> = 8..=32;

/// Random sequences of operations on `store` give the reference's
/// answers, one by one; see the [module documentation](self) for what is
/// explored.
pub async fn sequences_agree_with_the_reference(store: Arc<dyn Store>) {
    sequences_agree_with_the_reference_given(store, Choices::default()).await;
}

/// [`sequences_agree_with_the_reference`], for a store that made `choices`
/// where the contract leaves one.
pub async fn sequences_agree_with_the_reference_given(store: Arc<dyn Store>, choices: Choices) {
    let started = Instant::now();
    let totals = Arc::new(Totals::default());
    let handle = Handle::current();
    let lanes: Vec<_> = (0..LANES)
        .map(|_| {
            let (store, totals, handle) = (Arc::clone(&store), Arc::clone(&totals), handle.clone());
            tokio::task::spawn_blocking(move || lane((&*store, choices), &totals, &handle))
        })
        .collect();
    let mut failures = Vec::new();
    for lane in lanes {
        match lane.await {
            Ok(Ok(())) => {}
            Ok(Err(failure)) => failures.push(failure),
            Err(panic) => failures.push(format!("a runner panicked: {panic}")),
        }
    }
    let kind = store.kind();
    eprintln!("store sequences on {kind}, {:.1?}: {totals}", started.elapsed());
    assert!(failures.is_empty(), "{kind}: {}", failures.join("\n\n"));
    let seen = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed) > 0;
    for (what, counter) in [
        ("lapsed lease", &totals.lapses),
        ("grace", &totals.graces),
        ("takeover", &totals.takeovers),
        ("held execution", &totals.holds),
        ("record past its TTL", &totals.expiries),
    ] {
        assert!(seen(counter), "{kind}: no sequence met a {what}, so none tested one: {totals}");
    }
}

/// One runner's sequences: `Err` with the shrunk failing sequence.
fn lane(store: (&dyn Store, Choices), totals: &Totals, handle: &Handle) -> Result<(), String> {
    let config = Config {
        cases: SEQUENCES,
        failure_persistence: None,
        max_global_rejects: SEQUENCES,
        max_shrink_iters: 1_000,
        max_shrink_time: 150_000,
        ..Config::default()
    };
    // The store's connections opened (and its first-call checks made)
    // before any operation is timed.
    handle.block_on(runner::warm_up(store.0)).map_err(|error| format!("warming up: {error}"))?;
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&Sequences::sequential_strategy(LENGTH), |(drawn, ops, seen)| {
        match handle.block_on(runner::run(store, drawn.reference.keys(), &ops, seen.as_deref(), totals)) {
            Ok(()) => Ok(()),
            Err(Stop::Inconclusive(why)) => {
                totals.inconclusive.fetch_add(1, Ordering::Relaxed);
                eprintln!("inconclusive, an operation sent late: {why}");
                Err(TestCaseError::reject(why))
            }
            Err(Stop::Differs(why)) => Err(TestCaseError::fail(why)),
        }
    });
    outcome.map_err(|error| match error {
        TestError::Fail(why, (drawn, ops, _)) => {
            let ops: String = ops.iter().map(|op| format!("    {op:?},\n")).collect();
            format!(
                "a sequence differs from the reference store:\n{why}\nshrunk to (`replay(store, choices, {}, vec![...])`):\n{ops}",
                drawn.reference.keys()
            )
        }
        TestError::Abort(why) => format!("the sequences stopped: {why} (the machine is too slow for their margin)"),
    })
}

/// Runs `ops` on `keys` fresh keys of `store`, and panics at the first
/// answer that is not the reference's: a regression case, from a sequence
/// [`sequences_agree_with_the_reference`] shrunk. A run that is
/// inconclusive (the machine stalled) is tried again, twice at most.
pub async fn replay(store: Arc<dyn Store>, choices: Choices, keys: usize, ops: Vec<Op>) {
    let mut tries = 0;
    loop {
        match runner::run((&*store, choices), keys, &ops, None, &Totals::default()).await {
            Ok(()) => return,
            Err(Stop::Inconclusive(_)) if tries < 2 => tries += 1,
            Err(stop) => panic!("{}: {stop}", store.kind()),
        }
    }
}
