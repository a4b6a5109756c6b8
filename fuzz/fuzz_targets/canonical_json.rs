//! Fuzz target `canonical_json`: see `idem_fuzz_checks::canonical_json` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz_checks::canonical_json::check(data));
