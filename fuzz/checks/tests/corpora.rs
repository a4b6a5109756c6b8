//! Replays every stored fuzz input, `fuzz/corpus/<target>/*`, through its
//! target's check under `cargo test`: a crash the fuzzer found, once fixed
//! and its input kept in the corpus, stays fixed. A target without a
//! corpus, or with an empty one, fails.

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use idem_fuzz_checks::TARGETS;

/// `fuzz/`, beside this crate.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("fuzz/checks has a parent").to_path_buf()
}

/// The names of the entries of `dir` (file stems with `ext`, or directories).
fn names(dir: &Path, ext: Option<&str>) -> Vec<String> {
    let entries = fs::read_dir(dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    let mut names: Vec<String> = entries
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| match ext {
            Some(ext) => path.extension().is_some_and(|e| e == ext),
            None => path.is_dir(),
        })
        .filter_map(|path| path.file_stem().map(|stem| stem.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

fn replay(name: &str) {
    let target = TARGETS.iter().find(|target| target.name == name).expect("a registered target");
    let dir = fuzz_dir().join("corpus").join(name);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("the corpus {} is missing: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the corpus {} is empty: run scripts/fuzz {name}", dir.display());
    let failed: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let data = fs::read(file).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            catch_unwind(AssertUnwindSafe(|| (target.check)(&data))).err().map(|_| file.display().to_string())
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{name}: {} of {} inputs fail (the panics above): {failed:#?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn every_target_has_a_fuzz_target_and_a_corpus() {
    let mut registered: Vec<String> = TARGETS.iter().map(|target| target.name.to_owned()).collect();
    registered.sort();
    assert_eq!(names(&fuzz_dir().join("fuzz_targets"), Some("rs")), registered, "fuzz/fuzz_targets/*.rs");
    assert_eq!(names(&fuzz_dir().join("corpus"), None), registered, "fuzz/corpus/*/");
}

#[test]
fn key_corpus() {
    replay("key");
}

#[test]
fn canonical_json_corpus() {
    replay("canonical_json");
}

#[test]
fn record_corpus() {
    replay("record");
}

#[test]
fn signature_corpus() {
    replay("signature");
}

#[test]
fn duration_corpus() {
    replay("duration");
}

#[test]
fn handle_corpus() {
    replay("handle");
    // Inputs that return early check nothing: the corpus must still make
    // requests that run the handler and reach every property.
    let exercised = idem_fuzz_checks::handle::exercised();
    assert!(
        exercised.replayed > 0 && exercised.reused > 0 && exercised.rewritten > 0,
        "the handle corpus no longer reaches every property ({exercised:?}): run scripts/fuzz handle"
    );
}
