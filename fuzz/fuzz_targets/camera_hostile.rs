#![no_main]
//! See rdmacam_tests::fuzz::camera_hostile.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rdmacam_tests::fuzz::camera_hostile(data));
