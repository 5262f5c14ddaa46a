//! The command lines of `ipsec` ([`Cli`]), as a library item so that man pages and shell
//! completions can be generated from the same definitions (`examples/gen-man.rs`).

use crate::spec;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// `ipsec`.
#[derive(Parser)]
#[command(
    name = "ipsec",
    version,
    about = "Userspace IPsec: seal and open pcap captures with ESP, AH and IPComp; speedup models"
)]
pub struct Cli {
    #[command(subcommand)]
    /// The subcommand.
    pub cmd: Cmd,
}

/// `ipsec`'s subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Apply SAs to every packet of a capture (in the order given).
    Seal(SealArgs),
    /// Undo SAs on every packet of a capture; rejected packets are reported and not written.
    Open(OpenArgs),
    /// Evaluate the McGregor–Lee speedup models (Local Send, Local Receive, Complete) and
    /// the IPsec-only slowdown from measured rates.
    Model(crate::model_cmd::ModelArgs),
    /// Check a config file (TOML or setkey) and print its effective SAs and policies.
    CheckConfig(crate::check_config::CheckConfigArgs),
    /// Bytes a bundle adds per packet, the largest inner packet that fits a link MTU, and
    /// packets and wire bytes for a payload.
    Overhead(crate::overhead_cmd::OverheadArgs),
    /// Run a capture through the SA engine built from a config file (policies, bundles,
    /// lifetimes on the capture's clock); --stats writes the counters as JSON.
    Process(crate::process_cmd::ProcessArgs),
    /// tunneld's SAs over its control socket: add, update (rekey), del, list, get.
    Sa {
        #[command(subcommand)]
        cmd: crate::ctl_cmd::SaCmd,
        #[command(flatten)]
        opts: crate::ctl_cmd::ControlOpts,
    },
    /// tunneld's policies over its control socket: add, del, list.
    Policy {
        #[command(subcommand)]
        cmd: crate::ctl_cmd::PolicyCmd,
        #[command(flatten)]
        opts: crate::ctl_cmd::ControlOpts,
    },
    /// tunneld's SAs with their counters, drops, lifetime left and replay window (like `wg show`).
    Show {
        #[command(flatten)]
        opts: crate::ctl_cmd::ControlOpts,
        #[command(flatten)]
        show: crate::ctl_cmd::ShowArgs,
    },
    /// tunneld's IKEv2 connections over its control socket: initiate, terminate, list.
    Ike {
        #[command(subcommand)]
        cmd: crate::ctl_cmd::IkeCmd,
        #[command(flatten)]
        opts: crate::ctl_cmd::ControlOpts,
    },
    /// tunneld's events as they happen (SA added, replaced, removed, retired, expired; policy changes).
    Monitor {
        #[command(flatten)]
        opts: crate::ctl_cmd::ControlOpts,
        /// Exit after N events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
}

/// What seal and open share.
#[derive(Args)]
pub struct Common {
    #[arg(long = "sa", value_name = "SPEC", help = spec::SA_HELP, required_unless_present = "sa_file", conflicts_with = "sa_file")]
    pub sas: Vec<String>,
    #[arg(long = "sa-file", value_name = "FILE", help = spec::SA_FILE_HELP)]
    pub sa_file: Option<PathBuf>,
    /// Input pcap (default: standard input).
    #[arg(long = "in", value_name = "F.pcap")]
    pub input: Option<PathBuf>,
    /// Output pcap (default: standard output).
    #[arg(long = "out", value_name = "F.pcap")]
    pub output: Option<PathBuf>,
    /// Print nothing but rejected packets.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `ipsec seal`.
#[derive(Args)]
pub struct SealArgs {
    #[command(flatten)]
    pub common: Common,
    /// First sequence number used (default 1).
    #[arg(long, value_name = "N")]
    pub seq: Option<u64>,
    /// UNSAFE, for tests only: use this IV (hex) for every packet. A fixed IV breaks CBC
    /// confidentiality and reuses GCM/ChaCha20 nonces. With --seq the output is deterministic.
    #[arg(long, value_name = "HEX")]
    pub iv: Option<String>,
}

/// `ipsec open`.
#[derive(Args)]
pub struct OpenArgs {
    #[command(flatten)]
    pub common: Common,
    /// Start the replay window as if packet N-1 had been the last one received (for captures
    /// that begin in the middle of an SA, e.g. beyond 2^32 with ESN).
    #[arg(long, value_name = "N")]
    pub seq: Option<u64>,
}
