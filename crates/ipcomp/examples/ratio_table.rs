//! Compression ratios per data set and payload size, sampled as McGregor & Lee did (first 40
//! 1-KB blocks averaged, first 10 4-KB blocks, first 63-KB block), with the paper's figures
//! (table4_compression_ratios.csv) beside ours. Ratio = original / (compressed + 4-byte
//! IPComp header); a block that would not shrink counts as 1.0 (non-expansion).
//!
//! Data: $IPSEC_CORPUS (default <workspace>/../shared/corpus); paper: $IPSEC_PAPER (default
//! <workspace>/../shared/paper). Run with `cargo run --release -p ipsec-ipcomp --example ratio_table`.
#[path = "../tests/common/corpus.rs"]
mod corpus;

use ipsec_ipcomp::{Algorithm, Compressor};
use std::collections::HashMap;
use std::path::PathBuf;

const SIZES: [(&str, usize, usize); 3] = [("1k", 1024, 40), ("4k", 4096, 10), ("63k", 63 * 1024, 1)];

fn paper_dir() -> PathBuf {
    match std::env::var_os("IPSEC_PAPER") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/paper"),
    }
}

/// (benchmark, column) -> value.
fn paper_table() -> HashMap<(String, String), f64> {
    let path = paper_dir().join("table4_compression_ratios.csv");
    let mut t = HashMap::new();
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!(
            "NOTE: {} not found (set IPSEC_PAPER): paper columns left empty",
            path.display()
        );
        return t;
    };
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    for line in lines {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        for (i, c) in cells.iter().enumerate().skip(1) {
            if let (Some(col), Ok(v)) = (header.get(i), c.parse::<f64>()) {
                t.insert((cells[0].to_string(), col.clone()), v);
            }
        }
    }
    t
}

fn ratio(c: &mut Compressor, block: &[u8], out: &mut [u8]) -> f64 {
    // Only results with compressed + 4 < original are useful: stop the compressor there.
    let limit = block.len().saturating_sub(5);
    match c.compress(block, &mut out[..limit]) {
        Some(n) => block.len() as f64 / (n + 4) as f64,
        None => 1.0,
    }
}

fn main() {
    let sets = corpus::load();
    let paper = paper_table();
    let mut codecs = [
        ("deflate", Compressor::new(Algorithm::Deflate)),
        ("deflate32k", Compressor::deflate_with_window(32768)),
        ("lzs", Compressor::new(Algorithm::Lzs)),
        ("lzf", Compressor::new(Algorithm::Lzf)),
    ];
    let mut out = vec![0u8; 70000];
    println!("| data set | payload | DEFLATE 2 KB (ours) | DEFLATE (paper) | DEFLATE 32 KB (ours) | LZS (ours) | LZS (paper) | LZF (ours) |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let fmt = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.2}"));
    for set in &sets {
        let key = set.name.split(' ').next().unwrap_or("").to_string();
        for (label, size, count) in SIZES {
            let blocks: Vec<&[u8]> = set.data.chunks_exact(size).take(count).collect();
            let mut ours = HashMap::new();
            for (name, c) in codecs.iter_mut() {
                let sum: f64 = blocks.iter().map(|b| ratio(c, b, &mut out)).sum();
                ours.insert(*name, sum / blocks.len() as f64);
            }
            let p = |alg: &str| paper.get(&(key.clone(), format!("{alg}_{label}"))).copied();
            println!(
                "| {} | {} | {:.2} | {} | {:.2} | {:.2} | {} | {:.2} |",
                set.name,
                label.to_uppercase().replace('K', " KB"),
                ours["deflate"],
                fmt(p("deflate")),
                ours["deflate32k"],
                ours["lzs"],
                fmt(p("lzs")),
                ours["lzf"],
            );
        }
    }
}
