//! The compression data sets: the corpus files (`$IPSEC_CORPUS`, default `../shared/corpus`
//! beside the workspace), seeded random bytes, and generated stand-ins when the corpus is absent.

use std::path::PathBuf;

/// The corpus files, in the paper's order.
pub const CORPUS: [&str; 7] = ["obj2", "progl", "paper2", "trans", "book1", "pic", "gif"];

/// Bytes every data set has at least (the largest sample is one 63 KB block; 40 1-KB blocks and
/// 10 4-KB blocks need 40 KB).
const GENERATED_LEN: usize = 128 * 1024;

/// One data set.
pub struct DataSet {
    pub name: String,
    pub data: Vec<u8>,
    /// `corpus`, `generated` or `seeded-random` (the ratios file records it).
    pub source: &'static str,
}

/// Where the corpus is looked for.
pub fn corpus_dir() -> PathBuf {
    match std::env::var_os("IPSEC_CORPUS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"),
    }
}

/// xorshift32: deterministic bytes without a dependency.
pub fn seeded_random(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 11) as u8
        })
        .collect()
}

/// Text-like bytes: words from a small skewed vocabulary, capitals and punctuation, seeded.
pub fn generated_text(n: usize, seed: u32) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "the ",
        "of ",
        "and ",
        "a ",
        "to ",
        "in ",
        "is ",
        "that ",
        "packet ",
        "compression ",
        "security ",
        "association ",
        "header ",
        "payload ",
        "tunnel ",
        "window ",
        "ratio ",
        "network ",
        "with ",
        "for ",
        "each ",
        "rate ",
        ", ",
        ".\n",
    ];
    let r = seeded_random(n, seed);
    let mut out = Vec::with_capacity(n + 16);
    let mut i = 0;
    while out.len() < n {
        let b = r[i % r.len()] as usize;
        i += 1;
        match b {
            0..=9 => out.push(b'A' + b as u8),
            10..=19 => out.extend_from_slice(format!("{} ", b * 37 % 1000).as_bytes()),
            // Skewed: low word indices are more frequent.
            _ => out.extend_from_slice(WORDS[(b * b / 2731) % WORDS.len()].as_bytes()),
        }
    }
    out.truncate(n);
    out
}

/// The corpus files that are there (in [`CORPUS`] order) and `random`; without any corpus file,
/// `generated-text` and `random`, saying so on stderr.
pub fn load() -> Vec<DataSet> {
    let dir = corpus_dir();
    let mut sets = Vec::new();
    let mut missing = Vec::new();
    for name in CORPUS {
        match std::fs::read(dir.join(name)) {
            Ok(data) => sets.push(DataSet {
                name: name.to_string(),
                data,
                source: "corpus",
            }),
            Err(_) => missing.push(name),
        }
    }
    if sets.is_empty() {
        eprintln!(
            "NOTE: no corpus at {} (set IPSEC_CORPUS): benchmarking compression on generated data \
             (seeded text-like bytes and seeded random bytes) instead",
            dir.display()
        );
        sets.push(DataSet {
            name: "generated-text".into(),
            data: generated_text(GENERATED_LEN, 7),
            source: "generated",
        });
    } else if !missing.is_empty() {
        eprintln!("NOTE: corpus at {} lacks {missing:?}; those are skipped", dir.display());
    }
    sets.push(DataSet {
        name: "random".into(),
        data: seeded_random(GENERATED_LEN, 0xC0FFEE),
        source: "seeded-random",
    });
    sets
}

/// Compressible packet payload for the IPComp framing benches: paper2 if present, else generated
/// text; `n` bytes.
pub fn text_payload(sets: &[DataSet], n: usize) -> Vec<u8> {
    let src = sets
        .iter()
        .find(|s| s.name == "paper2")
        .map_or_else(|| generated_text(n, 7), |s| s.data.clone());
    src.iter().copied().cycle().take(n).collect()
}
