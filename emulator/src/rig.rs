//! `rdmacam run --rig FILE`: a rig of cameras described in TOML, each with its own address,
//! serial, size, pixel format, frame rate, pattern or images. Whatever a camera leaves out
//! comes from the command line (or its defaults).
//!
//! ```toml
//! [[camera]]
//! ip = "127.0.0.10"
//! serial = "LEFT"
//! width = 1280
//! height = 1024
//! pixel_format = "BayerRG8"
//! images = "shots/left/"
//!
//! [[camera]]
//! ip = "127.0.0.11"
//! serial = "RIGHT"
//! pattern = "MovingBar"
//! fps = 60
//! ```

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rdmacam_io::images::{ImageSet, RawFormat};
use rdmacam_protocol::device::frame::Pattern;
use rdmacam_protocol::gev::PixelFormat;
use serde::Deserialize;

use crate::run::RunOptions;

/// The most cameras one process serves (a rig, or `--cameras`).
pub const MAX_CAMERAS: usize = 256;

/// The longest rig file read.
pub const MAX_RIG_BYTES: u64 = 1 << 20;

/// One camera of a rig file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RigCamera {
    /// Its address (required).
    pub ip: Ipv4Addr,
    /// Its serial (default: the command line's, with -1, -2, ... appended).
    pub serial: Option<String>,
    /// Initial width.
    pub width: Option<u32>,
    /// Initial height.
    pub height: Option<u32>,
    /// Sensor width.
    pub sensor_width: Option<u32>,
    /// Sensor height.
    pub sensor_height: Option<u32>,
    /// Pixel format name.
    pub pixel_format: Option<String>,
    /// Test pattern name.
    pub pattern: Option<String>,
    /// Frames per second.
    pub fps: Option<f32>,
    /// Images to replay (a file, directory or glob; relative to the rig file).
    pub images: Option<String>,
    /// Size and format of raw images, `WIDTHxHEIGHT:FORMAT`.
    pub raw_format: Option<String>,
    /// Line0 pulses per second.
    pub trigger_hz: Option<f64>,
}

/// A rig file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rig {
    /// The cameras, at least one.
    pub camera: Vec<RigCamera>,
}

impl Rig {
    /// Parse a rig from TOML text.
    pub fn parse(text: &str) -> Result<Rig> {
        let rig: Rig = toml::from_str(text)?;
        if rig.camera.is_empty() {
            bail!("a rig needs at least one [[camera]]");
        }
        if rig.camera.len() > MAX_CAMERAS {
            bail!(
                "the rig has {} cameras; at most {MAX_CAMERAS} (as --cameras) in one process",
                rig.camera.len()
            );
        }
        let mut seen = HashSet::new();
        for c in &rig.camera {
            if !seen.insert(c.ip) {
                bail!("{} is in the rig twice: one address, one camera", c.ip);
            }
        }
        Ok(rig)
    }

