//! SA specifications in the words of `ip xfrm state`, e.g.
//! `proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' 0x<key>
//! auth-trunc 'hmac(sha1)' 0x<key> 96`, plus `flag esn`, `replay-window N` and, for ESP in
//! UDP (RFC 3948), `encap espinudp SPORT DPORT OADDR`.

use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg};
use ipsec_engine::UdpEncap;
use ipsec_ipcomp::{Adaptive, AdaptiveMode, Algorithm};
use std::fmt;
use std::net::IpAddr;
use zeroize::Zeroizing;

/// A SPEC that could not be understood, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

fn err<T>(msg: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(msg.into()))
}

/// Splits a SPEC into words as a POSIX shell would for quotes: `'...'` and `"..."` group,
/// and `''` or `""` is an empty word.
pub fn tokenize(s: &str) -> Result<Vec<String>, SpecError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(ch) => cur.push(ch),
                        None => return err(format!("unterminated {c} quote in SA spec")),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// A key as `ip xfrm` takes it: `0x` followed by hex digits, or the bytes of a string.
///
/// The key is held in a buffer that is zeroed when dropped, and an error says what is wrong
/// with it (odd length, the first digit that is not hex) but never shows it.
pub fn parse_key(s: &str) -> Result<Zeroizing<Vec<u8>>, SpecError> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => decode_hex_key(h).map_err(SpecError),
        None => Ok(Zeroizing::new(s.as_bytes().to_vec())),
    }
}

/// Decodes the hex digits of a key (without `0x`) into a zeroed-on-drop buffer. The error
/// names the problem and its position, not the digits: `odd number of hex digits (37)`, `not
/// hex at digit 5` (digits counted from 1 after `0x`).
pub fn decode_hex_key(h: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    if let Some(i) = h.chars().position(|c| !c.is_ascii_hexdigit()) {
        return Err(format!("not hex at digit {}", i + 1));
    }
    if h.len() % 2 == 1 {
        return Err(format!("odd number of hex digits ({})", h.len()));
    }
    let mut out = Zeroizing::new(vec![0u8; h.len() / 2]);
    hex::decode_to_slice(h, &mut out[..]).map_err(|_| "not hex".to_string())?;
    Ok(out)
}

/// A word of the user's input as an error message may show it: as it is, unless it could be
/// key material (8 or more hex digits in a row, or longer than 40 characters), which is
/// described instead of shown. Used wherever a message quotes a word that was not expected
/// to be a key but may be one that slipped out of place.
pub fn shown(word: &str) -> String {
    redacted(word).unwrap_or_else(|| format!("{word:?}"))
}

/// [`shown`], quoting a word that is shown in backticks (the config formats' style).
pub fn shown_bt(word: &str) -> String {
    redacted(word).unwrap_or_else(|| format!("`{word}`"))
}

/// What stands in for a word that may be key material, or `None` if it can be shown.
fn redacted(word: &str) -> Option<String> {
    let mut run = 0usize;
    let mut longest = 0usize;
    for c in word.chars() {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let n = word.chars().count();
    (longest >= 8 || n > 40).then(|| format!("<a {n}-character word, not shown: it may be a key>"))
}

fn parse_u64(s: &str, what: &str) -> Result<u64, SpecError> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| SpecError(format!("bad {what} {}: expected a number", shown(s))))
}

fn parse_u32(s: &str, what: &str) -> Result<u32, SpecError> {
    let v = parse_u64(s, what)?;
    u32::try_from(v).map_err(|_| SpecError(format!("{what} {} does not fit in 32 bits", shown(s))))
}

/// A number of bits (for `auth-trunc` and `aead`).
fn parse_bits(s: &str) -> Result<usize, SpecError> {
    s.parse()
        .map_err(|_| SpecError(format!("bad ICV length {}: expected a number of bits", shown(s))))
}

