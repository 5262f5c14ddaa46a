//! Configuration files: SAs and policies in TOML ([`from_toml`]) or in setkey(8) statements
//! ([`setkey`]), checked and built into an [`Engine`].
//!
//! A [`Config`] is a list of named SAs ([`SaConfig`]) and an ordered list of policies
//! ([`PolicyConfig`]) whose protect action names SAs in seal order (IPComp, then ESP, then AH).
//! [`Config::build`] installs the SAs (keying them), resolves the names to [`SaId`]s and adds
//! the policies; every error says which SA or policy, and the line when the config came from a
//! file.
//!
//! # TOML
//!
//! ```toml
//! [[sa]]
//! name = "esp-ab"
//! proto = "esp"                 # esp | ah | comp
//! spi = 0x1000                  # for comp: the CPI (default: the algorithm's well-known CPI)
//! mode = "transport"            # transport (default) | tunnel
//! src = "192.0.2.1"             # SA endpoints (required in tunnel mode)
//! dst = "192.0.2.2"
//! enc = { alg = "cbc(aes)", key = "0x00112233445566778899aabbccddeeff" }
//! auth = { alg = "hmac(sha256)", key = "0x...", trunc = 128 }   # trunc: ICV bits, default per RFC
//! # aead = { alg = "rfc4106(gcm(aes))", key = "0x<key><salt>", icv = 128 }
//! # comp = "deflate"            # deflate | lzs | lzf, for proto = "comp"
//! replay_window = 1024          # packets; 0 = off; default 1024 (comp SAs: none)
//! esn = false
//! lifetime = { soft = { seconds = 3000, bytes = 1_000_000_000 }, hard = { seconds = 3600 } }
//! # encap = { type = "espinudp", sport = 4500, dport = 4500, oa = "0.0.0.0" }  # ESP in UDP (RFC 3948)
//!
//! [[sa]]
//! name = "esp-ba"
//! xfrm = "proto esp spi 0x1001 mode transport src 192.0.2.2 dst 192.0.2.1 enc 'cbc(aes)' 0x... auth 'hmac(sha256)' 0x..."
//!
//! [[policy]]
//! dir = "out"                   # in | out
//! src = "192.0.2.1/32"          # prefix or address; omitted or "any" = any
//! dst = "192.0.2.2"
//! proto = "tcp"                 # name or number; omitted or "any" = any
//! dst_port = "1024-65535"       # number, "lo-hi" or "any"; ICMP: src_port = type, dst_port = code
//! action = "protect"            # protect | bypass | discard
//! bundle = ["esp-ab"]           # SA names in seal order
//! ```
//!
//! Keys are `"0x<hex>"` or a plain string whose bytes are the key (as `ip xfrm` takes them).
//! Unknown fields are errors. Algorithm names are those of `ip xfrm` (see `ipsec_core::alg`).
//! A `[[sa]]` with `xfrm` takes the whole SA from those `ip xfrm state` words (the syntax of
//! `ipsec seal --sa`) and admits only `name` and `lifetime` beside it.
//!
//! # setkey(8)
//!
//! `add`, `spdadd`, `flush` and `spdflush` statements, as [`setkey`] documents, with the
//! choices made where setkey implementations differ (Linux's where it matters for interop).
//!
//! # Policy order
//!
//! Policies match in the order given, per direction; the first match wins. An outbound or
//! inbound packet that matches no policy is discarded (RFC 4301 5.1, 5.2).

pub mod connection;
pub mod credentials;
pub mod from_toml;
pub mod ike_settings;
pub mod pools;
pub mod radius;
mod sa_encap;
pub mod setkey;
pub mod show;
pub mod spec;
mod values;

use ipsec_core::sa::Mode;
use ipsec_engine::{Action, Direction, Engine, InstallError, SaConfig, SaId, Selector};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// What a policy does, with SAs named rather than installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionConfig {
    /// Apply (outbound) or require (inbound) these SAs, named, in seal order.
    Protect(Vec<String>),
    /// Let the packet through unprotected.
    Bypass,
    /// Drop it.
    Discard,
}

