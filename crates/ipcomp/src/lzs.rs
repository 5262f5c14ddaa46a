//! LZS (ANSI X3.241-1994) as RFC 1974 and RFC 2395 use it. Written for this crate: no crate
//! implements it.
//!
//! The compressed data is a bit string, most significant bit of each byte first:
//!
//! ```text
//! literal:        0 <8-bit byte>
//! string:         1 <offset> <length>
//!   offset:       1 <7-bit offset>      offsets 1..127
//!                 0 <11-bit offset>     offsets 1..2047 (0 is invalid)
//!   length:       00 = 2    01 = 3    10 = 4
//!                 1100 = 5  1101 = 6  1110 = 7
//!                 1111 <nibble N>: if N < 15, 8 + N (8..22); every N = 15 adds 15 and
//!                 another nibble follows: 1111 1111 0000 = 23, 1111 1111 1111 0000 = 38, ...
//! end marker:     1 1 0000000 (a 7-bit offset of 0), then 0 bits up to a byte boundary.
//! ```
//!
//! Every IPComp packet is compressed on its own (history reset) and ends with the end marker
//! (RFC 2395 section 2). The window is 2 KB: offsets 1..2047.
use crate::error::{DecompressError, Error};
use crate::lz77::{Matcher, Params, Token};

/// The largest LZS offset (11 bits).
pub const MAX_OFFSET: usize = 2047;

/// MSB-first bit writer into a fixed slice; overflow is sticky.
struct MsbWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
    acc: u64,
    nbits: u32,
    overflow: bool,
}

impl<'a> MsbWriter<'a> {
    #[inline]
    fn put(&mut self, bits: u32, n: u32) {
        self.acc = self.acc << n | u64::from(bits);
        self.nbits += n;
        while self.nbits >= 8 {
            self.nbits -= 8;
            if self.pos < self.out.len() {
                self.out[self.pos] = (self.acc >> self.nbits) as u8;
                self.pos += 1;
            } else {
                self.overflow = true;
            }
        }
        self.acc &= (1u64 << self.nbits) - 1;
    }
}

/// MSB-first bit reader.
struct MsbReader<'a> {
    data: &'a [u8],
    bit: usize,
}

impl MsbReader<'_> {
    fn remaining(&self) -> usize {
        self.data.len() * 8 - self.bit
    }
    /// The next `n` (<= 16) bits, MSB first.
    #[inline]
    fn get(&mut self, n: u32) -> Result<u32, DecompressError> {
        if self.remaining() < n as usize {
            return Err(DecompressError::Truncated);
        }
        let i = self.bit / 8;
        let mut w = 0u32;
        for k in 0..3 {
            w = w << 8 | u32::from(self.data.get(i + k).copied().unwrap_or(0));
        }
        let shift = 24 - (self.bit % 8) as u32 - n;
        self.bit += n as usize;
        Ok(w >> shift & ((1 << n) - 1))
    }
    /// Whether only zero padding (< 8 bits, up to the byte boundary) remains.
    fn only_padding(&self) -> bool {
        let r = self.remaining();
        r < 8 && (r == 0 || self.data[self.bit / 8] & ((1u16 << r) - 1) as u8 == 0)
    }
}

/// The LZS codec of one SA: a 2 KB-window hash-chain match finder, allocated once.
#[derive(Debug)]
pub struct LzsCodec {
    matcher: Matcher,
    params: Params,
}

impl Default for LzsCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl LzsCodec {
    /// A codec (allocates its match-finder tables).
    pub fn new() -> Self {
        LzsCodec {
            matcher: Matcher::new(MAX_OFFSET),
            params: Params {
                min_len: 2,
                max_len: usize::MAX,
                max_dist: MAX_OFFSET,
                max_chain: 16,
                nice_len: 64,
                lazy: true,
                hash_len: 2,
            },
        }
    }

