//! The command lines of `ipsec` ([`Cli`]) and `tunneld` ([`TunneldArgs`]), as library items so that man pages and shell
//! completions can be generated from the same definitions (`examples/gen-man.rs`).

use crate::spec;
use clap::{Args, Parser, Subcommand};
use std::net::IpAddr;
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
    /// A CA, server and client certificates for IKEv2 remote access (ECDSA P-256 or RSA-3072): what
    /// the clients built into Windows, macOS, iOS and Android check.
    Pki {
        #[command(subcommand)]
        cmd: crate::pki_cmd::PkiCmd,
    },
    /// A user's client profiles for a remote-access connection of tunneld's config: an Apple
    /// .mobileconfig, a strongSwan .sswan and a Windows PowerShell script.
    Profile(crate::profile_cmd::ProfileArgs),
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

/// `tunneld`.
#[derive(Parser)]
#[command(
    name = "tunneld",
    version,
    about = "Carry a TUN device's packets to peers through ESP, AH and IPComp (userspace IPsec over IPv4/IPv6 raw sockets or ESP in UDP)"
)]
pub struct TunneldArgs {
    /// The config file: SAs and policies (TOML or setkey, as `ipsec check-config` takes
    /// them) and, in TOML, the `[tunnel]` table.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The TUN device's name (default: `[tunnel] tun`, else ipsec0).
    #[arg(long, value_name = "NAME")]
    pub tun: Option<String>,
    /// Write the counters as JSON to FILE every second and on exit (replaced atomically).
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// The control socket (Unix, mode 0600, root only; `ipsec sa|policy|show|monitor` speak
    /// to it). Default: `[tunnel] control`, else none.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Run CMD (by `sh -c`) for every event (SA added, replaced, removed, soft or hard
    /// expiry, ...) with the event's JSON on its standard input; killed after 10 s.
    #[arg(long = "on-event", value_name = "CMD")]
    pub on_event: Option<String>,
    /// Worker threads, each with its own TUN queue (default: `[tunnel] workers`, else one per
    /// core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: Option<u16>,
    /// No TUN offloads (default: `[tunnel] offload`, else on): plain reads and writes, no
    /// TSO segmentation or GRO coalescing.
    #[arg(long)]
    pub no_offload: bool,
    /// Raw ESP, AH and IPComp through the raw IP sockets only (default: `[tunnel] af_packet`,
    /// else on): no `AF_PACKET` receive rings or sender.
    #[arg(long)]
    pub no_af_packet: bool,
    /// Raw ESP, AH and IPComp sent through AF_PACKET skip the interface's qdisc too
    /// (PACKET_QDISC_BYPASS; default: `[tunnel] qdisc_bypass`, else off): faster, but no
    /// capture on this host sees them.
    #[arg(long)]
    pub qdisc_bypass: bool,
    /// This host's underlay address, IPv4 or IPv6; give it twice for one of each (default:
    /// `[tunnel] local`).
    #[arg(long, value_name = "ADDR")]
    pub local: Vec<IpAddr>,
    /// A peer's underlay address, IPv4 or IPv6; repeat it for several peers (default:
    /// `[tunnel] peer` or `peers`; none: any address the SAs tunnel to).
    #[arg(long, value_name = "ADDR")]
    pub peer: Vec<IpAddr>,
    /// The secrets file with the IKE connections' pre-shared keys (TOML `[[ike]]` entries,
    /// mode 0600 or stricter; default: `[tunnel] secrets`).
    #[arg(long, value_name = "FILE")]
    pub secrets: Option<PathBuf>,
    /// Write every IKE and ESP key to DIR as Wireshark's `ikev2_decryption_table` and
    /// `esp_sa` tables, so tshark can decrypt the traffic. For tests and debugging only:
    /// anyone who reads DIR decrypts this host's traffic. Off by default.
    #[arg(long, value_name = "DIR")]
    pub keylog: Option<PathBuf>,
    /// Let members of GROUP use the control socket too (it becomes group GROUP, mode 0660);
    /// by default only root may.
    #[arg(long, value_name = "GROUP")]
    pub control_group: Option<String>,
    /// Serve the counters in the Prometheus text format at http://ADDR/metrics (e.g.
    /// 127.0.0.1:9720; keep it on a loopback or management address). Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Run as USER (a name or a uid) once the TUN device, the sockets and the control socket
    /// are open: tunneld then keeps no capability at all and cannot regain one
    /// (PR_SET_NO_NEW_PRIVS). The stats file's directory and the config file (SIGHUP) must
    /// be writable and readable by USER.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Log level: error, warn, info, debug (every dropped packet) or trace.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log: String,
}
