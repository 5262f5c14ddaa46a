//! The Nonce payload (RFC 7296 section 3.9): 16 to 256 random bytes, at least half the PRF's
//! key size (2.10).
use crate::error::Error;
use alloc::vec::Vec;

/// Smallest nonce accepted (3.9).
pub const MIN_NONCE_LEN: usize = 16;
/// Largest nonce accepted (3.9).
pub const MAX_NONCE_LEN: usize = 256;
/// Length of the nonces we send (32: at least half of every PRF's key size, 2.10).
pub const OUR_NONCE_LEN: usize = 32;

/// Checks a received nonce's length and copies it.
pub fn parse(body: &[u8]) -> Result<Vec<u8>, Error> {
    if !(MIN_NONCE_LEN..=MAX_NONCE_LEN).contains(&body.len()) {
        return Err(Error::BadNonce);
    }
    Ok(body.to_vec())
}
