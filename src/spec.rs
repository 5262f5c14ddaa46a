//! SA specifications in the words of `ip xfrm state`, e.g.
//! `proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' 0x<key>
//! auth-trunc 'hmac(sha1)' 0x<key> 96`, plus `flag esn` and `replay-window N`.

use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg};
use ipsec_ipcomp::Algorithm;
use std::fmt;
use std::net::IpAddr;

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
pub fn parse_key(s: &str) -> Result<Vec<u8>, SpecError> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => hex::decode(h).map_err(|e| SpecError(format!("bad hex key {s:?}: {e}"))),
        None => Ok(s.as_bytes().to_vec()),
    }
}

fn parse_u64(s: &str, what: &str) -> Result<u64, SpecError> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| SpecError(format!("bad {what} {s:?}: expected a number")))
}

fn parse_u32(s: &str, what: &str) -> Result<u32, SpecError> {
    let v = parse_u64(s, what)?;
    u32::try_from(v).map_err(|_| SpecError(format!("{what} {s} does not fit in 32 bits")))
}

/// A number of bits (for `auth-trunc` and `aead`).
fn parse_bits(s: &str) -> Result<usize, SpecError> {
    s.parse()
        .map_err(|_| SpecError(format!("bad ICV length {s:?}: expected a number of bits")))
}

/// One parsed SA: the core parameters plus what only some protocols use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaSpec {
    /// The parameters.
    pub params: SaParams,
    /// The compression algorithm of an IPComp SA.
    pub comp: Option<Algorithm>,
}

/// Parses one SPEC and validates it (key lengths, combinations).
pub fn parse(spec: &str) -> Result<SaSpec, SpecError> {
    let words = tokenize(spec)?;
    let mut it = words.iter().map(String::as_str).peekable();
    let mut proto = None;
    let mut spi = None;
    let mut mode = Mode::Transport;
    let (mut src, mut dst): (Option<IpAddr>, Option<IpAddr>) = (None, None);
    let mut enc = None;
    let mut integ = None;
    let mut aead = None;
    let mut comp = None;
    let mut window = None;
    let mut esn = false;
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
                    p => return err(format!("unknown proto {p:?}: use esp, ah or comp")),
                })
            }
            "spi" => spi = Some(parse_u32(next(&mut it, "spi")?, "spi")?),
            "mode" => {
                mode = match next(&mut it, "mode")? {
                    "transport" => Mode::Transport,
                    "tunnel" => Mode::Tunnel,
                    m => return err(format!("unsupported mode {m:?}: use transport or tunnel")),
                }
            }
            "src" | "dst" => {
                let v = next(&mut it, w)?;
                let a: IpAddr = v.parse().map_err(|_| SpecError(format!("bad {w} address {v:?}")))?;
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
                        "unknown enc algorithm {name:?}: use cipher_null, cbc(des), cbc(des3_ede) or cbc(aes)"
                    ))
                })?;
                let key = parse_key(next(&mut it, "enc key")?)?;
                enc = Some(Keyed::new(alg, &key, 0));
            }
            "auth" | "auth-trunc" => {
                let name = next(&mut it, w)?;
                let alg = IntegAlg::from_name(name).ok_or_else(|| {
                    SpecError(format!(
                        "unknown auth algorithm {name:?}: use digest_null, hmac(md5), hmac(sha1), hmac(sha256), hmac(sha384) or hmac(sha512)"
                    ))
                })?;
                let key = parse_key(next(&mut it, "auth key")?)?;
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
                        "unknown aead algorithm {name:?}: use rfc4106(gcm(aes)) or rfc7539esp(chacha20,poly1305)"
                    ))
                })?;
                let key = parse_key(next(&mut it, "aead key")?)?;
                let bits = parse_bits(next(&mut it, "aead ICV length")?)?;
                let icv = alg.check_icv_bits(bits).map_err(|e| SpecError(e.to_string()))?;
                aead = Some(Keyed::new(alg, &key, icv));
            }
            "comp" => {
                let name = next(&mut it, "comp")?;
                match Algorithm::from_name(name) {
                    Some(a) => comp = Some(a),
                    None => return err(format!("unknown comp algorithm {name:?}: use deflate, lzs or lzf")),
                }
            }
            "replay-window" => window = Some(parse_u32(next(&mut it, "replay-window")?, "replay-window")?),
            "flag" => {
                let f = next(&mut it, "flag")?;
                match f {
                    "esn" => esn = true,
                    _ => return err(format!("unsupported flag {f:?} (only esn)")),
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
            other => return err(format!("unexpected word {other:?} in SA spec")),
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
    p.validate().map_err(|e| SpecError(e.to_string()))?;
    Ok(SaSpec { params: p, comp })
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
