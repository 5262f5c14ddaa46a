//! The compression data sets: the corpus files from $IPSEC_CORPUS (default
//! <workspace>/../shared/corpus), a seeded "random" set, and generated stand-ins when the
//! corpus is absent. Shared by the tests and the examples.
#![allow(dead_code)]
use std::path::PathBuf;

/// The corpus file names, in the paper's order.
pub const NAMES: [&str; 7] = ["obj2", "progl", "paper2", "trans", "book1", "pic", "gif"];

/// Where the corpus should be.
pub fn corpus_dir() -> PathBuf {
    match std::env::var_os("IPSEC_CORPUS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
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

/// Text-like data with a skewed vocabulary and some noise.
fn generated_text(n: usize, seed: u32) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "the ",
        "of ",
        "and ",
        "packet ",
        "compression ",
        "security ",
        "header ",
        "payload ",
        "tunnel ",
        "to ",
        "a ",
        "in ",
        "is ",
        "window ",
        "ratio ",
        ".\n",
    ];
    let r = seeded_random(n, seed);
    let mut v = Vec::with_capacity(n + 16);
    let mut i = 0;
    while v.len() < n {
        let b = r[i % r.len()];
        i += 1;
        if b < 12 {
            v.push(b'A' + b);
        } else {
            v.extend_from_slice(WORDS[(b as usize * 7 + i / 3) % 16].as_bytes());
        }
    }
    v.truncate(n);
    v
}

/// Image-like data: long runs.
fn generated_runs(n: usize, seed: u32) -> Vec<u8> {
    let r = seeded_random(n / 16 + 1, seed);
    let mut v = Vec::with_capacity(n);
    let mut i = 0;
    while v.len() < n {
        let len = 1 + (r[i % r.len()] as usize % 64) * 8;
        let val = if r[(i + 1) % r.len()] < 200 {
            0
        } else {
            r[(i + 2) % r.len()]
        };
        v.resize(v.len() + len, val);
        i += 3;
    }
    v.truncate(n);
    v
}

/// One data set: its name and bytes.
pub struct DataSet {
    pub name: String,
    pub data: Vec<u8>,
    /// Whether it came from the corpus (false: generated stand-in).
    pub real: bool,
}

/// Loads the seven corpus files (or generated stand-ins, saying so on stderr) and the seeded
/// random set. Every set is at least 64 KB... except that real files are used as they are.
pub fn load() -> Vec<DataSet> {
    let dir = corpus_dir();
    let mut sets = Vec::new();
    let mut missing = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        match std::fs::read(dir.join(name)) {
            Ok(data) => sets.push(DataSet {
                name: name.to_string(),
                data,
                real: true,
            }),
            Err(_) => {
                missing.push(*name);
                let n = 400 * 1024;
                let data = match *name {
                    "pic" => generated_runs(n, 7),
                    "gif" => seeded_random(n, 0x6166),
                    "obj2" => {
                        let mut d = generated_text(n, 11);
                        for (j, b) in d.iter_mut().enumerate() {
                            if j % 5 == 0 {
                                *b ^= (j >> 9) as u8;
                            }
                        }
                        d
                    }
                    _ => generated_text(n, i as u32 + 3),
                };
                sets.push(DataSet {
                    name: format!("{name} (generated)"),
                    data,
                    real: false,
                });
            }
        }
    }
    if !missing.is_empty() {
        eprintln!(
            "NOTE: corpus not found at {} (missing {:?}; set IPSEC_CORPUS): using generated stand-in data",
            dir.display(),
            missing
        );
    }
    sets.push(DataSet {
        name: "random".into(),
        data: seeded_random(700 * 1024, 0xC0FFEE),
        real: true,
    });
    sets
}
