//! Image sequences: what `rdmacam run --images` replays and `rdmacam-host --images` checks.
//!
//! Files (PNG, TIFF, PGM/PPM, BMP; 8 or 16 bits, gray or colour) are decoded with the `image`
//! crate and kept at 16 bits; raw files (`.raw`) need their size and format given
//! ([`RawFormat`]). Every image of a set has one size: the sensor's. A frame is the region
//! Width × Height at OffsetX, OffsetY of an image, converted to the frame's pixel format
//! ([`ImageSet::render`]): luma (BT.601) for Mono from colour, a Bayer mosaic for the Bayer
//! formats (the colour at each sensor position), 4:2:2 YUYV (BT.601, integer arithmetic), and
//! the top bits in 16-bit containers or packed for Mono10/12/12p. Camera and host call the same
//! function, so the host can check every byte.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rdmacam_protocol::device::frame::FrameSpec;
use rdmacam_protocol::gev::PixelFormat;
use rdmacam_protocol::gev::pixel::pack_mono12p;

/// How to read raw files: their size and pixel format (Mono8, Mono16, RGB8 or a Bayer 8-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFormat {
    /// Width in pixels.
    pub width: u32,
    /// Height in lines.
    pub height: u32,
    /// How the bytes are laid out.
    pub pixel_format: PixelFormat,
}

impl std::str::FromStr for RawFormat {
    type Err = anyhow::Error;

    /// `WIDTHxHEIGHT:FORMAT`, e.g. `640x480:Mono8`.
    fn from_str(s: &str) -> Result<Self> {
        let (size, format) = s
            .split_once(':')
            .context("raw format: WIDTHxHEIGHT:FORMAT, e.g. 640x480:Mono8")?;
        let (w, h) = size
            .split_once('x')
            .context("raw size: WIDTHxHEIGHT, e.g. 640x480")?;
        let pixel_format = PixelFormat::from_name(format)
            .with_context(|| format!("unknown pixel format {format:?}"))?;
        if !matches!(
            pixel_format,
            PixelFormat::Mono8
                | PixelFormat::Mono16
                | PixelFormat::Rgb8
                | PixelFormat::BayerGR8
                | PixelFormat::BayerRG8
                | PixelFormat::BayerGB8
                | PixelFormat::BayerBG8
        ) {
            bail!("raw files in {format} are not read: Mono8, Mono16, RGB8 or a Bayer 8-bit");
        }
        let side = |v: &str, what: &str| -> Result<u32> {
            v.parse()
                .ok()
                .filter(|v| (1..=MAX_SIDE).contains(v))
                .with_context(|| format!("raw {what} {v:?}: a number from 1 to {MAX_SIDE}"))
        };
        Ok(RawFormat {
            width: side(w, "width")?,
            height: side(h, "height")?,
            pixel_format,
        })
    }
}

/// The longest image side read (the camera's largest sensor): it also keeps every size
/// computed from a raw format far from overflowing.
pub const MAX_SIDE: u32 = 16_384;

/// The most memory a set of images may hold, at 16 bits per sample (a 16384 x 16384 grey
/// image takes 512 MiB, a colour one 1.5 GiB).
pub const MAX_SET_BYTES: u64 = 1 << 30;

/// One decoded image, 16 bits per sample.
#[derive(Debug, Clone)]
enum Pixels {
    Gray(Vec<u16>),
    Rgb(Vec<[u16; 3]>),
}

/// The images a camera replays, in name order, all of one size.
#[derive(Debug, Clone)]
pub struct ImageSet {
    names: Vec<PathBuf>,
    images: Vec<Pixels>,
    width: u32,
    height: u32,
}

const EXTENSIONS: &[&str] = &[
    "png", "tif", "tiff", "pgm", "ppm", "pnm", "pbm", "bmp", "raw",
];