/// One policy of a [`Config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// An optional name, for messages.
    pub name: Option<String>,
    /// Direction.
    pub dir: Direction,
    /// Selectors.
    pub selector: Selector,
    /// Action.
    pub action: ActionConfig,
}

/// Where each SA and policy of a [`Config`] came from (1-based lines), when it came from a
/// file. Empty for a config built in code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    /// The line of each SA, in the order of [`Config::sas`].
    pub sas: Vec<usize>,
    /// The line of each policy, in the order of [`Config::policies`].
    pub policies: Vec<usize>,
    /// The number of each policy, in the order of [`Config::policies`]: its position among
    /// the file's policies, counted from 1 (the Nth `[[policy]]` table or `spdadd`
    /// statement). Error messages (`policy #N`) and `check-config`'s table use it; a policy
    /// without one is numbered by its position in [`Config::policies`].
    pub policy_numbers: Vec<usize>,
}

/// SAs and policies, before they are keyed and installed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The SAs; each has a unique, non-empty name.
    pub sas: Vec<SaConfig>,
    /// The policies, in match order (per direction).
    pub policies: Vec<PolicyConfig>,
    /// Source lines, if the config came from a file.
    pub lines: Lines,
    /// The TOML `[tunnel]` table, for `tunneld` (the engine does not use it).
    pub tunnel: Option<TunnelConfig>,
    /// The TOML `[[connection]]`s: IKEv2 connections ([`connection`]), for `tunneld`.
    pub connections: Vec<connection::ConnectionConfig>,
    /// The TOML `[ike]` table: the IKE daemon's global settings ([`ike_settings`]).
    pub ike: ike_settings::IkeSettings,
    /// The TOML `[[pool]]`s: address pools for remote-access clients ([`pools`]).
    pub pools: Vec<pools::PoolConfig>,
    /// The TOML `[radius]` table: the server EAP-RADIUS connections pass EAP to ([`radius`]).
    pub radius: Option<radius::RadiusConfig>,
    /// The file holds no SA and no policy on purpose: TOML `sa = []` and `policy = []`
    /// written out, or setkey `flush;` and `spdflush;` with nothing added after them. A
    /// tunneld reload takes an empty config only then (an empty or cut-short file is refused,
    /// the running SAs and policies kept).
    pub empty_on_purpose: bool,
}

