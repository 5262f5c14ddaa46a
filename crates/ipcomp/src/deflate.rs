//! DEFLATE (RFC 1951) for IPComp (RFC 2394): raw deflate, no zlib header, no history across
//! packets.
//!
//! Compression is this crate's own encoder: the shared hash-chain LZ77 parser with a bounded
//! match distance ([`DeflateCodec::max_distance`], default [`LINUX_WINDOW`] = 2048) followed by
//! per-block dynamic or fixed Huffman coding, whichever is smaller. Bounding the distance is
//! what makes the output inflatable by Linux, whose IPComp inflates with `windowBits` 11 (a
//! 2 KB window). miniz_oxide's compressor always uses a 32 KB window, so it cannot be used for
//! that. Decompression is miniz_oxide's raw inflate into a bounded output slice; it accepts
//! any window up to 32 KB.
use crate::error::{DecompressError, Error};
use crate::lz77::{Matcher, Params, Token};
use alloc::boxed::Box;
use alloc::vec::Vec;
use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;

/// The window of Linux's IPComp DEFLATE (`windowBits` 11): the default largest match distance.
pub const LINUX_WINDOW: usize = 2048;
/// The largest distance DEFLATE can code.
pub const MAX_WINDOW: usize = 32768;

const BLOCK_TOKENS: usize = 16384;
const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258,
];
const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
    8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13,
];
const CL_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

/// Length code index (0..29) for each match length 0..=258.
const LEN_CODE: [u8; 259] = {
    let mut t = [0u8; 259];
    let mut code = 0;
    let mut len = 3;
    while len <= 258 {
        while code + 1 < 29 && LEN_BASE[code + 1] as usize <= len {
            code += 1;
        }
        t[len] = code as u8;
        len += 1;
    }
    t[258] = 28;
    t
};

#[inline]
fn dist_code(d: u32) -> usize {
    DIST_BASE.partition_point(|&b| u32::from(b) <= d) - 1
}

/// An LSB-first bit writer into a fixed slice; overflow is sticky and stops writing.
pub(crate) struct LsbWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
    acc: u64,
    nbits: u32,
    overflow: bool,
}

impl<'a> LsbWriter<'a> {
    fn new(out: &'a mut [u8]) -> Self {
        LsbWriter {
            out,
            pos: 0,
            acc: 0,
            nbits: 0,
            overflow: false,
        }
    }
    #[inline]
    fn put(&mut self, bits: u32, n: u32) {
        self.acc |= u64::from(bits) << self.nbits;
        self.nbits += n;
        while self.nbits >= 8 {
            if self.pos < self.out.len() {
                self.out[self.pos] = self.acc as u8;
                self.pos += 1;
            } else {
                self.overflow = true;
            }
            self.acc >>= 8;
            self.nbits -= 8;
        }
    }
    fn finish(mut self) -> Option<usize> {
        if self.nbits > 0 {
            self.put(0, 8 - self.nbits);
        }
        (!self.overflow).then_some(self.pos)
    }
}

/// Code lengths limited to `limit` bits for the symbols with non-zero `freq` (at least two
/// symbols get a code, so every code is complete).
fn build_lengths(freq: &[u32], limit: usize, lens: &mut [u8]) {
    let mut syms = [(0u32, 0u16); 288];
    let mut n = 0;
    for (s, &f) in freq.iter().enumerate() {
        if f > 0 {
            syms[n] = (f, s as u16);
            n += 1;
        }
    }
    lens.iter_mut().for_each(|l| *l = 0);
    // Two codes at least: a lone code of length 1 is legal but not every inflater likes it.
    let mut s = 0;
    while n < 2 {
        if !syms[..n].iter().any(|&(_, x)| x == s) {
            syms[n] = (1, s);
            n += 1;
        }
        s += 1;
    }
    let syms = &mut syms[..n];
    syms.sort_unstable();
    let mut a = [0u32; 288];
    for (i, &(f, _)) in syms.iter().enumerate() {
        a[i] = f;
    }
    minimum_redundancy(&mut a[..n]);
    let mut count = [0u32; 33];
    for &l in &a[..n] {
        count[(l as usize).min(32)] += 1;
    }
    // Enforce the limit (the zlib/miniz way): fold longer codes into `limit`, then rebalance.
    for i in limit + 1..=32 {
        count[limit] += count[i];
        count[i] = 0;
    }
    let mut total: u64 = (1..=limit).map(|i| u64::from(count[i]) << (limit - i)).sum();
    while total != 1u64 << limit {
        count[limit] -= 1;
        for i in (1..limit).rev() {
            if count[i] != 0 {
                count[i] -= 1;
                count[i + 1] += 2;
                break;
            }
        }
        total -= 1;
    }
    // Least frequent symbols get the longest codes.
    let mut idx = 0;
    for len in (1..=limit).rev() {
        for _ in 0..count[len] {
            lens[syms[idx].1 as usize] = len as u8;
            idx += 1;
        }
    }
}

