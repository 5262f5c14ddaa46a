//! An importer for setkey(8) files (KAME / ipsec-tools manual keying): `add` and `spdadd`
//! statements, plus `flush` and `spdflush`. Statements end with `;` and may span lines; `#`
//! starts a comment. Every error names its line.
//!
//! ```text
//! add [-46n] src dst esp|ah|ipcomp spi [-m transport|tunnel|any] [-r size] [-u id]
//!     [-f pad-option] [-lh s] [-ls s] [-bh bytes] [-bs bytes]
//!     -E ealgo key [-A aalgo key] | -A aalgo key | -C calgo [-R] ;
//! spdadd [-46n] src_range dst_range upperspec -P in|out|fwd [prio ...]
//!     discard | none | bypass | ipsec proto/mode/src-dst/level ... ;
//! flush [esp|ah|ipcomp] ;
//! spdflush ;
//! ```
//!
//! Addresses are numeric (host names are not resolved). Keys are `0x<hex>` or `"string"`.
//! `src_range` is `addr[/len][[port]]`; `upperspec` is `any`, a protocol number or name
//! (`tcp`, `udp`, `icmp`, `icmp6`, ...), for ICMP optionally followed by `type[,code]`.
//!
//! # Algorithms
//!
//! | setkey | here |
//! |---|---|
//! | `-E des-cbc`, `3des-cbc`, `aes-cbc` / `rijndael-cbc`, `null` | `cbc(des)`, `cbc(des3_ede)`, `cbc(aes)`, `cipher_null` |
//! | `-E aes-gcm-16` (FreeBSD) | `rfc4106(gcm(aes))` with a 16-byte ICV; the key includes the 4-byte salt |
//! | `-A hmac-md5`, `hmac-sha1` | HMAC-MD5-96, HMAC-SHA1-96 |
//! | `-A hmac-sha256` / `hmac-sha2-256`, `-384`, `-512` | HMAC-SHA-256-128, -384-192, -512-256 (RFC 4868); see below |
//! | `-A null` | `digest_null` (ESP only) |
//! | `-C deflate`, `lzs`; `lzf` (an extension of ours) | the same |
//!
//! `keyed-md5`, `keyed-sha1`, `hmac-ripemd160`, `aes-xcbc-mac`, `tcp-md5`, `blowfish-cbc`,
//! `cast128-cbc`, `twofish-cbc`, `aes-ctr`, `camellia-cbc`, `des-deriv`, `des-32iv`, `simple`
//! and `oui` are rejected with an error that says so.
//!
//! # Decisions where setkey implementations differ or the format is silent
//!
//! - **`-r size`** is the replay window **in packets**, as Linux reads it (KAME counted bytes
//!   of bitmap: `-r 4` there is 32 packets). It must be 0 or a power of two from 32 to 65536.
//!   Without `-r` the replay check is off, as setkey(8) says.
//! - **HMAC-SHA-256** is truncated to 128 bits (RFC 4868). Linux's PF_KEY (and so setkey on
//!   Linux) historically used 96 bits; set [`Options::sha256_icv_bits`] to 96 to match such
//!   a peer. SHA-384 and SHA-512 use 192 and 256 bits everywhere.
//! - **`-m any`** is transport mode (Linux's PF_KEY does the same). No `-m` means `any`.
//! - **IPComp**: the SPI is the CPI on the wire, with or without `-R` (as on Linux; KAME
//!   without `-R` sends the algorithm's well-known CPI). It must fit in 16 bits.
//! - **`-f random-pad` / `zero-pad`** are accepted with a warning: ESP here always pads
//!   1, 2, 3, ... (RFC 4303). `-f seq-pad` and `-f nocyclic-seq` match what we do.
//! - **`-u id`** (reqid) is kept only to resolve `unique:id` policy requests.
//! - **`-lh`/`-ls`** are hard/soft seconds, **`-bh`/`-bs`** hard/soft bytes; 0 is no limit.
//!   setkey has no packet limits and no ESN flag: those need the TOML format.
//! - **Policies**: `none` and `bypass` both let packets through unprotected; `discard` drops;
//!   `entrust` (meaningful only for socket policies) is rejected. `fwd` policies are skipped
//!   with a warning: this engine has no forwarding path of its own, and its inbound policies
//!   check forwarded packets too.
//! - **Levels**: `require`, `unique` and `default` (which Linux treats as required) need the
//!   SA. `use` (SA optional) is taken as required too, with a warning on inbound ESP/AH
//!   requests (Linux would also accept clear packets there); an IPComp request may always be
//!   skipped by the peer (non-expansion), which the engine accepts.
//! - **Priorities** (`prio N`, `prio def|low|high [+|- N]`, ipsec-tools syntax): policies are
//!   sorted by priority, lowest value first (Linux's order), keeping file order among equals;
//!   no `prio` is `def` (0x80000000).
//! - **SA names** are `<proto>-<spi in hex>` (`esp-0x1000`, `comp-0x2`), with `-<dst>` added
//!   when two SAs share protocol and SPI.
//! - **`flush`** drops the SAs read so far (of one protocol if given), **`spdflush`** the
//!   policies read so far.
//!
//! # Resolving policy requests to SAs
//!
//! Each `proto/mode/src-dst/level` request of an `ipsec` policy becomes one SA of the file;
//! the requests, in the order written, are the bundle in seal order (the first is applied
//! first, innermost). A request matches the `add`ed SAs of its protocol and mode, then:
//!
//! - with endpoints (`esp/tunnel/192.0.2.1-192.0.2.2/require`, required for tunnel mode): the
//!   SA whose src and dst are those endpoints;
//! - a transport request without endpoints, after a tunnel request of the same policy: the SA
//!   between that tunnel's endpoints (it protects the outer header);
//! - any other transport request without endpoints: the SA whose src lies in the policy's
//!   source range and whose dst lies in its destination range (for an `in` policy the source
//!   is the peer: both sides use the addresses as the packets carry them);
//! - with `unique:N`, only SAs added with `-u N`.
//!
//! Exactly one SA must match; none or several is an error naming the policy's line (tell
//! several apart with `-u N` / `unique:N`). Requests are resolved after the whole file is read,
//! so `spdadd` may come before the `add`s it uses.

