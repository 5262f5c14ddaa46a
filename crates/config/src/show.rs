//! What an [`Engine`] built from a config holds, as `ipsec check-config` prints it: the SAs
//! (without keys) and the policies in match order, as text or JSON.

use super::{proto_name, Config};
use ipsec_core::sa::Keyed;
use ipsec_core::AeadAlg;
use ipsec_engine::{Action, Direction, Engine, Lifetime, Limits, PortRange, Prefix};
use serde::Serialize;
use std::fmt::Write as _;

/// An algorithm as shown: name and sizes, never the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AlgView {
    /// The `ip xfrm` name.
    pub alg: &'static str,
    /// Key length in bits (for an AEAD, without the 32-bit salt).
    pub key_bits: usize,
    /// ICV length in bits, for integrity and AEAD algorithms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icv_bits: Option<usize>,
}

/// One installed SA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SaView {
    /// Its name.
    pub name: String,
    /// Its line in the file, if it came from one.
    pub line: Option<usize>,
    /// `esp`, `ah` or `comp`.
    pub proto: &'static str,
    /// SPI (IPComp: CPI).
    pub spi: u32,
    /// `transport` or `tunnel`.
    pub mode: &'static str,
    /// Source endpoint, if given.
    pub src: Option<String>,
    /// Destination endpoint, if given.
    pub dst: Option<String>,
    /// ESP cipher.
    pub enc: Option<AlgView>,
    /// Integrity algorithm.
    pub auth: Option<AlgView>,
    /// ESP combined mode.
    pub aead: Option<AlgView>,
    /// IPComp algorithm.
    pub comp: Option<&'static str>,
    /// IPComp: the adaptive mode (`off`, `always`, `backoff`, `model`).
    pub adaptive: Option<&'static str>,
    /// IPComp: the configured link rate in bit/s (0: unknown, estimated).
    pub link_bps: Option<u64>,
    /// IPComp: the alternative algorithm and its CPI (`lzf cpi 0xf001`).
    pub alternative: Option<String>,
    /// Replay window in packets (0: off).
    pub replay_window: u32,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Soft and hard limits.
    pub lifetime: Lifetime,
    /// ESP in UDP (RFC 3948): ports and original address, if the SA has `encap espinudp`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encap: Option<ipsec_engine::UdpEncap>,
}

/// One installed policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyView {
    /// The policy's number, as error messages give it (`policy #N`): its position among the
    /// file's policies, from 1 ([`Config::policy_number`]).
    pub number: usize,
    /// `in` or `out`.
    pub dir: Direction,
    /// Position among the policies of its direction (1 = matched first).
    pub order: usize,
    /// Its line in the file, if it came from one.
    pub line: Option<usize>,
    /// Source prefix or `any`.
    pub src: String,
    /// Destination prefix or `any`.
    pub dst: String,
    /// Protocol name or number, or `any`.
    pub proto: String,
    /// Source ports (ICMP type): `any`, `N` or `lo-hi`.
    pub src_port: String,
    /// Destination ports (ICMP code).
    pub dst_port: String,
    /// `protect`, `bypass` or `discard`.
    pub action: &'static str,
    /// The SAs of a protect action, by name, in seal order.
    pub bundle: Vec<String>,
}

/// `tunneld`'s settings from the `[tunnel]` table (`None`: not set, tunneld's default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TunnelView {
    /// The line of the `[tunnel]` header.
    pub line: Option<usize>,
    /// TUN device name.
    pub tun: Option<String>,
    /// TUN MTU.
    pub mtu: Option<u32>,
    /// This host's underlay addresses (one, or an IPv4 and an IPv6 one), comma-separated.
    pub local: Option<String>,
    /// The peers' underlay addresses, comma-separated (one in most configs).
    pub peer: Option<String>,
    /// The same, as a list.
    pub peers: Vec<String>,
}

/// Everything an engine holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Effective {
    /// The SAs, in install order.
    pub sas: Vec<SaView>,
    /// The policies: outbound in match order, then inbound in match order.
    pub policies: Vec<PolicyView>,
    /// The `[tunnel]` table, if the file has one.
    pub tunnel: Option<TunnelView>,
    /// The IKEv2 connections (`[[connection]]`), with their children (no keys: those are in
    /// the secrets file).
    pub connections: Vec<ConnectionView>,
}

