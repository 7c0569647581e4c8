//! Writes the GenICam XML the camera serves from the feature table
//! (`src/device/features/`), so the `no_std` crate embeds it as a plain string.

#![allow(dead_code)]

#[path = "src/device/regs.rs"]
mod regs;

#[path = "src/orsp/regs.rs"]
mod orsp_regs;

#[path = "src/gev/pixel.rs"]
mod pixel;

use pixel::{Axis, PixelFormat};

#[path = "src/device/features/mod.rs"]
mod features;

fn main() {
    for f in [
        "src/device/features",
        "src/device/regs.rs",
        "src/orsp/regs.rs",
        "src/gev/pixel.rs",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let mut xml = String::new();
    features::write_xml(&mut xml).expect("writing to a String cannot fail");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("rdmacam.xml"), xml).expect("write OUT_DIR/rdmacam.xml");
}