use super::{check_selector, proto_by_name, ActionConfig, Config, ConfigError, ErrorKind, Item, PolicyConfig, Warning};
use crate::spec::{decode_hex_key, shown, shown_bt};
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg};
use ipsec_engine::{Direction, Lifetime, PortRange, Prefix, SaConfig, Selector};
use ipsec_ipcomp::Algorithm;
use std::net::IpAddr;
use zeroize::Zeroizing;

/// Import options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The ICV length of `hmac-sha256` in bits: 128 (RFC 4868, the default) or 96 (Linux
    /// PF_KEY's historical truncation).
    pub sha256_icv_bits: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { sha256_icv_bits: 128 }
    }
}

/// ipsec-tools' base priorities.
const PRIORITY_HIGH: u32 = 0x4000_0000;
const PRIORITY_DEFAULT: u32 = 0x8000_0000;
const PRIORITY_LOW: u32 = 0xC000_0000;

#[derive(Debug, Clone)]
struct Tok {
    text: String,
    line: usize,
    quoted: bool,
}

fn syntax(line: usize, msg: impl Into<String>) -> ConfigError {
    ConfigError::at(line, ErrorKind::Syntax(msg.into()))
}

fn invalid(line: usize, msg: impl Into<String>) -> ConfigError {
    ConfigError::at(line, ErrorKind::Invalid(msg.into()))
}

fn unsupported(line: usize, msg: impl Into<String>) -> ConfigError {
    ConfigError::at(line, ErrorKind::Unsupported(msg.into()))
}

/// Splits the file into statements of tokens: whitespace separates, `;` ends a statement,
/// `"..."` is one token, `#` comments to the end of the line.
fn statements(src: &str) -> Result<Vec<Vec<Tok>>, ConfigError> {
    let mut out = Vec::new();
    let mut stmt: Vec<Tok> = Vec::new();
    let mut word = String::new();
    let mut word_line = 1;
    let mut line = 1;
    let mut chars = src.chars().peekable();
    let flush = |word: &mut String, stmt: &mut Vec<Tok>, l: usize| {
        if !word.is_empty() {
            stmt.push(Tok {
                text: std::mem::take(word),
                line: l,
                quoted: false,
            });
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                flush(&mut word, &mut stmt, word_line);
                line += 1;
            }
            '#' => {
                flush(&mut word, &mut stmt, word_line);
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            ';' => {
                flush(&mut word, &mut stmt, word_line);
                if !stmt.is_empty() {
                    out.push(std::mem::take(&mut stmt));
                }
            }
            '"' => {
                flush(&mut word, &mut stmt, word_line);
                let start = line;
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(ch) => {
                            if ch == '\n' {
                                line += 1;
                            }
                            s.push(ch);
                        }
                        None => return Err(syntax(start, "unterminated \" string")),
                    }
                }
                stmt.push(Tok {
                    text: s,
                    line: start,
                    quoted: true,
                });
            }
            c if c.is_whitespace() => flush(&mut word, &mut stmt, word_line),
            c => {
                if word.is_empty() {
                    word_line = line;
                }
                word.push(c);
            }
        }
    }
    flush(&mut word, &mut stmt, word_line);
    if let Some(t) = stmt.first() {
        return Err(syntax(
            t.line,
            format!("statement {} is not ended with `;`", shown_bt(&t.text)),
        ));
    }
    Ok(out)
}

/// Tokens of one statement, consumed in order.
struct Cursor<'a> {
    toks: &'a [Tok],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(toks: &'a [Tok]) -> Self {
        Cursor { toks, i: 1 }
    }
    fn peek(&self) -> Option<&'a Tok> {
        self.toks.get(self.i)
    }
    fn last_line(&self) -> usize {
        self.toks[self.i.min(self.toks.len()) - 1].line
    }
    fn next(&mut self, what: &str) -> Result<&'a Tok, ConfigError> {
        match self.toks.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(t)
            }
            None => Err(syntax(
                self.last_line(),
                format!("`{}` statement ends where {what} was expected", self.toks[0].text),
            )),
        }
    }
    /// Skips `-4`, `-6`, `-n`, `-46`, ...: returns the family they require (4 or 6), if any.
    fn family_flags(&mut self) -> Option<u8> {
        let mut fam = None;
        while let Some(t) = self.peek() {
            let f = t.text.strip_prefix('-').unwrap_or("");
            if t.quoted || f.is_empty() || !f.chars().all(|c| matches!(c, '4' | '6' | 'n')) {
                break;
            }
            if f.contains('4') && !f.contains('6') {
                fam = Some(4);
            } else if f.contains('6') && !f.contains('4') {
                fam = Some(6);
            }
            self.i += 1;
        }
        fam
    }
}

