//! X.501 distinguished names (ID_DER_ASN1_DN, RFC 7296 3.5; certificate subjects and issuers)
//! written as strongSwan writes them: `C=CH, O=strongSwan, CN=moon`, the attributes in the
//! order of the encoding (RFC 4514 prints them reversed; strongSwan, openssl's default and
//! this module do not).
//!
//! A DN is compared as strongSwan compares one (`compare_dn` in libstrongswan): attribute by
//! attribute through all RDNs (a multi-valued RDN counts as its attributes in order), the
//! types (OIDs) equal, and the values equal. Values that are strings (PrintableString,
//! UTF8String, IA5String, TeletexString, BMPString, VisibleString) compare as text ignoring
//! ASCII case, whatever their string types: RFC 5280 7.1 compares names case-insensitively
//! and independently of the string type, and a configured `O=strongSwan` (PrintableString)
//! must equal openssl's UTF8String `O=strongSwan`. strongSwan is stricter (it ignores case
//! only between two PrintableStrings or emailAddresses). Other values compare as bytes. A DN
//! parsed from DER keeps its bytes, so [`Dn::to_der`] gives back exactly what the peer sent
//! (the AUTH payload signs them).
use super::PkiError;
use alloc::string::String;
use alloc::vec::Vec;
use const_oid::ObjectIdentifier;
use core::fmt;
use core::hash::{Hash, Hasher};
use der::asn1::{Any, SetOfVec};
use der::{Decode, Encode, Tag, Tagged};
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::name::{Name, RelativeDistinguishedName};

/// Longest DN accepted (DER or text).
pub const MAX_DN_LEN: usize = 1024;
/// Most attributes in one DN.
pub const MAX_DN_ATTRS: usize = 32;

/// Attribute names: (name written, accepted aliases, OID, written as IA5String). The first
/// name is the one printed. strongSwan's names: `SN` is serialNumber and `S` the surname.
const ATTRS: &[(&str, &[&str], ObjectIdentifier, bool)] = &[
    ("C", &["countryName"], oid("2.5.4.6"), false),
    ("ST", &["stateOrProvinceName"], oid("2.5.4.8"), false),
    ("L", &["localityName"], oid("2.5.4.7"), false),
    ("O", &["organizationName"], oid("2.5.4.10"), false),
    ("OU", &["organizationalUnitName"], oid("2.5.4.11"), false),
    ("CN", &["commonName"], oid("2.5.4.3"), false),
    ("SN", &["serialNumber"], oid("2.5.4.5"), false),
    ("S", &["surname"], oid("2.5.4.4"), false),
    ("G", &["givenName"], oid("2.5.4.42"), false),
    ("I", &["initials"], oid("2.5.4.43"), false),
    ("T", &["title"], oid("2.5.4.12"), false),
    ("D", &["description"], oid("2.5.4.13"), false),
    ("N", &["name"], oid("2.5.4.41"), false),
    ("dnQualifier", &[], oid("2.5.4.46"), false),
    ("ID", &["uniqueIdentifier"], oid("2.5.4.45"), false),
    ("E", &["Email", "emailAddress"], oid("1.2.840.113549.1.9.1"), true),
    ("UN", &["unstructuredName"], oid("1.2.840.113549.1.9.2"), true),
    ("DC", &["domainComponent"], oid("0.9.2342.19200300.100.1.25"), true),
    ("UID", &["userId"], oid("0.9.2342.19200300.100.1.1"), false),
];

const fn oid(s: &str) -> ObjectIdentifier {
    ObjectIdentifier::new_unwrap(s)
}

/// One attribute: its type, the string type (tag) and the value's content octets.
#[derive(Clone)]
struct Attr {
    oid: ObjectIdentifier,
    tag: Tag,
    value: Vec<u8>,
}

