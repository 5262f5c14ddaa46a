//! A hash-chain LZ77 match finder with a bounded window, shared by the DEFLATE, LZS and LZF
//! compressors. Its tables are allocated once (at SA creation); each call resets only the
//! hash heads.
use alloc::vec;
use alloc::vec::Vec;

/// One LZ77 token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    /// A literal byte.
    Lit(u8),
    /// A copy of `len` bytes from `dist` bytes back.
    Match { len: u32, dist: u32 },
}

/// How a format constrains matches and how hard to look.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Shortest match the format can code.
    pub min_len: usize,
    /// Longest match the format can code.
    pub max_len: usize,
    /// Largest distance the format (or the peer's window) allows.
    pub max_dist: usize,
    /// Chain candidates examined per position.
    pub max_chain: u32,
    /// Stop searching once a match this long is found.
    pub nice_len: usize,
    /// Lazy evaluation (defer a match by one byte if the next one is longer).
    pub lazy: bool,
    /// Bytes hashed (2 or 3); must be <= `min_len`.
    pub hash_len: usize,
}

const HASH_BITS: u32 = 13;
const NONE: u32 = u32::MAX;

pub(crate) struct Matcher {
    head: Vec<u32>,
    prev: Vec<u32>,
    mask: usize,
}

impl core::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Matcher").field("window", &(self.mask + 1)).finish()
    }
}

impl Matcher {
    /// A matcher for distances up to `max_dist`.
    pub fn new(max_dist: usize) -> Self {
        let size = (max_dist + 1).next_power_of_two().max(1024) * 2;
        Matcher {
            head: vec![NONE; 1 << HASH_BITS],
            prev: vec![NONE; size],
            mask: size - 1,
        }
    }