fn number(t: &Tok, what: &str) -> Result<u64, ConfigError> {
    let s = t.text.as_str();
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| syntax(t.line, format!("bad {what} {}: expected a number", shown(s))))
}

fn number_u32(t: &Tok, what: &str) -> Result<u32, ConfigError> {
    u32::try_from(number(t, what)?)
        .map_err(|_| invalid(t.line, format!("{what} {} does not fit in 32 bits", shown(&t.text))))
}

/// A key token (`0x<hex>` or `"string"`) in a zeroed-on-drop buffer; errors say what is
/// wrong (`what`: `-E key`, `-A key`), never the key.
fn key(t: &Tok, what: &str) -> Result<Zeroizing<Vec<u8>>, ConfigError> {
    if t.quoted {
        return Ok(Zeroizing::new(t.text.as_bytes().to_vec()));
    }
    match t.text.strip_prefix("0x").or_else(|| t.text.strip_prefix("0X")) {
        Some(h) => decode_hex_key(h).map_err(|e| invalid(t.line, format!("{what}: {e}"))),
        None => Err(syntax(
            t.line,
            format!(
                "{what}: expected 0x-prefixed hex or a \"string\" ({} characters given, not shown)",
                t.text.chars().count()
            ),
        )),
    }
}

fn is_key(t: &Tok) -> bool {
    t.quoted || t.text.starts_with("0x") || t.text.starts_with("0X")
}

fn check_family(t: &Tok, a: IpAddr, fam: Option<u8>) -> Result<(), ConfigError> {
    match fam {
        Some(4) if !a.is_ipv4() => Err(invalid(t.line, format!("{a} is not IPv4 (-4 given)"))),
        Some(6) if a.is_ipv4() => Err(invalid(t.line, format!("{a} is not IPv6 (-6 given)"))),
        _ => Ok(()),
    }
}

fn address(t: &Tok, fam: Option<u8>) -> Result<IpAddr, ConfigError> {
    if t.text.contains('[') {
        return Err(unsupported(
            t.line,
            format!("a port on an SA address (`{}`): ESP in UDP is not implemented", t.text),
        ));
    }
    let a: IpAddr = t.text.parse().map_err(|_| {
        invalid(
            t.line,
            format!(
                "{} is not a numeric IP address (host names are not resolved)",
                shown_bt(&t.text)
            ),
        )
    })?;
    check_family(t, a, fam)?;
    Ok(a)
}

/// An SA read from an `add`, with what policy resolution needs.
struct SaDraft {
    config: SaConfig,
    reqid: Option<u32>,
    line: usize,
}