impl Attr {
    fn value_eq(&self, o: &Attr) -> bool {
        match (self.text(), o.text()) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(&b),
            _ => self.tag == o.tag && self.value == o.value,
        }
    }

    /// The value as text, when it is a string type.
    fn text(&self) -> Option<String> {
        match self.tag {
            Tag::PrintableString | Tag::Utf8String | Tag::Ia5String | Tag::VisibleString => {
                String::from_utf8(self.value.clone()).ok()
            }
            // T.61: read as Latin-1, as most implementations do.
            Tag::TeletexString => Some(self.value.iter().map(|&b| b as char).collect()),
            Tag::BmpString if self.value.len().is_multiple_of(2) => {
                let units = self.value.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]));
                char::decode_utf16(units).collect::<Result<String, _>>().ok()
            }
            _ => None,
        }
    }

    fn is_wildcard(&self) -> bool {
        self.value == b"*"
    }
}

/// A distinguished name.
#[derive(Clone)]
pub struct Dn {
    attrs: Vec<Attr>,
    der: Vec<u8>,
}

impl Dn {
    /// Parses a DER `Name` (the body of an ID_DER_ASN1_DN identity, a certificate's subject).
    pub fn from_der(der: &[u8]) -> Result<Dn, PkiError> {
        if der.len() > MAX_DN_LEN {
            return Err(PkiError::BadDn("too long"));
        }
        let name = Name::from_der(der).map_err(|_| PkiError::BadDn("malformed DER"))?;
        Self::from_name(&name, der.to_vec())
    }

    pub(crate) fn from_name(name: &Name, der: Vec<u8>) -> Result<Dn, PkiError> {
        let mut attrs = Vec::new();
        for rdn in name.0.iter() {
            for atv in rdn.0.iter() {
                if attrs.len() == MAX_DN_ATTRS {
                    return Err(PkiError::BadDn("too many attributes"));
                }
                attrs.push(Attr {
                    oid: atv.oid,
                    tag: atv.value.tag(),
                    value: atv.value.value().to_vec(),
                });
            }
        }
        Ok(Dn { attrs, der })
    }

    /// Parses a DN as strongSwan's configuration writes one: `C=CH, O=strongSwan, CN=moon`
    /// (or `/C=CH/O=strongSwan/CN=moon`), attribute names as strongSwan knows them (C, ST, L,
    /// O, OU, CN, SN = serialNumber, S = surname, E = emailAddress, DC, UID, ...; any case) or
    /// a dotted OID, each attribute its own RDN, in the order written. A value may be quoted
    /// (`CN="a, b"`) to hold the separator; spaces around names and values are dropped.
    /// Values are PrintableString when they fit, else UTF8String (IA5String for E and DC when
    /// ASCII), as strongSwan encodes them.
    pub fn from_str_config(s: &str) -> Result<Dn, PkiError> {
        let s = s.trim();
        if s.is_empty() || s.len() > MAX_DN_LEN {
            return Err(PkiError::BadDn("empty or too long"));
        }
        let (sep, mut rest) = match s.strip_prefix('/') {
            Some(r) => ('/', r),
            None => (',', s),
        };
        let mut attrs = Vec::new();
        loop {
            let eq = rest.find('=').ok_or(PkiError::BadDn("attribute without '='"))?;
            let name = rest[..eq].trim();
            let (oid, ia5) = lookup(name)?;
            let after = rest[eq + 1..].trim_start();
            let (value, next) = if let Some(q) = after.strip_prefix('"') {
                let end = q.find('"').ok_or(PkiError::BadDn("unterminated quote"))?;
                let tail = q[end + 1..].trim_start();
                match tail.strip_prefix(sep) {
                    Some(t) => (&q[..end], Some(t)),
                    None if tail.is_empty() => (&q[..end], None),
                    None => return Err(PkiError::BadDn("text after a quoted value")),
                }
            } else {
                match after.find(sep) {
                    Some(i) => (after[..i].trim_end(), Some(&after[i + 1..])),
                    None => (after.trim_end(), None),
                }
            };
            if value.is_empty() {
                return Err(PkiError::BadDn("empty value"));
            }
            if attrs.len() == MAX_DN_ATTRS {
                return Err(PkiError::BadDn("too many attributes"));
            }
            let tag = if ia5 && value.is_ascii() {
                Tag::Ia5String
            } else if value.bytes().all(printable) {
                Tag::PrintableString
            } else {
                Tag::Utf8String
            };
            attrs.push(Attr {
                oid,
                tag,
                value: value.as_bytes().to_vec(),
            });
            match next {
                Some(n) if !n.trim().is_empty() => rest = n,
                Some(_) => return Err(PkiError::BadDn("trailing separator")),
                None => break,
            }
        }
        let der = encode(&attrs)?;
        Ok(Dn { attrs, der })
    }

