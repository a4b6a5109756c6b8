//! The store conformance suite (feature `testing`).
//!
//! Every [`Store`] must pass it against its real server. Instantiate it in a
//! test file with [`store_conformance_tests!`],
//! giving an async function that returns the store, or `None` to skip (for
//! example when no server URL is configured):
//!
//! ```no_run
//! use std::sync::Arc;
//! use idem_runtime::MemoryStore;
//! use idem_runtime::store::Store;
//!
//! async fn store() -> Option<Arc<dyn Store>> {
//!     Some(Arc::new(MemoryStore::new()))
//! }
//!
//! idem_runtime::store::testing::store_conformance_tests!(store);
//! # fn main() {}
//! ```
//!
//! Each case uses fresh random keys, so the cases can share one server and
//! run in parallel.
//!
//! [`store_sequence_tests!`] adds the [`sequences`]: random sequences of
//! operations whose every answer is compared with a reference store, and
//! the regression cases they found (10 to 15 s per store, mostly waiting
//! for leases to lapse):
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use idem_runtime::MemoryStore;
//! # use idem_runtime::store::Store;
//! # async fn store() -> Option<Arc<dyn Store>> {
//! #     Some(Arc::new(MemoryStore::new()))
//! # }
//! idem_runtime::store::testing::store_sequence_tests!(store);
//! # fn main() {}
//! ```

mod cases;
mod leases;
mod operable;
mod race;
pub mod sequences;
mod steps;
mod tombstones;

use std::future::Future;
use std::sync::Arc;

pub use self::cases::{
    an_expired_record_is_never_replayed, claim_acquires_a_free_key, completed_key_refuses_another_fingerprint,
    completed_key_replays_byte_for_byte, completed_record_expires_after_ttl, completion_is_final, fingerprint,
    fresh_key, in_flight_key_refuses_another_fingerprint, in_flight_key_reports_time_left, keys_are_independent,
    large_binary_bodies_round_trip, purge_keeps_live_records, record_lives_at_least_as_long_as_its_lease, response,
};
pub use self::leases::{
    a_lapsed_lease_gives_its_holder_a_grace_before_a_takeover, a_lapsed_owner_completes_or_releases_without_renewing,
    a_lapsed_owner_without_successor_renews_and_completes, a_record_past_its_ttl_is_gone_for_its_token,
    expired_lease_can_be_taken_over, forged_token_is_refused, renew_extends_a_record_past_its_ttl,
    renew_keeps_the_lease_alive, renew_many_answers_each_lease, renew_many_tells_a_stale_token_from_the_live_one,
    stale_owner_can_neither_complete_nor_release, the_holders_token_with_another_request_is_a_mismatch,
    the_same_claim_sent_again_is_its_own,
};
pub use self::operable::{
    a_record_is_found_by_its_id, listing_filters_by_state_route_and_age,
    settling_a_lapsed_execution_first_gives_its_holder_a_grace, settling_applies_only_to_the_record_as_inspected,
};
pub use self::race::{
    CLAIMERS, concurrent_claims_after_completion_all_replay, different_requests_racing_for_one_key_one_wins,
    sixty_four_claimers_one_winner, sixty_four_claimers_take_over_a_tombstone_once,
};
pub use self::sequences::{replay, sequences_agree_with_the_reference};
pub use self::steps::{
    a_lapsed_execution_under_hold_is_held_for_its_holder, a_record_tells_its_route_attempt_and_age,
    a_stale_token_cannot_record_a_step, a_step_name_recorded_twice_keeps_the_first,
    a_takeover_sees_every_recorded_step_and_no_other, hold_waits_for_the_lease_and_its_grace, step,
};
pub use self::tombstones::{
    a_won_claim_tells_which_attempt_it_is, lapsed_lease_keeps_its_fingerprint,
    record_outlives_a_lapsed_lease_until_its_ttl, release_leaves_a_tombstone,
};
/// Instantiates the whole conformance suite as `#[test]` functions; see the
/// [module documentation](self).
#[doc(inline)]
pub use crate::__store_conformance_tests as store_conformance_tests;