impl SaDraft {
    fn endpoints(&self) -> (IpAddr, IpAddr) {
        let t = self.config.params.tunnel.expect("setkey SAs always have endpoints");
        (t.src, t.dst)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Default,
    Use,
    Require,
    Unique(Option<u32>),
}

struct Request {
    text: String,
    proto: Proto,
    mode: Mode,
    endpoints: Option<(IpAddr, IpAddr)>,
    level: Level,
    line: usize,
}

enum DraftAction {
    Bypass,
    Discard,
    Ipsec(Vec<Request>),
}

struct PolicyDraft {
    dir: Direction,
    selector: Selector,
    action: DraftAction,
    priority: u32,
    line: usize,
    /// Position among the file's `spdadd`s (1-based), for messages.
    ordinal: usize,
}

fn parse_add(stmt: &[Tok], opts: &Options, warnings: &mut Vec<Warning>) -> Result<SaDraft, ConfigError> {
    let line = stmt[0].line;
    let mut c = Cursor::new(stmt);
    let fam = c.family_flags();
    let src = address(c.next("the source address")?, fam)?;
    let dst = address(c.next("the destination address")?, fam)?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(invalid(line, format!("{src} and {dst} are of different IP versions")));
    }
    let pt = c.next("the protocol (esp, ah or ipcomp)")?;
    let proto = match pt.text.as_str() {
        "esp" => Proto::Esp,
        "ah" => Proto::Ah,
        "ipcomp" => Proto::Comp,
        "esp-old" | "ah-old" => {
            return Err(unsupported(
                pt.line,
                format!("`{}`: the RFC 1827/1829 transforms", pt.text),
            ))
        }
        "esp-udp" => {
            return Err(unsupported(
                pt.line,
                "`esp-udp` in setkey files: give ESP in UDP in the TOML format (`encap = { type = \"espinudp\", ... }` or `xfrm = \"... encap espinudp 4500 4500 0.0.0.0\"`)",
            ))
        }
        "tcp" => return Err(unsupported(pt.line, "`tcp`: TCP-MD5 signatures are not IPsec")),
        other => {
            return Err(syntax(
                pt.line,
                format!("unknown protocol {}: use esp, ah or ipcomp", shown_bt(other)),
            ))
        }
    };
    let spi_tok = c.next("the SPI")?;
    let spi = number_u32(spi_tok, "SPI")?;
    let mut p = SaParams::new(proto, spi);
    p.tunnel = Some(Tunnel { src, dst });
    p.replay_window = 0;
    let mut comp = None;
    let mut reqid = None;
    let mut lifetime = Lifetime::default();
    let nonzero = |v: u64| (v != 0).then_some(v);
    while let Some(t) = c.peek() {
        c.i += 1;
        match t.text.as_str() {
            "-m" => {
                let m = c.next("a mode after -m")?;
                p.mode = match m.text.as_str() {
                    "transport" | "any" => Mode::Transport,
                    "tunnel" => Mode::Tunnel,
                    other => {
                        return Err(syntax(
                            m.line,
                            format!("unknown mode {}: use transport, tunnel or any", shown_bt(other)),
                        ))
                    }
                };
            }
            "-r" => {
                let n = c.next("a window size after -r")?;
                let w = number_u32(n, "replay window")?;
                if let Err(e) = ipsec_core::replay::ReplayWindow::new(w, false) {
                    let hint = if (1..=8).contains(&w) {
                        format!(
                            " (-r counts packets here, as on Linux; KAME's -r {w} meant {} packets)",
                            w * 8
                        )
                    } else {
                        String::new()
                    };
                    return Err(invalid(n.line, format!("{e}{hint}")));
                }
                p.replay_window = w;
            }
            "-u" => reqid = Some(number_u32(c.next("a reqid after -u")?, "reqid")?),
            "-f" => {
                let f = c.next("an option after -f")?;
                match f.text.as_str() {
                    "seq-pad" | "nocyclic-seq" => {}
                    "random-pad" | "zero-pad" => warnings.push(Warning {
                        line: f.line,
                        message: format!(
                            "-f {}: ESP here always pads 1, 2, 3, ... (RFC 4303); receivers accept it",
                            f.text
                        ),
                    }),
                    other => {
                        return Err(syntax(
                            f.line,
                            format!(
                                "unknown -f option {}: use seq-pad, random-pad, zero-pad or nocyclic-seq",
                                shown_bt(other)
                            ),
                        ))
                    }
                }
            }
            flag @ ("-lh" | "-ls" | "-bh" | "-bs") => {
                let v = nonzero(number(c.next("a number")?, "lifetime")?);
                match flag {
                    "-lh" => lifetime.hard.seconds = v,
                    "-ls" => lifetime.soft.seconds = v,
                    "-bh" => lifetime.hard.bytes = v,
                    _ => lifetime.soft.bytes = v,
                }
            }
            "-ctx" => return Err(unsupported(t.line, "-ctx: security contexts")),
            "-E" => {
                let a = c.next("an encryption algorithm after -E")?;
                let enc = match a.text.as_str() {
                    "des-cbc" => Ok(EncAlg::DesCbc),
                    "3des-cbc" => Ok(EncAlg::Des3Cbc),
                    "aes-cbc" | "rijndael-cbc" => Ok(EncAlg::AesCbc),
                    "null" => Ok(EncAlg::Null),
                    "aes-gcm-16" => Err(AeadAlg::AesGcm),
                    "simple" | "blowfish-cbc" | "cast128-cbc" | "des-deriv" | "des-32iv" | "twofish-cbc"
                    | "aes-ctr" | "camellia-cbc" => {
                        return Err(unsupported(a.line, format!("encryption algorithm `{}`", a.text)))
                    }
                    other => {
                        return Err(ConfigError::at(
                            a.line,
                            ErrorKind::UnknownAlgorithm {
                                kind: "enc",
                                name: other.into(),
                                expected: "des-cbc, 3des-cbc, aes-cbc (rijndael-cbc), aes-gcm-16 or null",
                            },
                        ))
                    }
                };
                let k = match enc {
                    Ok(EncAlg::Null) if !c.peek().is_some_and(is_key) => Zeroizing::new(Vec::new()),
                    _ => {
                        let kt = c.next("a key")?;
                        let k = key(kt, "-E key")?;
                        match enc {
                            Ok(e) => e.check_key(k.len()),
                            Err(a) => a.check_key(k.len()),
                        }
                        .map_err(|e| ConfigError::at(kt.line, ErrorKind::Sa(e)))?;
                        k
                    }
                };
                match enc {
                    Ok(e) => p.enc = Some(Keyed::new(e, &k, 0)),
                    Err(a) => p.aead = Some(Keyed::new(a, &k, 16)),
                }
            }
            "-A" => {
                let a = c.next("an authentication algorithm after -A")?;
                let alg = match a.text.as_str() {
                    "hmac-md5" => IntegAlg::HmacMd5,
                    "hmac-sha1" => IntegAlg::HmacSha1,
                    "hmac-sha256" | "hmac-sha2-256" => IntegAlg::HmacSha256,
                    "hmac-sha384" | "hmac-sha2-384" => IntegAlg::HmacSha384,
                    "hmac-sha512" | "hmac-sha2-512" => IntegAlg::HmacSha512,
                    "null" => IntegAlg::Null,
                    "keyed-md5" | "keyed-sha1" | "hmac-ripemd160" | "aes-xcbc-mac" | "tcp-md5" => {
                        return Err(unsupported(a.line, format!("authentication algorithm `{}`", a.text)))
                    }
                    other => {
                        return Err(ConfigError::at(
                            a.line,
                            ErrorKind::UnknownAlgorithm {
                                kind: "auth",
                                name: other.into(),
                                expected: "hmac-md5, hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512 or null",
                            },
                        ))
                    }
                };
                let k = if alg == IntegAlg::Null && !c.peek().is_some_and(is_key) {
                    Zeroizing::new(Vec::new())
                } else {
                    let kt = c.next("a key")?;
                    let k = key(kt, "-A key")?;
                    alg.check_key(k.len())
                        .map_err(|e| ConfigError::at(kt.line, ErrorKind::Sa(e)))?;
                    k
                };
                let icv = if alg == IntegAlg::HmacSha256 {
                    alg.check_icv_bits(opts.sha256_icv_bits)
                        .map_err(|e| ConfigError::at(a.line, ErrorKind::Sa(e)))?
                } else {
                    alg.default_icv_len()
                };
                p.integ = Some(Keyed::new(alg, &k, icv));
            }
            "-C" => {
                let a = c.next("a compression algorithm after -C")?;
                comp = Some(match a.text.as_str() {
                    "deflate" => Algorithm::Deflate,
                    "lzs" => Algorithm::Lzs,
                    "lzf" => Algorithm::Lzf,
                    "oui" => return Err(unsupported(a.line, "compression algorithm `oui`")),
                    other => {
                        return Err(ConfigError::at(
                            a.line,
                            ErrorKind::UnknownAlgorithm {
                                kind: "comp",
                                name: other.into(),
                                expected: "deflate, lzs or lzf",
                            },
                        ))
                    }
                });
            }
            "-R" => {}
            other => {
                return Err(syntax(
                    t.line,
                    format!(
                        "unexpected {} in `add` (options: -m -r -u -f -lh -ls -bh -bs -E -A -C -R)",
                        shown_bt(other)
                    ),
                ))
            }
        }
    }
    let what = match (
        proto,
        p.enc.is_some() || p.aead.is_some(),
        p.integ.is_some(),
        comp.is_some(),
    ) {
        (Proto::Esp, false, _, _) => Some("an esp SA needs -E"),
        (Proto::Esp, _, _, true) => Some("-C belongs to ipcomp SAs"),
        (Proto::Ah, _, false, _) => Some("an ah SA needs -A"),
        (Proto::Ah, true, _, _) | (Proto::Ah, _, _, true) => Some("an ah SA takes only -A"),
        (Proto::Comp, _, _, false) => Some("an ipcomp SA needs -C"),
        (Proto::Comp, true, _, _) | (Proto::Comp, _, true, _) => Some("an ipcomp SA takes only -C"),
        _ => None,
    };
    if let Some(w) = what {
        return Err(syntax(line, w));
    }
    if proto == Proto::Comp && spi > u16::MAX as u32 {
        return Err(invalid(
            spi_tok.line,
            format!("the SPI of an ipcomp SA is its CPI, 16 bits; {spi:#x} is too large"),
        ));
    }
    p.validate().map_err(|e| ConfigError::at(line, ErrorKind::Sa(e)))?;
    lifetime
        .validate()
        .map_err(|m| invalid(line, format!("lifetime: {m}")))?;
    Ok(SaDraft {
        config: SaConfig {
            name: String::new(),
            params: p,
            comp,
            adaptive: Default::default(),
            lifetime,
            encap: None,
        },
        reqid,
        line,
    })
}