/// `tunneld`'s settings (the TOML `[tunnel]` table): every field optional.
///
/// ```toml
/// [tunnel]
/// tun = "ipsec0"          # TUN device name (tunneld --tun overrides it)
/// mtu = 1400              # TUN MTU; default: the largest inner packet every outbound
///                         # bundle fits into a 1500-byte underlay packet
/// local = "10.99.0.1"     # this host's underlay address, IPv4 or IPv6, or one of each
///                         # (local = ["10.99.0.1", "fd00:99::1"]): sockets bind to it
/// peer = "10.99.0.2"      # the peer's: sealed packets to other addresses are dropped;
///                         # several: peers = ["10.99.0.2", "fd00:99::3"]
/// control = "/run/tunneld.sock"  # the control socket (tunneld --control overrides it)
/// secrets = "/etc/ipsec-tunneld/secrets.toml"  # IKE pre-shared keys, mode 0600 (--secrets)
/// mss_clamp = "auto"      # lower TCP SYNs' MSS option to fit the TUN MTU: "auto", a
///                         # number (88-65495), or "off" (default)
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TunnelConfig {
    /// The TUN device's name: 1 to 15 bytes, no '/' or spaces (`%d`: the kernel numbers it).
    pub tun: Option<String>,
    /// The TUN device's MTU, 68 to 65535.
    pub mtu: Option<u32>,
    /// This host's underlay addresses: at most one IPv4 and one IPv6 address
    /// ([`check_underlay`]).
    pub local: Vec<std::net::IpAddr>,
    /// The peers' underlay addresses (`peer = "..."` or `peers = [...]`), IPv4 or IPv6, no
    /// repeats: sealed packets go to the one the outermost SA tunnels to, and to no other
    /// address. Empty: any address the SAs tunnel to.
    pub peers: Vec<std::net::IpAddr>,
    /// The control socket's path.
    pub control: Option<std::path::PathBuf>,
    /// The secrets file with the IKE connections' pre-shared keys ([`connection::Secrets`]).
    pub secrets: Option<std::path::PathBuf>,
    /// `encap = "espinudp"`: ESP in UDP (RFC 3948) from port `encap_sport` to `encap_dport`
    /// (both 4500 by default). SAs may carry it instead (`encap espinudp`): see
    /// [`Config::udp_encap_for_tunneld`].
    pub udp_encap: Option<(u16, u16)>,
    /// The line of `encap = ...`, if the table has one (with `udp_encap` `None`: `"none"`).
    pub encap_line: Option<usize>,
    /// Worker threads (each with a TUN queue), 1 to 256; `None`: one per core.
    pub workers: Option<usize>,
    /// TUN offloads (TSO/GRO through IFF_VNET_HDR); `None`: on.
    pub offload: Option<bool>,
    /// Raw ESP, AH and IPComp received through `AF_PACKET` rings (`PACKET_RX_RING`, fanned out
    /// to the workers) and sent through `AF_PACKET` sockets (`PACKET_QDISC_BYPASS`) rather than
    /// only the raw IP sockets; `None`: on where the kernel allows.
    pub af_packet: Option<bool>,
    /// With `af_packet`: `PACKET_QDISC_BYPASS` on the senders (no qdisc, invisible to captures
    /// on this host); `None`: off.
    pub qdisc_bypass: Option<bool>,
    /// The line of the `[tunnel]` header.
    pub line: Option<usize>,
    /// `mss_clamp`: TCP MSS clamping on the TUN device; `None`: off.
    pub mss_clamp: Option<MssClampSetting>,
}

/// `[tunnel] mss_clamp`: the MSS option of TCP SYNs and SYN-ACKs crossing the TUN device,
/// both ways, lowered to at most this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MssClampSetting {
    /// `"off"`: no clamping (the default).
    Off,
    /// `"auto"`: the TUN MTU less the IP (20 or 40 bytes) and TCP (20) headers.
    Auto,
    /// A number: this MSS over IPv4 and IPv6 alike (88, Linux's smallest, to 65495).
    Mss(u16),
}

impl MssClampSetting {
    /// The values `mss_clamp` takes.
    pub const RANGE: std::ops::RangeInclusive<u16> = 88..=65495;

    /// `mss_clamp`'s value: `"auto"`, `"off"` or a number in [`RANGE`](Self::RANGE).
    pub fn from_toml(v: &toml::Value) -> Result<MssClampSetting, String> {
        match v {
            toml::Value::String(s) if s == "auto" => Ok(MssClampSetting::Auto),
            toml::Value::String(s) if s == "off" => Ok(MssClampSetting::Off),
            toml::Value::Integer(n) => u16::try_from(*n)
                .ok()
                .filter(|n| Self::RANGE.contains(n))
                .map(MssClampSetting::Mss)
                .ok_or_else(|| format!("mss_clamp {n} is not in 88-65495")),
            other => Err(format!("mss_clamp {other}: use \"auto\", \"off\" or an MSS (88-65495)")),
        }
    }
}

/// A configuration file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The TOML format of [`from_toml`].
    Toml,
    /// setkey(8) statements ([`setkey`]).
    Setkey,
}

