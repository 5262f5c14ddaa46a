//! Value types the config file's tables share: [`Secret`] (a string holding key material,
//! zeroed when dropped, never shown in an error) and [`Span`] (a duration in swanctl's
//! words).

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use zeroize::Zeroizing;

/// A string that holds key material (`key = "..."`, `xfrm = "..."`): zeroed when dropped,
/// and a value of the wrong type is described, never shown.
pub(crate) struct Secret(Zeroizing<String>);

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Secret;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string (a key is \"0x<hex>\" or the key's bytes as a string)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret(Zeroizing::new(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Secret, E> {
                Ok(Secret(Zeroizing::new(v)))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secret, E> {
                Err(E::custom(
                    "expected a string, found an integer (not shown): write key = \"0x<hex>\" in quotes",
                ))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secret, E> {
                Err(E::custom(
                    "expected a string, found an integer (not shown): write key = \"0x<hex>\" in quotes",
                ))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secret, E> {
                Err(E::custom(
                    "expected a string, found a number (not shown): write key = \"0x<hex>\" in quotes",
                ))
            }
        }
        d.deserialize_any(V)
    }
}

impl Secret {
    pub(crate) fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// A duration in swanctl's words: `"90s"`, `"20m"`, `"1h"`, `"1d"`, `"30"`, or seconds.
#[derive(serde::Deserialize, Debug, Clone)]
#[serde(untagged)]
pub(crate) enum Span {
    Secs(u64),
    Text(String),
}

impl Span {
    pub(crate) fn get(&self, what: &str) -> Result<std::time::Duration, String> {
        let bad = || format!("{what}: `{self:?}` is not a duration (\"90s\", \"20m\", \"1h\", \"1d\" or seconds)");
        let secs = match self {
            Span::Secs(n) => *n,
            Span::Text(t) => {
                let t = t.trim();
                let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
                let n: u64 = num.parse().map_err(|_| bad())?;
                let mul = match unit.trim() {
                    "" | "s" => 1,
                    "m" => 60,
                    "h" => 3600,
                    "d" => 86400,
                    _ => return Err(bad()),
                };
                n.checked_mul(mul).ok_or_else(bad)?
            }
        };
        if secs > 10 * 365 * 86400 {
            return Err(format!("{what}: more than ten years"));
        }
        Ok(std::time::Duration::from_secs(secs))
    }
}