    /// The DER encoding: the bytes parsed by [`Dn::from_der`], or the encoding of a DN read
    /// from text (each attribute its own RDN).
    pub fn to_der(&self) -> Vec<u8> {
        self.der.clone()
    }

    /// The DER encoding, borrowed.
    pub fn as_der(&self) -> &[u8] {
        &self.der
    }

    /// Number of attributes (through all RDNs).
    pub fn len(&self) -> usize {
        self.attrs.len()
    }

    /// Whether the DN has no attribute (an empty subject).
    pub fn is_empty(&self) -> bool {
        self.attrs.is_empty()
    }

    /// Whether some attribute's value is the wildcard `*`.
    pub fn has_wildcards(&self) -> bool {
        self.attrs.iter().any(Attr::is_wildcard)
    }

    /// Whether `self`, used as a pattern, matches `dn`: the same number of attributes, the
    /// same types in the same order, each value equal or `*` in the pattern (strongSwan's
    /// `matches_dn`).
    pub fn matches(&self, dn: &Dn) -> bool {
        self.attrs.len() == dn.attrs.len()
            && self
                .attrs
                .iter()
                .zip(&dn.attrs)
                .all(|(p, a)| p.oid == a.oid && (p.is_wildcard() || a.value_eq(p)))
    }
}

fn printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b)
}

fn lookup(name: &str) -> Result<(ObjectIdentifier, bool), PkiError> {
    for (n, aliases, oid, ia5) in ATTRS {
        if n.eq_ignore_ascii_case(name) || aliases.iter().any(|a| a.eq_ignore_ascii_case(name)) {
            return Ok((*oid, *ia5));
        }
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        if let Ok(o) = ObjectIdentifier::new(name) {
            return Ok((o, false));
        }
    }
    Err(PkiError::BadDn("unknown attribute name"))
}

fn encode(attrs: &[Attr]) -> Result<Vec<u8>, PkiError> {
    let mut rdns = Vec::with_capacity(attrs.len());
    for a in attrs {
        let value = Any::new(a.tag, a.value.clone()).map_err(|_| PkiError::BadDn("value too long"))?;
        let mut set = SetOfVec::new();
        set.insert(AttributeTypeAndValue { oid: a.oid, value })
            .map_err(|_| PkiError::BadDn("encoding"))?;
        rdns.push(RelativeDistinguishedName(set));
    }
    x509_cert::name::RdnSequence(rdns)
        .to_der()
        .map_err(|_| PkiError::BadDn("encoding"))
}

impl PartialEq for Dn {
    fn eq(&self, o: &Dn) -> bool {
        self.der == o.der
            || (self.attrs.len() == o.attrs.len()
                && self
                    .attrs
                    .iter()
                    .zip(&o.attrs)
                    .all(|(a, b)| a.oid == b.oid && a.value_eq(b)))
    }
}

impl Eq for Dn {}

impl Hash for Dn {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // Consistent with `eq`: equal DNs have equal types and values up to ASCII case.
        self.attrs.len().hash(h);
        for a in &self.attrs {
            a.oid.as_bytes().hash(h);
            match a.text() {
                Some(t) => {
                    h.write_u8(0);
                    for b in t.bytes() {
                        h.write_u8(b.to_ascii_lowercase());
                    }
                }
                None => {
                    h.write_u8(1);
                    a.value.hash(h);
                }
            }
        }
    }
}

