//! The user documentation keeps up with the camera: every feature a host sees (everything in
//! the GenICam XML but the invisible helper nodes) is described in docs/virtual-camera.md.

use rdmacam_protocol::device::features::{Visibility, all};

#[test]
fn virtual_camera_doc_describes_every_feature() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/virtual-camera.md"),
    )
    .unwrap();
    let missing: Vec<&str> = all()
        .filter(|f| f.visibility != Visibility::Invisible || f.standard)
        .map(|f| f.name)
        .filter(|n| !doc.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/virtual-camera.md does not describe: {missing:?}"
    );
}
