//! The CSPRNG that makes CBC IVs (RFC 3602 section 3 asks for unpredictable IVs): ChaCha20
//! seeded once per SA from the operating system (with `std`) or from a caller's seed.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// A per-SA IV generator.
#[derive(Clone)]
pub struct IvRng(ChaCha20Rng);

impl core::fmt::Debug for IvRng {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("IvRng")
    }
}

impl IvRng {
    /// Seeded from a caller's 32 bytes of entropy (for `no_std` targets).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        IvRng(ChaCha20Rng::from_seed(seed))
    }

    /// Seeded from the operating system's entropy source.
    #[cfg(feature = "std")]
    pub fn from_os() -> Result<Self, crate::Error> {
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed).map_err(|_| crate::Error::InvalidSa("no OS entropy for IVs"))?;
        let r = Self::from_seed(seed);
        zeroize::Zeroize::zeroize(&mut seed);
        Ok(r)
    }

    /// Fills `out` with fresh random bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        self.0.fill_bytes(out);
    }
}