/// One IKEv2 connection as `ipsec check-config` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionView {
    /// Its name.
    pub name: String,
    /// Its line.
    pub line: usize,
    /// Local and remote IKE addresses (`%any`: any).
    pub addrs: (String, String),
    /// Local and remote identities (`%any`: any).
    pub ids: (String, String),
    /// How each side authenticates: what we present, what we trust.
    pub auth: (String, String),
    /// IKE proposals.
    pub proposals: Vec<String>,
    /// Forced UDP encapsulation.
    pub encap: bool,
    /// Liveness checks every this many seconds (0: off).
    pub dpd_delay: u64,
    /// The child SAs.
    pub children: Vec<ChildView>,
}

/// One child of a connection as `ipsec check-config` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildView {
    /// Its name.
    pub name: String,
    /// Local traffic selectors (empty: dynamic).
    pub local_ts: Vec<String>,
    /// Remote traffic selectors (empty: dynamic).
    pub remote_ts: Vec<String>,
    /// ESP proposals.
    pub esp_proposals: Vec<String>,
    /// `start`, `trap` or `none`.
    pub start_action: String,
}

fn alg<A: Copy>(k: &Option<Keyed<A>>, name: impl Fn(A) -> &'static str, icv: bool, salt: usize) -> Option<AlgView> {
    k.as_ref().map(|k| AlgView {
        alg: name(k.alg),
        key_bits: k.key.len().saturating_sub(salt) * 8,
        icv_bits: icv.then_some(k.icv_len * 8),
    })
}

fn prefix(p: Option<Prefix>) -> String {
    p.map_or_else(|| "any".into(), |p| p.to_string())
}

fn ports(r: PortRange) -> String {
    r.to_string()
}

impl SaView {
    /// An SA's view (no keys), with its line if it came from a file.
    pub fn of(c: &ipsec_engine::SaConfig, line: Option<usize>) -> Self {
        let p = &c.params;
        SaView {
            name: c.name.clone(),
            line,
            proto: p.proto.name(),
            spi: p.spi,
            mode: p.mode.name(),
            src: p.tunnel.map(|t| t.src.to_string()),
            dst: p.tunnel.map(|t| t.dst.to_string()),
            enc: alg(&p.enc, |a| a.name(), false, 0),
            auth: alg(&p.integ, |a| a.name(), true, 0),
            aead: alg(&p.aead, |a| a.name(), true, AeadAlg::SALT_LEN),
            comp: c.comp.map(|c| c.name()),
            adaptive: c.comp.map(|_| c.adaptive.mode.name()),
            link_bps: c.comp.map(|_| c.adaptive.link_bps),
            alternative: c
                .adaptive
                .alternative
                .filter(|_| c.comp.is_some())
                .map(|a| format!("{} cpi {:#x}", a.algorithm, a.cpi)),
            replay_window: p.replay_window,
            esn: p.esn,
            lifetime: c.lifetime,
            encap: c.encap,
        }
    }
}

