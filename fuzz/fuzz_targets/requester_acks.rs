#![no_main]
//! See rdmacam_tests::fuzz::requester_acks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rdmacam_tests::fuzz::requester_acks(data));
