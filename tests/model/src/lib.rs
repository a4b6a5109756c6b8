//! The idempotency protocol as a model, checked exhaustively with
//! [stateright](https://docs.rs/stateright): one key's record in the store,
//! the executions that claim it (with their processes' view of their
//! leases and the keeper that renews them), an operator, and a network that
//! delays, reorders and loses, all under a clock whose leases lapse.
//!
//! It depends on nothing of `idem-runtime`: it restates the protocol of
//! `store.rs`, the Redis scripts, `engine/lease.rs`, `engine/steps.rs`,
//! `actix/execute.rs` and `operate.rs`, small enough to read against them.
//! The checks (`cargo test -p idem-model`) explore every interleaving within
//! small [`Bounds`] under both lapse policies, and then again with each
//! [`Mutant`], to show that every property can fail. Where the protocol as
//! implemented breaks a property, [`SettleFence`] and [`StartCheck`] name
//! the change that the checks verify instead (the crate's README says
//! which, and why).
//!
//! ```
//! use idem_model::{Bounds, OnLapse, Protocol};
//! use stateright::{Checker, Model};
//!
//! // Two requests of one key, a handler of one durable step, no operator.
//! let bounds = Bounds { operator_looks: 0, ..Bounds::small() };
//! let checked = Protocol::new(OnLapse::Takeover, bounds).with_symmetry().checker().spawn_bfs().join();
//! checked.assert_properties();
//! assert!(checked.unique_state_count() > 10_000);
//! ```

pub mod bounds;
pub mod execution;
pub mod history;
pub mod model;
pub mod mutants;
pub mod network;
pub mod operator;
pub mod properties;
pub mod record;
pub mod store;
pub mod symmetry;

#[cfg(test)]
mod checks;

pub use self::bounds::{Bounds, OnLapse, SettleFence, StartCheck, Targets};
pub use self::model::{Action, Protocol, State};
pub use self::mutants::Mutant;
