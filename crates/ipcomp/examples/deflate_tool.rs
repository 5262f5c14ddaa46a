//! Raw DEFLATE through this crate's IPComp codec, stdin to stdout (for the zlib interop test).
//!
//! ```text
//! deflate_tool compress [--window N]      # N: largest match distance, default 2048
//! deflate_tool decompress [--max N]       # N: output bound in bytes, default 16 MiB
//! ```
use ipsec_ipcomp::{Algorithm, Compressor};
use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("deflate_tool: reading stdin: {e}");
        return ExitCode::FAILURE;
    }
    let output = match args.first().map(String::as_str) {
        Some("compress") => {
            let mut c = Compressor::deflate_with_window(opt("--window", ipsec_ipcomp::deflate::LINUX_WINDOW));
            let mut out = vec![0u8; input.len() + input.len() / 4 + 1024];
            let n = c
                .compress(&input, &mut out)
                .expect("the output buffer bounds the worst case");
            out.truncate(n);
            out
        }
        Some("decompress") => {
            let mut c = Compressor::new(Algorithm::Deflate);
            let mut out = vec![0u8; opt("--max", 16 << 20)];
            match c.decompress(&input, &mut out) {
                Ok(n) => {
                    out.truncate(n);
                    out
                }
                Err(e) => {
                    eprintln!("deflate_tool: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => {
            eprintln!("usage: deflate_tool compress [--window N] | decompress [--max N]  (stdin -> stdout)");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::io::stdout().write_all(&output) {
        eprintln!("deflate_tool: writing stdout: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
