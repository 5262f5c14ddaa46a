//! Identities against certificates and against configured patterns.
//!
//! A certificate contains an identity (RFC 4945 4.1.3, as strongSwan checks it) when: an
//! ID_FQDN equals one of its subjectAltName dNSNames, an ID_RFC822_ADDR one of its
//! rfc822Names (both ignoring ASCII case), an ID_IPV4_ADDR/ID_IPV6_ADDR one of its
//! iPAddresses, an ID_DER_ASN1_DN its subject DN or a directoryName SAN (equal as DNs, see
//! [`Dn`]). The subject's CN is never used for an FQDN (RFC 4945 3.1.2 leaves it to policy;
//! strongSwan does not either). ID_KEY_ID and other types match no certificate.
use super::cert::Certificate;
use super::dn::Dn;
use super::PkiError;
use crate::id::Identity;
use alloc::string::String;
use core::fmt;

/// Whether `cert` contains `id` (see the module documentation).
pub fn cert_matches_id(cert: &Certificate, id: &Identity) -> bool {
    if let Identity::Dn(d) = id {
        if cert.subject() == *d {
            return true;
        }
    }
    cert.sans().iter().any(|san| ids_equal(san, id))
}

fn ids_equal(a: &Identity, b: &Identity) -> bool {
    match (a, b) {
        (Identity::Fqdn(x), Identity::Fqdn(y)) | (Identity::UserFqdn(x), Identity::UserFqdn(y)) => {
            x.eq_ignore_ascii_case(y)
        }
        (Identity::Ipv4(_) | Identity::Ipv6(_) | Identity::Dn(_), _) => a == b,
        _ => false,
    }
}

/// A configured remote identity, possibly with wildcards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdPattern {
    /// `%any`: any identity.
    Any,
    /// A DN whose `*` values match any value (`C=CH, O=strongSwan, CN=*`); without `*` it
    /// matches an equal DN.
    Dn(Dn),
    /// `*.example.org`: an FQDN ending in the suffix kept here (`.example.org`) after at
    /// least one character.
    FqdnSuffix(String),
    /// `*@example.org`: an RFC 822 address ending in the suffix kept here (`@example.org`)
    /// after at least one character.
    UserFqdnSuffix(String),
    /// Any other identity, matched exactly (FQDNs and RFC 822 addresses ignoring ASCII case).
    Exact(Identity),
}

impl IdPattern {
    /// Parses `%any`, a DN (text containing `=`, see [`Dn::from_str_config`]) with optional
    /// `*` values, `*.domain`, `*@domain`, or an identity as
    /// [`Identity::from_str_config`] reads it.
    pub fn from_str_config(s: &str) -> Result<IdPattern, PkiError> {
        let s = s.trim();
        if s == "%any" {
            return Ok(IdPattern::Any);
        }
        if s.contains('=') && !s.starts_with('@') {
            return Ok(IdPattern::Dn(Dn::from_str_config(s)?));
        }
        let bare = s.strip_prefix('@').unwrap_or(s);
        if let Some(suffix) = bare.strip_prefix('*') {
            if suffix.contains('*') || suffix.len() < 2 {
                return Err(PkiError::BadPattern("one leading '*' then a domain"));
            }
            return match suffix.as_bytes()[0] {
                b'.' => Ok(IdPattern::FqdnSuffix(suffix.into())),
                b'@' => Ok(IdPattern::UserFqdnSuffix(suffix.into())),
                _ => Err(PkiError::BadPattern("'*' must be followed by '.' or '@'")),
            };
        }
        if s.contains('*') {
            return Err(PkiError::BadPattern("'*' only as the first character"));
        }
        Identity::from_str_config(s)
            .map(IdPattern::Exact)
            .map_err(|_| PkiError::BadPattern("bad identity"))
    }

    /// Whether `id` matches.
    pub fn matches(&self, id: &Identity) -> bool {
        match (self, id) {
            (IdPattern::Any, _) => true,
            (IdPattern::Dn(p), Identity::Dn(d)) => p.matches(d),
            (IdPattern::FqdnSuffix(sfx), Identity::Fqdn(f))
            | (IdPattern::UserFqdnSuffix(sfx), Identity::UserFqdn(f)) => {
                f.len() > sfx.len()
                    && f.is_char_boundary(f.len() - sfx.len())
                    && f[f.len() - sfx.len()..].eq_ignore_ascii_case(sfx)
            }
            (IdPattern::Exact(e), _) => ids_equal(e, id) || e == id,
            _ => false,
        }
    }
}

impl fmt::Display for IdPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdPattern::Any => f.write_str("%any"),
            IdPattern::Dn(d) => write!(f, "{d}"),
            IdPattern::FqdnSuffix(s) | IdPattern::UserFqdnSuffix(s) => write!(f, "*{s}"),
            IdPattern::Exact(i) => write!(f, "{i}"),
        }
    }
}