/// `addr[/len][[port]]`, the `[port]` possibly as the next token.
fn range(c: &mut Cursor, what: &str, fam: Option<u8>) -> Result<(Prefix, PortRange), ConfigError> {
    let t = c.next(what)?;
    let mut text = t.text.clone();
    if !text.contains('[') && c.peek().is_some_and(|n| !n.quoted && n.text.starts_with('[')) {
        text.push_str(&c.next("a port")?.text);
    }
    let (a, port) = match text.split_once('[') {
        None => (text.as_str(), PortRange::ANY),
        Some((a, rest)) => {
            let p = rest
                .strip_suffix(']')
                .ok_or_else(|| syntax(t.line, format!("`{text}`: a port is written [port]")))?;
            let port = if p == "any" {
                PortRange::ANY
            } else {
                PortRange::single(
                    p.parse()
                        .map_err(|_| invalid(t.line, format!("bad port `{p}` in `{text}`")))?,
                )
            };
            (a, port)
        }
    };
    let prefix: Prefix = a.parse().map_err(|e| {
        invalid(
            t.line,
            format!("bad address range `{a}`: {e} (host names are not resolved)"),
        )
    })?;
    check_family(t, prefix.addr(), fam)?;
    Ok((prefix, port))
}

fn priority(c: &mut Cursor) -> Result<u32, ConfigError> {
    let t = c.next("a priority after prio")?;
    let line = t.line;
    let offset = |c: &mut Cursor, sign_tok: Option<&str>| -> Result<Option<i64>, ConfigError> {
        // `+ N`, `- N`, `+N`, `-N`.
        let s = match sign_tok {
            Some(s) => s.to_string(),
            None => match c.peek() {
                Some(n)
                    if n.text.starts_with('+')
                        || (n.text.starts_with('-') && n.text[1..].chars().all(|ch| ch.is_ascii_digit())) =>
                {
                    c.i += 1;
                    n.text.clone()
                }
                _ => return Ok(None),
            },
        };
        let (sign, rest) = s.split_at(1);
        let digits = if rest.is_empty() {
            c.next("a number")?.text.clone()
        } else {
            rest.to_string()
        };
        let n: i64 = digits
            .parse()
            .map_err(|_| syntax(line, format!("bad priority offset `{digits}`")))?;
        Ok(Some(if sign == "+" { n } else { -n }))
    };
    let value: i64 = match t.text.as_str() {
        base @ ("def" | "low" | "high") => {
            let b = match base {
                "def" => PRIORITY_DEFAULT,
                "low" => PRIORITY_LOW,
                _ => PRIORITY_HIGH,
            } as i64;
            // `base + N` raises the priority: a lower value.
            b - offset(c, None)?.unwrap_or(0)
        }
        s if s.starts_with('-') || s.starts_with('+') => PRIORITY_DEFAULT as i64 - offset(c, Some(s))?.unwrap_or(0),
        s => {
            let n: i64 = s
                .parse()
                .map_err(|_| syntax(line, format!("bad priority `{s}`: use N, -N or def|low|high [+|- N]")))?;
            PRIORITY_DEFAULT as i64 - n
        }
    };
    u32::try_from(value).map_err(|_| invalid(line, "priority out of range"))
}