impl Format {
    /// The format's name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Toml => "toml",
            Format::Setkey => "setkey",
        }
    }

    /// The format of a file: by extension (`.toml`; `.conf`, `.setkey`), else by content (a
    /// first statement `add`, `spdadd`, `flush` or `spdflush` means setkey).
    pub fn detect(path: &Path, text: &str) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => return Format::Toml,
            Some("conf") | Some("setkey") => return Format::Setkey,
            _ => {}
        }
        let first = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .find(|l| !l.is_empty())
            .and_then(|l| l.split(|c: char| c.is_whitespace() || c == ';').next())
            .unwrap_or("");
        match first {
            "add" | "spdadd" | "flush" | "spdflush" => Format::Setkey,
            _ => Format::Toml,
        }
    }
}

/// A note about something accepted but not taken literally (setkey options with no
/// equivalent here, `fwd` policies skipped, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The line it is about.
    pub line: usize,
    /// What was done.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A config read from a file.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The config.
    pub config: Config,
    /// The format it was read as.
    pub format: Format,
    /// Things accepted with a caveat.
    pub warnings: Vec<Warning>,
}

/// The SA or policy an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// An SA, by name.
    Sa(String),
    /// A policy, by position (1-based, over all policies) and name if it has one.
    Policy {
        /// Position in the file (1-based).
        index: usize,
        /// Its name, if any.
        name: Option<String>,
    },
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Sa(n) => write!(f, "SA `{n}`"),
            Item::Policy { index, name: Some(n) } => write!(f, "policy #{index} `{n}`"),
            Item::Policy { index, name: None } => write!(f, "policy #{index}"),
        }
    }
}

/// What is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The file could not be read.
    Io(String),
    /// Not well-formed: TOML syntax, a missing or unknown field, a value of the wrong type, a
    /// setkey statement that does not parse.
    Syntax(String),
    /// An algorithm name not known here.
    UnknownAlgorithm {
        /// `enc`, `auth`, `aead` or `comp`.
        kind: &'static str,
        /// The name given.
        name: String,
        /// The names accepted.
        expected: &'static str,
    },
    /// Something valid in the format that this data plane does not implement.
    Unsupported(String),
    /// A value that is well-formed but not acceptable (bad address, port range, ...).
    Invalid(String),
    /// The SA's parameters are rejected (key or ICV length, algorithm combination, replay
    /// window, ...).
    Sa(ipsec_core::Error),
    /// Two SAs have the same name.
    DuplicateName(String),
    /// A policy names an SA that does not exist.
    UnknownSa(String),
    /// A setkey policy request matches no SA, or several.
    Unresolved(String),
    /// The engine refused the SA or policy (duplicate SPI, bundle order, lifetime).
    Install(InstallError),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Io(m) | ErrorKind::Syntax(m) | ErrorKind::Invalid(m) | ErrorKind::Unresolved(m) => {
                f.write_str(m)
            }
            ErrorKind::UnknownAlgorithm { kind, name, expected } => {
                // A key written where the name belongs is not echoed.
                write!(
                    f,
                    "unknown {kind} algorithm {}: use {expected}",
                    crate::spec::shown_bt(name)
                )
            }
            ErrorKind::Unsupported(m) => write!(f, "not supported: {m}"),
            ErrorKind::Sa(e) => e.fmt(f),
            ErrorKind::DuplicateName(n) => write!(f, "another SA is already named `{n}`"),
            ErrorKind::UnknownSa(n) => write!(f, "no SA named `{n}`"),
            ErrorKind::Install(e) => e.fmt(f),
        }
    }
}