impl Effective {
    /// Reads the SAs and policies of `engine`, which `config` built (for the line numbers).
    pub fn new(engine: &Engine, config: &Config) -> Self {
        let sad = engine.sad();
        let sas = sad
            .iter()
            .enumerate()
            .map(|(i, (_, e))| SaView::of(&e.config, config.sa_line(i)))
            .collect();
        let mut policies = Vec::new();
        for dir in [Direction::Out, Direction::In] {
            let mut order = 0;
            for (i, p) in engine.spd().policies().iter().enumerate() {
                if p.dir != dir {
                    continue;
                }
                order += 1;
                let s = &p.selector;
                let (action, bundle) = match &p.action {
                    Action::Bypass => ("bypass", Vec::new()),
                    Action::Discard => ("discard", Vec::new()),
                    Action::Protect(ids) => (
                        "protect",
                        ids.iter()
                            .map(|&id| {
                                sad.get(id)
                                    .map_or_else(|| format!("#{}", id.0), |e| e.config.name.clone())
                            })
                            .collect(),
                    ),
                };
                policies.push(PolicyView {
                    number: config.policy_number(i),
                    dir,
                    order,
                    line: config.policy_line(i),
                    src: prefix(s.src),
                    dst: prefix(s.dst),
                    proto: s.proto.map_or_else(
                        || "any".into(),
                        |n| proto_name(n).map_or_else(|| n.to_string(), str::to_string),
                    ),
                    src_port: ports(s.src_ports),
                    dst_port: ports(s.dst_ports),
                    action,
                    bundle,
                });
            }
        }
        let tunnel = config.tunnel.as_ref().map(|t| TunnelView {
            line: t.line,
            tun: t.tun.clone(),
            mtu: t.mtu,
            local: joined(&t.local),
            peer: joined(&t.peers),
            peers: t.peers.iter().map(|a| a.to_string()).collect(),
        });
        let connections = config
            .connections
            .iter()
            .map(|c| ConnectionView {
                name: c.name.clone(),
                line: c.line,
                addrs: (
                    c.local_addr.to_string(),
                    c.remote_addr.map_or_else(|| "%any".into(), |a| a.to_string()),
                ),
                ids: (c.local_id(), c.remote.id.clone().unwrap_or_else(|| "%any".into())),
                auth: (
                    crate::connection::describe(&c.local, true),
                    crate::connection::describe(&c.remote, false),
                ),
                proposals: c.proposals.clone(),
                encap: c.encap,
                dpd_delay: c.dpd_delay,
                children: c
                    .children
                    .iter()
                    .map(|ch| ChildView {
                        name: ch.name.clone(),
                        local_ts: ch.local_ts.clone(),
                        remote_ts: ch.remote_ts.clone(),
                        esp_proposals: ch.esp_proposals.clone(),
                        start_action: format!("{:?}", ch.start_action).to_lowercase(),
                    })
                    .collect(),
            })
            .collect();
        Effective {
            sas,
            policies,
            tunnel,
            connections,
        }
    }