fn request(t: &Tok, warnings: &mut Vec<Warning>, dir: Direction) -> Result<Request, ConfigError> {
    let parts: Vec<&str> = t.text.split('/').collect();
    if parts.len() < 2 || parts.len() > 4 {
        return Err(syntax(
            t.line,
            format!("bad request `{}`: write proto/mode/src-dst/level", t.text),
        ));
    }
    let proto = match parts[0] {
        "esp" => Proto::Esp,
        "ah" => Proto::Ah,
        "ipcomp" => Proto::Comp,
        other => {
            return Err(syntax(
                t.line,
                format!("unknown protocol `{other}` in `{}`: use esp, ah or ipcomp", t.text),
            ))
        }
    };
    let mode = match parts[1] {
        "transport" => Mode::Transport,
        "tunnel" => Mode::Tunnel,
        other => {
            return Err(syntax(
                t.line,
                format!("unknown mode `{other}` in `{}`: use transport or tunnel", t.text),
            ))
        }
    };
    let endpoints = match parts.get(2).copied().unwrap_or("") {
        "" => None,
        a => {
            let (s, d) = a
                .split_once('-')
                .ok_or_else(|| syntax(t.line, format!("bad endpoints `{a}`: write src-dst")))?;
            if [s, d].iter().any(|x| *x == "me" || *x == "any") {
                return Err(unsupported(
                    t.line,
                    format!("`{a}`: me/any endpoints (socket policies)"),
                ));
            }
            if a.contains('[') {
                return Err(unsupported(t.line, format!("`{a}`: ports on endpoints (ESP in UDP)")));
            }
            let parse = |x: &str| -> Result<IpAddr, ConfigError> {
                x.parse()
                    .map_err(|_| invalid(t.line, format!("`{x}` is not a numeric IP address")))
            };
            let (s, d) = (parse(s)?, parse(d)?);
            if s.is_ipv4() != d.is_ipv4() {
                return Err(invalid(t.line, format!("{s} and {d} are of different IP versions")));
            }
            Some((s, d))
        }
    };
    if mode == Mode::Tunnel && endpoints.is_none() {
        return Err(syntax(
            t.line,
            format!(
                "`{}`: a tunnel request needs its endpoints, e.g. esp/tunnel/192.0.2.1-192.0.2.2/require",
                t.text
            ),
        ));
    }
    let level = match parts.get(3).copied().unwrap_or("") {
        "" | "default" => Level::Default,
        "use" => Level::Use,
        "require" => Level::Require,
        "unique" => Level::Unique(None),
        l => match l.strip_prefix("unique:").map(str::parse::<u32>) {
            Some(Ok(n)) => Level::Unique(Some(n)),
            _ => {
                return Err(syntax(
                    t.line,
                    format!("unknown level `{l}`: use default, use, require, unique or unique:N"),
                ))
            }
        },
    };
    if level == Level::Use && dir == Direction::In && proto != Proto::Comp {
        warnings.push(Warning {
            line: t.line,
            message: format!(
                "`{}`: level use is taken as require: inbound packets must arrive protected (Linux would also accept them in the clear)",
                t.text
            ),
        });
    }
    Ok(Request {
        text: t.text.clone(),
        proto,
        mode,
        endpoints,
        level,
        line: t.line,
    })
}