use crate::store::Store;

/// Instantiates the [`sequences`] and their regression cases as `#[test]`
/// functions; the argument is the path of an
/// `async fn() -> Option<Arc<dyn Store>>`, as for
/// [`store_conformance_tests!`], then, for a store that made other
/// choices where the contract leaves one, its
/// [`Choices`](sequences::Choices).
#[doc(inline)]
pub use crate::__store_sequence_tests as store_sequence_tests;

/// Instantiates the [`Operable`](crate::store::Operable) cases as `#[test]`
/// functions; the argument is the path of an
/// `async fn() -> Option<Arc<dyn Operable>>`.
#[doc(inline)]
pub use crate::__operable_conformance_tests as operable_conformance_tests;

/// Runs one [`Operable`](crate::store::Operable) case, like [`run`].
pub fn run_operable<M, MF, C, CF>(make: M, case: C)
where
    M: FnOnce() -> MF,
    MF: Future<Output = Option<Arc<dyn crate::store::Operable>>>,
    C: FnOnce(Arc<dyn crate::store::Operable>) -> CF,
    CF: Future<Output = ()>,
{
    on_a_runtime(async move {
        if let Some(store) = make().await {
            case(store).await;
        }
    });
}

/// Runs `work` on a fresh multi-threaded runtime.
fn on_a_runtime(work: impl Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("building a tokio runtime");
    runtime.block_on(work);
}

#[doc(hidden)]
pub use tokio::spawn as __spawn;

/// Runs one conformance case on a fresh multi-threaded runtime.
///
/// `make` builds the store; when it returns `None` the case is skipped (the
/// factory is expected to have said why).
pub fn run<M, MF, C, CF>(make: M, case: C)
where
    M: FnOnce() -> MF,
    MF: Future<Output = Option<Arc<dyn Store>>>,
    C: FnOnce(Arc<dyn Store>) -> CF,
    CF: Future<Output = ()>,
{
    on_a_runtime(async move {
        if let Some(store) = make().await {
            case(store).await;
        }
    });
}

/// Instantiates the whole conformance suite as `#[test]` functions.
///
/// The argument is the path of an `async fn() -> Option<Arc<dyn Store>>`.
/// Reached as `idem_runtime::store::testing::store_conformance_tests!`.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_tests {
    ($make:path) => {
        $crate::__store_conformance_tests!(@cases $make;
            claim_acquires_a_free_key,
            record_lives_at_least_as_long_as_its_lease,
            completed_key_replays_byte_for_byte,
            completed_key_refuses_another_fingerprint,
            in_flight_key_reports_time_left,
            in_flight_key_refuses_another_fingerprint,
            expired_lease_can_be_taken_over,
            stale_owner_can_neither_complete_nor_release,
            a_lapsed_owner_without_successor_renews_and_completes,
            a_lapsed_lease_gives_its_holder_a_grace_before_a_takeover,
            a_lapsed_owner_completes_or_releases_without_renewing,
            a_record_past_its_ttl_is_gone_for_its_token,
            the_same_claim_sent_again_is_its_own,
            the_holders_token_with_another_request_is_a_mismatch,
            lapsed_lease_keeps_its_fingerprint,
            record_outlives_a_lapsed_lease_until_its_ttl,
            renew_keeps_the_lease_alive,
            renew_extends_a_record_past_its_ttl,
            renew_many_answers_each_lease,
            renew_many_tells_a_stale_token_from_the_live_one,
            an_expired_record_is_never_replayed,
            different_requests_racing_for_one_key_one_wins,
            release_leaves_a_tombstone,
            a_won_claim_tells_which_attempt_it_is,
            forged_token_is_refused,
            completion_is_final,
            completed_record_expires_after_ttl,
            keys_are_independent,
            large_binary_bodies_round_trip,
            sixty_four_claimers_one_winner,
            sixty_four_claimers_take_over_a_tombstone_once,
            concurrent_claims_after_completion_all_replay,
        );
        // Cases that mostly wait for leases to lapse run side by side in
        // one test: a test thread each would sit idle for seconds.
        $crate::__store_conformance_tests!(@joined run $make; durable_steps_and_held_executions:
            a_step_name_recorded_twice_keeps_the_first,
            a_stale_token_cannot_record_a_step,
            a_takeover_sees_every_recorded_step_and_no_other,
            a_lapsed_execution_under_hold_is_held_for_its_holder,
            hold_waits_for_the_lease_and_its_grace,
            a_record_tells_its_route_attempt_and_age,
        );
    };
    (@joined $run:ident $make:path; $name:ident: $($case:ident),* $(,)?) => {
        #[test]
        fn $name() {
            $crate::store::testing::$run($make, |store| async move {
                $crate::__private_join!(store; $($case),*);
            });
        }
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $crate::__store_conformance_tests!(@each run $make; $($case),*);
    };
    (@each $run:ident $make:path; $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                $crate::store::testing::$run($make, |store| async move {
                    $crate::store::testing::$case(store).await
                });
            }
        )*
    };
}

