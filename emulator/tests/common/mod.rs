//! What the integration tests that run a host script against a camera share.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Run `python script args…` under `timeout secs`, print its stdout, and fail the test (saying
/// `what`, with stdout and stderr) unless it exits 0. Returns stdout: the script's JSON line.
pub fn check_script<S: AsRef<OsStr>>(
    secs: u32,
    python: &Path,
    script: &Path,
    args: impl IntoIterator<Item = S>,
    what: &str,
) -> String {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .arg(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", script.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{what}: {text}");
    assert!(
        out.status.success(),
        "{what}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