/// Why an SA is unsafe though RFC 4303 allows it: ESP with encryption and no integrity
/// (RFC 4303 3.2.2 permits confidentiality-only ESP but warns of active attacks), or `None`.
/// An AH SA in the same bundle would authenticate its packets; the warning says so.
pub fn unauthenticated_esp(p: &SaParams) -> Option<&'static str> {
    let encrypts = p.enc.as_ref().is_some_and(|e| e.alg != EncAlg::Null);
    let authenticates = p.integ.as_ref().is_some_and(|i| i.alg != IntegAlg::Null);
    (p.proto == Proto::Esp && p.aead.is_none() && encrypts && !authenticates).then_some(
        "ESP with encryption and no integrity is UNSAFE: RFC 4303 3.2.2 allows it, but \
         anyone on the path can alter packets undetected (and CBC without integrity is open to \
         attacks that recover plaintext); add auth or use an AEAD, unless an AH SA in the same \
         bundle authenticates the packets",
    )
}

/// One parsed SA: the core parameters plus what only some protocols use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaSpec {
    /// The parameters.
    pub params: SaParams,
    /// The compression algorithm of an IPComp SA.
    pub comp: Option<Algorithm>,
    /// An IPComp SA's adaptive mode and link rate (`adaptive MODE`, `link RATE`).
    pub adaptive: Adaptive,
    /// An ESP SA's ESP in UDP (`encap espinudp SPORT DPORT OADDR`).
    pub encap: Option<UdpEncap>,
}

/// The encapsulation types `encap` accepts, as messages list them.
pub const ENCAP_TYPES: &str = "espinudp (RFC 3948 ESP in UDP)";

/// The pieces of `encap TYPE SPORT DPORT OADDR` (TOML: `encap = { type, sport, dport, oa }`)
/// as one [`UdpEncap`]: TYPE must be `espinudp` (`espinudp-nonike`, the pre-RFC draft
/// framing with an 8-byte non-IKE marker, and `espintcp`, RFC 8229, are not implemented);
/// ports 1-65535; an OADDR of `0.0.0.0` or `::` is none. The error names what is accepted.
pub fn encap_of(kind: &str, sport: u64, dport: u64, oa: Option<IpAddr>) -> Result<UdpEncap, String> {
    match kind {
        "espinudp" => {}
        "espinudp-nonike" | "espintcp" => {
            return Err(format!(
                "encap type {}: not implemented; use {ENCAP_TYPES}",
                shown(kind)
            ))
        }
        other => return Err(format!("unknown encap type {}: use {ENCAP_TYPES}", shown(other))),
    }
    let port = |v: u64, what: &str| {
        u16::try_from(v)
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("encap {what} {v} is not a port (1-65535)"))
    };
    Ok(UdpEncap {
        sport: port(sport, "source port")?,
        dport: port(dport, "destination port")?,
        oa: oa.filter(|a| !a.is_unspecified()),
    })
}

/// Checks an SA's encapsulation against the rest of it: ESP SAs only, and an original address
/// of the family of the SA's endpoints (when it has them).
pub fn check_encap(p: &SaParams, e: &UdpEncap) -> Result<(), String> {
    if p.proto != Proto::Esp {
        return Err(format!(
            "`encap` is ESP in UDP (RFC 3948): it belongs to ESP SAs, not to proto {}",
            p.proto.name()
        ));
    }
    match (e.oa, p.tunnel) {
        (Some(oa), Some(t)) if oa.is_ipv4() != t.src.is_ipv4() => Err(format!(
            "encap original address {oa} is not of the family of the SA's endpoints ({} -> {})",
            t.src, t.dst
        )),
        _ => Ok(()),
    }
}

/// A link rate in bit/s: a number with an optional k, M or G (10^3, 10^6, 10^9) suffix and an
/// optional `bit`/`bps`/`bit/s` unit (`100M`, `1.5Mbit/s`, `1G`); `0` or `unlimited` is 0
/// (unknown: no transmission time saved).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") {
        return Ok(0);
    }
    let t = ["bit/s", "bps", "bit", "b/s"]
        .iter()
        .find_map(|u| t.strip_suffix(u))
        .unwrap_or(t);
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * mul < 1e15 => Ok((v * mul).round() as u64),
        _ => Err(format!(
            "bad link rate {}: expected e.g. 10M, 1G, 56k or unlimited",
            shown(s)
        )),
    }
}