/// A config error: what, about which SA or policy, at which line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// The SA or policy concerned, when there is one.
    pub item: Option<Item>,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl ConfigError {
    /// An error at a line.
    pub fn at(line: usize, kind: ErrorKind) -> Self {
        ConfigError {
            line: Some(line),
            item: None,
            kind,
        }
    }

    /// Sets the SA or policy concerned (if not set yet).
    pub fn about(mut self, item: Item) -> Self {
        self.item.get_or_insert(item);
        self
    }

    /// What is wrong, about which SA or policy: `SA `x`: message`.
    pub fn describe(&self) -> String {
        match &self.item {
            Some(i) => format!("{i}: {}", self.kind),
            None => self.kind.to_string(),
        }
    }

    /// The error as tools print it for `file`: `file:line: SA `x`: message`.
    pub fn in_file(&self, file: &str) -> String {
        match self.line {
            Some(l) => format!("{file}:{l}: {}", self.describe()),
            None => format!("{file}: {}", self.describe()),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(l) = self.line {
            write!(f, "line {l}: ")?;
        }
        if let Some(i) = &self.item {
            write!(f, "{i}: ")?;
        }
        self.kind.fmt(f)
    }
}

impl std::error::Error for ConfigError {}

/// IP protocol names accepted in selectors, with their numbers (`/etc/protocols` names plus
/// setkey's `icmp6` and `ip4`).
pub const PROTOCOLS: &[(&str, u8)] = &[
    ("icmp", 1),
    ("igmp", 2),
    ("ipip", 4),
    ("ip4", 4),
    ("ipencap", 4),
    ("tcp", 6),
    ("udp", 17),
    ("ipv6", 41),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("icmp6", 58),
    ("ipv6-icmp", 58),
    ("icmpv6", 58),
    ("ospf", 89),
    ("pim", 103),
    ("ipcomp", 108),
    ("vrrp", 112),
    ("l2tp", 115),
    ("sctp", 132),
    ("udplite", 136),
];

/// The number of an IP protocol name (case-insensitive), or a decimal number.
pub fn proto_by_name(name: &str) -> Option<u8> {
    if let Ok(n) = name.parse::<u8>() {
        return Some(n);
    }
    PROTOCOLS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, p)| p)
}

/// The usual name of an IP protocol number, if it has one here.
pub fn proto_name(p: u8) -> Option<&'static str> {
    PROTOCOLS.iter().find(|&&(_, n)| n == p).map(|&(name, _)| name)
}

/// Whether packets of this protocol carry ports (or ICMP type and code) a selector can match.
pub fn has_ports(p: u8) -> bool {
    matches!(p, 1 | 6 | 17 | 58 | 132 | 136)
}

/// Checks a selector: same family on both sides, ports only where the protocol has them.
pub(crate) fn check_selector(s: &Selector) -> Result<(), String> {
    if let (Some(a), Some(b)) = (s.src, s.dst) {
        if a.addr().is_ipv4() != b.addr().is_ipv4() {
            return Err(format!(
                "src {a} and dst {b} are of different IP versions: the policy would never match"
            ));
        }
    }
    let any_port = s.src_ports.is_any() && s.dst_ports.is_any();
    if !any_port && !s.proto.is_some_and(has_ports) {
        return Err("ports need proto tcp, udp, sctp, udplite, icmp or icmp6 (ICMP: type and code)".into());
    }
    for r in [s.src_ports, s.dst_ports] {
        if r.lo > r.hi {
            return Err(format!("port range {}-{} is empty", r.lo, r.hi));
        }
    }
    Ok(())
}

impl Config {
    /// The line of SA `i`, if known.
    pub fn sa_line(&self, i: usize) -> Option<usize> {
        self.lines.sas.get(i).copied()
    }

    /// The line of policy `i`, if known.
    pub fn policy_line(&self, i: usize) -> Option<usize> {
        self.lines.policies.get(i).copied()
    }

    /// The number of policy `i` as messages show it (`policy #N`): see [`Lines::policy_numbers`].
    pub fn policy_number(&self, i: usize) -> usize {
        self.lines.policy_numbers.get(i).copied().unwrap_or(i + 1)
    }

    /// Warnings about SAs that are valid but unsafe: ESP with encryption and no integrity.
    pub fn unsafe_sa_warnings(&self) -> Vec<Warning> {
        self.sas
            .iter()
            .enumerate()
            .filter_map(|(i, sa)| {
                crate::spec::unauthenticated_esp(&sa.params).map(|m| Warning {
                    line: self.sa_line(i).unwrap_or(0),
                    message: format!("SA `{}`: {m}", sa.name),
                })
            })
            .collect()
    }