impl fmt::Display for Dn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.attrs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match ATTRS.iter().find(|(_, _, o, _)| *o == a.oid) {
                Some((n, ..)) => f.write_str(n)?,
                None => write!(f, "{}", a.oid)?,
            }
            f.write_str("=")?;
            match a.text() {
                Some(t) if t.contains(',') || t.contains('"') || t.trim() != t => write!(f, "\"{t}\"")?,
                Some(t) => f.write_str(&t)?,
                None => {
                    f.write_str("#")?;
                    for b in &a.value {
                        write!(f, "{b:02x}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Dn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn text_roundtrip_and_der() {
        let d = Dn::from_str_config("C=CH, O=strongSwan, CN=moon.strongswan.org").unwrap();
        assert_eq!(d.to_string(), "C=CH, O=strongSwan, CN=moon.strongswan.org");
        assert_eq!(Dn::from_der(&d.to_der()).unwrap(), d);
        assert_eq!(Dn::from_der(&d.to_der()).unwrap().to_string(), d.to_string());
        // openssl: printf 'C=CH\nO=strongSwan\nCN=moon\n' style subject, PrintableStrings.
        let slash = Dn::from_str_config("/C=CH/O=strongSwan/CN=moon.strongswan.org").unwrap();
        assert_eq!(slash, d);
        let q = Dn::from_str_config("CN=\"a, b\", serialNumber=0042, e=x@y.z").unwrap();
        assert_eq!(q.to_string(), "CN=\"a, b\", SN=0042, E=x@y.z");
        assert_eq!(Dn::from_str_config(&q.to_string()).unwrap(), q);
        let u = Dn::from_str_config("CN=Zürich, 2.5.4.99=x").unwrap();
        assert_eq!(u.to_string(), "CN=Zürich, 2.5.4.99=x");
    }

    #[test]
    fn equality_follows_strongswan() {
        let a = Dn::from_str_config("C=CH, O=strongSwan, CN=moon").unwrap();
        assert_eq!(a, Dn::from_str_config("c=ch, o=STRONGSWAN, cn=Moon").unwrap());
        assert_ne!(a, Dn::from_str_config("C=CH, CN=moon, O=strongSwan").unwrap());
        assert_ne!(a, Dn::from_str_config("C=CH, O=strongSwan").unwrap());
        // Only ASCII case is ignored.
        assert_ne!(
            Dn::from_str_config("CN=ü").unwrap(),
            Dn::from_str_config("CN=Ü").unwrap()
        );
        assert_eq!(
            Dn::from_str_config("CN=xü").unwrap(),
            Dn::from_str_config("CN=Xü").unwrap()
        );
        // Whatever the string types: a UTF8String "moon" equals a PrintableString "MOON".
        let utf8 = [
            0x30, 0x0f, 0x31, 0x0d, 0x30, 0x0b, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x04, b'm', b'o', b'o', b'n',
        ];
        assert_eq!(Dn::from_der(&utf8).unwrap(), Dn::from_str_config("CN=MOON").unwrap());
    }

    #[test]
    fn refusals() {
        for s in ["", "CN", "XX=1", "CN=", "CN=a,", "CN=\"a", "CN=\"a\" b", "CN=a, , O=b"] {
            assert!(Dn::from_str_config(s).is_err(), "{s}");
        }
        assert!(Dn::from_der(&[0x30, 0x03, 0x31, 0x01]).is_err());
        assert!(Dn::from_der(&[]).is_err());
        assert!(Dn::from_der(&[0x30, 0x00, 0x00]).is_err());
        let long = "CN=x, ".repeat(40) + "CN=y";
        assert_eq!(Dn::from_str_config(&long), Err(PkiError::BadDn("too many attributes")));
        assert!(Dn::from_der(&[0x30, 0x00]).unwrap().is_empty());
    }

    #[test]
    fn wildcard_patterns() {
        let p = Dn::from_str_config("C=CH, O=strongSwan, CN=*").unwrap();
        assert!(p.matches(&Dn::from_str_config("C=CH, O=strongSwan, CN=moon").unwrap()));
        assert!(!p.matches(&Dn::from_str_config("C=CH, O=other, CN=moon").unwrap()));
        assert!(!p.matches(&Dn::from_str_config("C=CH, O=strongSwan, OU=x, CN=moon").unwrap()));
        assert!(!p.matches(&Dn::from_str_config("C=CH, O=strongSwan, OU=moon").unwrap()));
    }
}
