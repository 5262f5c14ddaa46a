//! `ipsec model`: the command line of the speedup models of the `ipsec-model` crate
//! ([`ipsec_model`], re-exported as `ipsec::model`). This module only parses; the crate
//! evaluates and formats.

use ipsec_model::{Format, Model, Options, DEFAULT_EFFICIENCY, DEFAULT_LINKS, DEFAULT_MTU};
use std::path::PathBuf;

/// Evaluate the McGregor-Lee speedup models (IPsec-only slowdown, Local Send, Local Receive,
/// Complete) from measured crypto and (de)compression rates.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// Directory with the input CSVs (table1_crypto_rates_mbps.csv, table4_compression_ratios.csv,
    /// `*_<compressor>_rates_mbps.csv`) [default: the paper's tables, built in from the
    /// repository's data/mcgregor-lee].
    #[arg(long, value_name = "DIR")]
    pub inputs: Option<PathBuf>,
    /// Read the rates measured on this machine instead: the criterion directory of
    /// `cargo bench --bench throughput` (e.g. target/criterion), with the ipsec-ratios.csv the
    /// bench writes there.
    #[arg(long, value_name = "DIR", conflicts_with = "inputs")]
    pub from_criterion: Option<PathBuf>,
    /// Only these algorithms (names as in the inputs, e.g. aes128-gcm,hmac-sha1), comma-separated
    /// [default: all].
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub algs: Vec<String>,
    /// Links, comma-separated nominal rates (k/M/G = 10^3/10^6/10^9 bit/s).
    #[arg(long, value_name = "RATES", value_delimiter = ',', default_value = DEFAULT_LINKS)]
    pub links: Vec<String>,
    /// Fraction of each link's nominal rate actually sustained.
    #[arg(long, value_name = "E", default_value_t = DEFAULT_EFFICIENCY)]
    pub efficiency: f64,
    /// Network MTU (bytes); larger packets are fragmented.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MTU)]
    pub mtu: usize,
    /// Models to evaluate, comma-separated [default: all].
    #[arg(long = "model", value_name = "MODEL", value_enum, value_delimiter = ',')]
    pub models: Vec<Model>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Print the break-even compression ratios instead of the speedups.
    #[arg(long)]
    pub break_even: bool,
    /// Print the input rates and ratios as read (tables in the layout of the paper's tables 1,
    /// 4, 5 and 6) instead of evaluating the models.
    #[arg(long, conflicts_with_all = ["break_even", "plot"])]
    pub print_rates: bool,
    /// Write SVG plots into DIR instead of printing tables: speedup.svg (Complete-model speedup
    /// against link rate per suite class) and break-even.svg (R_COMP needed against the
    /// compression ratio X, with the measured compressors as points).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Data set of speedup.svg [default: paper2 if present, else the first data set].
    #[arg(long, value_name = "NAME", requires = "plot")]
    pub plot_dataset: Option<String>,
    /// Payload of both plots [default: 4k if present, else the first].
    #[arg(long, value_name = "LABEL", requires = "plot")]
    pub plot_payload: Option<String>,
}

impl From<ModelArgs> for Options {
    fn from(a: ModelArgs) -> Options {
        Options {
            inputs: a.inputs,
            from_criterion: a.from_criterion,
            algs: a.algs,
            links: a.links,
            efficiency: a.efficiency,
            mtu: a.mtu,
            models: a.models,
            format: a.format,
            break_even: a.break_even,
            print_rates: a.print_rates,
            plot: a.plot,
            plot_dataset: a.plot_dataset,
            plot_payload: a.plot_payload,
        }
    }
}

/// Runs `ipsec model`; returns the text to print.
pub fn run(args: ModelArgs) -> Result<String, String> {
    ipsec_model::run(&args.into())
}
