//! PFNC pixel formats the camera offers (codes from aravis `arvenums.h` and genicam-rs `pfnc`,
//! `reference/gev.md` §2.7).

/// A pixel format: its PFNC code and layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PixelFormat {
    /// 8-bit monochrome (0x01080001).
    Mono8,
    /// 10-bit monochrome in a 16-bit little-endian container (0x01100003).
    Mono10,
    /// 12-bit monochrome in a 16-bit little-endian container (0x01100005).
    Mono12,
    /// 12-bit monochrome packed: two pixels in three bytes, least significant bits first,
    /// across line ends (0x010C0047).
    Mono12p,
    /// 16-bit monochrome, little-endian per pixel (0x01100007).
    Mono16,
    /// 8-bit Bayer GRBG (0x01080008).
    BayerGR8,
    /// 8-bit Bayer RGGB (0x01080009).
    BayerRG8,
    /// 8-bit Bayer GBRG (0x0108000A).
    BayerGB8,
    /// 8-bit Bayer BGGR (0x0108000B).
    BayerBG8,
    /// 24-bit RGB (0x02180014).
    Rgb8,
    /// 24-bit BGR (0x02180015).
    Bgr8,
    /// YUV 4:2:2, 8 bits, Y0 U Y1 V per two pixels (YUYV, 0x02100032).
    Yuv422_8,
}

/// An image setting whose step a pixel format decides ([`PixelFormat::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// Width.
    Width,
    /// OffsetX.
    OffsetX,
    /// OffsetY.
    OffsetY,
}

impl PixelFormat {
    /// Every supported format.
    pub const ALL: [PixelFormat; 12] = [
        PixelFormat::Mono8,
        PixelFormat::Mono10,
        PixelFormat::Mono12,
        PixelFormat::Mono12p,
        PixelFormat::Mono16,
        PixelFormat::BayerGR8,
        PixelFormat::BayerRG8,
        PixelFormat::BayerGB8,
        PixelFormat::BayerBG8,
        PixelFormat::Rgb8,
        PixelFormat::Bgr8,
        PixelFormat::Yuv422_8,
    ];

    /// The 32-bit PFNC code carried in registers and GVSP leaders (bits 23..16: bits per
    /// pixel).
    pub const fn pfnc(self) -> u32 {
        match self {
            PixelFormat::Mono8 => 0x0108_0001,
            PixelFormat::Mono10 => 0x0110_0003,
            PixelFormat::Mono12 => 0x0110_0005,
            PixelFormat::Mono12p => 0x010C_0047,
            PixelFormat::Mono16 => 0x0110_0007,
            PixelFormat::BayerGR8 => 0x0108_0008,
            PixelFormat::BayerRG8 => 0x0108_0009,
            PixelFormat::BayerGB8 => 0x0108_000A,
            PixelFormat::BayerBG8 => 0x0108_000B,
            PixelFormat::Rgb8 => 0x0218_0014,
            PixelFormat::Bgr8 => 0x0218_0015,
            PixelFormat::Yuv422_8 => 0x0210_0032,
        }
    }