/// In-place Huffman code lengths for frequencies sorted ascending (Moffat and Katajainen).
fn minimum_redundancy(a: &mut [u32]) {
    let n = a.len();
    if n == 0 {
        return;
    }
    if n == 1 {
        a[0] = 1;
        return;
    }
    a[0] += a[1];
    let (mut root, mut leaf) = (0usize, 2usize);
    for next in 1..n - 1 {
        if leaf >= n || a[root] < a[leaf] {
            a[next] = a[root];
            a[root] = next as u32;
            root += 1;
        } else {
            a[next] = a[leaf];
            leaf += 1;
        }
        if leaf >= n || (root < next && a[root] < a[leaf]) {
            a[next] += a[root];
            a[root] = next as u32;
            root += 1;
        } else {
            a[next] += a[leaf];
            leaf += 1;
        }
    }
    a[n - 2] = 0;
    for next in (0..n - 2).rev() {
        a[next] = a[a[next] as usize] + 1;
    }
    let (mut avbl, mut used, mut dpth) = (1i64, 0i64, 0u32);
    let (mut root, mut next) = (n as i64 - 2, n as i64 - 1);
    while avbl > 0 {
        while root >= 0 && a[root as usize] == dpth {
            used += 1;
            root -= 1;
        }
        while avbl > used {
            a[next as usize] = dpth;
            next -= 1;
            avbl -= 1;
        }
        avbl = 2 * used;
        dpth += 1;
        used = 0;
    }
}

/// Canonical codes, bit-reversed for the LSB-first stream.
fn build_codes(lens: &[u8], codes: &mut [u16]) {
    // All 288 fixed literal/length codes take part in the canonical numbering (RFC 1951 3.2.6).
    let mut bl_count = [0u16; 16];
    for &l in lens {
        bl_count[l as usize] += 1;
    }
    bl_count[0] = 0;
    let mut next = [0u16; 16];
    let mut code = 0u16;
    for bits in 1..16 {
        code = (code + bl_count[bits - 1]) << 1;
        next[bits] = code;
    }
    for (s, &l) in lens.iter().enumerate() {
        if l > 0 {
            let c = next[l as usize];
            next[l as usize] += 1;
            codes[s] = c.reverse_bits() >> (16 - l);
        } else {
            codes[s] = 0;
        }
    }
}

fn fixed_lit_len(s: usize) -> u8 {
    match s {
        0..=143 => 8,
        144..=255 => 9,
        256..=279 => 7,
        _ => 8,
    }
}

/// The DEFLATE codec of one SA: match finder, token buffer and inflater, allocated once.
pub struct DeflateCodec {
    matcher: Matcher,
    params: Params,
    tokens: Vec<u32>,
    inflater: Box<DecompressorOxide>,
}

impl core::fmt::Debug for DeflateCodec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeflateCodec")
            .field("max_distance", &self.params.max_dist)
            .finish()
    }
}

impl Default for DeflateCodec {
    fn default() -> Self {
        Self::new(LINUX_WINDOW)
    }
}

