//! Fuzz target `handle`: see `idem_fuzz_checks::handle` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz_checks::handle::check(data));
