//! PFNC pixel formats the camera offers (codes from aravis `arvenums.h` and genicam-rs `pfnc`).

/// A pixel format: its PFNC code and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PixelFormat {
    /// 8-bit monochrome (0x01080001).
    Mono8,
    /// 16-bit monochrome, little-endian per pixel (0x01100007).
    Mono16,
    /// 8-bit Bayer RGGB (0x01080009).
    BayerRG8,
    /// 24-bit RGB (0x02180014).
    Rgb8,
}

impl PixelFormat {
    /// Every supported format.
    pub const ALL: [PixelFormat; 4] = [
        PixelFormat::Mono8,
        PixelFormat::Mono16,
        PixelFormat::BayerRG8,
        PixelFormat::Rgb8,
    ];

    /// The 32-bit PFNC code carried in registers and GVSP leaders.
    pub const fn pfnc(self) -> u32 {
        match self {
            PixelFormat::Mono8 => 0x0108_0001,
            PixelFormat::Mono16 => 0x0110_0007,
            PixelFormat::BayerRG8 => 0x0108_0009,
            PixelFormat::Rgb8 => 0x0218_0014,
        }
    }

    /// From a PFNC code.
    pub const fn from_pfnc(code: u32) -> Option<Self> {
        Some(match code {
            0x0108_0001 => PixelFormat::Mono8,
            0x0110_0007 => PixelFormat::Mono16,
            0x0108_0009 => PixelFormat::BayerRG8,
            0x0218_0014 => PixelFormat::Rgb8,
            _ => return None,
        })
    }

    /// Bytes per pixel.
    pub const fn bytes_per_pixel(self) -> u32 {
        match self {
            PixelFormat::Mono8 | PixelFormat::BayerRG8 => 1,
            PixelFormat::Mono16 => 2,
            PixelFormat::Rgb8 => 3,
        }
    }

    /// The GenICam / SFNC name.
    pub const fn name(self) -> &'static str {
        match self {
            PixelFormat::Mono8 => "Mono8",
            PixelFormat::Mono16 => "Mono16",
            PixelFormat::BayerRG8 => "BayerRG8",
            PixelFormat::Rgb8 => "RGB8",
        }
    }

    /// From the GenICam name (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfnc_codes_encode_size_in_bits_23_16() {
        for p in PixelFormat::ALL {
            assert_eq!((p.pfnc() >> 16) & 0xff, p.bytes_per_pixel() * 8, "{p:?}");
            assert_eq!(PixelFormat::from_pfnc(p.pfnc()), Some(p));
            assert_eq!(PixelFormat::from_name(p.name()), Some(p));
        }
        assert_eq!(PixelFormat::from_pfnc(0x0108_0008), None); // BayerGR8: not offered
    }
}
