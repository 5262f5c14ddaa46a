//! The TOML config format (see [the module above](super) for an example): `[[sa]]` and
//! `[[policy]]` tables, read with serde and `toml::Spanned` so that every error, syntax or
//! semantic, names the line of the value at fault.

use super::{
    check_selector, proto_by_name, ActionConfig, Config, ConfigError, ErrorKind, Item, PolicyConfig, TunnelConfig,
};
use crate::spec;
use crate::values::Secret;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg};
use ipsec_engine::{Direction, Lifetime, Limits, PortRange, Prefix, SaConfig, Selector};
use ipsec_ipcomp::Algorithm;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::collections::HashMap;
use std::net::IpAddr;
use toml::Spanned;
use zeroize::Zeroizing;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// `None` when absent; `Some(empty)` when written `sa = []` (on purpose).
    sa: Option<Vec<Spanned<SaToml>>>,
    policy: Option<Vec<Spanned<PolicyToml>>>,
    tunnel: Option<Spanned<TunnelToml>>,
    #[serde(default)]
    connection: Vec<Spanned<crate::connection::ConnectionToml>>,
    ike: Option<Spanned<crate::ike_settings::IkeToml>>,
    #[serde(default)]
    pool: Vec<Spanned<crate::pools::PoolToml>>,
    /// `[radius]` (one server) or `[[radius]]` (several).
    radius: Option<Spanned<toml::Value>>,
}

/// `[tunnel]`: tunneld's settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TunnelToml {
    tun: Option<Spanned<String>>,
    mtu: Option<Spanned<u32>>,
    local: Option<Spanned<toml::Value>>,
    peer: Option<Spanned<String>>,
    peers: Option<Spanned<Vec<Spanned<String>>>>,
    control: Option<Spanned<String>>,
    secrets: Option<Spanned<String>>,
    encap: Option<Spanned<String>>,
    encap_sport: Option<Spanned<u16>>,
    encap_dport: Option<Spanned<u16>>,
    workers: Option<Spanned<u32>>,
    offload: Option<bool>,
    af_packet: Option<bool>,
    qdisc_bypass: Option<bool>,
    mss_clamp: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SaToml {
    name: Spanned<String>,
    xfrm: Option<Spanned<Secret>>,
    proto: Option<Spanned<String>>,
    spi: Option<Spanned<u32>>,
    mode: Option<Spanned<String>>,
    src: Option<Spanned<String>>,
    dst: Option<Spanned<String>>,
    enc: Option<Spanned<EncToml>>,
    auth: Option<Spanned<AuthToml>>,
    aead: Option<Spanned<AeadToml>>,
    comp: Option<Spanned<String>>,
    /// IPComp: `off`, `always`, `backoff` (default) or `model`.
    adaptive: Option<Spanned<String>>,
    /// IPComp: the link rate for the `model` mode (e.g. "100M").
    link_rate: Option<Spanned<String>>,
    /// IPComp: a second algorithm under its own CPI, `{ comp = "lzf", cpi = 0xf001 }`.
    alternative: Option<Spanned<AlternativeToml>>,
    replay_window: Option<Spanned<u32>>,
    esn: Option<Spanned<bool>>,
    lifetime: Option<Spanned<LifetimeToml>>,
    /// ESP in UDP (RFC 3948): `{ type = "espinudp", sport = 4500, dport = 4500, oa = "..." }`.
    encap: Option<Spanned<EncapToml>>,
}

/// `alternative = { comp = "lzf", cpi = 0xf001 }` of an IPComp `[[sa]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AlternativeToml {
    comp: Spanned<String>,
    cpi: Spanned<u32>,
}