impl DeflateCodec {
    /// A codec whose compressor never emits a match distance above `max_distance` (clamped to
    /// 1..=32768). Use [`LINUX_WINDOW`] (the default) to interoperate with Linux.
    pub fn new(max_distance: usize) -> Self {
        let max_dist = max_distance.clamp(1, MAX_WINDOW);
        DeflateCodec {
            matcher: Matcher::new(max_dist),
            params: Params {
                min_len: 3,
                max_len: 258,
                max_dist,
                max_chain: 32,
                nice_len: 128,
                lazy: true,
                hash_len: 3,
            },
            tokens: Vec::with_capacity(BLOCK_TOKENS),
            inflater: Box::default(),
        }
    }

    /// The largest match distance the compressor emits.
    pub fn max_distance(&self) -> usize {
        self.params.max_dist
    }

    /// Compresses `input` into `out`. Returns the length, or `None` if it does not fit in `out`
    /// (compression gives up as soon as the output is full).
    pub fn compress(&mut self, input: &[u8], out: &mut [u8]) -> Option<usize> {
        let mut w = LsbWriter::new(out);
        let DeflateCodec {
            matcher,
            params,
            tokens,
            ..
        } = self;
        tokens.clear();
        let ok = matcher.parse(input, params, |t| {
            tokens.push(match t {
                Token::Lit(b) => u32::from(b),
                Token::Match { len, dist } => 1 << 31 | len << 16 | dist,
            });
            if tokens.len() == BLOCK_TOKENS {
                write_block(tokens, false, &mut w);
                tokens.clear();
            }
            !w.overflow
        });
        if !ok {
            return None;
        }
        write_block(tokens, true, &mut w);
        tokens.clear();
        w.finish()
    }

    /// Inflates raw DEFLATE `input` into `out`, whose length is the bound: more output is
    /// [`Error::DecompressedTooBig`]. Bytes after the final block are ignored.
    pub fn decompress(&mut self, input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        self.inflater.init();
        let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
        let (status, _, n) = decompress(&mut self.inflater, input, out, 0, flags);
        match status {
            TINFLStatus::Done => Ok(n),
            TINFLStatus::HasMoreOutput => Err(Error::DecompressedTooBig),
            TINFLStatus::NeedsMoreInput | TINFLStatus::FailedCannotMakeProgress => {
                Err(DecompressError::DeflateTruncated.into())
            }
            _ => Err(DecompressError::InvalidDeflate.into()),
        }
    }
}