/// Checks an IPComp SA's alternative algorithm `alg` under `cpi` against its own (`comp`
/// under `spi`): a different algorithm and a CPI of its own, 16 bits.
pub fn check_alternative(
    comp: Option<Algorithm>,
    spi: u32,
    alg: Algorithm,
    cpi: u32,
) -> Result<ipsec_ipcomp::Alternative, String> {
    let cpi = u16::try_from(cpi).map_err(|_| format!("an IPComp CPI is 16 bits; {cpi:#x} is too large"))?;
    if u32::from(cpi) == spi {
        return Err(format!(
            "the alternative algorithm needs a CPI of its own (RFC 3173 3.3: the CPI names the algorithm); {cpi:#x} is the SA's"
        ));
    }
    if comp == Some(alg) {
        return Err(format!("the alternative is the SA's own algorithm ({alg})"));
    }
    Ok(ipsec_ipcomp::Alternative { algorithm: alg, cpi })
}

/// `off`, `always`, `backoff` or `model`.
pub fn parse_adaptive_mode(s: &str) -> Result<AdaptiveMode, String> {
    AdaptiveMode::from_name(s)
        .ok_or_else(|| format!("unknown adaptive mode {}: use off, always, backoff or model", shown(s)))
}

/// Parses one SPEC and validates it (key lengths, combinations).
pub fn parse(spec: &str) -> Result<SaSpec, SpecError> {
    // The words include the keys: zeroed when dropped.
    let words = Zeroizing::new(tokenize(spec)?);
    let mut it = words.iter().map(String::as_str).peekable();
    let mut proto = None;
    let mut spi = None;
    let mut mode = Mode::Transport;
    let (mut src, mut dst): (Option<IpAddr>, Option<IpAddr>) = (None, None);
    let mut enc = None;
    let mut integ = None;
    let mut aead = None;
    let mut comp = None;
    let mut adaptive = Adaptive::default();
    let mut adaptive_given = false;
    let mut alternative = None;
    let mut window = None;
    let mut esn = false;
    let mut encap = None;
    let next = |it: &mut std::iter::Peekable<_>, what: &str| -> Result<&str, SpecError> {
        let v: Option<&str> = Iterator::next(it);
        v.ok_or_else(|| SpecError(format!("{what} needs a value")))
    };
    while let Some(w) = it.next() {
        match w {
            "proto" => {
                proto = Some(match next(&mut it, "proto")? {
                    "esp" => Proto::Esp,
                    "ah" => Proto::Ah,
                    "comp" | "ipcomp" => Proto::Comp,
                    p => return err(format!("unknown proto {}: use esp, ah or comp", shown(p))),
                })
            }
            "spi" => spi = Some(parse_u32(next(&mut it, "spi")?, "spi")?),
            "mode" => {
                mode = match next(&mut it, "mode")? {
                    "transport" => Mode::Transport,
                    "tunnel" => Mode::Tunnel,
                    m => return err(format!("unsupported mode {}: use transport or tunnel", shown(m))),
                }
            }
            "src" | "dst" => {
                let v = next(&mut it, w)?;
                let a: IpAddr = v
                    .parse()
                    .map_err(|_| SpecError(format!("bad {w} address {}", shown(v))))?;
                if w == "src" {
                    src = Some(a)
                } else {
                    dst = Some(a)
                }
            }
            "enc" => {
                let name = next(&mut it, "enc")?;
                let alg = EncAlg::from_name(name).ok_or_else(|| {
                    SpecError(format!(
                        "unknown enc algorithm {}: use cipher_null, cbc(des), cbc(des3_ede) or cbc(aes)",
                        shown(name)
                    ))
                })?;
                let key = parse_key(next(&mut it, "enc key")?).map_err(|e| SpecError(format!("enc key: {e}")))?;
                enc = Some(Keyed::new(alg, &key, 0));
            }
            "auth" | "auth-trunc" => {
                let name = next(&mut it, w)?;
                let alg = IntegAlg::from_name(name).ok_or_else(|| {
                    SpecError(format!(
                        "unknown auth algorithm {}: use digest_null, hmac(md5), hmac(sha1), hmac(sha256), hmac(sha384) or hmac(sha512)",
                        shown(name)
                    ))
                })?;
                let key = parse_key(next(&mut it, "auth key")?).map_err(|e| SpecError(format!("auth key: {e}")))?;
                let icv = if w == "auth-trunc" {
                    let bits = parse_bits(next(&mut it, "auth-trunc length")?)?;
                    alg.check_icv_bits(bits).map_err(|e| SpecError(e.to_string()))?
                } else {
                    alg.default_icv_len()
                };
                integ = Some(Keyed::new(alg, &key, icv));
            }
            "aead" => {
                let name = next(&mut it, "aead")?;
                let alg = AeadAlg::from_name(name).ok_or_else(|| {
                    SpecError(format!(
                        "unknown aead algorithm {}: use rfc4106(gcm(aes)) or rfc7539esp(chacha20,poly1305)",
                        shown(name)
                    ))
                })?;
                let key = parse_key(next(&mut it, "aead key")?).map_err(|e| SpecError(format!("aead key: {e}")))?;
                let bits = parse_bits(next(&mut it, "aead ICV length")?)?;
                let icv = alg.check_icv_bits(bits).map_err(|e| SpecError(e.to_string()))?;
                aead = Some(Keyed::new(alg, &key, icv));
            }
            "comp" => {
                let name = next(&mut it, "comp")?;
                match Algorithm::from_name(name) {
                    Some(a) => comp = Some(a),
                    None => {
                        return err(format!(
                            "unknown comp algorithm {}: use deflate, lzs or lzf",
                            shown(name)
                        ))
                    }
                }
            }
            "adaptive" => {
                adaptive.mode = parse_adaptive_mode(next(&mut it, "adaptive")?).map_err(SpecError)?;
                adaptive_given = true;
            }
            "link" => {
                adaptive.link_bps = parse_rate(next(&mut it, "link")?).map_err(SpecError)?;
                adaptive_given = true;
            }
            "alternative" => {
                let name = next(&mut it, "alternative")?;
                let alg = Algorithm::from_name(name).ok_or_else(|| {
                    SpecError(format!(
                        "unknown comp algorithm {}: use deflate, lzs or lzf",
                        shown(name)
                    ))
                })?;
                let cpi = parse_u32(next(&mut it, "alternative ALGORITHM")?, "alternative CPI")?;
                alternative = Some((alg, cpi));
                adaptive_given = true;
            }
            "replay-window" => window = Some(parse_u32(next(&mut it, "replay-window")?, "replay-window")?),
            "flag" => {
                let f = next(&mut it, "flag")?;
                match f {
                    "esn" => esn = true,
                    _ => return err(format!("unsupported flag {} (only esn)", shown(f))),
                }
                // `flag esn noecn ...` style lists: take further flags while they are flags.
                while let Some(&f) = it.peek() {
                    match f {
                        "esn" => {
                            esn = true;
                            it.next();
                        }
                        _ => break,
                    }
                }
            }
            "reqid" => {
                next(&mut it, "reqid")?;
            }
            "encap" => {
                let kind = next(&mut it, "encap")?;
                let sport = parse_u64(next(&mut it, "encap source port")?, "encap source port")?;
                let dport = parse_u64(next(&mut it, "encap destination port")?, "encap destination port")?;
                let a = next(&mut it, "encap original address (0.0.0.0 or :: for none)")?;
                let oa: IpAddr = a.parse().map_err(|_| {
                    SpecError(format!(
                        "bad encap original address {}: an IP address, 0.0.0.0 or :: for none",
                        shown(a)
                    ))
                })?;
                encap = Some(encap_of(kind, sport, dport, Some(oa)).map_err(SpecError)?);
            }
            other => return err(format!("unexpected word {} in SA spec", shown(other))),
        }
    }
    let proto = proto.ok_or_else(|| SpecError("SA spec needs `proto esp|ah|comp`".into()))?;
    let spi = spi.ok_or_else(|| SpecError("SA spec needs `spi N`".into()))?;
    let mut p = SaParams::new(proto, spi);
    p.mode = mode;
    p.enc = enc;
    p.integ = integ;
    p.aead = aead;
    p.esn = esn;
    if let Some(w) = window {
        p.replay_window = w;
    }
    p.tunnel = match (src, dst) {
        (Some(src), Some(dst)) => Some(Tunnel { src, dst }),
        (None, None) => None,
        _ => return err("give both src and dst, or neither"),
    };
    if proto == Proto::Comp && comp.is_none() {
        return err("an IPComp SA needs `comp deflate|lzs|lzf`");
    }
    if proto != Proto::Comp && comp.is_some() {
        return err("`comp` belongs to `proto comp` SAs only");
    }
    if proto != Proto::Comp && adaptive_given {
        return err("`adaptive`, `link` and `alternative` belong to `proto comp` SAs only");
    }
    if let Some((alg, cpi)) = alternative {
        adaptive.alternative = Some(check_alternative(comp, p.spi, alg, cpi).map_err(SpecError)?);
    }
    if let Some(e) = &encap {
        check_encap(&p, e).map_err(SpecError)?;
    }
    p.validate().map_err(|e| SpecError(e.to_string()))?;
    Ok(SaSpec {
        params: p,
        comp,
        adaptive,
        encap,
    })
}

