//! Fuzz target `signature`: see `idem_fuzz_checks::signature` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz_checks::signature::check(data));
