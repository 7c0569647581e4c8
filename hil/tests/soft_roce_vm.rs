//! Real Linux Soft-RoCE as the host: a qemu VM boots a Debian kernel with rdma_rxe
//! (`hil/vm/`, see its README), the emulator's userspace RoCEv2 transport runs in a network
//! namespace of the VM, and a host on real librdmacm (pyverbs) connects to it with
//! `rdma_connect()`: REJ on a wrong port, HELLO in the REP, a busy REJ for a second host, 100
//! frames verified byte for byte, `rdma_disconnect()`, and a second connection that streams 50
//! more through netem dropping 1 % of packets both ways (the camera's go-back-N against rxe's
//! NAKs and timeouts); then a camera with `--roce-ip fd00::2` takes an `rdma_connect()` to its
//! IPv6 address (IPv6 GIDs in the CM and on the wire) and streams 20 frames.
//!
//! Needs root, qemu and the VM image (`scripts/setup.sh --vm`). Skipped with a message when the
//! image is missing, unless `RDMACAM_REQUIRE_VM=1` (CI sets it), which makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

fn build_dir() -> PathBuf {
    std::env::var_os("RDMACAM_VM_BUILD")
        .map_or_else(|| PathBuf::from("/tmp/rxe-lab"), PathBuf::from)
}

fn camera_binary(root: &Path) -> PathBuf {
    std::env::var_os("RDMACAM_BIN")
        .map_or_else(|| root.join("target/release/rdmacam"), PathBuf::from)
}

#[test]
fn a_librdmacm_host_on_soft_roce_connects_streams_and_reconnects() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let vm = root.join("hil/vm");
    let build = build_dir();
    let bin = camera_binary(root);
    let required = std::env::var("RDMACAM_REQUIRE_VM").is_ok_and(|v| v == "1");
    let missing = [
        (!build.join("vmlinux-bpo").exists())
            .then(|| format!("no VM image in {}", build.display())),
        (!bin.exists()).then(|| format!("no release camera at {}", bin.display())),
        Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_err()
            .then(|| "qemu-system-x86_64 is not installed".to_owned()),
    ];
    if let Some(why) = missing.into_iter().flatten().next() {
        assert!(!required, "RDMACAM_REQUIRE_VM=1 but {why}");
        eprintln!(
            "SKIPPED: {why} (run scripts/setup.sh --vm as root and cargo build --release -p rdmacam)"
        );
        return;
    }
    let bin_str = bin.to_str().unwrap();
    assert!(
        !bin_str.contains(' '),
        "the guest gets RDMACAM_BIN on the kernel command line: {bin_str} must not contain spaces"
    );
    let out = tempfile_dir();
    let run = Command::new(vm.join("run-vm.sh"))
        .arg(vm.join("cm-scenario.sh"))
        .env("BUILD", &build)
        .env("OUT", &out)
        .env("TIMEOUT", "600")
        .env("LABENV", format!("RDMACAM_BIN={bin_str}"))
        .output()
        .expect("run-vm.sh");
    let console = String::from_utf8_lossy(&run.stdout);
    let checks: Vec<&str> = console
        .lines()
        .filter(|l| l.starts_with("CHECK") || l.starts_with("RESULT"))
        .collect();
    eprintln!("{}", checks.join("\n"));
    let passed = console.contains("LAB-RESULT rc=0")
        && console.matches("RESULT PASS").count() == 2
        && !console.contains("RESULT FAIL");
    assert!(
        passed,
        "VM scenario failed; console:\n{console}\nstderr:\n{}\ncamera log:\n{}",
        String::from_utf8_lossy(&run.stderr),
        std::fs::read_to_string(out.join("cm-camera.log")).unwrap_or_default()
    );
    assert!(
        checks.iter().filter(|l| l.starts_with("CHECK ok")).count() >= 26,
        "every check ran: {checks:?}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdmacam-vm-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
