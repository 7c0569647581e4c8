//! Puts `memory.x` (the Zynq-7000 memory map) on the linker's search path for bare-metal
//! builds; hosted builds (the TAP board) need nothing.
fn main() {
    println!("cargo:rerun-if-changed=memory.x");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
        std::fs::copy("memory.x", out.join("memory.x")).expect("memory.x");
        println!("cargo:rustc-link-search={}", out.display());
    }
}