/// What `--sa` says in a command's help: the SPEC syntax and the warning about `/proc`.
pub const SA_HELP: &str = "One SA in `ip xfrm state` words, e.g. \"proto esp spi 0x1000 mode tunnel src 192.0.2.1 \
dst 192.0.2.2 enc 'cbc(aes)' 0x<key> auth-trunc 'hmac(sha1)' 0x<key> 96\". Repeat for a bundle, in seal order. \
WARNING: a command line is visible to every local user (ps, /proc/PID/cmdline): keys given with --sa are exposed; \
use --sa-file for real keys.";

/// What `--sa-file` says in a command's help.
pub const SA_FILE_HELP: &str = "Read the SAs from FILE instead of --sa: one SPEC per line, in seal order; blank \
lines and lines starting with # are skipped. `-` reads standard input. Keeps the keys off the command line.";

/// Where an SA's SPEC came from, as messages name it (`--sa #2`, `keys.sa:3`), and its
/// text (zeroed when dropped: it has keys).
pub struct SpecText {
    /// `--sa #N` or `FILE:LINE`.
    pub label: String,
    /// The SPEC.
    pub text: Zeroizing<String>,
}

/// The SPECs of a command: the `--sa` values, or the lines of `--sa-file` (`-`: standard
/// input). Errors name the file, never its content.
pub fn collect(sas: &[String], file: Option<&std::path::Path>) -> Result<Vec<SpecText>, String> {
    let Some(path) = file else {
        return Ok(sas
            .iter()
            .enumerate()
            .map(|(i, s)| SpecText {
                label: format!("--sa #{}", i + 1),
                text: Zeroizing::new(s.clone()),
            })
            .collect());
    };
    let stdin = path.as_os_str() == "-";
    let name = if stdin {
        "standard input".to_string()
    } else {
        path.display().to_string()
    };
    let mut text = Zeroizing::new(String::new());
    let read = if stdin {
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)
    } else if path.is_dir() {
        return Err(format!("--sa-file {name}: is a directory"));
    } else {
        std::fs::File::open(path).and_then(|mut f| std::io::Read::read_to_string(&mut f, &mut text))
    };
    read.map_err(|e| format!("--sa-file {name}: {}", crate::io_reason(&e)))?;
    let specs: Vec<SpecText> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| SpecText {
            label: format!("{name}:{}", i + 1),
            text: Zeroizing::new(l.trim().to_string()),
        })
        .collect();
    if specs.is_empty() {
        return Err(format!("--sa-file {name}: no SA (one SPEC per line)"));
    }
    Ok(specs)
}

