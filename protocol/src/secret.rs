//! Numbers a host not in control must not guess: the device's QPN and first PSN, and the RDMA
//! CM's communication IDs. A host that can predict them can forge the packets that end a
//! connection (an RC NAK, a CM DREQ). They come from ChaCha8, seeded by the device and stirred
//! with the entropy the I/O layer has (the OS's random source, or the board's): what the
//! generator has put out says nothing about what it puts out next, which an invertible mixing
//! function (one output gives away the state) cannot promise.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// A generator of numbers that must not be guessed.
#[derive(Debug, Clone)]
pub struct Secret(ChaCha8Rng);

impl Secret {
    /// A generator from `seed`; stir in real entropy ([`Self::stir`]) before the numbers
    /// matter.
    pub fn new(seed: u64) -> Secret {
        Secret(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Mix `entropy` into the state: the next numbers depend on it and on everything stirred
    /// in before.
    pub fn stir(&mut self, entropy: u64) {
        let mut seed = [0u8; 32];
        self.0.fill_bytes(&mut seed);
        for (s, e) in seed.iter_mut().zip(entropy.to_le_bytes()) {
            *s ^= e;
        }
        self.0 = ChaCha8Rng::from_seed(seed);
    }

    /// The next 32 secret bits.
    pub fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }

    /// The next 64 secret bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_and_entropy_give_the_same_numbers_and_other_entropy_others() {
        let mut a = Secret::new(1);
        let mut b = Secret::new(1);
        assert_eq!(a.next_u64(), b.next_u64());
        a.stir(7);
        let mut c = b.clone();
        b.stir(7);
        c.stir(8);
        let (x, y, z) = (a.next_u64(), b.next_u64(), c.next_u64());
        assert_eq!(x, y);
        assert_ne!(x, z);
    }
}
