//! Compile-time behaviour of `#[idempotent]`: every argument error of §2 of `docs/contract.md`
//! is a compile error on the offending token (`ui/fail`), and every supported
//! way to write and register a handler compiles under `#![deny(warnings)]`
//! (`ui/pass`); the same for axum handlers (`ui/axum/`). Regenerate the
//! `.stderr` files with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
    // The same argument checks, and the axum handlers it takes.
    cases.compile_fail("tests/ui/axum/fail/*.rs");
    cases.pass("tests/ui/axum/pass/*.rs");
}

/// The README quotes `ui/pass/expansion.rs` (what the attribute expands to,
/// written by hand) in full; `ui` compiles and runs the file, and this keeps
/// the quote equal to it. The attribute's own docs include the file.
#[test]
fn the_readme_quotes_the_expansion_as_it_is() {
    const MARKER: &str = "<!-- quoted from idem-macros/tests/ui/pass/expansion.rs -->\n```rust\n";
    let file = include_str!("ui/pass/expansion.rs");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    let (_, after) = readme.split_once(MARKER).expect("the README marks its quote of expansion.rs");
    let (quote, _) = after.split_once("\n```\n").expect("the quote's code block ends");
    assert!(
        quote == file.trim_end(),
        "the README's quote of tests/ui/pass/expansion.rs differs from the file: copy the file into it"
    );
}