    #[inline]
    fn hash(data: &[u8], pos: usize, hash_len: usize) -> usize {
        let v = if hash_len >= 3 {
            u32::from(data[pos]) | u32::from(data[pos + 1]) << 8 | u32::from(data[pos + 2]) << 16
        } else {
            u32::from(data[pos]) | u32::from(data[pos + 1]) << 8
        };
        (v.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
    }

    #[inline]
    fn insert(&mut self, data: &[u8], pos: usize, p: &Params) {
        if pos + p.hash_len <= data.len() {
            let h = Self::hash(data, pos, p.hash_len);
            self.prev[pos & self.mask] = self.head[h];
            self.head[h] = pos as u32;
        }
    }

    /// Finds the longest match at `pos` (then inserts `pos`). Returns (len, dist), len 0 if none.
    #[inline]
    fn find_and_insert(&mut self, data: &[u8], pos: usize, p: &Params) -> (usize, usize) {
        if pos + p.hash_len > data.len() {
            return (0, 0);
        }
        let h = Self::hash(data, pos, p.hash_len);
        let max_len = p.max_len.min(data.len() - pos);
        let mut best = (0usize, 0usize);
        if max_len >= p.min_len {
            let mut cand = self.head[h];
            let mut chain = p.max_chain;
            let mut best_len = p.min_len - 1;
            while cand != NONE && chain > 0 {
                let c = cand as usize;
                if c >= pos || pos - c > p.max_dist {
                    break;
                }
                if data[c + best_len] == data[pos + best_len] {
                    let l = common_len(&data[c..], &data[pos..pos + max_len]);
                    if l > best_len {
                        best_len = l;
                        best = (l, pos - c);
                        if l >= p.nice_len || l == max_len {
                            break;
                        }
                    }
                }
                cand = self.prev[c & self.mask];
                chain -= 1;
            }
        }
        self.prev[pos & self.mask] = self.head[h];
        self.head[h] = pos as u32;
        best
    }

    /// Hands `sink` the match `(len, dist)` starting at `start`, and enters the positions it
    /// covers after `pos` (the last one already in the hash chains) into the chains. Returns
    /// where parsing resumes, or `None` if `sink` refused the token.
    #[inline]
    fn take_match(
        &mut self,
        data: &[u8],
        p: &Params,
        sink: &mut impl FnMut(Token) -> bool,
        pos: usize,
        start: usize,
        (len, dist): (usize, usize),
    ) -> Option<usize> {
        if !sink(Token::Match {
            len: len as u32,
            dist: dist as u32,
        }) {
            return None;
        }
        let end = start + len;
        for q in pos + 1..end {
            self.insert(data, q, p);
        }
        Some(end)
    }

    /// Parses `data` into tokens handed to `sink`, in order. `sink` returns false to stop
    /// early (the output is full); then `parse` returns false.
    pub fn parse(&mut self, data: &[u8], p: &Params, mut sink: impl FnMut(Token) -> bool) -> bool {
        debug_assert!(p.hash_len <= p.min_len && p.max_dist < self.mask);
        self.head.fill(NONE);
        let n = data.len();
        let mut pos = 0;
        // A match found at pos - 1, waiting to see whether pos has a longer one.
        let mut pending: Option<(usize, usize)> = None;
        while pos < n {
            let (len, dist) = self.find_and_insert(data, pos, p);
            if let Some((plen, pdist)) = pending.take() {
                if len > plen {
                    if !sink(Token::Lit(data[pos - 1])) {
                        return false;
                    }
                    if len >= p.nice_len {
                        match self.take_match(data, p, &mut sink, pos, pos, (len, dist)) {
                            Some(end) => pos = end,
                            None => return false,
                        }
                    } else {
                        pending = Some((len, dist));
                        pos += 1;
                    }
                    continue;
                }
                match self.take_match(data, p, &mut sink, pos, pos - 1, (plen, pdist)) {
                    Some(end) => pos = end,
                    None => return false,
                }
                continue;
            }
            if len >= p.min_len {
                if p.lazy && len < p.nice_len && pos + 1 < n {
                    pending = Some((len, dist));
                    pos += 1;
                    continue;
                }
                match self.take_match(data, p, &mut sink, pos, pos, (len, dist)) {
                    Some(end) => pos = end,
                    None => return false,
                }
            } else {
                if !sink(Token::Lit(data[pos])) {
                    return false;
                }
                pos += 1;
            }
        }
        if let Some((plen, pdist)) = pending {
            // Unreachable in practice (a pending match always has a byte after it), kept for safety.
            return sink(Token::Match {
                len: plen as u32,
                dist: pdist as u32,
            });
        }
        true
    }
}

/// Length of the common prefix of `a` and `b` (at most `b.len()`).
#[inline]
fn common_len(a: &[u8], b: &[u8]) -> usize {
    let n = b.len().min(a.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().unwrap_or([0; 8]));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let d = x ^ y;
        if d != 0 {
            return i + (d.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(tokens: &[Token]) -> Vec<u8> {
        let mut out = Vec::new();
        for t in tokens {
            match *t {
                Token::Lit(b) => out.push(b),
                Token::Match { len, dist } => {
                    for _ in 0..len {
                        out.push(out[out.len() - dist as usize]);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn parse_respects_limits_and_reconstructs() {
        let mut data = Vec::new();
        let mut x = 12345u32;
        for i in 0..20000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            data.push(if i % 3 == 0 {
                (x % 7) as u8
            } else {
                b"abcabcab"[(i % 8) as usize]
            });
        }
        for lazy in [false, true] {
            let p = Params {
                min_len: 3,
                max_len: 258,
                max_dist: 2048,
                max_chain: 16,
                nice_len: 64,
                lazy,
                hash_len: 3,
            };
            let mut m = Matcher::new(2048);
            let mut toks = Vec::new();
            assert!(m.parse(&data, &p, |t| {
                toks.push(t);
                true
            }));
            for t in &toks {
                if let Token::Match { len, dist } = *t {
                    assert!((3..=258).contains(&len) && (1..=2048).contains(&dist));
                }
            }
            assert_eq!(expand(&toks), data);
        }
    }
}
