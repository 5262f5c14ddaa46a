//! The Identification payloads IDi and IDr (RFC 7296 section 3.5).
use crate::error::Error;
use crate::pki::Dn;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

/// ID types (3.5).
pub mod id_type {
    /// ID_IPV4_ADDR.
    pub const IPV4_ADDR: u8 = 1;
    /// ID_FQDN.
    pub const FQDN: u8 = 2;
    /// ID_RFC822_ADDR (user FQDN).
    pub const RFC822_ADDR: u8 = 3;
    /// ID_IPV6_ADDR.
    pub const IPV6_ADDR: u8 = 5;
    /// ID_DER_ASN1_DN.
    pub const DER_ASN1_DN: u8 = 9;
    /// ID_DER_ASN1_GN.
    pub const DER_ASN1_GN: u8 = 10;
    /// ID_KEY_ID.
    pub const KEY_ID: u8 = 11;
}

/// Longest identity accepted.
pub const MAX_ID_LEN: usize = 1024;

/// An identity.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// An IPv4 address.
    Ipv4(Ipv4Addr),
    /// An IPv6 address.
    Ipv6(Ipv6Addr),
    /// A fully-qualified domain name (`vpn.example.org`).
    Fqdn(String),
    /// A user FQDN / RFC 822 address (`alice@example.org`).
    UserFqdn(String),
    /// An opaque key ID.
    KeyId(Vec<u8>),
    /// An X.501 distinguished name (ID_DER_ASN1_DN): `C=CH, O=strongSwan, CN=moon`. Parsed
    /// from a payload it keeps the peer's DER bytes (signed by AUTH); compared as DNs.
    Dn(Dn),
    /// Another type (e.g. ID_DER_ASN1_GN), kept as bytes: compared exactly, never interpreted.
    Other(u8, Vec<u8>),
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Ipv4(a) => write!(f, "{a}"),
            Identity::Ipv6(a) => write!(f, "{a}"),
            Identity::Fqdn(s) => f.write_str(s),
            Identity::UserFqdn(s) => f.write_str(s),
            Identity::KeyId(k) => {
                f.write_str("keyid:")?;
                for b in k {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
            Identity::Dn(d) => write!(f, "{d}"),
            Identity::Other(t, d) => write!(f, "type{t}:{} bytes", d.len()),
        }
    }
}

impl Identity {
    /// Parses an identity as swanctl.conf writes one: an IP address, `user@domain`, `keyid:HEX`,
    /// `@fqdn`, a distinguished name (text with `=`, e.g. `C=CH, O=strongSwan, CN=moon`, see
    /// [`Dn::from_str_config`]) or a bare FQDN.
    pub fn from_str_config(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        if s.is_empty() || s.len() > MAX_ID_LEN {
            return Err(Error::BadSyntax("identity empty or too long"));
        }
        if let Ok(a) = s.parse::<Ipv4Addr>() {
            return Ok(Identity::Ipv4(a));
        }
        if let Ok(a) = s.parse::<Ipv6Addr>() {
            return Ok(Identity::Ipv6(a));
        }
        if let Some(h) = s.strip_prefix("keyid:") {
            let h = h.strip_prefix("#").unwrap_or(h);
            if h.len() % 2 != 0 || h.is_empty() {
                return Err(Error::BadSyntax("keyid: wants hex"));
            }
            let mut v = Vec::with_capacity(h.len() / 2);
            for i in (0..h.len()).step_by(2) {
                v.push(
                    u8::from_str_radix(h.get(i..i + 2).ok_or(Error::BadSyntax("keyid: wants hex"))?, 16)
                        .map_err(|_| Error::BadSyntax("keyid: wants hex"))?,
                );
            }
            return Ok(Identity::KeyId(v));
        }
        if s.contains('=') && !s.starts_with('@') {
            return Dn::from_str_config(s)
                .map(Identity::Dn)
                .map_err(|_| Error::BadSyntax("bad distinguished name"));
        }
        if let Some(f) = s.strip_prefix('@') {
            return Ok(Identity::Fqdn(f.into()));
        }
        if s.contains('@') {
            return Ok(Identity::UserFqdn(s.into()));
        }
        Ok(Identity::Fqdn(s.into()))
    }