    /// Compresses `input` into `out`, ending with the end marker and padding. Returns the
    /// length, or `None` if it does not fit.
    pub fn compress(&mut self, input: &[u8], out: &mut [u8]) -> Option<usize> {
        let mut w = MsbWriter {
            out,
            pos: 0,
            acc: 0,
            nbits: 0,
            overflow: false,
        };
        let ok = self.matcher.parse(input, &self.params, |t| {
            match t {
                Token::Lit(b) => w.put(u32::from(b), 9),
                Token::Match { len, dist } => {
                    if dist < 128 {
                        w.put(0b11 << 7 | dist, 9);
                    } else {
                        w.put(0b10 << 11 | dist, 13);
                    }
                    put_length(&mut w, len as usize);
                }
            }
            !w.overflow
        });
        if !ok {
            return None;
        }
        w.put(0b1_1000_0000, 9);
        if w.nbits > 0 {
            w.put(0, 8 - w.nbits);
        }
        (!w.overflow).then_some(w.pos)
    }

    /// Decompresses `input` into `out` (whose length is the bound). Rejects truncated input,
    /// offsets of 0 or beyond the output, a missing end marker and data after it.
    pub fn decompress(&mut self, input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        decompress(input, out)
    }
}

fn put_length(w: &mut MsbWriter<'_>, len: usize) {
    match len {
        2..=4 => w.put((len - 2) as u32, 2),
        5..=7 => w.put(0b1100 | (len - 5) as u32, 4),
        _ => {
            w.put(0b1111, 4);
            let mut n = len - 8;
            while n >= 15 {
                w.put(0b1111, 4);
                n -= 15;
                if w.overflow {
                    return;
                }
            }
            w.put(n as u32, 4);
        }
    }
}

/// Decompresses an LZS stream (see the module docs) into `out`; see [`LzsCodec::decompress`].
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
    let mut r = MsbReader { data: input, bit: 0 };
    let mut n = 0usize;
    loop {
        if r.only_padding() {
            return Err(DecompressError::MissingEndMarker.into());
        }
        if r.get(1)? == 0 {
            let b = r.get(8)? as u8;
            *out.get_mut(n).ok_or(Error::DecompressedTooBig)? = b;
            n += 1;
            continue;
        }
        let off = if r.get(1)? == 1 {
            let o = r.get(7)? as usize;
            if o == 0 {
                // End marker: only zero padding may follow.
                if r.bit & 7 != 0 {
                    let pad = 8 - (r.bit % 8) as u32;
                    if r.get(pad)? != 0 {
                        return Err(DecompressError::TrailingData.into());
                    }
                }
                if r.remaining() != 0 {
                    return Err(DecompressError::TrailingData.into());
                }
                return Ok(n);
            }
            o
        } else {
            let o = r.get(11)? as usize;
            if o == 0 {
                return Err(DecompressError::OffsetZero.into());
            }
            o
        };
        let len = match r.get(2)? {
            v @ 0..=2 => v as usize + 2,
            _ => match r.get(2)? {
                v @ 0..=2 => v as usize + 5,
                _ => {
                    let mut len = 8usize;
                    loop {
                        let v = r.get(4)? as usize;
                        len += v;
                        if v < 15 {
                            break;
                        }
                        if len > out.len() {
                            return Err(Error::DecompressedTooBig);
                        }
                    }
                    len
                }
            },
        };
        if off > n {
            return Err(DecompressError::OffsetBeyondOutput.into());
        }
        if len > out.len() - n {
            return Err(Error::DecompressedTooBig);
        }
        for i in n..n + len {
            out[i] = out[i - off];
        }
        n += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_packs_msb_first() {
        let mut buf = [0u8; 4];
        let mut w = MsbWriter {
            out: &mut buf,
            pos: 0,
            acc: 0,
            nbits: 0,
            overflow: false,
        };
        w.put(0b101, 3);
        w.put(0b1_1110_0001, 9);
        w.put(0b0000, 4);
        assert_eq!((w.pos, w.overflow), (2, false));
        assert_eq!(buf[..2], [0b1011_1110, 0b0001_0000]);
    }
}
