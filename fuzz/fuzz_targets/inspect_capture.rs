#![no_main]
//! See rdmacam_tests::fuzz::inspect_capture.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rdmacam_tests::fuzz::inspect_capture(data));
