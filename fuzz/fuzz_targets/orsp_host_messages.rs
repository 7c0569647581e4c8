#![no_main]
//! See rdmacam_tests::fuzz::orsp_host_messages.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rdmacam_tests::fuzz::orsp_host_messages(data));