/// `encap = { ... }` of an `[[sa]]`: `ip xfrm state`'s `encap TYPE SPORT DPORT OADDR`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EncapToml {
    #[serde(rename = "type")]
    kind: Spanned<String>,
    /// Default 4500.
    sport: Option<Spanned<u64>>,
    /// Default 4500.
    dport: Option<Spanned<u64>>,
    /// The original address (NAT-OA); omitted, "0.0.0.0" or "::": none.
    oa: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EncToml {
    alg: Spanned<String>,
    #[serde(default)]
    key: Option<Spanned<Secret>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthToml {
    alg: Spanned<String>,
    #[serde(default)]
    key: Option<Spanned<Secret>>,
    /// ICV length in bits.
    trunc: Option<Spanned<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AeadToml {
    alg: Spanned<String>,
    key: Spanned<Secret>,
    /// ICV length in bits (default 128).
    icv: Option<Spanned<usize>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsToml {
    bytes: Option<u64>,
    packets: Option<u64>,
    seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LifetimeToml {
    #[serde(default)]
    soft: LimitsToml,
    #[serde(default)]
    hard: LimitsToml,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyToml {
    name: Option<String>,
    dir: Spanned<String>,
    src: Option<Spanned<String>>,
    dst: Option<Spanned<String>>,
    proto: Option<Spanned<ProtoToml>>,
    src_port: Option<Spanned<PortToml>>,
    dst_port: Option<Spanned<PortToml>>,
    action: Spanned<String>,
    bundle: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `proto = 6` or `proto = "tcp"` (or "any").
struct ProtoToml(Option<u8>);

impl<'de> Deserialize<'de> for ProtoToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ProtoToml;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an IP protocol number (0-255) or name (tcp, udp, icmp, icmp6, sctp, gre, ...), or \"any\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ProtoToml, E> {
                u8::try_from(v)
                    .map(|p| ProtoToml(Some(p)))
                    .map_err(|_| E::custom(format!("IP protocol {v} is not in 0-255")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ProtoToml, E> {
                if v.eq_ignore_ascii_case("any") {
                    return Ok(ProtoToml(None));
                }
                proto_by_name(v).map(|p| ProtoToml(Some(p))).ok_or_else(|| {
                    E::custom(format!(
                        "unknown IP protocol `{v}`: use a number or tcp, udp, icmp, icmp6, sctp, gre, ..."
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `80`, `"1024-65535"` or `"any"`.
struct PortToml(PortRange);

fn parse_port_range(v: &str) -> Option<PortRange> {
    if v.eq_ignore_ascii_case("any") {
        return Some(PortRange::ANY);
    }
    match v.split_once('-') {
        Some((lo, hi)) => Some(PortRange {
            lo: lo.trim().parse().ok()?,
            hi: hi.trim().parse().ok()?,
        }),
        None => v.trim().parse().ok().map(PortRange::single),
    }
}

impl<'de> Deserialize<'de> for PortToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PortToml;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a port (0-65535), a range \"lo-hi\" or \"any\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PortToml, E> {
                u16::try_from(v)
                    .map(|p| PortToml(PortRange::single(p)))
                    .map_err(|_| E::custom(format!("port {v} is not in 0-65535")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortToml, E> {
                parse_port_range(v)
                    .map(PortToml)
                    .ok_or_else(|| E::custom(format!("bad port `{v}`: use a number, \"lo-hi\" or \"any\"")))
            }
        }
        d.deserialize_any(V)
    }
}

/// Byte offset → 1-based line.
struct LineIndex(Vec<usize>);

impl LineIndex {
    fn new(text: &str) -> Self {
        LineIndex(text.match_indices('\n').map(|(i, _)| i).collect())
    }
    fn line(&self, offset: usize) -> usize {
        self.0.partition_point(|&nl| nl < offset) + 1
    }
    fn of<T>(&self, s: &Spanned<T>) -> usize {
        self.line(s.span().start)
    }
}

const ENC_NAMES: &str = "cipher_null, cbc(des), cbc(des3_ede) or cbc(aes)";
const AUTH_NAMES: &str = "digest_null, hmac(md5), hmac(sha1), hmac(sha256), hmac(sha384) or hmac(sha512)";
const AEAD_NAMES: &str = "rfc4106(gcm(aes)) or rfc7539esp(chacha20,poly1305)";
const COMP_NAMES: &str = "deflate, lzs or lzf";

/// Parses and checks a TOML config: syntax, field names and types, algorithm names, key and
/// ICV lengths, SA consistency, addresses, selectors, bundle names. Errors name the line.
/// Installing the SAs (duplicate SPIs, bundle order) is left to [`Config::build`].
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    parse_known(text, &[])
}

/// As [`parse`], where policies may also name the SAs `known` (installed elsewhere: the
/// control socket's `policy.add` names SAs already in the engine).
pub fn parse_known(text: &str, known: &[&str]) -> Result<Config, ConfigError> {
    let lines = LineIndex::new(text);
    let file: File = toml::from_str(text).map_err(|e| ConfigError {
        line: e.span().map(|s| lines.line(s.start)),
        item: None,
        kind: ErrorKind::Syntax(e.message().trim_end().to_string()),
    })?;
    let mut config = Config::default();
    let mut names: HashMap<String, usize> = known.iter().map(|n| (n.to_string(), 0)).collect();
    config.empty_on_purpose =
        file.sa.as_ref().is_some_and(Vec::is_empty) && file.policy.as_ref().is_some_and(Vec::is_empty);
    for sa in file.sa.iter().flatten() {
        let name = sa.get_ref().name.get_ref().clone();
        let item = Item::Sa(name.clone());
        let cfg = sa_config(sa.get_ref(), &lines, lines.of(sa)).map_err(|e| e.about(item.clone()))?;
        if name.is_empty() {
            return Err(ConfigError::at(
                lines.of(&sa.get_ref().name),
                ErrorKind::Invalid("an SA needs a non-empty name".into()),
            ));
        }
        if let Some(first) = names.insert(name.clone(), lines.of(sa)) {
            return Err(ConfigError::at(
                lines.of(&sa.get_ref().name),
                ErrorKind::Invalid(format!("another SA is already named `{name}` (line {first})")),
            )
            .about(item));
        }
        config.sas.push(cfg);
        config.lines.sas.push(lines.of(sa));
    }
    for (i, p) in file.policy.iter().flatten().enumerate() {
        let item = Item::Policy {
            index: i + 1,
            name: p.get_ref().name.clone(),
        };
        let pc = policy_config(p.get_ref(), &lines, lines.of(p), &names).map_err(|e| e.about(item))?;
        config.policies.push(pc);
        config.lines.policies.push(lines.of(p));
        config.lines.policy_numbers.push(i + 1);
    }
    if let Some(t) = &file.tunnel {
        config.tunnel = Some(tunnel_config(t.get_ref(), &lines, lines.of(t))?);
    }
    if let Some(t) = file.ike {
        let line = lines.of(&t);
        config.ike = t
            .into_inner()
            .into_settings()
            .map_err(|m| ConfigError::at(line, ErrorKind::Invalid(format!("[ike]: {m}"))))?;
    }
    for c in file.connection {
        let line = lines.of(&c);
        let c = c
            .into_inner()
            .into_config(line)
            .map_err(|m| ConfigError::at(line, ErrorKind::Invalid(m)))?;
        if let Some(other) = config.connections.iter().find(|o| o.name == c.name) {
            return Err(ConfigError::at(
                line,
                ErrorKind::Invalid(format!(
                    "another connection is already named `{}` (line {})",
                    c.name, other.line
                )),
            ));
        }
        config.connections.push(c);
    }
    crate::pools::read(file.pool, &mut config, &|s| lines.of(s))?;
    if let Some(r) = file.radius {
        let line = lines.of(&r);
        let bad = |m: String| ConfigError::at(line, ErrorKind::Invalid(format!("[radius]: {m}")));
        let one = |v: toml::Value| {
            v.try_into::<crate::radius::RadiusToml>()
                .map_err(|e| bad(e.message().to_string()))
        };
        let entries = match r.into_inner() {
            toml::Value::Array(list) => list
                .into_iter()
                .map(|v| one(v).map(|e| (e, line)))
                .collect::<Result<Vec<_>, _>>()?,
            v => vec![(one(v)?, line)],
        };
        config.radius = Some(crate::radius::from_entries(entries).map_err(bad)?);
    }
    if config.radius.is_none() {
        if let Some(c) = config.connections.iter().find(|c| c.remote.radius) {
            return Err(ConfigError::at(
                c.line,
                ErrorKind::Invalid(format!(
                    "connection `{}`: remote.auth = \"eap-radius\" but there is no [radius] server (address = \"host:port\")",
                    c.name
                )),
            ));
        }
    }
    Ok(config)
}

fn tunnel_config(t: &TunnelToml, lines: &LineIndex, line: usize) -> Result<TunnelConfig, ConfigError> {
    let invalid = |s: usize, m: String| ConfigError::at(s, ErrorKind::Invalid(format!("[tunnel]: {m}")));
    if let Some(n) = &t.tun {
        let b = n.get_ref().as_bytes();
        if b.is_empty() || b.len() > 15 || b.iter().any(|&c| c == b'/' || c.is_ascii_whitespace() || c == 0) {
            return Err(invalid(
                lines.of(n),
                format!("bad TUN name `{}`: 1 to 15 bytes, no '/' or spaces", n.get_ref()),
            ));
        }
    }
    if let Some(m) = &t.mtu {
        if !(68..=65535).contains(m.get_ref()) {
            return Err(invalid(lines.of(m), format!("mtu {} is not in 68-65535", m.get_ref())));
        }
    }
    // local: one address, or one of each family.
    let local = match &t.local {
        None => Vec::new(),
        Some(v) => {
            let bad = |m: String| ConfigError::at(lines.of(v), ErrorKind::Invalid(format!("[tunnel]: {m}")));
            let parse = |x: &toml::Value| match x {
                toml::Value::String(s) => s
                    .trim()
                    .parse::<IpAddr>()
                    .map_err(|_| bad(format!("bad local address `{s}`"))),
                other => Err(bad(format!(
                    "local must be an address or a list of addresses, not {}",
                    other.type_str()
                ))),
            };
            match v.get_ref() {
                toml::Value::Array(a) => a.iter().map(parse).collect::<Result<Vec<_>, _>>()?,
                x => vec![parse(x)?],
            }
        }
    };
    let peers = match (&t.peer, &t.peers) {
        (Some(_), Some(ps)) => {
            return Err(invalid(
                lines.of(ps),
                "give either peer = \"...\" or peers = [...], not both".into(),
            ))
        }
        (Some(p), None) => vec![addr(p, "peer", lines)?],
        (None, Some(ps)) => ps
            .get_ref()
            .iter()
            .map(|p| addr(p, "peer", lines))
            .collect::<Result<Vec<_>, _>>()?,
        (None, None) => Vec::new(),
    };
    // Port 0 is no port: a datagram from it cannot be answered and the kernel would pick a
    // random one (an SA's `encap espinudp 0 ...` is refused the same way).
    for (what, v) in [("encap_sport", &t.encap_sport), ("encap_dport", &t.encap_dport)] {
        if let Some(v) = v.as_ref().filter(|v| *v.get_ref() == 0) {
            return Err(invalid(lines.of(v), format!("{what} 0 is not a port (1-65535)")));
        }
    }
    let port = |v: &Option<Spanned<u16>>| v.as_ref().map_or(4500, |v| *v.get_ref());
    let udp_encap = match &t.encap {
        None => None,
        Some(e) if e.get_ref() == "espinudp" => Some((port(&t.encap_sport), port(&t.encap_dport))),
        Some(e) if e.get_ref() == "none" => None,
        Some(e) => {
            return Err(invalid(
                lines.of(e),
                format!("encap `{}`: use \"espinudp\" (RFC 3948) or \"none\"", e.get_ref()),
            ))
        }
    };
    if let Err(m) = crate::check_underlay(&local, &peers, udp_encap.is_some()) {
        let at = (t.peer.as_ref().map(|p| lines.of(p)))
            .or(t.peers.as_ref().map(|p| lines.of(p)))
            .or(t.local.as_ref().map(|l| lines.of(l)))
            .unwrap_or(line);
        return Err(invalid(at, m));
    }
    Ok(TunnelConfig {
        udp_encap,
        encap_line: t.encap.as_ref().map(|e| lines.of(e)),
        tun: t.tun.as_ref().map(|n| n.get_ref().clone()),
        mtu: t.mtu.as_ref().map(|m| *m.get_ref()),
        local,
        peers,
        control: t.control.as_ref().map(|c| std::path::PathBuf::from(c.get_ref())),
        secrets: t.secrets.as_ref().map(|c| std::path::PathBuf::from(c.get_ref())),
        workers: match &t.workers {
            Some(w) if !(1..=256).contains(w.get_ref()) => {
                return Err(invalid(lines.of(w), format!("workers {} is not in 1-256", w.get_ref())))
            }
            w => w.as_ref().map(|w| *w.get_ref() as usize),
        },
        offload: t.offload,
        af_packet: t.af_packet,
        qdisc_bypass: t.qdisc_bypass,
        line: Some(line),
        mss_clamp: match &t.mss_clamp {
            None => None,
            Some(v) => Some(crate::MssClampSetting::from_toml(v.get_ref()).map_err(|m| invalid(lines.of(v), m))?),
        },
    })
}

/// The bytes of a `key = "..."` (none if absent) and the line to blame for them; an error
/// says what is wrong with the key, never the key.
fn key_bytes(
    k: Option<&Spanned<Secret>>,
    lines: &LineIndex,
    table_line: usize,
) -> Result<(Zeroizing<Vec<u8>>, usize), ConfigError> {
    match k {
        None => Ok((Zeroizing::new(Vec::new()), table_line)),
        Some(k) => spec::parse_key(k.get_ref().as_str())
            .map(|b| (b, lines.of(k)))
            .map_err(|e| ConfigError::at(lines.of(k), ErrorKind::Invalid(format!("key: {e}")))),
    }
}

fn addr(s: &Spanned<String>, what: &str, lines: &LineIndex) -> Result<IpAddr, ConfigError> {
    s.get_ref().trim().parse().map_err(|_| {
        ConfigError::at(
            lines.of(s),
            ErrorKind::Invalid(format!("bad {what} address `{}`", s.get_ref())),
        )
    })
}

fn limits(l: &LimitsToml) -> Limits {
    let nz = |v: Option<u64>| v.filter(|&v| v != 0);
    Limits {
        bytes: nz(l.bytes),
        packets: nz(l.packets),
        seconds: nz(l.seconds),
    }
}

fn sa_config(t: &SaToml, lines: &LineIndex, line: usize) -> Result<SaConfig, ConfigError> {
    let name = t.name.get_ref().clone();
    let lifetime = match &t.lifetime {
        None => Lifetime::default(),
        Some(l) => {
            let lt = Lifetime {
                soft: limits(&l.get_ref().soft),
                hard: limits(&l.get_ref().hard),
            };
            lt.validate()
                .map_err(|m| ConfigError::at(lines.of(l), ErrorKind::Invalid(format!("lifetime: {m}"))))?;
            lt
        }
    };
    if let Some(x) = &t.xfrm {
        let others: [(&str, Option<usize>); 15] = [
            ("adaptive", t.adaptive.as_ref().map(|v| lines.of(v))),
            ("alternative", t.alternative.as_ref().map(|v| lines.of(v))),
            ("link_rate", t.link_rate.as_ref().map(|v| lines.of(v))),
            ("proto", t.proto.as_ref().map(|v| lines.of(v))),
            ("spi", t.spi.as_ref().map(|v| lines.of(v))),
            ("mode", t.mode.as_ref().map(|v| lines.of(v))),
            ("src", t.src.as_ref().map(|v| lines.of(v))),
            ("dst", t.dst.as_ref().map(|v| lines.of(v))),
            ("enc", t.enc.as_ref().map(|v| lines.of(v))),
            ("auth", t.auth.as_ref().map(|v| lines.of(v))),
            ("aead", t.aead.as_ref().map(|v| lines.of(v))),
            ("comp", t.comp.as_ref().map(|v| lines.of(v))),
            ("replay_window", t.replay_window.as_ref().map(|v| lines.of(v))),
            ("esn", t.esn.as_ref().map(|v| lines.of(v))),
            ("encap", t.encap.as_ref().map(|v| lines.of(v))),
        ];
        if let Some((field, Some(l))) = others.iter().find(|(_, l)| l.is_some()) {
            return Err(ConfigError::at(
                *l,
                ErrorKind::Invalid(format!(
                    "`{field}` cannot be used with `xfrm` (the xfrm words give the whole SA; only `name` and `lifetime` go beside them)"
                )),
            ));
        }
        let s = spec::parse(x.get_ref().as_str())
            .map_err(|e| ConfigError::at(lines.of(x), ErrorKind::Invalid(format!("xfrm: {e}"))))?;
        return Ok(SaConfig {
            name,
            params: s.params,
            comp: s.comp,
            adaptive: s.adaptive,
            lifetime,
            encap: s.encap,
        });
    }
    let proto_s = t.proto.as_ref().ok_or_else(|| {
        ConfigError::at(
            line,
            ErrorKind::Syntax("missing field `proto` (esp, ah or comp), or give the SA as `xfrm = \"...\"`".into()),
        )
    })?;
    let proto = match proto_s.get_ref().as_str() {
        "esp" => Proto::Esp,
        "ah" => Proto::Ah,
        "comp" | "ipcomp" => Proto::Comp,
        other => {
            return Err(ConfigError::at(
                lines.of(proto_s),
                ErrorKind::Invalid(format!("unknown proto `{other}`: use esp, ah or comp")),
            ))
        }
    };
    let comp = match &t.comp {
        None => None,
        Some(c) => Some(Algorithm::from_name(c.get_ref()).ok_or_else(|| {
            ConfigError::at(
                lines.of(c),
                ErrorKind::UnknownAlgorithm {
                    kind: "comp",
                    name: c.get_ref().clone(),
                    expected: COMP_NAMES,
                },
            )
        })?),
    };
    let spi = match (&t.spi, proto, comp) {
        (Some(s), _, _) => *s.get_ref(),
        (None, Proto::Comp, Some(a)) => a.cpi() as u32,
        (None, _, _) => {
            return Err(ConfigError::at(line, ErrorKind::Syntax("missing field `spi`".into())));
        }
    };
    let mut p = SaParams::new(proto, spi);
    if let Some(m) = &t.mode {
        p.mode = match m.get_ref().as_str() {
            "transport" => Mode::Transport,
            "tunnel" => Mode::Tunnel,
            other => {
                return Err(ConfigError::at(
                    lines.of(m),
                    ErrorKind::Invalid(format!("unknown mode `{other}`: use transport or tunnel")),
                ))
            }
        };
    }
    p.tunnel = match (&t.src, &t.dst) {
        (Some(s), Some(d)) => Some(Tunnel {
            src: addr(s, "src", lines)?,
            dst: addr(d, "dst", lines)?,
        }),
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            return Err(ConfigError::at(
                lines.of(one),
                ErrorKind::Invalid("give both src and dst, or neither".into()),
            ))
        }
    };
    if let Some(e) = &t.enc {
        let e_ref = e.get_ref();
        let alg = EncAlg::from_name(e_ref.alg.get_ref()).ok_or_else(|| {
            ConfigError::at(
                lines.of(&e_ref.alg),
                ErrorKind::UnknownAlgorithm {
                    kind: "enc",
                    name: e_ref.alg.get_ref().clone(),
                    expected: ENC_NAMES,
                },
            )
        })?;
        let (key, key_line) = key_bytes(e_ref.key.as_ref(), lines, lines.of(e))?;
        alg.check_key(key.len())
            .map_err(|err| ConfigError::at(key_line, ErrorKind::Sa(err)))?;
        p.enc = Some(Keyed::new(alg, &key, 0));
    }
    if let Some(a) = &t.auth {
        let a_ref = a.get_ref();
        let alg = IntegAlg::from_name(a_ref.alg.get_ref()).ok_or_else(|| {
            ConfigError::at(
                lines.of(&a_ref.alg),
                ErrorKind::UnknownAlgorithm {
                    kind: "auth",
                    name: a_ref.alg.get_ref().clone(),
                    expected: AUTH_NAMES,
                },
            )
        })?;
        let (key, key_line) = key_bytes(a_ref.key.as_ref(), lines, lines.of(a))?;
        alg.check_key(key.len())
            .map_err(|err| ConfigError::at(key_line, ErrorKind::Sa(err)))?;
        let icv = match &a_ref.trunc {
            None => alg.default_icv_len(),
            Some(bits) => alg
                .check_icv_bits(*bits.get_ref())
                .map_err(|err| ConfigError::at(lines.of(bits), ErrorKind::Sa(err)))?,
        };
        p.integ = Some(Keyed::new(alg, &key, icv));
    }
    if let Some(a) = &t.aead {
        let a_ref = a.get_ref();
        let alg = AeadAlg::from_name(a_ref.alg.get_ref()).ok_or_else(|| {
            ConfigError::at(
                lines.of(&a_ref.alg),
                ErrorKind::UnknownAlgorithm {
                    kind: "aead",
                    name: a_ref.alg.get_ref().clone(),
                    expected: AEAD_NAMES,
                },
            )
        })?;
        let (key, key_line) = key_bytes(Some(&a_ref.key), lines, lines.of(a))?;
        alg.check_key(key.len())
            .map_err(|err| ConfigError::at(key_line, ErrorKind::Sa(err)))?;
        let icv = match &a_ref.icv {
            None => 16,
            Some(bits) => alg
                .check_icv_bits(*bits.get_ref())
                .map_err(|err| ConfigError::at(lines.of(bits), ErrorKind::Sa(err)))?,
        };
        p.aead = Some(Keyed::new(alg, &key, icv));
    }
    if proto == Proto::Comp {
        // IPComp has no sequence numbers: no replay window.
        p.replay_window = 0;
    }
    if let Some(w) = &t.replay_window {
        if proto == Proto::Comp && *w.get_ref() != 0 {
            return Err(ConfigError::at(
                lines.of(w),
                ErrorKind::Invalid("IPComp has no sequence numbers: no replay_window".into()),
            ));
        }
        p.replay_window = *w.get_ref();
        ipsec_core::replay::ReplayWindow::new(p.replay_window, false)
            .map_err(|err| ConfigError::at(lines.of(w), ErrorKind::Sa(err)))?;
    }
    if let Some(e) = &t.esn {
        p.esn = *e.get_ref();
    }
    match (proto, comp) {
        (Proto::Comp, None) => {
            return Err(ConfigError::at(
                line,
                ErrorKind::Syntax(format!("an IPComp SA needs `comp = \"...\"` ({COMP_NAMES})")),
            ))
        }
        (Proto::Esp | Proto::Ah, Some(_)) => {
            let l = t.comp.as_ref().map_or(line, |c| lines.of(c));
            return Err(ConfigError::at(
                l,
                ErrorKind::Invalid("`comp` belongs to proto = \"comp\" SAs only".into()),
            ));
        }
        _ => {}
    }
    if proto == Proto::Comp && p.spi > u16::MAX as u32 {
        let l = t.spi.as_ref().map_or(line, |s| lines.of(s));
        return Err(ConfigError::at(
            l,
            ErrorKind::Invalid(format!("an IPComp CPI is 16 bits; {:#x} is too large", p.spi)),
        ));
    }
    p.validate().map_err(|err| ConfigError::at(line, ErrorKind::Sa(err)))?;
    let adaptive = adaptive_of(t, proto, &p, comp, lines)?;
    let encap = encap_of(t, &p, lines)?;
    Ok(SaConfig {
        name,
        params: p,
        comp,
        adaptive,
        lifetime,
        encap,
    })
}

/// An `[[sa]]`'s `encap` table, checked against the SA (ESP only); errors name the line of
/// the value at fault.
fn encap_of(t: &SaToml, p: &SaParams, lines: &LineIndex) -> Result<Option<ipsec_engine::UdpEncap>, ConfigError> {
    let Some(e) = &t.encap else { return Ok(None) };
    let er = e.get_ref();
    let oa = match &er.oa {
        None => None,
        Some(a) => Some(addr(a, "encap oa (original)", lines)?),
    };
    let port = |v: &Option<Spanned<u64>>| v.as_ref().map_or(4500, |v| *v.get_ref());
    let blame = [&er.sport, &er.dport]
        .into_iter()
        .flatten()
        .find(|v| !(1..=65535).contains(v.get_ref()))
        .map_or(lines.of(&er.kind), |v| lines.of(v));
    let u = spec::encap_of(er.kind.get_ref(), port(&er.sport), port(&er.dport), oa).map_err(|m| {
        let l = if er.kind.get_ref() == "espinudp" {
            blame
        } else {
            lines.of(&er.kind)
        };
        ConfigError::at(l, ErrorKind::Invalid(m))
    })?;
    spec::check_encap(p, &u).map_err(|m| ConfigError::at(lines.of(e), ErrorKind::Invalid(m)))?;
    Ok(Some(u))
}

/// An IPComp SA's `adaptive`, `link_rate` and `alternative` fields.
fn adaptive_of(
    t: &SaToml,
    proto: Proto,
    p: &SaParams,
    comp: Option<Algorithm>,
    lines: &LineIndex,
) -> Result<ipsec_ipcomp::Adaptive, ConfigError> {
    let mut a = ipsec_ipcomp::Adaptive::default();
    let alt_line = t.alternative.as_ref().map(|v| lines.of(v));
    for l in [&t.adaptive, &t.link_rate]
        .into_iter()
        .flatten()
        .map(|f| lines.of(f))
        .chain(alt_line)
    {
        if proto != Proto::Comp {
            let msg = "`adaptive`, `link_rate` and `alternative` belong to proto = \"comp\" SAs only";
            return Err(ConfigError::at(l, ErrorKind::Invalid(msg.into())));
        }
    }
    if let Some(alt) = &t.alternative {
        let at = alt.get_ref();
        let algorithm = Algorithm::from_name(at.comp.get_ref()).ok_or_else(|| {
            ConfigError::at(
                lines.of(&at.comp),
                ErrorKind::Invalid(format!(
                    "unknown comp algorithm `{}`: use deflate, lzs or lzf",
                    at.comp.get_ref()
                )),
            )
        })?;
        let cpi = *at.cpi.get_ref();
        a.alternative = Some(
            spec::check_alternative(comp, p.spi, algorithm, cpi)
                .map_err(|m| ConfigError::at(lines.of(&at.cpi), ErrorKind::Invalid(m)))?,
        );
    }
    if let Some(m) = &t.adaptive {
        a.mode =
            spec::parse_adaptive_mode(m.get_ref()).map_err(|e| ConfigError::at(lines.of(m), ErrorKind::Invalid(e)))?;
    }
    if let Some(r) = &t.link_rate {
        a.link_bps = spec::parse_rate(r.get_ref()).map_err(|e| ConfigError::at(lines.of(r), ErrorKind::Invalid(e)))?;
    }
    Ok(a)
}

fn prefix(s: &Option<Spanned<String>>, what: &str, lines: &LineIndex) -> Result<Option<Prefix>, ConfigError> {
    let Some(s) = s else { return Ok(None) };
    let v = s.get_ref().trim();
    if v.eq_ignore_ascii_case("any") {
        return Ok(None);
    }
    v.parse::<Prefix>()
        .map(Some)
        .map_err(|e| ConfigError::at(lines.of(s), ErrorKind::Invalid(format!("bad {what} prefix `{v}`: {e}"))))
}

fn policy_config(
    t: &PolicyToml,
    lines: &LineIndex,
    line: usize,
    names: &HashMap<String, usize>,
) -> Result<PolicyConfig, ConfigError> {
    let dir = match t.dir.get_ref().as_str() {
        "in" => Direction::In,
        "out" => Direction::Out,
        other => {
            return Err(ConfigError::at(
                lines.of(&t.dir),
                ErrorKind::Invalid(format!(
                    "unknown dir `{other}`: use in or out (a forwarding gateway needs no `fwd`: inbound policies check forwarded packets too)"
                )),
            ))
        }
    };
    let selector = Selector {
        src: prefix(&t.src, "src", lines)?,
        dst: prefix(&t.dst, "dst", lines)?,
        proto: t.proto.as_ref().and_then(|p| p.get_ref().0),
        src_ports: t.src_port.as_ref().map_or(PortRange::ANY, |p| p.get_ref().0),
        dst_ports: t.dst_port.as_ref().map_or(PortRange::ANY, |p| p.get_ref().0),
    };
    let sel_line = [
        t.src_port.as_ref().map(|v| lines.of(v)),
        t.dst_port.as_ref().map(|v| lines.of(v)),
        t.dst.as_ref().map(|v| lines.of(v)),
    ]
    .into_iter()
    .flatten()
    .next()
    .unwrap_or(line);
    check_selector(&selector).map_err(|m| ConfigError::at(sel_line, ErrorKind::Invalid(m)))?;
    let action = match t.action.get_ref().as_str() {
        "protect" => {
            let b = t.bundle.as_ref().ok_or_else(|| {
                ConfigError::at(
                    lines.of(&t.action),
                    ErrorKind::Syntax("action = \"protect\" needs `bundle = [\"sa-name\", ...]`".into()),
                )
            })?;
            if b.get_ref().is_empty() {
                return Err(ConfigError::at(
                    lines.of(b),
                    ErrorKind::Invalid("the bundle is empty: name one to three SAs".into()),
                ));
            }
            for n in b.get_ref() {
                if !names.contains_key(n.get_ref()) {
                    return Err(ConfigError::at(lines.of(n), ErrorKind::UnknownSa(n.get_ref().clone())));
                }
            }
            ActionConfig::Protect(b.get_ref().iter().map(|n| n.get_ref().clone()).collect())
        }
        a @ ("bypass" | "discard") => {
            if let Some(b) = &t.bundle {
                return Err(ConfigError::at(
                    lines.of(b),
                    ErrorKind::Invalid(format!("`bundle` goes with action = \"protect\", not \"{a}\"")),
                ));
            }
            if a == "bypass" {
                ActionConfig::Bypass
            } else {
                ActionConfig::Discard
            }
        }
        other => {
            return Err(ConfigError::at(
                lines.of(&t.action),
                ErrorKind::Invalid(format!("unknown action `{other}`: use protect, bypass or discard")),
            ))
        }
    };
    Ok(PolicyConfig {
        name: t.name.clone(),
        dir,
        selector,
        action,
    })
}

#[cfg(test)]
mod tests;