    /// The IKE connections' proposals that are not post-quantum: no ML-KEM as the key
    /// exchange of IKE_SA_INIT nor as an additional key exchange that cannot be NONE
    /// (RFC 9370), so traffic recorded today could be decrypted by a quantum computer later.
    /// ESP proposals are named only when they ask for a key exchange (PFS) without ML-KEM.
    /// For `ipsec check-config`; one note a proposal, at its connection's line.
    pub fn not_post_quantum(&self) -> Vec<Warning> {
        use ipsec_ike::alg::{parse_proposal, ProposalKind};
        let mut v = Vec::new();
        for c in &self.connections {
            for p in &c.proposals {
                if parse_proposal(p, ProposalKind::Ike).is_ok_and(|s| !s.is_post_quantum()) {
                    v.push(Warning {
                        line: c.line,
                        message: format!(
                            "connection `{}`: IKE proposal `{p}` is not post-quantum (add an ML-KEM \
                             key exchange, e.g. `-ke1_mlkem768`)",
                            c.name
                        ),
                    });
                }
            }
            for ch in &c.children {
                for p in &ch.esp_proposals {
                    let pfs_classic =
                        parse_proposal(p, ProposalKind::Esp).is_ok_and(|s| !s.dh.is_empty() && !s.is_post_quantum());
                    if pfs_classic {
                        v.push(Warning {
                            line: c.line,
                            message: format!(
                                "connection `{}` child `{}`: ESP proposal `{p}` rekeys with a key exchange \
                                 that is not post-quantum",
                                c.name, ch.name
                            ),
                        });
                    }
                }
            }
        }
        v
    }

    /// The weak algorithms the connections accept (3DES, SHA-1, PRF SHA-1, MODP-1024: only
    /// when a proposal names them, e.g. the `windows` keyword): for `ipsec check-config`, one
    /// warning per algorithm and connection (IKE) or child (ESP), at the connection's line.
    pub fn weak_algorithms(&self) -> Vec<Warning> {
        use ipsec_ike::alg::{parse_proposal, ProposalKind};
        let mut v = Vec::new();
        let mut name = |line: usize, what: String, props: &[String], kind: ProposalKind| {
            let mut seen: Vec<&str> = Vec::new();
            for p in props {
                for (alg, why) in parse_proposal(p, kind).map(|s| s.weak_algorithms()).unwrap_or_default() {
                    if !seen.contains(&alg) {
                        seen.push(alg);
                        v.push(Warning {
                            line,
                            message: format!("{what}: weak algorithm `{alg}` accepted ({why}), in `{p}`"),
                        });
                    }
                }
            }
        };
        for c in &self.connections {
            name(
                c.line,
                format!("connection `{}` IKE", c.name),
                &c.proposals,
                ProposalKind::Ike,
            );
            for ch in &c.children {
                name(
                    c.line,
                    format!("connection `{}` child `{}` ESP", c.name, ch.name),
                    &ch.esp_proposals,
                    ProposalKind::Esp,
                );
            }
        }
        v
    }