    /// The ID Type.
    pub fn id_type(&self) -> u8 {
        match self {
            Identity::Ipv4(_) => id_type::IPV4_ADDR,
            Identity::Ipv6(_) => id_type::IPV6_ADDR,
            Identity::Fqdn(_) => id_type::FQDN,
            Identity::UserFqdn(_) => id_type::RFC822_ADDR,
            Identity::KeyId(_) => id_type::KEY_ID,
            Identity::Dn(_) => id_type::DER_ASN1_DN,
            Identity::Other(t, _) => *t,
        }
    }

    /// The identification data.
    pub fn data(&self) -> Vec<u8> {
        match self {
            Identity::Ipv4(a) => a.octets().to_vec(),
            Identity::Ipv6(a) => a.octets().to_vec(),
            Identity::Fqdn(s) | Identity::UserFqdn(s) => s.as_bytes().to_vec(),
            Identity::KeyId(k) => k.clone(),
            Identity::Dn(d) => d.to_der(),
            Identity::Other(_, d) => d.clone(),
        }
    }

    /// Parses the body of an IDi/IDr payload.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        if body.len() < 5 || body.len() > 4 + MAX_ID_LEN {
            return Err(Error::BadId);
        }
        let d = &body[4..];
        Ok(match body[0] {
            id_type::IPV4_ADDR => Identity::Ipv4(<[u8; 4]>::try_from(d).map_err(|_| Error::BadId)?.into()),
            id_type::IPV6_ADDR => Identity::Ipv6(<[u8; 16]>::try_from(d).map_err(|_| Error::BadId)?.into()),
            id_type::FQDN => Identity::Fqdn(String::from_utf8(d.to_vec()).map_err(|_| Error::BadId)?),
            id_type::RFC822_ADDR => Identity::UserFqdn(String::from_utf8(d.to_vec()).map_err(|_| Error::BadId)?),
            id_type::KEY_ID => Identity::KeyId(d.to_vec()),
            id_type::DER_ASN1_DN => Identity::Dn(Dn::from_der(d).map_err(|_| Error::BadId)?),
            t => Identity::Other(t, d.to_vec()),
        })
    }

    /// The payload body: ID Type, 3 reserved bytes, data. This is also what the AUTH
    /// computation signs ("RestOfInitIDPayload", 2.15).
    pub fn to_body(&self) -> Vec<u8> {
        let mut v = alloc::vec![self.id_type(), 0, 0, 0];
        v.extend_from_slice(&self.data());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_strings_and_wire() {
        for (s, t) in [
            ("10.0.0.1", 1),
            ("fd00::1", 5),
            ("vpn.example.org", 2),
            ("@moon", 2),
            ("a@b.c", 3),
            ("keyid:0a0b", 11),
            ("C=CH, O=strongSwan, CN=moon", 9),
            ("/C=CH/O=strongSwan/CN=moon", 9),
        ] {
            let id = Identity::from_str_config(s).unwrap();
            assert_eq!(id.id_type(), t);
            assert_eq!(Identity::parse(&id.to_body()).unwrap(), id);
        }
        assert_eq!(Identity::parse(&[1, 0, 0, 0, 1, 2, 3]), Err(Error::BadId));
        assert_eq!(Identity::parse(&[2, 0, 0, 0]), Err(Error::BadId));
        assert!(Identity::from_str_config("keyid:0").is_err());
        assert!(Identity::from_str_config("C=CH, XX=1").is_err());
        // A DN payload: SEQUENCE { SET { SEQUENCE { OID 2.5.4.3, PrintableString "moon" } } }.
        let dn = [
            9, 0, 0, 0, 0x30, 0x0f, 0x31, 0x0d, 0x30, 0x0b, 0x06, 0x03, 0x55, 0x04, 0x03, 0x13, 0x04, b'm', b'o', b'o',
            b'n',
        ];
        let id = Identity::parse(&dn).unwrap();
        assert_eq!(alloc::format!("{id}"), "CN=moon");
        assert_eq!(id, Identity::from_str_config("CN=Moon").unwrap());
        assert_eq!(id.to_body(), dn);
        assert_eq!(Identity::parse(&dn[..dn.len() - 1]), Err(Error::BadId));
    }
}
