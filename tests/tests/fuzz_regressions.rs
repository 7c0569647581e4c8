//! Every input kept in `fuzz/regressions/<target>/` (what fuzzing or a review found, and the
//! hostile cases of the issues) replayed through the same harness the cargo-fuzz target runs,
//! on stable `cargo test`. A file that made a harness panic once must never do so again.

use std::path::Path;

use rdmacam_tests::fuzz::TARGETS;

#[test]
fn every_kept_fuzz_input_still_passes_its_harness() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    let mut replayed = 0;
    for (name, harness) in TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{name}: no regression inputs");
        for f in files {
            let data = std::fs::read(&f).unwrap();
            let r = std::panic::catch_unwind(|| harness(&data));
            assert!(r.is_ok(), "{} fails its harness again", f.display());
            replayed += 1;
        }
    }
    eprintln!("{replayed} kept inputs replayed");
}
