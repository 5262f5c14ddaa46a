//! Multi-buffer CBC encryption: the CBC chains of several packets interleaved so the AES unit
//! pipelines them.
//!
//! CBC encryption (RFC 3602 section 2) is serial within one packet: block `i` is
//! `C[i] = E(K, P[i] ^ C[i-1])` with `C[0] = IV`, so each block waits for the whole AES
//! latency of the one before it. AES-NI can have several independent blocks in flight at once
//! (the `aes` crate's AES-NI backend encrypts 8 blocks per call, interleaving their rounds), so
//! one chain leaves most of the unit idle.
//!
//! The multi-buffer technique (Intel's IPsec-MB library, "Processing Multiple Buffers in
//! Parallel to Increase Performance on Intel Architecture Processors", V. Gopal et al., Intel
//! white paper, July 2010) fills that gap with *other packets*: up to [`LANES`] chains of
//! different packets, all under the same key, advance one block each per step, and the blocks
//! of all active lanes are encrypted by one multi-block call (`BlockEncrypt::encrypt_blocks`;
//! the `aes` crate picks its AES-NI backend at run time). Packets have different lengths, so a
//! lane that finishes is refilled at once from the pending jobs (IPsec-MB's "job manager"
//! scheduler); lanes run dry only when no job is left. When a single lane is left it finishes as one ordinary chain,
//! since nothing remains to interleave it with.
//!
//! Each job's ciphertext is exactly what [`CbcCipher::encrypt`] gives for it alone; only the
//! order in which the blocks are computed changes. DES and 3DES (64-bit blocks, no parallel
//! backend in the `des` crate) and the null cipher take the one-chain path per job.
//!
//! Nothing is allocated: the lane state is a fixed array of [`LANES`] blocks on the stack. That
//! state holds `P ^ C[i-1]` (plaintext-derived) between steps, so it is zeroized before
//! returning.

use crate::cipher::CbcCipher;
use crate::error::Error;
use aes::cipher::consts::U16;
use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, BlockSizeUser};
use zeroize::Zeroize;

/// How many chains are interleaved: the AES-NI backend of the `aes` crate encrypts 8 blocks
/// per parallel call.
pub const LANES: usize = 8;

/// AES block size in bytes (RFC 3602 section 2.1: 128-bit blocks).
const AES_BLOCK: usize = 16;

/// One packet to encrypt in place: its IV and its data, a whole number of cipher blocks (zero
/// blocks is allowed and leaves it untouched).
pub struct CbcJob<'a> {
    /// The packet's IV; exactly one cipher block (RFC 3602 section 2.1 for AES).
    pub iv: &'a [u8],
    /// Plaintext in, ciphertext out.
    pub data: &'a mut [u8],
}

