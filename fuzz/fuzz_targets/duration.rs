//! Fuzz target `duration`: see `idem_fuzz_checks::duration` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz_checks::duration::check(data));