/// Writes one block of `tokens` (plus end-of-block) as dynamic or fixed Huffman, whichever is
/// smaller.
fn write_block(tokens: &[u32], last: bool, w: &mut LsbWriter<'_>) {
    let mut lit_freq = [0u32; 286];
    let mut dist_freq = [0u32; 30];
    let mut extra_bits = 0u64;
    for &t in tokens {
        if t >> 31 == 0 {
            lit_freq[t as usize] += 1;
        } else {
            let len = (t >> 16 & 0x7fff) as usize;
            let lc = LEN_CODE[len] as usize;
            let dc = dist_code(t & 0xffff);
            lit_freq[257 + lc] += 1;
            dist_freq[dc] += 1;
            extra_bits += u64::from(LEN_EXTRA[lc]) + u64::from(DIST_EXTRA[dc]);
        }
    }
    lit_freq[256] = 1;
    let mut lit_lens = [0u8; 288];
    let mut dist_lens = [0u8; 30];
    build_lengths(&lit_freq, 15, &mut lit_lens[..286]);
    build_lengths(&dist_freq, 15, &mut dist_lens);
    let hlit = 257.max(lit_lens.iter().rposition(|&l| l != 0).map_or(0, |i| i + 1));
    let hdist = 1.max(dist_lens.iter().rposition(|&l| l != 0).map_or(0, |i| i + 1));
    // Run-length code the concatenated code lengths (RFC 1951 3.2.7).
    let mut all = [0u8; 316];
    all[..hlit].copy_from_slice(&lit_lens[..hlit]);
    all[hlit..hlit + hdist].copy_from_slice(&dist_lens[..hdist]);
    let all = &all[..hlit + hdist];
    let mut rle = [(0u8, 0u8); 316];
    let mut nrle = 0;
    let mut i = 0;
    while i < all.len() {
        let v = all[i];
        let mut run = all[i..].iter().take_while(|&&x| x == v).count();
        i += run;
        if v == 0 {
            while run >= 11 {
                let k = run.min(138);
                rle[nrle] = (18, (k - 11) as u8);
                nrle += 1;
                run -= k;
            }
            if run >= 3 {
                rle[nrle] = (17, (run - 3) as u8);
                nrle += 1;
                run = 0;
            }
        } else {
            rle[nrle] = (v, 0);
            nrle += 1;
            run -= 1;
            while run >= 3 {
                let k = run.min(6);
                rle[nrle] = (16, (k - 3) as u8);
                nrle += 1;
                run -= k;
            }
        }
        for _ in 0..run {
            rle[nrle] = (v, 0);
            nrle += 1;
        }
    }
    let rle = &rle[..nrle];
    let mut cl_freq = [0u32; 19];
    for &(s, _) in rle {
        cl_freq[s as usize] += 1;
    }
    let mut cl_lens = [0u8; 19];
    build_lengths(&cl_freq, 7, &mut cl_lens);
    let hclen = 4.max(CL_ORDER.iter().rposition(|&s| cl_lens[s] != 0).map_or(0, |i| i + 1));

    let cl_extra = |s: u8| -> u64 {
        match s {
            16 => 2,
            17 => 3,
            18 => 7,
            _ => 0,
        }
    };
    let mut dyn_bits = 3 + 5 + 5 + 4 + 3 * hclen as u64 + extra_bits;
    dyn_bits += rle
        .iter()
        .map(|&(s, _)| u64::from(cl_lens[s as usize]) + cl_extra(s))
        .sum::<u64>();
    let mut fixed_bits = 3 + extra_bits;
    for s in 0..286 {
        dyn_bits += u64::from(lit_freq[s]) * u64::from(lit_lens[s]);
        fixed_bits += u64::from(lit_freq[s]) * u64::from(fixed_lit_len(s));
    }
    for d in 0..30 {
        dyn_bits += u64::from(dist_freq[d]) * u64::from(dist_lens[d]);
        fixed_bits += u64::from(dist_freq[d]) * 5;
    }

    let mut lit_codes = [0u16; 288];
    let mut dist_codes = [0u16; 30];
    if fixed_bits <= dyn_bits {
        for (s, l) in lit_lens.iter_mut().enumerate() {
            *l = fixed_lit_len(s);
        }
        dist_lens = [5; 30];
        w.put(u32::from(last) | 1 << 1, 3);
    } else {
        w.put(u32::from(last) | 2 << 1, 3);
        w.put((hlit - 257) as u32, 5);
        w.put((hdist - 1) as u32, 5);
        w.put((hclen - 4) as u32, 4);
        for &s in &CL_ORDER[..hclen] {
            w.put(u32::from(cl_lens[s]), 3);
        }
        let mut cl_codes = [0u16; 19];
        build_codes(&cl_lens, &mut cl_codes);
        for &(s, e) in rle {
            w.put(u32::from(cl_codes[s as usize]), u32::from(cl_lens[s as usize]));
            let eb = cl_extra(s) as u32;
            if eb > 0 {
                w.put(u32::from(e), eb);
            }
        }
    }
    build_codes(&lit_lens, &mut lit_codes);
    build_codes(&dist_lens, &mut dist_codes);
    for &t in tokens {
        if w.overflow {
            return;
        }
        if t >> 31 == 0 {
            w.put(u32::from(lit_codes[t as usize]), u32::from(lit_lens[t as usize]));
        } else {
            let len = (t >> 16 & 0x7fff) as usize;
            let dist = t & 0xffff;
            let lc = LEN_CODE[len] as usize;
            let dc = dist_code(dist);
            w.put(u32::from(lit_codes[257 + lc]), u32::from(lit_lens[257 + lc]));
            if LEN_EXTRA[lc] > 0 {
                w.put((len - LEN_BASE[lc] as usize) as u32, u32::from(LEN_EXTRA[lc]));
            }
            w.put(u32::from(dist_codes[dc]), u32::from(dist_lens[dc]));
            if DIST_EXTRA[dc] > 0 {
                w.put(dist - u32::from(DIST_BASE[dc]), u32::from(DIST_EXTRA[dc]));
            }
        }
    }
    w.put(u32::from(lit_codes[256]), u32::from(lit_lens[256]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn sample(n: usize, seed: u32) -> Vec<u8> {
        let words: [&[u8]; 8] = [
            b"the ", b"quick ", b"brown ", b"fox ", b"jumps ", b"over ", b"lazy ", b"dog\n",
        ];
        let mut x = seed | 1;
        let mut v = Vec::new();
        while v.len() < n {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if x % 5 == 1 {
                v.push((x >> 8) as u8);
            } else {
                v.extend_from_slice(words[(x >> 4) as usize % 8]);
            }
        }
        v.truncate(n);
        v
    }

    /// Inflates through a 2048-byte ring buffer, as a 2 KB-window inflater holds its history:
    /// any distance beyond 2048 would read the wrong bytes.
    fn inflate_2k_ring(data: &[u8]) -> Vec<u8> {
        let mut r = DecompressorOxide::new();
        let mut ring = [0u8; 2048];
        let mut out = Vec::new();
        let (mut inp, mut pos) = (0, 0);
        loop {
            let (st, used, n) = decompress(&mut r, &data[inp..], &mut ring, pos, 0);
            inp += used;
            out.extend_from_slice(&ring[pos..pos + n]);
            pos = (pos + n) & 2047;
            match st {
                TINFLStatus::Done => return out,
                TINFLStatus::HasMoreOutput => {}
                s => panic!("inflate: {s:?}"),
            }
        }
    }

    #[test]
    fn round_trip_various_sizes() {
        let mut c = DeflateCodec::default();
        for &n in &[0usize, 1, 2, 3, 10, 100, 1000, 4096, 30000, 70000] {
            let d = sample(n, n as u32 + 7);
            let mut out = vec![0u8; n + n / 4 + 64];
            let len = c.compress(&d, &mut out).unwrap();
            let mut back = vec![0u8; n];
            assert_eq!(c.decompress(&out[..len], &mut back).unwrap(), n);
            assert_eq!(back, d);
            assert_eq!(inflate_2k_ring(&out[..len]), d, "n={n}");
            // And miniz_oxide's own one-shot inflate agrees.
            assert_eq!(miniz_oxide::inflate::decompress_to_vec(&out[..len]).unwrap(), d);
        }
    }

    #[test]
    fn skewed_frequencies_hit_the_length_limit() {
        // Fibonacci-like frequencies force Huffman depths above 15 before limiting.
        let mut d = Vec::new();
        let (mut a, mut b) = (1usize, 1usize);
        for s in 0..24u8 {
            for _ in 0..a {
                d.push(s.wrapping_mul(37));
            }
            (a, b) = (b, a + b);
        }
        // Shuffle so that LZ77 finds few matches.
        let mut x = 99u32;
        for i in (1..d.len()).rev() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            d.swap(i, x as usize % (i + 1));
        }
        let mut c = DeflateCodec::default();
        let mut out = vec![0u8; d.len() * 2 + 64];
        let len = c.compress(&d, &mut out).unwrap();
        assert_eq!(miniz_oxide::inflate::decompress_to_vec(&out[..len]).unwrap(), d);
    }

    #[test]
    fn output_full_gives_none_and_bound_gives_error() {
        let mut c = DeflateCodec::default();
        let d = sample(5000, 3);
        let mut small = [0u8; 100];
        assert_eq!(c.compress(&d, &mut small), None);
        let mut out = vec![0u8; 6000];
        let len = c.compress(&d, &mut out).unwrap();
        let mut back = vec![0u8; 4999];
        assert_eq!(c.decompress(&out[..len], &mut back), Err(Error::DecompressedTooBig));
        assert_eq!(
            c.decompress(&out[..len / 2], &mut vec![0u8; 5000]),
            Err(DecompressError::DeflateTruncated.into())
        );
        // Block type 3 is invalid.
        assert_eq!(
            c.decompress(&[0x07, 0, 0], &mut back),
            Err(DecompressError::InvalidDeflate.into())
        );
    }
}