    /// What `tunneld` needs of a config, checked at start-up rather than found per packet:
    /// the outer header of every packet an outbound bundle seals is made by the bundle's
    /// last tunnel-mode SA (transport SAs after it, such as AH on the outer header, keep
    /// that header), so each outbound bundle needs a tunnel-mode SA, the last of which
    /// tunnels to one of `peers` when any are given: tunneld sends every sealed packet to
    /// the peer its outermost SA names and drops the others.
    pub fn check_for_tunneld(&self, peers: &[std::net::IpAddr]) -> Result<(), ConfigError> {
        let why = "tunneld sends every sealed packet to a peer, so an outbound bundle needs a tunnel-mode \
                   SA to a peer (the last tunnel-mode SA of the bundle makes the outer header)";
        for (i, p) in self.policies.iter().enumerate() {
            let ActionConfig::Protect(names) = &p.action else {
                continue;
            };
            if p.dir != Direction::Out {
                continue;
            }
            let err = |m: String| ConfigError {
                line: self.policy_line(i),
                item: Some(self.policy_item(i)),
                kind: ErrorKind::Invalid(m),
            };
            let outer = names.iter().rev().find_map(|n| {
                let sa = self.sas.iter().find(|s| &s.name == n)?;
                match (sa.params.mode, sa.params.tunnel) {
                    (Mode::Tunnel, Some(t)) => Some((n, t.dst)),
                    _ => None,
                }
            });
            match outer {
                None => {
                    return Err(err(format!(
                        "no SA of its bundle [{}] is in tunnel mode: {why}",
                        names.join(", ")
                    )))
                }
                Some((n, d)) if !peers.is_empty() && !peers.contains(&d) => {
                    let to = match peers {
                        [p] => format!("the peer {p} ([tunnel] peer)"),
                        _ => format!("any of the peers {} ([tunnel] peers)", list(peers)),
                    };
                    return Err(err(format!("SA `{n}` tunnels to {d}, not to {to}: {why}")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn policy_item(&self, i: usize) -> Item {
        Item::Policy {
            index: self.policy_number(i),
            name: self.policies[i].name.clone(),
        }
    }

    /// Checks names, installs (keys) every SA at time `now`, resolves bundle names and adds
    /// the policies in order.
    pub fn build(&self, now: Duration) -> Result<Engine, ConfigError> {
        let mut engine = Engine::new();
        let mut ids: HashMap<&str, SaId> = HashMap::new();
        for (i, sa) in self.sas.iter().enumerate() {
            let err = |kind| ConfigError {
                line: self.sa_line(i),
                item: Some(Item::Sa(sa.name.clone())),
                kind,
            };
            if sa.name.is_empty() {
                return Err(err(ErrorKind::Invalid("an SA needs a non-empty name".into())));
            }
            if ids.contains_key(sa.name.as_str()) {
                return Err(err(ErrorKind::DuplicateName(sa.name.clone())));
            }
            sa.params.validate().map_err(|e| err(ErrorKind::Sa(e)))?;
            let id = engine.add_sa(sa.clone(), now).map_err(|e| err(ErrorKind::Install(e)))?;
            ids.insert(&sa.name, id);
        }
        let mut policies = Vec::with_capacity(self.policies.len());
        for (i, p) in self.policies.iter().enumerate() {
            let err = |kind| ConfigError {
                line: self.policy_line(i),
                item: Some(self.policy_item(i)),
                kind,
            };
            check_selector(&p.selector).map_err(|m| err(ErrorKind::Invalid(m)))?;
            let action = match &p.action {
                ActionConfig::Bypass => Action::Bypass,
                ActionConfig::Discard => Action::Discard,
                ActionConfig::Protect(names) => {
                    let mut v = Vec::with_capacity(names.len());
                    for n in names {
                        v.push(
                            *ids.get(n.as_str())
                                .ok_or_else(|| err(ErrorKind::UnknownSa(n.clone())))?,
                        );
                    }
                    Action::Protect(v)
                }
            };
            let policy = ipsec_engine::Policy {
                dir: p.dir,
                selector: p.selector,
                action,
            };
            engine.check_policy(&policy).map_err(|e| err(ErrorKind::Install(e)))?;
            policies.push(policy);
        }
        // All at once: `add_policy` per policy would publish (clone) the data plane each time,
        // quadratic in the number of policies.
        engine.set_policies(policies).map_err(|e| ConfigError {
            line: None,
            item: None,
            kind: ErrorKind::Install(e),
        })?;
        Ok(engine)
    }
}

/// `tunneld`'s underlay addresses, checked once `[tunnel]` and the command line are merged:
/// at most one local address per family; peers unicast and without repeats; a local
/// address of each peer's family where the daemon needs one: for IPv6 (an IPv6 raw socket
/// delivers packets without their IPv6 header, which tunneld rebuilds with the local
/// address as destination, RFC 3542 3) and for ESP in UDP (the socket is bound to it),
/// which also needs a peer to send to. The error says what to change.
pub fn check_underlay(local: &[std::net::IpAddr], peers: &[std::net::IpAddr], udp_encap: bool) -> Result<(), String> {
    let unicast = |a: &std::net::IpAddr| !(a.is_unspecified() || a.is_multicast());
    for a in local {
        if !unicast(a) {
            return Err(format!("local {a} is not a unicast address"));
        }
        if let Some(b) = local.iter().find(|b| *b != a && b.is_ipv4() == a.is_ipv4()) {
            return Err(format!(
                "local {a} and {b}: give at most one IPv4 and one IPv6 local address"
            ));
        }
        if local.iter().filter(|b| *b == a).count() > 1 {
            return Err(format!("local {a} is given twice"));
        }
    }
    for (i, p) in peers.iter().enumerate() {
        if !unicast(p) {
            return Err(format!("peer {p} is not a unicast address"));
        }
        if peers[..i].contains(p) {
            return Err(format!("peer {p} is given twice"));
        }
        if local.contains(p) {
            return Err(format!("peer {p} is also a local address"));
        }
        let has_local = local.iter().any(|l| l.is_ipv4() == p.is_ipv4());
        if !has_local && p.is_ipv6() {
            return Err(format!(
                "peer {p} is IPv6, so local needs an IPv6 address too: IPv6 raw sockets deliver packets \
                 without their IPv6 header, which tunneld rebuilds with the local address as destination"
            ));
        }
        if !has_local && udp_encap {
            return Err(format!(
                "ESP in UDP to peer {p} needs a local IPv4 address: the UDP socket is bound to it"
            ));
        }
    }
    if udp_encap && peers.is_empty() {
        return Err("ESP in UDP needs a peer (where the datagrams go) and a local address".into());
    }
    Ok(())
}

/// Addresses as `a, b, c`.
fn list(addrs: &[std::net::IpAddr]) -> String {
    addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

/// Reads a config file's text (held in a buffer zeroed when dropped: it has keys). The error
/// says why, without the path ([`ConfigError::in_file`] adds it).
pub fn read(path: &Path) -> Result<zeroize::Zeroizing<String>, ConfigError> {
    let io = |m: String| ConfigError {
        line: None,
        item: None,
        kind: ErrorKind::Io(m),
    };
    if path.is_dir() {
        return Err(io("is a directory, not a config file".into()));
    }
    std::fs::read_to_string(path)
        .map(zeroize::Zeroizing::new)
        .map_err(|e| io(io_reason(&e)))
}

/// Reads a config file in `format` (detected from the name and content when `None`).
pub fn load(path: &Path, format: Option<Format>) -> Result<Loaded, ConfigError> {
    let text = read(path)?;
    parse(&text, format.unwrap_or_else(|| Format::detect(path, &text)))
}

/// Parses config text in `format`.
pub fn parse(text: &str, format: Format) -> Result<Loaded, ConfigError> {
    parse_with(text, format, &setkey::Options::default())
}

/// Parses config text in `format`, setkey text with `opts`. The warnings include those of
/// [`Config::unsafe_sa_warnings`].
pub fn parse_with(text: &str, format: Format, opts: &setkey::Options) -> Result<Loaded, ConfigError> {
    let (config, mut warnings) = match format {
        Format::Toml => (from_toml::parse(text)?, Vec::new()),
        Format::Setkey => setkey::parse(text, opts)?,
    };
    warnings.extend(config.unsafe_sa_warnings());
    warnings.sort_by_key(|w| w.line);
    Ok(Loaded {
        config,
        format,
        warnings,
    })
}

/// An I/O error's reason as messages show it: the OS's words without `(os error N)`.
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::IsADirectory => "is a directory".into(),
        std::io::ErrorKind::UnexpectedEof => "unexpected end of file".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}
