//! SplitMix64, the one mixing function of the crate: the synthetic Noise pattern computes any
//! byte of a frame from it directly, and the ORSP channel draws its QPNs and first PSNs with it.

/// SplitMix64's output for state `x`: spreads every bit of the input over the output. Not a
/// cryptographic generator: where numbers must not be guessed (QPNs, PSNs), the unpredictability
/// comes from the entropy the I/O layer stirs into the state.
pub const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_sequence() {
        // The reference generator (Vigna, splitmix64.c) seeded with 0 outputs these first
        // (its state advances by the golden gamma before each output).
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(0x9e37_79b9_7f4a_7c15), 0x6e78_9e6a_a1b9_65f4);
    }
}