    /// Read and parse `path`.
    pub fn load(path: &Path) -> Result<Rig> {
        use std::io::Read;
        // a rig file is a few lines per camera: reading stops past MAX_RIG_BYTES, so a path
        // to /dev/zero or a huge file is refused instead of read until memory runs out
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_RIG_BYTES + 1).read_to_string(&mut text))
            .with_context(|| format!("cannot read {}", path.display()))?;
        if text.len() as u64 > MAX_RIG_BYTES {
            bail!(
                "{} is larger than {} KiB: not a rig file ({MAX_CAMERAS} cameras take a few \
                 KiB)",
                path.display(),
                MAX_RIG_BYTES >> 10
            );
        }
        Rig::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// The run options of each camera: `base` with the camera's settings over it; image paths
    /// are relative to `dir` (the rig file's directory).
    pub fn options(&self, base: &RunOptions, dir: &Path) -> Result<Vec<RunOptions>> {
        self.options_within(base, dir, rdmacam_io::images::MAX_SET_BYTES)
    }

    /// [`Self::options`], the images of all cameras together holding at most `cap` bytes.
    /// Cameras that name the same images (path and raw format) share one loaded set: six
    /// cameras on one 256 MiB folder held six copies, 1.6 GB, with no limit on the sum.
    pub fn options_within(
        &self,
        base: &RunOptions,
        dir: &Path,
        cap: u64,
    ) -> Result<Vec<RunOptions>> {
        let mut loaded: Vec<(String, Option<RawFormat>, Arc<ImageSet>)> = Vec::new();
        let mut held = base.images.as_ref().map_or(0, |s| s.bytes());
        self.camera
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let what = || format!("camera {} in the rig", c.ip);
                let serial = c
                    .serial
                    .clone()
                    .unwrap_or_else(|| format!("{}-{}", base.device.serial, k + 1));
                if let Err(e) = crate::run::check_serial(&serial) {
                    bail!("{}: {e}", what());
                }
                let mut o = base.at(c.ip, &serial);
                let d = &mut o.device;
                if let Some(p) = &c.pixel_format {
                    d.pixel_format = PixelFormat::from_name(p)
                        .with_context(|| format!("{}: unknown pixel format {p:?}", what()))?;
                }
                if let (Some(_), Some(_)) = (&c.pattern, &c.images) {
                    bail!(
                        "{}: pattern and images together: the camera shows the images \
                         (TestPattern Off), and a host may pick a pattern through TestPattern",
                        what()
                    );
                }
                if let Some(p) = &c.pattern {
                    d.pattern = Pattern::from_name(p)
                        .with_context(|| format!("{}: unknown pattern {p:?}", what()))?;
                }
                if let Some(f) = c.fps {
                    d.frame_rate = f;
                }
                if let Some(h) = c.trigger_hz {
                    o.trigger_hz = Some(h);
                }
                if let Some(spec) = &c.images {
                    let raw: Option<RawFormat> = c
                        .raw_format
                        .as_deref()
                        .map(str::parse)
                        .transpose()
                        .with_context(what)?;
                    let path = dir.join(spec).to_string_lossy().into_owned();
                    let set = match loaded.iter().find(|(p, r, _)| *p == path && *r == raw) {
                        Some((_, _, set)) => set.clone(),
                        None => {
                            let set = Arc::new(ImageSet::load(&path, raw).with_context(what)?);
                            held += set.bytes();
                            if held > cap {
                                bail!(
                                    "{}: the rig's images take {} MiB together with this \
                                     camera's, more than the {} MiB one process holds; \
                                     cameras that name the same images share one copy",
                                    what(),
                                    held.div_ceil(1 << 20),
                                    cap >> 20
                                );
                            }
                            loaded.push((path, raw, set.clone()));
                            set
                        }
                    };
                    d.sensor_width = set.width();
                    d.sensor_height = set.height();
                    d.width = set.width();
                    d.height = set.height();
                    o.images = Some(set);
                }
                if let Some(v) = c.sensor_width {
                    d.sensor_width = v;
                }
                if let Some(v) = c.sensor_height {
                    d.sensor_height = v;
                }
                if let Some(v) = c.width {
                    d.width = v;
                }
                if let Some(v) = c.height {
                    d.height = v;
                }
                o.validate().with_context(what)?;
                Ok(o)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rig file is read up to 1 MiB: /dev/zero used to be read until the kernel killed the
    /// process (24 GB).
    #[test]
    fn an_endless_rig_file_is_refused_not_read_to_the_end() {
        let e = format!("{:#}", Rig::load(Path::new("/dev/zero")).unwrap_err());
        assert!(
            e.contains("/dev/zero is larger than 1024 KiB: not a rig file"),
            "{e}"
        );
    }

    /// Cameras naming the same images share one loaded set, and the sets of a rig together
    /// stay within one cap: each camera loaded its own copy with no limit on the sum.
    #[test]
    fn cameras_on_the_same_images_share_them_and_a_rig_holds_at_most_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        for folder in ["a", "b"] {
            std::fs::create_dir(dir.path().join(folder)).unwrap();
            for k in 0..2 {
                image::GrayImage::new(64, 64)
                    .save(dir.path().join(folder).join(format!("{k}.png")))
                    .unwrap();
            }
        }
        let rig = |folders: &[&str]| {
            let cams: String = folders
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    format!(
                        "[[camera]]\nip = \"127.0.0.{}\"\nimages = \"{f}/\"\n",
                        10 + i
                    )
                })
                .collect();
            Rig::parse(&cams).unwrap()
        };
        let base = RunOptions::new(Ipv4Addr::LOCALHOST, "RIG");
        // one set: 2 images of 64x64 grey at 16 bits
        let one = 2 * 64 * 64 * 2;
        let all = rig(&["a"; 6])
            .options_within(&base, dir.path(), one)
            .unwrap();
        let first = all[0].images.as_ref().unwrap();
        assert!(
            all.iter()
                .all(|o| Arc::ptr_eq(o.images.as_ref().unwrap(), first))
        );
        // two sets need twice the memory: refused under a cap of one, naming the camera
        let e = format!(
            "{:#}",
            rig(&["a", "b"])
                .options_within(&base, dir.path(), one)
                .unwrap_err()
        );
        assert!(
            e.contains("camera 127.0.0.11 in the rig: the rig's images take 1 MiB together"),
            "{e}"
        );
        assert!(
            rig(&["a", "b"])
                .options_within(&base, dir.path(), 2 * one)
                .is_ok()
        );
    }

    #[test]
    fn a_rig_parses_and_refuses_what_it_should() {
        let rig = Rig::parse(
            r#"
[[camera]]
ip = "127.0.0.10"
serial = "LEFT"
width = 640
height = 480
pixel_format = "BayerRG8"

[[camera]]
ip = "127.0.0.11"
pattern = "MovingBar"
fps = 60
"#,
        )
        .unwrap();
        assert_eq!(rig.camera.len(), 2);
        assert_eq!(rig.camera[0].serial.as_deref(), Some("LEFT"));
        assert_eq!(rig.camera[1].fps, Some(60.0));
        assert!(Rig::parse("").is_err());
        let many: String = (0..257)
            .map(|k| format!("[[camera]]\nip = \"127.0.{}.{}\"\n", k / 200, 1 + k % 200))
            .collect();
        assert!(
            Rig::parse(&many)
                .unwrap_err()
                .to_string()
                .contains("the rig has 257 cameras; at most 256"),
        );
        assert!(
            Rig::parse("[[camera]]\nip = \"127.0.0.1\"\n[[camera]]\nip = \"127.0.0.1\"\n").is_err()
        );
        let e = format!(
            "{:#}",
            Rig::parse("[[camera]]\nip = \"127.0.0.1\"\nwidht = 5\n").unwrap_err()
        );
        assert!(e.contains("widht"), "{e}");
        // a camera that replays images shows them (TestPattern Off): a pattern beside them
        // would do nothing at start, and is refused
        let rig = Rig::parse(
            "[[camera]]\nip = \"127.0.0.1\"\npattern = \"Noise\"\nimages = \"shots/\"\n",
        )
        .unwrap();
        let base = RunOptions::new(std::net::Ipv4Addr::LOCALHOST, "RIG");
        let e = format!("{:#}", rig.options(&base, Path::new(".")).unwrap_err());
        assert!(e.contains("pattern and images together"), "{e}");
        // a serial a host can name the camera by, as --serial
        for (serial, want) in [
            ("", "camera 127.0.0.1 in the rig: a serial is empty"),
            (
                "SEVENTEEN_BYTES_X",
                "is 17 bytes, longer than a GigE Vision serial",
            ),
            ("L\u{e9}FT", "holds '\u{e9}': a serial is printable ASCII"),
        ] {
            let rig = Rig::parse(&format!(
                "[[camera]]\nip = \"127.0.0.1\"\nserial = \"{serial}\"\n"
            ))
            .unwrap();
            let e = format!("{:#}", rig.options(&base, Path::new(".")).unwrap_err());
            assert!(e.contains(want), "{serial:?}: {e}");
        }
    }
}