/// The files `spec` names: one file, every image file of a directory, or a glob in the last
/// path component (`frames/*.png`), sorted by name.
pub fn files(spec: &str) -> Result<Vec<PathBuf>> {
    let path = Path::new(spec);
    let listed = |dir: &Path, keep: &dyn Fn(&str) -> bool| -> Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(keep))
            .collect();
        v.sort();
        Ok(v)
    };
    let known = |n: &str| {
        n.rsplit_once('.')
            .is_some_and(|(_, e)| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
    };
    // what makes a glob: `*`, `?`, `[...]` and `{a,b}` (globset's syntax); a file whose name
    // holds one of them is still that file
    const GLOB: [char; 4] = ['*', '?', '[', '{'];
    let found = if path.is_dir() {
        listed(path, &known)?
    } else if path.is_file() {
        vec![path.to_path_buf()]
    } else if spec.contains(GLOB) {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        let pattern = path
            .file_name()
            .and_then(|n| n.to_str())
            .context("a glob's last component must be UTF-8")?;
        if dir.is_some_and(|d| d.to_string_lossy().contains(GLOB)) {
            bail!("--images: only the last path component may hold *, ?, [...] or {{a,b}}");
        }
        // globset compiles the pattern to an automaton: linear in the name, where a
        // backtracking matcher took seconds for `*a*a*a*a*b` against one long name
        let glob = globset::Glob::new(pattern)
            .with_context(|| format!("--images {spec}: not a glob"))?
            .compile_matcher();
        listed(dir.unwrap_or(Path::new(".")), &|n| glob.is_match(n))?
    } else {
        bail!("--images {spec}: no such file or directory");
    };
    if found.is_empty() {
        bail!("--images {spec}: no image files (png, tiff, pgm/ppm, bmp, raw)");
    }
    Ok(found)
}

impl Pixels {
    /// Memory held.
    fn bytes(&self) -> u64 {
        match self {
            Pixels::Gray(p) => 2 * p.len() as u64,
            Pixels::Rgb(p) => 6 * p.len() as u64,
        }
    }
}

fn is_raw(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("raw"))
}

/// An image's size, and whether it is in colour, from its header (or the raw format) without
/// decoding it.
fn dimensions(path: &Path, raw: Option<RawFormat>) -> Result<(u32, u32, bool)> {
    use image::ImageDecoder;
    if is_raw(path) {
        return match raw {
            Some(r) => Ok((r.width, r.height, r.pixel_format == PixelFormat::Rgb8)),
            None => bail!(
                "{}: a raw file needs --raw-format WIDTHxHEIGHT:FORMAT",
                path.display()
            ),
        };
    }
    let d = image::ImageReader::open(path)
        .with_context(|| format!("cannot open {}", path.display()))?
        .with_guessed_format()
        .with_context(|| format!("cannot read {}", path.display()))?
        .into_decoder()
        .with_context(|| format!("{} is not an image this build reads", path.display()))?;
    let (w, h) = d.dimensions();
    Ok((w, h, d.color_type().has_color()))
}

fn decode(path: &Path, raw: Option<RawFormat>) -> Result<(u32, u32, Pixels)> {
    if is_raw(path) {
        let r = raw.with_context(|| {
            format!(
                "{}: a raw file needs --raw-format WIDTHxHEIGHT:FORMAT",
                path.display()
            )
        })?;
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let want = r.pixel_format.image_size(r.width, r.height);
        if bytes.len() != want {
            bail!(
                "{}: {} bytes, but {}x{} {} takes {want}",
                path.display(),
                bytes.len(),
                r.width,
                r.height,
                r.pixel_format.name()
            );
        }
        let px = match r.pixel_format {
            PixelFormat::Mono16 => Pixels::Gray(
                bytes
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect(),
            ),
            PixelFormat::Rgb8 => Pixels::Rgb(
                bytes
                    .chunks_exact(3)
                    .map(|c| [c[0], c[1], c[2]].map(|v| u16::from(v) << 8))
                    .collect(),
            ),
            // Mono8 and a Bayer mosaic: one 8-bit sample per position
            _ => Pixels::Gray(bytes.iter().map(|&v| u16::from(v) << 8).collect()),
        };
        return Ok((r.width, r.height, px));
    }
    let mut reader = image::ImageReader::open(path)
        .with_context(|| format!("cannot open {}", path.display()))?
        .with_guessed_format()
        .with_context(|| format!("cannot read {}", path.display()))?;
    // the set's memory was bounded from the headers ([`ImageSet::load`]): the decoder's own
    // 512 MiB limit would refuse a colour image the set has room for, as "Memory limit
    // exceeded"
    reader.no_limits();
    let img = reader
        .decode()
        .with_context(|| format!("{} is not an image this build reads", path.display()))?;
    let (w, h) = (img.width(), img.height());
    let px = if img.color().has_color() {
        Pixels::Rgb(img.into_rgb16().pixels().map(|p| p.0).collect())
    } else {
        Pixels::Gray(img.into_luma16().pixels().map(|p| p.0[0]).collect())
    };
    Ok((w, h, px))
}