fn parse_spdadd(stmt: &[Tok], warnings: &mut Vec<Warning>) -> Result<Option<PolicyDraft>, ConfigError> {
    let line = stmt[0].line;
    let mut c = Cursor::new(stmt);
    let fam = c.family_flags();
    let (src, sport) = range(&mut c, "the source range", fam)?;
    let (dst, dport) = range(&mut c, "the destination range", fam)?;
    let ut = c.next("the upper-layer protocol")?;
    let proto = match ut.text.as_str() {
        "any" => None,
        name => Some(proto_by_name(name).ok_or_else(|| {
            syntax(
                ut.line,
                format!("unknown upper-layer protocol `{name}`: use any, a number or tcp, udp, icmp, icmp6, ..."),
            )
        })?),
    };
    let mut selector = Selector {
        src: Some(src),
        dst: Some(dst),
        proto,
        src_ports: sport,
        dst_ports: dport,
    };
    // `icmp6 135,0`: ICMP type and code, which selectors keep in the port fields.
    if let Some(t) = c.peek() {
        if matches!(proto, Some(1 | 58)) && !t.text.starts_with('-') {
            c.i += 1;
            let (ty, code) = match t.text.split_once(',') {
                Some((a, b)) => (a, Some(b)),
                None => (t.text.as_str(), None),
            };
            let num = |s: &str| -> Result<u16, ConfigError> {
                s.parse::<u8>()
                    .map(u16::from)
                    .map_err(|_| invalid(t.line, format!("bad ICMP type/code `{}`", t.text)))
            };
            selector.src_ports = PortRange::single(num(ty)?);
            if let Some(code) = code {
                selector.dst_ports = PortRange::single(num(code)?);
            }
        }
    }
    let pt = c.next("-P")?;
    match pt.text.as_str() {
        "-P" => {}
        "-ctx" => return Err(unsupported(pt.line, "-ctx: security contexts")),
        other => return Err(syntax(pt.line, format!("expected -P, found `{other}`"))),
    }
    check_selector(&selector).map_err(|m| invalid(line, m))?;
    let dt = c.next("a direction (in, out or fwd)")?;
    let dir = match dt.text.as_str() {
        "in" => Direction::In,
        "out" => Direction::Out,
        "fwd" => {
            warnings.push(Warning {
                line: dt.line,
                message: "fwd policy skipped: inbound policies here check forwarded packets too".into(),
            });
            return Ok(None);
        }
        other => {
            return Err(syntax(
                dt.line,
                format!("unknown direction `{other}`: use in, out or fwd"),
            ))
        }
    };
    let mut prio = PRIORITY_DEFAULT;
    if c.peek().is_some_and(|t| t.text == "prio" || t.text == "priority") {
        c.i += 1;
        prio = priority(&mut c)?;
    }
    let at = c.next("an action (discard, none, bypass or ipsec)")?;
    let action = match at.text.as_str() {
        "discard" => DraftAction::Discard,
        "none" | "bypass" => DraftAction::Bypass,
        "ipsec" => {
            let mut reqs = Vec::new();
            while let Some(t) = c.peek() {
                c.i += 1;
                reqs.push(request(t, warnings, dir)?);
            }
            if reqs.is_empty() {
                return Err(syntax(
                    at.line,
                    "`ipsec` needs at least one proto/mode/src-dst/level request",
                ));
            }
            DraftAction::Ipsec(reqs)
        }
        "entrust" => {
            return Err(unsupported(
                at.line,
                "`entrust` (it only means something for socket policies)",
            ))
        }
        other => {
            return Err(syntax(
                at.line,
                format!("unknown action `{other}`: use discard, none, bypass or ipsec"),
            ))
        }
    };
    if let Some(t) = c.peek() {
        return Err(syntax(
            t.line,
            format!("unexpected {} after the policy", shown_bt(&t.text)),
        ));
    }
    Ok(Some(PolicyDraft {
        dir,
        selector,
        action,
        priority: prio,
        line,
        ordinal: 0,
    }))
}

fn resolve(
    req: &Request,
    sel: &Selector,
    outer: Option<(IpAddr, IpAddr)>,
    sas: &[SaDraft],
) -> Result<usize, ConfigError> {
    let within = |p: Option<Prefix>, a: IpAddr| p.is_none_or(|p| p.contains(a));
    let wanted = req.endpoints.or(outer);
    let found: Vec<usize> = sas
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let p = &s.config.params;
            let (src, dst) = s.endpoints();
            p.proto == req.proto
                && p.mode == req.mode
                && match req.level {
                    Level::Unique(Some(id)) => s.reqid == Some(id),
                    _ => true,
                }
                && match wanted {
                    Some(e) => e == (src, dst),
                    None => within(sel.src, src) && within(sel.dst, dst),
                }
        })
        .map(|(i, _)| i)
        .collect();
    let mode = if req.mode == Mode::Tunnel {
        "tunnel"
    } else {
        "transport"
    };
    let between = match wanted {
        Some((s, d)) => format!("from {s} to {d}"),
        None => format!(
            "from {} to {}",
            sel.src.map_or("any".into(), |p| p.to_string()),
            sel.dst.map_or("any".into(), |p| p.to_string())
        ),
    };
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(ConfigError::at(
            req.line,
            ErrorKind::Unresolved(format!(
                "`{}`: no `add`ed {} SA in {mode} mode {between}{}",
                req.text,
                req.proto.name(),
                match req.level {
                    Level::Unique(Some(id)) => format!(" with -u {id}"),
                    _ => String::new(),
                }
            )),
        )),
        many => Err(ConfigError::at(
            req.line,
            ErrorKind::Unresolved(format!(
                "`{}` matches {} SAs ({}): give one `-u N` and write unique:N in the policy",
                req.text,
                many.len(),
                many.iter()
                    .map(|&i| format!("line {}", sas[i].line))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        )),
    }
}