/// Whether `id` matches `pattern` (see [`IdPattern`]).
pub fn id_matches_pattern(pattern: &IdPattern, id: &Identity) -> bool {
    pattern.matches(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn id(s: &str) -> Identity {
        Identity::from_str_config(s).unwrap()
    }
    fn pat(s: &str) -> IdPattern {
        IdPattern::from_str_config(s).unwrap()
    }

    #[test]
    fn patterns() {
        assert!(pat("%any").matches(&id("10.0.0.1")));
        assert!(pat("*.example.org").matches(&id("vpn.Example.org")));
        assert!(pat("*.example.org").matches(&id("a.b.example.org")));
        assert!(!pat("*.example.org").matches(&id("example.org")));
        assert!(!pat("*.example.org").matches(&id("vpn.example.org.evil")));
        assert!(!pat("*.example.org").matches(&id("alice@vpn.example.org")));
        assert!(pat("*@example.org").matches(&id("alice@example.org")));
        assert!(!pat("*@example.org").matches(&id("@example.org")));
        assert!(!pat("*@example.org").matches(&id("alice@sub.example.org")));
        assert!(pat("C=CH, O=strongSwan, CN=*").matches(&id("C=CH, O=strongSwan, CN=moon")));
        assert!(!pat("C=CH, O=strongSwan, CN=*").matches(&id("C=CH, O=strongSwan")));
        assert!(!pat("C=CH, O=strongSwan, CN=*").matches(&id("moon.strongswan.org")));
        assert!(pat("moon.strongswan.org").matches(&id("MOON.strongswan.org")));
        assert!(pat("@moon").matches(&id("moon")));
        assert!(pat("10.0.0.1").matches(&id("10.0.0.1")));
        assert!(!pat("10.0.0.1").matches(&id("10.0.0.2")));
        for bad in ["*", "*x.org", "a*.org", "*.a*", "CN=", "XX=y"] {
            assert!(IdPattern::from_str_config(bad).is_err(), "{bad}");
        }
        assert_eq!(pat("*@example.org").to_string(), "*@example.org");
        assert_eq!(pat("C=CH, CN=*").to_string(), "C=CH, CN=*");
    }

    const NAMES: &[&str] = &["C", "ST", "L", "O", "OU", "CN", "E", "DC", "SN"];

    fn dn_parts() -> impl Strategy<Value = Vec<(usize, String)>> {
        prop::collection::vec((0..NAMES.len(), "[A-Za-z0-9][A-Za-z0-9 .@-]{0,10}[A-Za-z0-9]"), 1..6)
    }

    fn dn_text(parts: &[(usize, String)], wild: &[bool]) -> String {
        parts
            .iter()
            .zip(wild.iter().chain(core::iter::repeat(&false)))
            .map(|((n, v), w)| alloc::format!("{}={}", NAMES[*n], if *w { "*" } else { v }))
            .collect::<Vec<_>>()
            .join(", ")
    }

    proptest! {
        #[test]
        fn dn_matches_itself_and_its_wildcards(parts in dn_parts(), wild in prop::collection::vec(any::<bool>(), 0..6)) {
            let d = Dn::from_str_config(&dn_text(&parts, &[])).unwrap();
            let i = Identity::Dn(d.clone());
            prop_assert!(IdPattern::Dn(d.clone()).matches(&i));
            prop_assert!(IdPattern::Dn(Dn::from_str_config(&dn_text(&parts, &[true; 6])).unwrap()).matches(&i));
            prop_assert!(IdPattern::Dn(Dn::from_str_config(&dn_text(&parts, &wild)).unwrap()).matches(&i));
            // Text and DER round trips keep it equal.
            prop_assert_eq!(&Dn::from_str_config(&d.to_string()).unwrap(), &d);
            prop_assert_eq!(&Dn::from_der(&d.to_der()).unwrap(), &d);
            prop_assert_eq!(Identity::parse(&i.to_body()).unwrap(), i);
        }

        #[test]
        fn dn_equality_ignores_ascii_case_and_hashes_alike(parts in dn_parts(), flips in prop::collection::vec(any::<bool>(), 0..64)) {
            use core::hash::{Hash, Hasher};
            let text = dn_text(&parts, &[]);
            let flipped: String = text
                .chars()
                .zip(flips.iter().chain(core::iter::repeat(&false)))
                .map(|(c, f)| if *f { c.to_ascii_uppercase() } else { c })
                .collect();
            let (a, b) = (Dn::from_str_config(&text).unwrap(), Dn::from_str_config(&flipped).unwrap());
            prop_assert_eq!(&a, &b);
            let hash = |d: &Dn| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                d.hash(&mut h);
                h.finish()
            };
            prop_assert_eq!(hash(&a), hash(&b));
        }

        #[test]
        fn dn_never_matches_another_value(parts in dn_parts(), k in any::<prop::sample::Index>(), other in "[A-Za-z0-9]{1,8}") {
            let k = k.index(parts.len());
            let mut changed = parts.clone();
            changed[k].1 = alloc::format!("{}x{}", changed[k].1, other);
            let d = Dn::from_str_config(&dn_text(&parts, &[])).unwrap();
            let p = Dn::from_str_config(&dn_text(&changed, &[])).unwrap();
            prop_assert!(!IdPattern::Dn(p.clone()).matches(&Identity::Dn(d.clone())));
            prop_assert!(d != p);
            // Nor a pattern with one attribute fewer or more.
            if parts.len() > 1 {
                let shorter = Dn::from_str_config(&dn_text(&parts[1..], &[true; 6])).unwrap();
                prop_assert!(!IdPattern::Dn(shorter).matches(&Identity::Dn(d.clone())));
            }
            let mut longer = parts.clone();
            longer.push((5, "*".into()));
            let longer = Dn::from_str_config(&dn_text(&longer, &[])).unwrap();
            prop_assert!(!IdPattern::Dn(longer).matches(&Identity::Dn(d)));
        }
    }
}