impl core::fmt::Debug for CbcJob<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Lengths only: the data is plaintext.
        f.debug_struct("CbcJob")
            .field("iv_len", &self.iv.len())
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// Encrypts every job in CBC mode under `cipher`, each with its own IV, interleaving up to
/// [`LANES`] AES chains (see the module doc).
///
/// All jobs are checked before any is touched: an IV that is not one block long is
/// [`Error::InvalidSa`], data that is not a whole number of blocks is [`Error::BadAlignment`];
/// on error no job's data has changed. The null cipher, like [`CbcCipher::encrypt`], accepts
/// anything and changes nothing.
pub fn encrypt_many(cipher: &CbcCipher, jobs: &mut [CbcJob<'_>]) -> Result<(), Error> {
    let block = match cipher {
        CbcCipher::Null => return Ok(()),
        CbcCipher::Des(_) | CbcCipher::Des3(_) => 8,
        CbcCipher::Aes128(_) | CbcCipher::Aes192(_) | CbcCipher::Aes256(_) => AES_BLOCK,
    };
    check(block, jobs)?;
    match cipher {
        CbcCipher::Aes128(c) => interleave(c, jobs),
        CbcCipher::Aes192(c) => interleave(c, jobs),
        CbcCipher::Aes256(c) => interleave(c, jobs),
        _ => {
            for job in jobs.iter_mut() {
                cipher.encrypt(job.iv, job.data)?;
            }
        }
    }
    Ok(())
}

/// Checks every job's IV and data length against the cipher's block size.
fn check(block: usize, jobs: &[CbcJob<'_>]) -> Result<(), Error> {
    for job in jobs {
        if job.iv.len() != block {
            return Err(Error::InvalidSa("IV length"));
        }
        if job.data.len() % block != 0 {
            return Err(Error::BadAlignment);
        }
    }
    Ok(())
}

type Block = GenericArray<u8, U16>;

/// XORs the block `src` into `dst`, as one 128-bit word.
#[inline(always)]
fn xor_into(dst: &mut Block, src: &[u8; AES_BLOCK]) {
    let d: &mut [u8; AES_BLOCK] = dst.as_mut();
    *d = (u128::from_ne_bytes(*d) ^ u128::from_ne_bytes(*src)).to_ne_bytes();
}

/// Loads the next pending job with at least one block into a lane: `state` gets its first
/// block XOR its IV, `rest` its data from that block on. Returns false when no job is left.
fn load<'b>(pending: &mut core::slice::IterMut<'b, CbcJob<'_>>, state: &mut Block, rest: &mut &'b mut [u8]) -> bool {
    for job in pending.by_ref() {
        // Lengths were checked: a job with data has a whole first block and a 16-byte IV.
        let (Some(first), Ok(iv)) = (job.data.first_chunk(), <&[u8; AES_BLOCK]>::try_from(job.iv)) else {
            continue;
        };
        *state.as_mut() = *iv;
        xor_into(state, first);
        *rest = &mut *job.data;
        return true;
    }
    false
}

/// The scheduler: fill the lanes, then per step encrypt all lanes' blocks in one call, store
/// them, and chain (or refill) each lane.
///
/// Lane `i` is `state[i]` (the block about to be encrypted, then the ciphertext just made,
/// which chains into the next block) and `rest[i]` (the job's data from that block on). Lanes
/// `0..active` are in use, so the blocks to encrypt are always the prefix `state[..active]`.
fn interleave<C>(cipher: &C, jobs: &mut [CbcJob<'_>])
where
    C: BlockEncrypt + BlockSizeUser<BlockSize = U16>,
{
    let mut pending = jobs.iter_mut();
    let mut state: [Block; LANES] = Default::default();
    let mut rest: [&mut [u8]; LANES] = Default::default();
    let mut active = 0;
    while active < LANES && load(&mut pending, &mut state[active], &mut rest[active]) {
        active += 1;
    }
    while active > 1 {
        cipher.encrypt_blocks(&mut state[..active]);
        let mut i = 0;
        while i < active {
            let (out, tail) = core::mem::take(&mut rest[i]).split_at_mut(AES_BLOCK);
            out.copy_from_slice(&state[i]);
            if let Some(next) = tail.first_chunk() {
                // C[i] is already in the state: XOR in P[i+1] (RFC 3602 section 2).
                xor_into(&mut state[i], next);
                rest[i] = tail;
                i += 1;
            } else if load(&mut pending, &mut state[i], &mut rest[i]) {
                i += 1;
            } else {
                // No job left: the last lane moves here and is handled in this same pass.
                active -= 1;
                state.swap(i, active);
                rest.swap(i, active);
            }
        }
    }
    if active == 1 {
        // One chain left and nothing to interleave it with.
        let mut rest = core::mem::take(&mut rest[0]);
        loop {
            cipher.encrypt_block(&mut state[0]);
            let (out, tail) = rest.split_at_mut(AES_BLOCK);
            out.copy_from_slice(&state[0]);
            let Some(next) = tail.first_chunk() else { break };
            xor_into(&mut state[0], next);
            rest = tail;
        }
    }
    for s in state.iter_mut() {
        s.as_mut_slice().zeroize();
    }
}
