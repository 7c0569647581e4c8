//! End-to-end scenarios live in `tests/tests/`; this library holds what they share.

pub mod fuzz;

use std::path::Path;
use std::process::Command;

/// Whether tshark is installed; prints why a check is skipped when it is not.
pub fn have_tshark() -> bool {
    let ok = Command::new("tshark").arg("--version").output().is_ok();
    if !ok {
        eprintln!("SKIPPED: tshark is not installed (apt-get install tshark); CI installs it");
    }
    ok
}

/// Wireshark's reading of a capture: one row per packet, one string per field (`tshark -T
/// fields`, empty when the packet lacks the field).
pub fn tshark_fields(capture: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    tshark_fields_with(capture, fields, &[])
}

/// [`tshark_fields`] with more tshark arguments first (`-X lua_script:...`).
pub fn tshark_fields_with(capture: &Path, fields: &[&str], args: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(args)
        .args(["-n", "-r"])
        .arg(capture)
        .args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("tshark writes UTF-8")
        .lines()
        .map(|l| l.split('|').map(str::to_owned).collect())
        .collect()
}

/// The bytes of the worked LEADER in docs/orsp-spec.md ("An example"), read from the document's
/// hex (each line's leading two-digit words; the comments after them are skipped).
pub fn spec_leader_example() -> Vec<u8> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/orsp-spec.md"),
    )
    .expect("docs/orsp-spec.md");
    let start = doc.find("The LEADER of block 7").expect("the example");
    let block = &doc[start..];
    let block = &block[block.find("```\n").expect("its code block") + 4..];
    let block = &block[..block.find("```").expect("its end")];
    block
        .lines()
        .flat_map(|l| {
            l.split_whitespace()
                .take_while(|w| w.len() == 2 && u8::from_str_radix(w, 16).is_ok())
                .map(|w| u8::from_str_radix(w, 16).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}