/// Instantiates the random sequences and their regression cases as
/// `#[test]` functions. Reached as
/// `idem_runtime::store::testing::store_sequence_tests!`.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_sequence_tests {
    ($make:path) => {
        $crate::__store_sequence_tests!($make, $crate::store::testing::sequences::Choices::default());
    };
    ($make:path, $choices:expr) => {
        #[test]
        fn sequences_agree_with_the_reference() {
            $crate::store::testing::run($make, |store| async move {
                $crate::store::testing::sequences::sequences_agree_with_the_reference_given(store, $choices).await
            });
        }
        $crate::__store_sequence_tests!(@each $make, $choices;
            renewing_a_long_lease_for_less,
            renewing_within_a_grace,
            completing_twice,
        );
    };
    (@each $make:path, $choices:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::store::testing::run($make, |store| async move {
                    $crate::store::testing::sequences::regressions::$case(store, $choices).await
                });
            }
        )*
    };
}

/// Instantiates the [`Operable`](crate::store::Operable) cases as `#[test]`
/// functions. Reached as
/// `idem_runtime::store::testing::operable_conformance_tests!`.
#[doc(hidden)]
#[macro_export]
macro_rules! __operable_conformance_tests {
    ($make:path) => {
        $crate::__store_conformance_tests!(@joined run_operable $make; operable:
            listing_filters_by_state_route_and_age,
            a_record_is_found_by_its_id,
            settling_applies_only_to_the_record_as_inspected,
            settling_a_lapsed_execution_first_gives_its_holder_a_grace
        );
    };
}

/// Runs every case on clones of one store at once, and panics with the
/// first case that failed.
#[doc(hidden)]
#[macro_export]
macro_rules! __private_join {
    ($store:ident; $($case:ident),*) => {
        let cases: ::std::vec::Vec<(&str, ::std::pin::Pin<::std::boxed::Box<dyn ::std::future::Future<Output = ()> + ::std::marker::Send>>)> = ::std::vec![
            $((::std::stringify!($case), ::std::boxed::Box::pin($crate::store::testing::$case(::std::sync::Arc::clone(&$store))))),*
        ];
        // Each on a task of its own: a panic names its case.
        let tasks: ::std::vec::Vec<_> = cases
            .into_iter()
            .map(|(name, case)| (name, $crate::store::testing::__spawn(case)))
            .collect();
        for (name, task) in tasks {
            if let ::std::result::Result::Err(error) = task.await {
                ::std::panic!("conformance case {name} failed: {error}");
            }
        }
    };
}