/// The name an `add` statement's SA will get (without the collision suffixes), for messages.
fn add_name(stmt: &[Tok]) -> Option<String> {
    let i = stmt
        .iter()
        .position(|t| matches!(t.text.as_str(), "esp" | "ah" | "ipcomp"))?;
    let spi = number(stmt.get(i + 1)?, "SPI").ok()?;
    let proto = if stmt[i].text == "ipcomp" {
        "comp"
    } else {
        &stmt[i].text
    };
    Some(format!("{proto}-{spi:#x}"))
}

/// Imports a setkey file: the SAs of its `add` statements and the policies of its `spdadd`
/// statements, with each policy request resolved to one SA (see the module documentation).
/// Returns the config and the warnings about things accepted with a caveat.
pub fn parse(text: &str, opts: &Options) -> Result<(Config, Vec<Warning>), ConfigError> {
    let mut warnings = Vec::new();
    let mut sas: Vec<SaDraft> = Vec::new();
    let mut policies: Vec<PolicyDraft> = Vec::new();
    let mut spdadds = 0;
    // `flush;` (every protocol) and `spdflush;` seen: an empty result is on purpose.
    let (mut flushed, mut spdflushed) = (false, false);
    for stmt in statements(text)? {
        let head = &stmt[0];
        match head.text.as_str() {
            "add" => sas.push(
                parse_add(&stmt, opts, &mut warnings).map_err(|e| match add_name(&stmt) {
                    Some(n) => e.about(Item::Sa(n)),
                    None => e,
                })?,
            ),
            "spdadd" => {
                spdadds += 1;
                let item = Item::Policy {
                    index: spdadds,
                    name: None,
                };
                if let Some(mut p) = parse_spdadd(&stmt, &mut warnings).map_err(|e| e.about(item))? {
                    p.ordinal = spdadds;
                    policies.push(p);
                }
            }
            "flush" => {
                let only = match stmt.get(1).map(|t| t.text.as_str()) {
                    None => None,
                    Some("esp") => Some(Proto::Esp),
                    Some("ah") => Some(Proto::Ah),
                    Some("ipcomp") => Some(Proto::Comp),
                    Some(other) => return Err(syntax(stmt[1].line, format!("flush `{other}`: use esp, ah or ipcomp"))),
                };
                if let Some(t) = stmt.get(2) {
                    return Err(syntax(t.line, format!("unexpected `{}` after flush", t.text)));
                }
                sas.retain(|s| only.is_some_and(|p| p != s.config.params.proto));
                flushed |= only.is_none();
            }
            "spdflush" => {
                if let Some(t) = stmt.get(1) {
                    return Err(syntax(t.line, format!("unexpected `{}` after spdflush", t.text)));
                }
                policies.clear();
                spdflushed = true;
            }
            w @ ("delete" | "deleteall" | "get" | "dump" | "update" | "spdupdate" | "spddelete" | "spddump"
            | "exit" | "quit" | "bye") => {
                return Err(unsupported(
                    head.line,
                    format!("`{w}`: a configuration file takes add, spdadd, flush and spdflush"),
                ))
            }
            other => return Err(syntax(head.line, format!("unknown statement {}", shown_bt(other)))),
        }
    }
    // Names: <proto>-<spi>, made unique with the destination, then the line.
    let mut taken = std::collections::HashSet::new();
    for s in &mut sas {
        let p = &s.config.params;
        let base = format!("{}-{:#x}", p.proto.name(), p.spi);
        let (_, dst) = s.endpoints();
        let name = [base.clone(), format!("{base}-{dst}"), format!("{base}-line{}", s.line)]
            .into_iter()
            .find(|n| !taken.contains(n))
            .expect("the line makes it unique");
        taken.insert(name.clone());
        s.config.name = name;
    }
    policies.sort_by_key(|p| p.priority);
    let mut config = Config {
        empty_on_purpose: flushed && spdflushed && sas.is_empty() && policies.is_empty(),
        ..Config::default()
    };
    for p in &policies {
        let action = match &p.action {
            DraftAction::Bypass => ActionConfig::Bypass,
            DraftAction::Discard => ActionConfig::Discard,
            DraftAction::Ipsec(reqs) => {
                let mut names = Vec::new();
                let mut outer = None;
                for r in reqs {
                    let idx = resolve(r, &p.selector, outer, &sas).map_err(|e| {
                        e.about(Item::Policy {
                            index: p.ordinal,
                            name: None,
                        })
                    })?;
                    if r.mode == Mode::Tunnel {
                        outer = r.endpoints;
                    }
                    names.push(sas[idx].config.name.clone());
                }
                ActionConfig::Protect(names)
            }
        };
        config.policies.push(PolicyConfig {
            name: None,
            dir: p.dir,
            selector: p.selector,
            action,
        });
        config.lines.policies.push(p.line);
        config.lines.policy_numbers.push(p.ordinal);
    }
    for s in sas {
        config.lines.sas.push(s.line);
        config.sas.push(s.config);
    }
    Ok((config, warnings))
}

#[cfg(test)]
mod tests;