    /// From a PFNC code.
    pub const fn from_pfnc(code: u32) -> Option<Self> {
        let mut i = 0;
        while i < Self::ALL.len() {
            if Self::ALL[i].pfnc() == code {
                return Some(Self::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// Bits per pixel on the wire (PFNC bits 23..16).
    pub const fn bits_per_pixel(self) -> u32 {
        (self.pfnc() >> 16) & 0xff
    }

    /// Bytes per pixel, rounded up (Mono12p: 2; its image size is
    /// [`image_size`](Self::image_size)).
    pub const fn bytes_per_pixel(self) -> u32 {
        self.bits_per_pixel().div_ceil(8)
    }

    /// Significant bits of each sample (Mono10: 10 in a 16-bit container).
    pub const fn sample_bits(self) -> u32 {
        match self {
            PixelFormat::Mono10 => 10,
            PixelFormat::Mono12 | PixelFormat::Mono12p => 12,
            PixelFormat::Mono16 => 16,
            _ => 8,
        }
    }

    /// The step of an image setting under this format, in pixels or lines:
    /// - Width: 2 for 4:2:2, where two neighbouring pixels share one U and one V sample
    ///   (PFNC's YUV422_8 is Y U Y V per pair), so an odd width would end a line in half a pair;
    /// - OffsetX: 2 for 4:2:2 (a line starts on a pair) and for Bayer, whose colour filter
    ///   repeats every two pixels: the sensor position decides a pixel's filter, so an odd
    ///   offset would start the image on another colour than the format names;
    /// - OffsetY: 2 for Bayer, for its rows;
    /// - 1 for the rest.
    pub const fn step(self, axis: Axis) -> u32 {
        let bayer = matches!(
            self,
            PixelFormat::BayerGR8
                | PixelFormat::BayerRG8
                | PixelFormat::BayerGB8
                | PixelFormat::BayerBG8
        );
        let pairs = matches!(self, PixelFormat::Yuv422_8);
        let two = match axis {
            Axis::Width => pairs,
            Axis::OffsetX => pairs || bayer,
            Axis::OffsetY => bayer,
        };
        if two { 2 } else { 1 }
    }

    /// Whether pixels share bytes (packed).
    pub const fn packed(self) -> bool {
        self.bits_per_pixel() % 8 != 0
    }

    /// Bytes of a `width` × `height` image.
    pub const fn image_size(self, width: u32, height: u32) -> usize {
        (width as usize * height as usize * self.bits_per_pixel() as usize).div_ceil(8)
    }

    /// The GenICam / SFNC name.
    pub const fn name(self) -> &'static str {
        match self {
            PixelFormat::Mono8 => "Mono8",
            PixelFormat::Mono10 => "Mono10",
            PixelFormat::Mono12 => "Mono12",
            PixelFormat::Mono12p => "Mono12p",
            PixelFormat::Mono16 => "Mono16",
            PixelFormat::BayerGR8 => "BayerGR8",
            PixelFormat::BayerRG8 => "BayerRG8",
            PixelFormat::BayerGB8 => "BayerGB8",
            PixelFormat::BayerBG8 => "BayerBG8",
            PixelFormat::Rgb8 => "RGB8",
            PixelFormat::Bgr8 => "BGR8",
            PixelFormat::Yuv422_8 => "YUV422_8",
        }
    }

    /// From the GenICam name (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

/// Two 12-bit pixels packed as Mono12p lays them out: three bytes, least significant bits
/// first (byte 0 = v0 bits 7..0, byte 1 = v1 bits 3..0 over v0 bits 11..8, byte 2 = v1 bits
/// 11..4).
pub const fn pack_mono12p(v0: u16, v1: u16) -> [u8; 3] {
    [
        v0 as u8,
        ((v0 >> 8) as u8 & 0x0f) | ((v1 as u8 & 0x0f) << 4),
        (v1 >> 4) as u8,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfnc_codes_encode_size_in_bits_23_16() {
        for p in PixelFormat::ALL {
            assert_eq!(PixelFormat::from_pfnc(p.pfnc()), Some(p));
            assert_eq!(PixelFormat::from_name(p.name()), Some(p));
            assert!(p.sample_bits() <= p.bits_per_pixel() || p.packed(), "{p:?}");
        }
        // the codes of reference/gev.md §2.7
        assert_eq!(PixelFormat::Mono12p.pfnc(), 0x010C_0047);
        assert_eq!(PixelFormat::Yuv422_8.pfnc(), 0x0210_0032);
        assert_eq!(PixelFormat::from_pfnc(0x0110_002F), None); // BayerRG16: not offered
        assert_eq!(PixelFormat::Mono12p.image_size(3, 1), 5);
        assert_eq!(PixelFormat::Mono12p.image_size(4, 2), 12);
        assert_eq!(PixelFormat::Mono10.image_size(4, 2), 16);
        // PFNC's Mono12p example layout: 0xABC, 0xDEF -> BC FA DE
        assert_eq!(pack_mono12p(0xABC, 0xDEF), [0xBC, 0xFA, 0xDE]);
    }
}