impl ImageSet {
    /// Load the images `spec` names ([`files`]); raw files need `raw`.
    pub fn load(spec: &str, raw: Option<RawFormat>) -> Result<ImageSet> {
        let names = files(spec)?;
        // every header first (cheap): sizes checked and the set's memory bounded before a
        // pixel is decoded
        let mut size: Option<(u32, u32, &Path)> = None;
        let mut least: u64 = 0;
        for n in &names {
            let (w, h, colour) = dimensions(n, raw)?;
            if !(16..=MAX_SIDE).contains(&w) || !(1..=MAX_SIDE).contains(&h) {
                bail!(
                    "{}: {w}x{h}; images are 16 to {MAX_SIDE} pixels wide and 1 to {MAX_SIDE} \
                     lines high",
                    n.display()
                );
            }
            match size {
                None => size = Some((w, h, n)),
                Some((sw, sh, first)) if (sw, sh) != (w, h) => bail!(
                    "{} is {w}x{h} but {} is {sw}x{sh}: the images of a camera share one size",
                    n.display(),
                    first.display()
                ),
                Some(_) => {}
            }
            // 16 bits a sample: grey 2 bytes a pixel, colour 6
            least += if colour { 6 } else { 2 } * u64::from(w) * u64::from(h);
        }
        let too_much = |held: u64| {
            anyhow::anyhow!(
                "--images {spec}: {} {} {} MiB at 16 bits per sample, more than the \
                 {} MiB a set may hold; fewer or smaller images (or grey ones: a third of \
                 colour's)",
                names.len(),
                if names.len() == 1 {
                    "image takes"
                } else {
                    "images take"
                },
                held.div_ceil(1 << 20),
                MAX_SET_BYTES >> 20
            )
        };
        if least > MAX_SET_BYTES {
            return Err(too_much(least));
        }
        let (width, height, _) = size.expect("files() never returns an empty list");
        let mut images = Vec::with_capacity(names.len());
        let mut held: u64 = 0;
        for n in &names {
            let (w, h, px) = decode(n, raw)?;
            if (w, h) != (width, height) {
                bail!(
                    "{}: {w}x{h} decoded, its header said {width}x{height}",
                    n.display()
                );
            }
            // colour takes three times grey
            held += px.bytes();
            if held > MAX_SET_BYTES {
                return Err(too_much(held));
            }
            images.push(px);
        }
        Ok(ImageSet {
            names,
            images,
            width,
            height,
        })
    }

    /// Memory its decoded images hold, bytes.
    pub fn bytes(&self) -> u64 {
        self.images.iter().map(Pixels::bytes).sum()
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.images.len()
    }

    /// Whether there are none (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// The images' width (the sensor's).
    pub fn width(&self) -> u32 {
        self.width
    }

    /// The images' height.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The file of image `i`.
    pub fn name(&self, i: usize) -> &Path {
        &self.names[i % self.names.len()]
    }

