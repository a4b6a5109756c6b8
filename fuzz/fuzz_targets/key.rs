//! Fuzz target `key`: see `idem_fuzz_checks::key` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz_checks::key::check(data));
