#![no_main]
//! See rdmacam_tests::fuzz::gvcp_from_a_bystander.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rdmacam_tests::fuzz::gvcp_from_a_bystander(data));
