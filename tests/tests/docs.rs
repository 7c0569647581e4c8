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

/// The LEADER example in docs/orsp-spec.md was written out by hand from the tables there; the
/// camera's encoder must give exactly those bytes, so a host engineer building from the page
/// builds what the camera sends.
#[test]
fn the_orsp_spec_leader_example_is_what_the_camera_sends() {
    use rdmacam_protocol::gev::PixelFormat;
    use rdmacam_protocol::gev::gvsp::ImageLeader;
    use rdmacam_protocol::orsp::msg;
    let bytes = rdmacam_tests::spec_leader_example();
    let leader = ImageLeader {
        timestamp: 0x0102_0304_0506_0708,
        pixel_format: PixelFormat::Mono8.pfnc(),
        width: 1920,
        height: 1080,
        offset_x: 0,
        offset_y: 0,
        chunks: false,
    };
    let mut out = [0u8; 128];
    let n = msg::emit_leader(&mut out, 12, 3, 2_073_600, 7, false, &leader).unwrap();
    assert_eq!(bytes.len(), msg::LEADER_LEN, "the example has every byte");
    assert_eq!(&out[..n], &bytes[..]);
}
