//! ESP padding and trailer (RFC 4303 section 2.4): Padding, Pad Length, Next Header.

use ipsec_core::Error;

/// Length of Pad Length and Next Header.
pub const TRAILER_LEN: usize = 2;

/// RFC 4303 2.4: the padded plaintext plus the 2-byte trailer is a multiple of the cipher
/// block size and of 4 bytes. Returns the pad length for `payload_len` bytes of payload.
pub fn pad_len(payload_len: usize, block_size: usize) -> usize {
    pad_to(payload_len, alignment(block_size))
}

/// What the padded payload and trailer are aligned to for a cipher of `block_size` bytes:
/// the least common multiple of the block size and 4 (computed once per SA).
pub fn alignment(block_size: usize) -> usize {
    lcm(block_size.max(1), 4)
}

/// The pad length for `payload_len` bytes of payload aligned to `align` (from
/// [`alignment`]): a mask when `align` is a power of two, as it is for every cipher ESP
/// defines (4, 8 or 16), without a division.
#[inline]
pub fn pad_to(payload_len: usize, align: usize) -> usize {
    let end = payload_len + TRAILER_LEN;
    if align.is_power_of_two() {
        end.wrapping_neg() & (align - 1)
    } else {
        (align - end % align) % align
    }
}

fn lcm(a: usize, b: usize) -> usize {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// RFC 4303 2.4: writes the default padding (bytes 1, 2, 3, ...), the pad length and the
/// next header into `trailer` (its length is the pad length plus 2).
#[inline]
pub fn write_trailer(trailer: &mut [u8], next_header: u8) {
    let n = trailer.len() - TRAILER_LEN;
    for (i, b) in trailer[..n].iter_mut().enumerate() {
        *b = (i + 1) as u8;
    }
    trailer[n] = n as u8;
    trailer[n + 1] = next_header;
}

/// Reads the trailer at the end of decrypted `plaintext` and checks the padding bytes are
/// the default 1, 2, 3, ... (RFC 4303 2.4: a receiver SHOULD check them when it knows the
/// sender used the default scheme). Returns (pad length, next header).
#[inline]
pub fn check_trailer(plaintext: &[u8], check_contents: bool) -> Result<(usize, u8), Error> {
    let len = plaintext.len();
    if len < TRAILER_LEN {
        return Err(Error::Truncated);
    }
    let pad = plaintext[len - 2] as usize;
    let nh = plaintext[len - 1];
    if pad + TRAILER_LEN > len {
        return Err(Error::BadPadding);
    }
    if check_contents {
        let start = len - TRAILER_LEN - pad;
        // Compare without early exit; padding is not secret, but keep the loop branch-free.
        let mut diff = 0u8;
        for (i, b) in plaintext[start..len - TRAILER_LEN].iter().enumerate() {
            diff |= *b ^ ((i + 1) as u8);
        }
        if diff != 0 {
            return Err(Error::BadPadding);
        }
    }
    Ok((pad, nh))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mask agrees with RFC 4303 2.4's arithmetic for every block size and length.
    #[test]
    fn pad_to_is_the_division() {
        for block in [1usize, 3, 4, 8, 12, 16, 32] {
            let align = lcm(block, 4);
            assert_eq!(super::alignment(block), align);
            for len in 0..300 {
                let want = (align - (len + TRAILER_LEN) % align) % align;
                assert_eq!(pad_to(len, align), want, "block {block} len {len}");
                assert_eq!((len + want + TRAILER_LEN) % align, 0);
            }
        }
    }

    #[test]
    fn alignment() {
        assert_eq!(pad_len(14, 16), 0);
        assert_eq!(pad_len(15, 16), 15);
        assert_eq!(pad_len(0, 16), 14);
        assert_eq!(pad_len(6, 8), 0);
        assert_eq!(pad_len(7, 8), 7);
        // Stream ciphers and the null cipher align to 4 bytes.
        assert_eq!(pad_len(2, 1), 0);
        assert_eq!(pad_len(3, 1), 3);
        for p in 0..100 {
            for b in [1, 4, 8, 16] {
                let n = pad_len(p, b);
                assert_eq!((p + n + 2) % b.max(4), 0);
                assert!(n < b.max(4));
            }
        }
    }

    #[test]
    fn trailer_round_trip_and_checks() {
        let mut t = [0u8; 7];
        write_trailer(&mut t, 4);
        assert_eq!(t, [1, 2, 3, 4, 5, 5, 4]);
        let mut pt = [0xaa; 16];
        pt[9..].copy_from_slice(&t);
        assert_eq!(check_trailer(&pt, true), Ok((5, 4)));
        pt[10] = 9;
        assert_eq!(check_trailer(&pt, true), Err(Error::BadPadding));
        assert_eq!(check_trailer(&pt, false), Ok((5, 4)));
        pt[14] = 15; // pad length past the start
        assert_eq!(check_trailer(&pt, false), Err(Error::BadPadding));
        assert_eq!(check_trailer(&[1], true), Err(Error::Truncated));
    }
}