    /// Image `i` (modulo the count) as the frame `spec` asks: its region, in its pixel format.
    /// `out` is resized to the frame's size. Regions beyond the image read black.
    pub fn render(&self, i: usize, spec: &FrameSpec, out: &mut Vec<u8>) {
        let img = &self.images[i % self.images.len()];
        let (w, h) = (spec.width as usize, spec.height as usize);
        let pf = spec.pixel_format;
        out.clear();
        out.resize(pf.image_size(spec.width, spec.height), 0);
        let at = |x: usize, y: usize| -> Option<usize> {
            let (sx, sy) = (x + spec.offset_x as usize, y + spec.offset_y as usize);
            (sx < self.width as usize && sy < self.height as usize)
                .then(|| sy * self.width as usize + sx)
        };
        let rgb = |x: usize, y: usize| -> [u16; 3] {
            match (img, at(x, y)) {
                (Pixels::Rgb(p), Some(k)) => p[k],
                (Pixels::Gray(p), Some(k)) => [p[k]; 3],
                (_, None) => [0; 3],
            }
        };
        let luma = |x: usize, y: usize| -> u16 {
            match (img, at(x, y)) {
                (Pixels::Gray(p), Some(k)) => p[k],
                (Pixels::Rgb(p), Some(k)) => {
                    let [r, g, b] = p[k].map(u32::from);
                    ((299 * r + 587 * g + 114 * b + 500) / 1000) as u16
                }
                (_, None) => 0,
            }
        };
        match pf {
            PixelFormat::Mono8 => {
                for y in 0..h {
                    for x in 0..w {
                        out[y * w + x] = (luma(x, y) >> 8) as u8;
                    }
                }
            }
            PixelFormat::Mono10 | PixelFormat::Mono12 | PixelFormat::Mono16 => {
                let shift = 16 - pf.sample_bits();
                for y in 0..h {
                    for x in 0..w {
                        let v = luma(x, y) >> shift;
                        out[2 * (y * w + x)..][..2].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            PixelFormat::Mono12p => {
                let v = |k: usize| {
                    if k < w * h {
                        luma(k % w, k / w) >> 4
                    } else {
                        0
                    }
                };
                for (g, b) in out.chunks_mut(3).enumerate() {
                    let bytes = pack_mono12p(v(2 * g), v(2 * g + 1));
                    b.copy_from_slice(&bytes[..b.len()]);
                }
            }
            PixelFormat::Rgb8 | PixelFormat::Bgr8 => {
                for y in 0..h {
                    for x in 0..w {
                        let mut c = rgb(x, y).map(|v| (v >> 8) as u8);
                        if pf == PixelFormat::Bgr8 {
                            c.reverse();
                        }
                        out[3 * (y * w + x)..][..3].copy_from_slice(&c);
                    }
                }
            }
            PixelFormat::BayerGR8
            | PixelFormat::BayerRG8
            | PixelFormat::BayerGB8
            | PixelFormat::BayerBG8 => {
                // the colour filter at (even row, even column) and its neighbours
                let first: [[usize; 2]; 2] = match pf {
                    PixelFormat::BayerRG8 => [[0, 1], [1, 2]],
                    PixelFormat::BayerGR8 => [[1, 0], [2, 1]],
                    PixelFormat::BayerGB8 => [[1, 2], [0, 1]],
                    _ => [[2, 1], [1, 0]], // BG
                };
                for y in 0..h {
                    for x in 0..w {
                        // the sensor position decides the filter, as on a real sensor
                        let (sx, sy) = (x + spec.offset_x as usize, y + spec.offset_y as usize);
                        let ch = first[sy % 2][sx % 2];
                        out[y * w + x] = (rgb(x, y)[ch] >> 8) as u8;
                    }
                }
            }
            PixelFormat::Yuv422_8 => {
                for y in 0..h {
                    for x in (0..w).step_by(2) {
                        let p0 = rgb(x, y).map(|v| i32::from(v >> 8));
                        let p1 = if x + 1 < w {
                            rgb(x + 1, y).map(|v| i32::from(v >> 8))
                        } else {
                            p0
                        };
                        let y_of =
                            |[r, g, b]: [i32; 3]| ((77 * r + 150 * g + 29 * b + 128) >> 8) as u8;
                        let [r, g, b] = [0, 1, 2].map(|c| (p0[c] + p1[c] + 1) / 2);
                        let u =
                            (((-43 * r - 85 * g + 128 * b + 128) >> 8) + 128).clamp(0, 255) as u8;
                        let v =
                            (((128 * r - 107 * g - 21 * b + 128) >> 8) + 128).clamp(0, 255) as u8;
                        let k = 2 * (y * w + x);
                        out[k] = y_of(p0);
                        out[k + 1] = u;
                        if x + 1 < w {
                            out[k + 2] = y_of(p1);
                            out[k + 3] = v;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmacam_protocol::device::frame::Pattern;

    fn spec(w: u32, h: u32, ox: u32, oy: u32, pf: PixelFormat) -> FrameSpec {
        FrameSpec {
            width: w,
            height: h,
            offset_x: ox,
            offset_y: oy,
            pixel_format: pf,
            pattern: Pattern::Gradient,
            sensor: false,
        }
    }

    /// A 16x2 colour image: pixel (x, y) = (x·16, y·100, 255 − x·16) in 8 bits, written as
    /// a PNG by the `image` crate's encoder (the files users bring).
    fn colour_png(dir: &Path, name: &str) -> PathBuf {
        let img = image::RgbImage::from_fn(16, 2, |x, y| {
            image::Rgb([(x * 16) as u8, (y * 100) as u8, 255 - (x * 16) as u8])
        });
        let p = dir.join(name);
        img.save(&p).unwrap();
        p
    }

    #[test]
    fn formats_from_a_colour_png() {
        let dir = tempfile::tempdir().unwrap();
        colour_png(dir.path(), "a.png");
        let set = ImageSet::load(dir.path().to_str().unwrap(), None).unwrap();
        assert_eq!((set.len(), set.width(), set.height()), (1, 16, 2));
        let mut out = Vec::new();
        set.render(0, &spec(16, 2, 0, 0, PixelFormat::Rgb8), &mut out);
        assert_eq!(&out[..6], &[0, 0, 255, 16, 0, 239]);
        set.render(0, &spec(16, 2, 0, 0, PixelFormat::Bgr8), &mut out);
        assert_eq!(&out[..3], &[255, 0, 0]);
        // RGGB at the sensor's origin: R G on row 0, G B on row 1
        set.render(0, &spec(4, 2, 0, 0, PixelFormat::BayerRG8), &mut out);
        assert_eq!(out, vec![0, 0, 32, 0, 100, 239, 100, 207]);
        // offset by one column: the filter follows the sensor position (G R ...)
        set.render(0, &spec(2, 1, 1, 0, PixelFormat::BayerRG8), &mut out);
        assert_eq!(out, vec![0, 32]);
        // luma, BT.601: (299·16 + 587·0 + 114·239) / 1000 on 16 bits, top byte
        set.render(0, &spec(2, 1, 0, 0, PixelFormat::Mono8), &mut out);
        assert_eq!(out, vec![29, 32]);
        set.render(0, &spec(2, 1, 0, 0, PixelFormat::Mono12), &mut out);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]) >> 4, 29);
        set.render(0, &spec(3, 1, 0, 0, PixelFormat::Mono12p), &mut out);
        assert_eq!(out.len(), 5);
        set.render(0, &spec(2, 1, 0, 0, PixelFormat::Yuv422_8), &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!((out[0], out[2]), (29, 32)); // Y of each pixel (8-bit BT.601 integer)
    }

    #[test]
    fn sets_globs_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        colour_png(dir.path(), "b.png");
        colour_png(dir.path(), "a.png");
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let set = ImageSet::load(dir.path().to_str().unwrap(), None).unwrap();
        assert_eq!(set.len(), 2);
        assert!(set.name(0).ends_with("a.png") && set.name(1).ends_with("b.png"));
        let glob = format!("{}/b*.png", dir.path().display());
        assert_eq!(ImageSet::load(&glob, None).unwrap().len(), 1);
        // classes and alternatives are globs too, without a * or ? (the docs promised them,
        // and such a pattern was looked up as one file's name: "no such file")
        for g in ["[ab].png", "{a,b}.png", "[b].{png,tif}"] {
            let glob = format!("{}/{g}", dir.path().display());
            let n = ImageSet::load(&glob, None).map(|s| s.len());
            assert_eq!(
                n.ok(),
                Some(if g.starts_with("[b]") { 1 } else { 2 }),
                "{g}"
            );
        }
        // another size in the set: refused, naming both files
        image::GrayImage::new(20, 2)
            .save(dir.path().join("c.png"))
            .unwrap();
        let e = format!(
            "{:#}",
            ImageSet::load(dir.path().to_str().unwrap(), None).unwrap_err()
        );
        assert!(e.contains("c.png is 20x2") && e.contains("16x2"), "{e}");
        // not an image
        std::fs::write(dir.path().join("bad.png"), "not a png").unwrap();
        let e = format!(
            "{:#}",
            ImageSet::load(dir.path().join("bad.png").to_str().unwrap(), None).unwrap_err()
        );
        assert!(e.contains("bad.png"), "{e}");
        // raw: size and format given, length checked
        std::fs::write(dir.path().join("r.raw"), vec![7u8; 32]).unwrap();
        let raw_path = dir.path().join("r.raw");
        let raw = raw_path.to_str().unwrap();
        assert!(ImageSet::load(raw, None).is_err());
        let set = ImageSet::load(raw, Some("16x2:Mono8".parse().unwrap())).unwrap();
        let mut out = Vec::new();
        set.render(0, &spec(16, 2, 0, 0, PixelFormat::Mono8), &mut out);
        assert_eq!(out, vec![7u8; 32]);
        assert!(ImageSet::load(raw, Some("16x3:Mono8".parse().unwrap())).is_err());
    }

    /// A grey PNG whose header says `w` x `h` (its pixels are a 16x1 image's): what a reader
    /// learns before decoding, without writing gigabytes.
    fn png_claiming(dir: &Path, name: &str, w: u32, h: u32) -> PathBuf {
        let p = dir.join(name);
        image::GrayImage::new(16, 1).save(&p).unwrap();
        let mut b = std::fs::read(&p).unwrap();
        // signature (8), IHDR length (4), "IHDR" at 12, width at 16, height at 20, CRC at 29
        b[16..20].copy_from_slice(&w.to_be_bytes());
        b[20..24].copy_from_slice(&h.to_be_bytes());
        let crc = crc32fast::hash(&b[12..29]);
        b[29..33].copy_from_slice(&crc.to_be_bytes());
        std::fs::write(&p, b).unwrap();
        p
    }

    #[test]
    fn sizes_and_sets_past_the_limits_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        // a raw size whose byte count would wrap: refused as a raw format, not passed on
        let e = "2147516416x4294901761:Mono16"
            .parse::<RawFormat>()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("raw width \"2147516416\": a number from 1 to 16384"),
            "{e}"
        );
        assert!("16x0:Mono8".parse::<RawFormat>().is_err());
        // four 16384x16384 grey images: 2 GiB held, refused from their headers alone
        for k in 0..4 {
            png_claiming(dir.path(), &format!("big{k}.png"), 16_384, 16_384);
        }
        let e = ImageSet::load(dir.path().to_str().unwrap(), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("4 images take 2048 MiB at 16 bits per sample, more than the 1024 MiB"),
            "{e}"
        );
        // one 16384x16384 colour image: 1.5 GiB at 16 bits, refused from its header; the
        // decoder said "Memory limit exceeded" (its own 512 MiB) before
        let colour = tempfile::tempdir().unwrap();
        let p = colour.path().join("colour.png");
        image::RgbImage::new(16, 1).save(&p).unwrap();
        let mut b = std::fs::read(&p).unwrap();
        b[16..20].copy_from_slice(&16_384u32.to_be_bytes());
        b[20..24].copy_from_slice(&16_384u32.to_be_bytes());
        let crc = crc32fast::hash(&b[12..29]);
        b[29..33].copy_from_slice(&crc.to_be_bytes());
        std::fs::write(&p, b).unwrap();
        let e = format!(
            "{:#}",
            ImageSet::load(p.to_str().unwrap(), None).unwrap_err()
        );
        assert!(
            e.contains("1 image takes 1536 MiB at 16 bits per sample, more than the 1024 MiB"),
            "{e}"
        );
        // too small and too wide: the message names the file
        let small = dir.path().join("one.png");
        image::GrayImage::new(1, 1).save(&small).unwrap();
        let e = format!(
            "{:#}",
            ImageSet::load(small.to_str().unwrap(), None).unwrap_err()
        );
        assert!(e.contains("one.png: 1x1; images are 16 to 16384"), "{e}");
        let wide = png_claiming(dir.path(), "wide.png", 20_000, 2);
        let e = format!(
            "{:#}",
            ImageSet::load(wide.to_str().unwrap(), None).unwrap_err()
        );
        assert!(e.contains("wide.png: 20000x2"), "{e}");
    }

    #[test]
    fn a_glob_with_many_stars_matches_in_linear_time() {
        // `*a*a*a*a*a*a*b` against a 205-character name of a's: a backtracking matcher tries
        // ~C(205, 6) splits (minutes); an automaton reads the name once
        let dir = tempfile::tempdir().unwrap();
        let long = format!("{}.png", "a".repeat(201));
        colour_png(dir.path(), &long);
        colour_png(dir.path(), "aab.png");
        let glob = format!("{}/*a*a*a*a*a*a*b.png", dir.path().display());
        let e = format!("{:#}", ImageSet::load(&glob, None).unwrap_err());
        assert!(e.contains("no image files"), "{e}");
        let glob = format!("{}/*a*b.png", dir.path().display());
        let set = ImageSet::load(&glob, None).unwrap();
        assert!(set.len() == 1 && set.name(0).ends_with("aab.png"));
    }

    #[test]
    fn sixteen_bit_gray_keeps_its_low_bits_in_mono16() {
        let dir = tempfile::tempdir().unwrap();
        let img = image::ImageBuffer::<image::Luma<u16>, _>::from_fn(16, 1, |x, _| {
            image::Luma([0x1234 + x as u16])
        });
        img.save(dir.path().join("g.png")).unwrap();
        let set = ImageSet::load(dir.path().to_str().unwrap(), None).unwrap();
        let mut out = Vec::new();
        set.render(0, &spec(16, 1, 0, 0, PixelFormat::Mono16), &mut out);
        assert_eq!(&out[..4], &[0x34, 0x12, 0x35, 0x12]);
        set.render(0, &spec(16, 1, 0, 0, PixelFormat::Mono10), &mut out);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), 0x1234 >> 6);
    }
}
