//! `ipsec check-config FILE [--format toml|setkey] [--json]`: reads a config, builds the
//! engine, and prints the effective SAs (without keys) and policies in match order. Exit 0
//! when valid, 2 with a line-numbered error otherwise.

use crate::config::{self, setkey, show::Effective, ConfigError, Format};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// A format on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// The TOML format.
    Toml,
    /// setkey(8) `add` / `spdadd` statements.
    Setkey,
}

/// The arguments of `ipsec check-config`.
#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// The config file: TOML, or setkey(8) statements.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The file's format (default: `.toml` is TOML, `.conf`/`.setkey` setkey, else by content).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Print the result (or the error) as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// setkey only: truncate hmac-sha256 to 96 bits, as Linux's PF_KEY did, instead of RFC
    /// 4868's 128. (A TOML file says it per SA: `auth = { ..., trunc = 96 }`; the option is
    /// refused for TOML rather than ignored.)
    #[arg(long)]
    pub sha256_96: bool,
}

/// Runs the command, printing to standard output and error; returns the exit code.
pub fn run(args: &CheckConfigArgs) -> ExitCode {
    let file = args.file.display().to_string();
    let fail = |e: ConfigError| {
        eprintln!("ipsec: {}", e.in_file(&file));
        if args.json {
            let v = json!({
                "valid": false,
                "file": file,
                "line": e.line,
                "item": e.item.as_ref().map(|i| i.to_string()),
                "error": e.describe(),
            });
            let text = serde_json::to_string_pretty(&v).expect("JSON of plain values") + "\n";
            return crate::tool::print_stdout(&text, ExitCode::from(2));
        }
        ExitCode::from(2)
    };
    let text = match config::read(&args.file) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let format = match args.format {
        Some(FormatArg::Toml) => Format::Toml,
        Some(FormatArg::Setkey) => Format::Setkey,
        None => Format::detect(&args.file, &text),
    };
    if args.sha256_96 && format == Format::Toml {
        return crate::tool::usage_error(format!(
            "{file}: --sha256-96 applies to setkey files only; in TOML give the truncation per SA: \
             auth = {{ alg = \"hmac(sha256)\", key = ..., trunc = 96 }}"
        ));
    }
    let opts = setkey::Options {
        sha256_icv_bits: if args.sha256_96 { 96 } else { 128 },
    };
    let loaded = config::parse_with(&text, format, &opts);
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    for w in &loaded.warnings {
        eprintln!("ipsec: {file}:{}: warning: {}", w.line, w.message);
    }
    let engine = match loaded.config.build(Duration::ZERO) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let weak = loaded.config.weak_algorithms();
    for w in &weak {
        eprintln!("ipsec: {file}:{}: warning: {}", w.line, w.message);
    }
    let not_pq = loaded.config.not_post_quantum();
    for w in &not_pq {
        eprintln!("ipsec: {file}:{}: note: {}", w.line, w.message);
    }
    let eff = Effective::new(&engine, &loaded.config);
    let mut out = String::new();
    if args.json {
        let v = json!({
            "valid": true,
            "file": file,
            "format": format.name(),
            "warnings": loaded.warnings.iter().map(|w| json!({"line": w.line, "message": w.message})).collect::<Vec<_>>(),
            "weak_algorithms": weak.iter().map(|w| json!({"line": w.line, "message": w.message})).collect::<Vec<_>>(),
            "not_post_quantum": not_pq.iter().map(|w| json!({"line": w.line, "message": w.message})).collect::<Vec<_>>(),
            "sas": eff.sas,
            "policies": eff.policies,
            "tunnel": eff.tunnel,
        });
        out = serde_json::to_string_pretty(&v).expect("JSON of plain values") + "\n";
    } else {
        out += &format!(
            "{file}: valid {} config: {} SAs, {} policies\n\n",
            format.name(),
            eff.sas.len(),
            eff.policies.len()
        );
        out += &eff.to_text();
    }
    crate::tool::print_stdout(&out, ExitCode::SUCCESS)
}