    /// The text `ipsec check-config` prints: each SA, then a table of the policies.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "SAs ({}), in install order (keys not shown):", self.sas.len());
        for s in &self.sas {
            let at = s.line.map_or_else(String::new, |l| format!(" (line {l})"));
            let ends = match (&s.src, &s.dst) {
                (Some(a), Some(b)) => format!(" {a} -> {b}"),
                _ => String::new(),
            };
            let id = if s.proto == "comp" { "cpi" } else { "spi" };
            let _ = writeln!(out, "  {}{at}: {} {id} {:#x} {}{ends}", s.name, s.proto, s.spi, s.mode);
            if let Some(a) = &s.enc {
                let _ = writeln!(out, "      enc      {}, {}-bit key", a.alg, a.key_bits);
            }
            if let Some(a) = &s.auth {
                let _ = writeln!(
                    out,
                    "      auth     {}, {}-bit key, {}-bit ICV",
                    a.alg,
                    a.key_bits,
                    a.icv_bits.unwrap_or(0)
                );
            }
            if let Some(a) = &s.aead {
                let _ = writeln!(
                    out,
                    "      aead     {}, {}-bit key + 32-bit salt, {}-bit ICV",
                    a.alg,
                    a.key_bits,
                    a.icv_bits.unwrap_or(0)
                );
            }
            if let Some(c) = s.comp {
                let _ = writeln!(out, "      comp     {c}");
            }
            if let Some(m) = s.adaptive {
                let link = match s.link_bps.unwrap_or(0) {
                    0 => "unknown (estimated)".to_string(),
                    b => format!("{} Mbit/s", b as f64 / 1e6),
                };
                let _ = writeln!(out, "      adaptive {m}, link {link}");
            }
            if let Some(a) = &s.alternative {
                let _ = writeln!(out, "      alternative {a}");
            }
            if s.proto != "comp" {
                let window = match s.replay_window {
                    0 => "off".to_string(),
                    w => format!("{w} packets"),
                };
                let esn = if s.esn { "on" } else { "off" };
                let _ = writeln!(out, "      replay   window {window}, esn {esn}");
            }
            if let Some(e) = &s.encap {
                let oa = e.oa.map_or_else(|| "none".to_string(), |a| a.to_string());
                let _ = writeln!(
                    out,
                    "      encap    espinudp (RFC 3948), UDP {} -> {}, original address {oa}",
                    e.sport, e.dport
                );
            }
            let _ = writeln!(out, "      lifetime {}", lifetime(&s.lifetime));
        }
        let _ = writeln!(
            out,
            "\nPolicies, in match order per direction (first match wins; no match: discard);\n\
             # is the policy's number in the file, as error messages give it:"
        );
        let mut rows = vec![row(&[
            "LINE", "DIR", "#", "SRC", "DST", "PROTO", "SPORT", "DPORT", "ACTION",
        ])];
        for p in &self.policies {
            rows.push(vec![
                line(p.line),
                p.dir.to_string(),
                p.number.to_string(),
                p.src.clone(),
                p.dst.clone(),
                p.proto.clone(),
                p.src_port.clone(),
                p.dst_port.clone(),
                if p.bundle.is_empty() {
                    p.action.into()
                } else {
                    format!("{} {}", p.action, p.bundle.join(", "))
                },
            ]);
        }
        table(&mut out, &rows);
        if let Some(t) = &self.tunnel {
            let at = t.line.map_or_else(String::new, |l| format!(" (line {l})"));
            let or_default = |v: Option<String>, d: &str| v.unwrap_or_else(|| format!("default ({d})"));
            let _ = writeln!(out, "\ntunneld settings{at}:");
            let _ = writeln!(out, "  tun   {}", or_default(t.tun.clone(), "ipsec0, or --tun"));
            let mtu = or_default(
                t.mtu.map(|m| m.to_string()),
                "largest inner packet that fits 1500 bytes",
            );
            let _ = writeln!(out, "  mtu   {mtu}");
            let _ = writeln!(out, "  local {}", or_default(t.local.clone(), "any"));
            let label = if t.peers.len() > 1 { "peers" } else { "peer " };
            let _ = writeln!(out, "  {label} {}", or_default(t.peer.clone(), "any"));
        }
        for c in &self.connections {
            let _ = writeln!(out, "\nIKEv2 connection {} (line {}):", c.name, c.line);
            let _ = writeln!(out, "  addresses {} <-> {}", c.addrs.0, c.addrs.1);
            let _ = writeln!(out, "  ids       {} <-> {}", c.ids.0, c.ids.1);
            let _ = writeln!(out, "  we prove  {}", c.auth.0);
            let _ = writeln!(out, "  peer must {}", c.auth.1);
            let _ = writeln!(out, "  proposals {}", c.proposals.join(", "));
            let _ = writeln!(
                out,
                "  ESP in UDP {}; liveness checks {}",
                if c.encap {
                    "always"
                } else {
                    "always (tunneld's IKE children go in UDP)"
                },
                if c.dpd_delay == 0 {
                    "off".to_string()
                } else {
                    format!("every {} s", c.dpd_delay)
                }
            );
            for ch in &c.children {
                let any = |v: &Vec<String>| {
                    if v.is_empty() {
                        "dynamic".to_string()
                    } else {
                        v.join(", ")
                    }
                };
                let _ = writeln!(
                    out,
                    "  child {}: {} <-> {}; ESP {}; start {}",
                    ch.name,
                    any(&ch.local_ts),
                    any(&ch.remote_ts),
                    ch.esp_proposals.join(", "),
                    ch.start_action
                );
            }
        }
        out
    }
}

/// Addresses comma-separated; `None` for none.
fn joined(addrs: &[std::net::IpAddr]) -> Option<String> {
    (!addrs.is_empty()).then(|| addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "))
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

fn line(l: Option<usize>) -> String {
    l.map_or_else(|| "-".into(), |l| l.to_string())
}

fn limits(l: &Limits) -> Option<String> {
    let mut v = Vec::new();
    if let Some(s) = l.seconds {
        v.push(format!("{s} s"));
    }
    if let Some(b) = l.bytes {
        v.push(format!("{b} bytes"));
    }
    if let Some(p) = l.packets {
        v.push(format!("{p} packets"));
    }
    (!v.is_empty()).then(|| v.join(", "))
}

fn lifetime(l: &Lifetime) -> String {
    match (limits(&l.soft), limits(&l.hard)) {
        (None, None) => "none".into(),
        (s, h) => {
            let mut v = Vec::new();
            if let Some(s) = s {
                v.push(format!("soft {s}"));
            }
            if let Some(h) = h {
                v.push(format!("hard {h}"));
            }
            v.join("; ")
        }
    }
}

fn table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut l = String::from(" ");
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                l.push(' ');
                l.push_str(cell);
            } else {
                let _ = write!(l, " {cell:<w$}", w = widths[c]);
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    }
}
