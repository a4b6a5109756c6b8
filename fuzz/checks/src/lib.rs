//! What each fuzz target checks, in one place for the two callers that run
//! the checks: the libFuzzer targets in `fuzz/fuzz_targets/` (run by
//! `scripts/fuzz`) and the corpus replay test (`tests/corpora.rs`), which
//! runs every stored input of `fuzz/corpus/<target>/` through the same
//! check under `cargo test`, so that a fixed crash stays fixed.
//!
//! A check takes the fuzzer's bytes and panics when a property fails; it
//! returns quietly for inputs it cannot use (bytes that do not make a
//! request, say). Every target lives in [`TARGETS`].

pub mod canonical_json;
pub mod duration;
pub mod handle;
pub mod key;
pub mod record;
pub mod signature;

/// One fuzz target: the check that `fuzz/fuzz_targets/<name>.rs` runs and
/// that the replay test runs over `fuzz/corpus/<name>/`.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The target's name, as `cargo fuzz run <name>` takes it.
    pub name: &'static str,
    /// What the target checks, for one input.
    pub check: fn(&[u8]),
}

/// Every fuzz target of the repository.
pub const TARGETS: &[Target] = &[
    Target { name: "key", check: key::check },
    Target { name: "canonical_json", check: canonical_json::check },
    Target { name: "record", check: record::check },
    Target { name: "signature", check: signature::check },
    Target { name: "duration", check: duration::check },
    Target { name: "handle", check: handle::check },
];
