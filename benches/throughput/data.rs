//! The compression data sets: the corpus files (`$IPSEC_CORPUS`, default `../shared/corpus`
//! beside the workspace), seeded random bytes, and a generated stand-in of the same size for
//! each corpus file that is absent (the bench still runs, and says loudly that its figures are
//! not the paper's).

use std::path::PathBuf;

/// The corpus files, in the paper's order, with their sizes (the stand-ins' sizes).
pub const CORPUS: [(&str, usize); 7] = [
    ("obj2", 246_814),
    ("progl", 71_646),
    ("paper2", 82_199),
    ("trans", 93_695),
    ("book1", 768_771),
    ("pic", 513_216),
    ("gif", 543_836),
];

/// Bytes of the seeded random set (the largest sample is one 63 KB block; 40 1-KB blocks and
/// 10 4-KB blocks need 40 KB).
const RANDOM_LEN: usize = 128 * 1024;

/// One data set.
pub struct DataSet {
    pub name: String,
    pub data: Vec<u8>,
    /// `corpus`, `generated` (a stand-in, named `<file>-standin`) or `seeded-random` (the
    /// ratios file records it).
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

/// Image-like bytes (a scanned page: long runs of white, short stretches of ink), seeded.
fn generated_runs(n: usize, seed: u32) -> Vec<u8> {
    let r = seeded_random(n / 16 + 2, seed);
    let mut out = Vec::with_capacity(n + 1024);
    for run in r.chunks_exact(2) {
        let (len, ink) = (1 + usize::from(run[0]) * 4, run[1]);
        out.resize(out.len() + len, if ink < 208 { 0 } else { ink });
        if out.len() >= n {
            break;
        }
    }
    out.resize(n, 0);
    out
}

/// The stand-in for corpus file `name` of `len` bytes: text-like for the text files, text
/// with every fifth byte perturbed for the object code, runs for the bitmap and seeded random
/// bytes for the GIF (already compressed).
fn stand_in(name: &str, len: usize, seed: u32) -> Vec<u8> {
    match name {
        "pic" => generated_runs(len, seed),
        "gif" => seeded_random(len, seed),
        "obj2" => {
            let mut d = generated_text(len, seed);
            d.iter_mut()
                .step_by(5)
                .enumerate()
                .for_each(|(j, b)| *b ^= (j >> 7) as u8);
            d
        }
        _ => generated_text(len, seed),
    }
}

/// The seven corpus files in [`CORPUS`] order (a generated stand-in, `<file>-standin`, for each
/// one absent or of another size than the corpus file's, with one warning on stderr per
/// process), then `random`.
pub fn load() -> Vec<DataSet> {
    static WARN: std::sync::Once = std::sync::Once::new();
    let dir = corpus_dir();
    let mut sets = Vec::new();
    let mut missing = Vec::new();
    for (i, (name, len)) in CORPUS.into_iter().enumerate() {
        match std::fs::read(dir.join(name)) {
            Ok(data) if data.len() == len => sets.push(DataSet {
                name: name.to_string(),
                data,
                source: "corpus",
            }),
            // Absent, or not the corpus file (another size: truncated, or another file).
            found => {
                missing.push(match found {
                    Ok(data) => format!("{name} (its {} bytes are not the corpus file's {len})", data.len()),
                    Err(_) => name.to_string(),
                });
                sets.push(DataSet {
                    name: format!("{name}-standin"),
                    data: stand_in(name, len, 7 + i as u32),
                    source: "generated",
                });
            }
        }
    }
    if !missing.is_empty() {
        let what = if missing.len() == CORPUS.len() && missing.iter().all(|m| !m.contains(' ')) {
            format!("corpus not found at {}", dir.display())
        } else {
            format!("corpus at {} lacks {}", dir.display(), missing.join(", "))
        };
        WARN.call_once(|| {
            eprintln!("WARNING: {what} (set IPSEC_CORPUS): using generated stand-in data; figures are not the paper's")
        });
    }
    sets.push(DataSet {
        name: "random".into(),
        data: seeded_random(RANDOM_LEN, 0xC0FFEE),
        source: "seeded-random",
    });
    sets
}

/// Compressible packet payload for the IPComp framing benches: paper2 (or its stand-in),
/// cycled to `n` bytes.
pub fn text_payload(sets: &[DataSet], n: usize) -> Vec<u8> {
    let paper2 = sets
        .iter()
        .find(|s| s.name.trim_end_matches("-standin") == "paper2")
        .expect("load() has paper2 or its stand-in");
    paper2.data.iter().copied().cycle().take(n).collect()
}