/// Refuses a bundle that names the same SA (protocol and SPI) twice: each SA is applied
/// once, and `open` could not undo a bundle that repeats one (the second SA's replay window
/// and sequence numbers are the first's). Returns the message naming both.
pub fn check_distinct(specs: &[(&str, &SaParams)]) -> Result<(), String> {
    for (j, (label, p)) in specs.iter().enumerate() {
        if let Some((first, _)) = specs[..j].iter().find(|(_, q)| q.proto == p.proto && q.spi == p.spi) {
            return Err(format!(
                "{label}: the same SA as {first} ({} SPI {:#x}): a bundle applies each SA once",
                p.proto.name(),
                p.spi
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_handles_quotes() {
        assert_eq!(tokenize("enc 'cbc(aes)' 0x00").unwrap(), ["enc", "cbc(aes)", "0x00"]);
        assert_eq!(tokenize("enc cipher_null \"\"").unwrap(), ["enc", "cipher_null", ""]);
        assert!(tokenize("enc 'cbc(aes) 0x00").is_err());
    }

    #[test]
    fn full_spec() {
        let s = parse(
            "proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' 0x000102030405060708090a0b0c0d0e0f \
             auth-trunc 'hmac(sha1)' 0x0001020304050607080900010203040506070809 96 flag esn replay-window 128",
        )
        .unwrap();
        let p = s.params;
        assert_eq!(
            (p.spi, p.mode, p.esn, p.replay_window),
            (0x1000, Mode::Tunnel, true, 128)
        );
        assert_eq!(p.enc.unwrap().alg, EncAlg::AesCbc);
        assert_eq!(p.integ.unwrap().icv_len, 12);
    }

    #[test]
    fn aead_and_defaults() {
        let s = parse(
            "proto esp spi 4097 mode transport aead 'rfc4106(gcm(aes))' 0x0102030405060708090a0b0c0d0e0f1011121314 64",
        )
        .unwrap();
        assert_eq!(s.params.aead.unwrap().icv_len, 8);
        let s = parse("proto esp spi 1 enc cipher_null '' auth 'hmac(sha256)' 0x0000000000000000000000000000000000000000000000000000000000000000").unwrap();
        assert_eq!(s.params.integ.unwrap().icv_len, 16);
    }

    #[test]
    fn adaptive_words() {
        let s = parse("proto comp spi 2 comp deflate adaptive model link 100M").unwrap();
        assert_eq!(s.adaptive.mode, AdaptiveMode::Model);
        assert_eq!(s.adaptive.link_bps, 100_000_000);
        let s = parse("proto comp spi 2 comp deflate").unwrap();
        assert_eq!(s.adaptive, Adaptive::default());
        assert!(parse("proto comp spi 2 comp deflate adaptive maybe")
            .unwrap_err()
            .0
            .contains("adaptive mode"));
        assert!(parse("proto comp spi 2 comp deflate link fast")
            .unwrap_err()
            .0
            .contains("link rate"));
        assert!(parse(
            "proto esp spi 2 aead 'rfc4106(gcm(aes))' 0x0102030405060708090a0b0c0d0e0f1011121314 128 adaptive off"
        )
        .unwrap_err()
        .0
        .contains("proto comp"));
        assert_eq!(parse_rate("1.5Mbit/s"), Ok(1_500_000));
        assert_eq!(parse_rate("1G"), Ok(1_000_000_000));
        assert_eq!(parse_rate("56k"), Ok(56_000));
        assert_eq!(parse_rate("unlimited"), Ok(0));
        assert!(parse_rate("-3M").is_err() && parse_rate("").is_err() && parse_rate("1e300").is_err());
    }

    const GCM: &str = "aead 'rfc4106(gcm(aes))' 0x0102030405060708090a0b0c0d0e0f1011121314 128";

    #[test]
    fn encap_words() {
        let s = parse(&format!(
            "proto esp spi 0x10 mode tunnel src 192.0.2.1 dst 192.0.2.2 {GCM} encap espinudp 4500 4501 0.0.0.0"
        ))
        .unwrap();
        assert_eq!(
            s.encap,
            Some(UdpEncap {
                sport: 4500,
                dport: 4501,
                oa: None
            })
        );
        // Before other words, hex ports, an original address kept; `::` is none too.
        let s = parse(&format!(
            "proto esp spi 0x10 encap espinudp 0x1194 65535 10.0.0.7 {GCM}"
        ))
        .unwrap();
        let e = s.encap.unwrap();
        assert_eq!(
            (e.sport, e.dport, e.oa),
            (4500, 65535, Some("10.0.0.7".parse().unwrap()))
        );
        let s = parse(&format!("proto esp spi 0x10 {GCM} encap espinudp 1 2 ::")).unwrap();
        assert_eq!(s.encap.unwrap().oa, None);
        assert_eq!(parse(&format!("proto esp spi 0x10 {GCM}")).unwrap().encap, None);
    }

    #[test]
    fn bad_encap_words_say_what_is_accepted() {
        let e = |tail: &str| parse(&format!("proto esp spi 0x10 {GCM} {tail}")).unwrap_err().0;
        let m = e("encap espinudp-nonike 4500 4500 0.0.0.0");
        assert!(
            m.contains("\"espinudp-nonike\": not implemented") && m.contains("use espinudp"),
            "{m}"
        );
        let m = e("encap espintcp 4500 4500 0.0.0.0");
        assert!(m.contains("not implemented"), "{m}");
        let m = e("encap gre 4500 4500 0.0.0.0");
        assert!(
            m.contains("unknown encap type \"gre\"") && m.contains("use espinudp"),
            "{m}"
        );
        assert!(e("encap espinudp 0 4500 0.0.0.0").contains("source port 0 is not a port (1-65535)"));
        assert!(e("encap espinudp 4500 65536 0.0.0.0").contains("destination port 65536 is not a port"));
        assert!(e("encap espinudp 45x0 4500 0.0.0.0").contains("bad encap source port \"45x0\""));
        assert!(e("encap espinudp 4500 4500 10.0.0").contains("bad encap original address"));
        assert!(e("encap espinudp 4500 4500").contains("encap original address (0.0.0.0 or :: for none) needs a value"));
        assert!(e("encap").contains("encap needs a value"));
        // ESP only; an original address of the endpoints' family.
        let m = parse("proto ah spi 1 auth 'hmac(sha1)' 0x0102030405060708090a0b0c0d0e0f1011121314 encap espinudp 4500 4500 0.0.0.0")
            .unwrap_err()
            .0;
        assert!(m.contains("belongs to ESP SAs, not to proto ah"), "{m}");
        let m = parse(&format!(
            "proto esp spi 1 mode tunnel src 2001:db8::1 dst 2001:db8::2 {GCM} encap espinudp 4500 4500 10.0.0.1"
        ))
        .unwrap_err()
        .0;
        assert!(m.contains("not of the family"), "{m}");
    }

    #[test]
    fn clear_errors() {
        let e = parse("proto esp spi 1 enc 'cbc(aes)' 0x0011 auth 'hmac(sha1)' 0x00").unwrap_err();
        assert!(e.0.contains("cbc(aes)") && e.0.contains("16, 24 or 32"), "{e}");
        assert!(parse("proto esp enc 'cbc(aes)' 0x00").unwrap_err().0.contains("spi"));
        assert!(parse("proto esp spi 1 enc 'cbc(foo)' 0x00")
            .unwrap_err()
            .0
            .contains("unknown enc"));
        assert!(parse("proto esp spi 1 mode tunnel enc 'cbc(aes)' 0x00000000000000000000000000000000").is_err());
        assert!(
            parse("proto esp spi 1 aead 'rfc4106(gcm(aes))' 0x0102030405060708090a0b0c0d0e0f1011121314 100")
                .unwrap_err()
                .0
                .contains("ICV")
        );
        assert!(parse("proto esp spi 1 enc 'cbc(aes)' 0xzz")
            .unwrap_err()
            .0
            .contains("hex"));
        assert!(parse("proto esp spi 0x1ffffffff").is_err());
    }
}
