//! Fuzz target `record`: see `idem_fuzz_checks::record` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz_checks::record::check(data));
