//! Compile-time behaviour of `#[idempotent]`: every argument error of §2 of `docs/contract.md`
//! is a compile error on the offending token (`ui/fail`), and every supported
//! way to write and register a handler compiles under `#![deny(warnings)]`
//! (`ui/pass`). Regenerate the `.stderr` files with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
