//! LZF (Marc Lehmann's liblzf format), written for this crate rather than using the
//! deprecated `lzf` crate (which wraps the C library and needs `std`).
//!
//! The format is a sequence of byte-aligned runs:
//!
//! ```text
//! 000LLLLL <L+1 literal bytes>                 literal run of 1..32 bytes
//! LLLOOOOO OOOOOOOO                            copy of L+2 bytes (L = 1..6), offset O+1
//! 111OOOOO LLLLLLLL OOOOOOOO                   copy of L+9 bytes (9..264), offset O+1
//! ```
//!
//! Offsets are 1..8192 back; the stream has no end marker (it ends with the input).
use crate::error::{DecompressError, Error};
use crate::lz77::{Matcher, Params, Token};

/// The largest LZF back reference distance.
pub const MAX_OFFSET: usize = 8192;
const MAX_LEN: usize = 264;
const MAX_LIT: usize = 32;

/// The LZF codec of one SA (allocates its match-finder tables once).
#[derive(Debug)]
pub struct LzfCodec {
    matcher: Matcher,
    params: Params,
}

impl Default for LzfCodec {
    fn default() -> Self {
        Self::new()
    }
}

struct Out<'a> {
    out: &'a mut [u8],
    pos: usize,
    ok: bool,
}

impl Out<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        match self.out.get_mut(self.pos..self.pos + bytes.len()) {
            Some(d) => {
                d.copy_from_slice(bytes);
                self.pos += bytes.len();
            }
            None => self.ok = false,
        }
    }
}

impl LzfCodec {
    /// A codec: greedy parsing, short hash chains (LZF is meant to be fast).
    pub fn new() -> Self {
        LzfCodec {
            matcher: Matcher::new(MAX_OFFSET),
            params: Params {
                min_len: 3,
                max_len: MAX_LEN,
                max_dist: MAX_OFFSET,
                max_chain: 4,
                nice_len: 32,
                lazy: false,
                hash_len: 3,
            },
        }
    }

    /// Compresses `input` into `out`; `None` if it does not fit.
    pub fn compress(&mut self, input: &[u8], out: &mut [u8]) -> Option<usize> {
        let mut o = Out { out, pos: 0, ok: true };
        let mut lit_start = 0usize;
        let mut lit_len = 0usize;
        let mut pos = 0usize;
        let ok = self.matcher.parse(input, &self.params, |t| {
            match t {
                Token::Lit(_) => {
                    if lit_len == 0 {
                        lit_start = pos;
                    }
                    lit_len += 1;
                    pos += 1;
                    if lit_len == MAX_LIT {
                        o.put(&[(MAX_LIT - 1) as u8]);
                        o.put(&input[lit_start..pos]);
                        lit_len = 0;
                    }
                }
                Token::Match { len, dist } => {
                    if lit_len > 0 {
                        o.put(&[(lit_len - 1) as u8]);
                        o.put(&input[lit_start..pos]);
                        lit_len = 0;
                    }
                    let l = len as usize - 2;
                    let off = dist as usize - 1;
                    if l < 7 {
                        o.put(&[(l << 5 | off >> 8) as u8, off as u8]);
                    } else {
                        o.put(&[(7 << 5 | off >> 8) as u8, (l - 7) as u8, off as u8]);
                    }
                    pos += len as usize;
                }
            }
            o.ok
        });
        if !ok {
            return None;
        }
        if lit_len > 0 {
            o.put(&[(lit_len - 1) as u8]);
            o.put(&input[lit_start..pos]);
        }
        o.ok.then_some(o.pos)
    }

    /// Decompresses `input` into `out` (whose length is the bound).
    pub fn decompress(&mut self, input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        decompress(input, out)
    }
}

/// Decompresses an LZF stream into `out`; see [`LzfCodec::decompress`].
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
    let (mut ip, mut op) = (0usize, 0usize);
    while ip < input.len() {
        let ctrl = input[ip] as usize;
        ip += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            let src = input.get(ip..ip + n).ok_or(DecompressError::Truncated)?;
            out.get_mut(op..op + n)
                .ok_or(Error::DecompressedTooBig)?
                .copy_from_slice(src);
            ip += n;
            op += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += *input.get(ip).ok_or(DecompressError::Truncated)? as usize;
                ip += 1;
            }
            let lo = *input.get(ip).ok_or(DecompressError::Truncated)? as usize;
            ip += 1;
            let dist = ((ctrl & 0x1f) << 8 | lo) + 1;
            let len = len + 2;
            if dist > op {
                return Err(DecompressError::OffsetBeyondOutput.into());
            }
            if len > out.len() - op {
                return Err(Error::DecompressedTooBig);
            }
            for i in op..op + len {
                out[i] = out[i - dist];
            }
            op += len;
        }
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn known_answer_and_round_trip() {
        // "abcabcabc": literal run "abc" (ctrl 2), then a 6-byte copy at offset 3:
        // L = 6 - 2 = 4, O = 3 - 1 = 2 -> 100 00000, 00000010.
        let stream = [2, b'a', b'b', b'c', 0x80, 0x02];
        let mut out = [0u8; 16];
        assert_eq!(decompress(&stream, &mut out).unwrap(), 9);
        assert_eq!(&out[..9], b"abcabcabc");
        let mut c = LzfCodec::new();
        let mut buf = [0u8; 16];
        let n = c.compress(b"abcabcabc", &mut buf).unwrap();
        assert_eq!(&buf[..n], &stream);
        // Long copy: 300 zero bytes.
        let z = vec![0u8; 300];
        let mut buf = vec![0u8; 64];
        let n = c.compress(&z, &mut buf).unwrap();
        let mut back = vec![0u8; 300];
        assert_eq!(decompress(&buf[..n], &mut back).unwrap(), 300);
        assert_eq!(back, z);
        let mut d: Vec<u8> = Vec::new();
        for i in 0..20000u32 {
            d.push((i * 7 % 251) as u8 ^ (i / 3000) as u8);
        }
        let mut buf = vec![0u8; 30000];
        let n = c.compress(&d, &mut buf).unwrap();
        let mut back = vec![0u8; 20000];
        assert_eq!(decompress(&buf[..n], &mut back).unwrap(), 20000);
        assert_eq!(back, d);
    }

    #[test]
    fn malformed() {
        let mut out = [0u8; 8];
        assert_eq!(decompress(&[3, 1, 2], &mut out), Err(DecompressError::Truncated.into()));
        assert_eq!(
            decompress(&[0, 1, 0x20, 1], &mut out),
            Err(DecompressError::OffsetBeyondOutput.into())
        );
        assert_eq!(
            decompress(&[0, 1, 0xe0], &mut out),
            Err(DecompressError::Truncated.into())
        );
        assert_eq!(
            decompress(&[0, 1, 0xe0, 10, 0], &mut out),
            Err(Error::DecompressedTooBig)
        );
    }
}
