#![no_main]
//! See rdmacam_tests::fuzz::cm_mads.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rdmacam_tests::fuzz::cm_mads(data));
