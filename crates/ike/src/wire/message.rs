//! Whole messages: the payload chain decoded into [`Payload`]s (RFC 7296 section 3), with
//! unknown non-critical payloads skipped and unknown critical ones refused (2.5), and
//! built back into bytes. The Encrypted payload is opened and sealed by [`crate::sk`].
use crate::auth::AuthPayload;
use crate::delete::Delete;
use crate::error::Error;
use crate::header::{HeaderRepr, IkePacket, HEADER_LEN};
use crate::id::Identity;
use crate::ke::KePayload;
use crate::limits::{MAX_MESSAGE_LEN, MAX_PAYLOADS};
use crate::notify::Notify;
use crate::payload::{emit_generic_header, kind, PayloadIter, GENERIC_HEADER_LEN};
use crate::sa::SaPayload;
use crate::ts::{self, TrafficSelector};
use alloc::vec::Vec;

/// One decoded payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Security Association.
    Sa(SaPayload),
    /// Key Exchange.
    Ke(KePayload),
    /// IDi: the identity and the body as received (signed by AUTH, 2.15).
    IdI(Identity, Vec<u8>),
    /// IDr.
    IdR(Identity, Vec<u8>),
    /// Authentication.
    Auth(AuthPayload),
    /// Nonce.
    Nonce(Vec<u8>),
    /// Notify.
    Notify(Notify),
    /// Delete.
    Delete(Delete),
    /// TSi.
    TsI(Vec<TrafficSelector>),
    /// TSr.
    TsR(Vec<TrafficSelector>),
    /// Vendor ID.
    Vendor(Vec<u8>),
    /// Certificate (3.6).
    Cert(crate::pki::CertPayload),
    /// Certificate Request (3.7).
    CertReq(crate::pki::CertReqPayload),
    /// A payload we carry but do not interpret (CERTREQ, CP, ...): type, critical, body.
    Other(u8, bool, Vec<u8>),
}

impl Payload {
    /// The payload type.
    pub fn kind(&self) -> u8 {
        match self {
            Payload::Sa(_) => kind::SA,
            Payload::Ke(_) => kind::KE,
            Payload::IdI(..) => kind::IDI,
            Payload::IdR(..) => kind::IDR,
            Payload::Auth(_) => kind::AUTH,
            Payload::Nonce(_) => kind::NONCE,
            Payload::Notify(_) => kind::NOTIFY,
            Payload::Delete(_) => kind::DELETE,
            Payload::TsI(_) => kind::TSI,
            Payload::TsR(_) => kind::TSR,
            Payload::Vendor(_) => kind::VENDOR,
            Payload::Cert(_) => kind::CERT,
            Payload::CertReq(_) => kind::CERTREQ,
            Payload::Other(k, ..) => *k,
        }
    }

    fn parse(kind_: u8, critical: bool, body: &[u8]) -> Result<Option<Self>, Error> {
        Ok(Some(match kind_ {
            kind::SA => Payload::Sa(SaPayload::parse(body)?),
            kind::KE => Payload::Ke(KePayload::parse(body)?),
            kind::IDI => Payload::IdI(Identity::parse(body)?, body.to_vec()),
            kind::IDR => Payload::IdR(Identity::parse(body)?, body.to_vec()),
            kind::AUTH => Payload::Auth(AuthPayload::parse(body)?),
            kind::NONCE => Payload::Nonce(crate::nonce::parse(body)?),
            kind::NOTIFY => Payload::Notify(Notify::parse(body)?),
            kind::DELETE => Payload::Delete(Delete::parse(body)?),
            kind::TSI => Payload::TsI(ts::parse(body)?),
            kind::TSR => Payload::TsR(ts::parse(body)?),
            kind::VENDOR => Payload::Vendor(body.to_vec()),
            // A CERT or CERTREQ we cannot read (another encoding's layout, a certificate over
            // MAX_CERT_LEN) is kept unread rather than failing the message (3.6, 3.7: an
            // encoding not understood is ignored); AUTH then finds no certificate it can use.
            kind::CERT => match crate::pki::CertPayload::parse(body) {
                Ok(c) => Payload::Cert(c),
                Err(_) => Payload::Other(kind_, critical, body.to_vec()),
            },
            kind::CERTREQ => match crate::pki::CertReqPayload::parse(body) {
                Ok(c) => Payload::CertReq(c),
                Err(_) => Payload::Other(kind_, critical, body.to_vec()),
            },
            kind::CP | kind::EAP => Payload::Other(kind_, critical, body.to_vec()),
            _ if critical => return Err(Error::UnsupportedCritical(kind_)),
            _ => return Ok(None),
        }))
    }

    /// The body bytes.
    pub fn body(&self) -> Result<Vec<u8>, Error> {
        let mut v;
        match self {
            Payload::Sa(s) => {
                v = alloc::vec![0; s.buffer_len()];
                s.emit(&mut v)?;
            }
            Payload::Ke(k) => {
                v = alloc::vec![0; k.buffer_len()];
                k.emit(&mut v)?;
            }
            Payload::IdI(_, b) | Payload::IdR(_, b) => v = b.clone(),
            Payload::Auth(a) => v = a.to_body(),
            Payload::Nonce(n) | Payload::Vendor(n) => v = n.clone(),
            Payload::Notify(n) => {
                v = alloc::vec![0; n.buffer_len()];
                n.emit(&mut v)?;
            }
            Payload::Delete(d) => {
                v = alloc::vec![0; d.buffer_len()];
                d.emit(&mut v)?;
            }
            Payload::TsI(t) | Payload::TsR(t) => {
                v = alloc::vec![0; ts::buffer_len(t)];
                ts::emit(t, &mut v)?;
            }
            Payload::Cert(c) => v = c.to_body(),
            Payload::CertReq(c) => v = c.to_body(),
            Payload::Other(_, _, b) => v = b.clone(),
        }
        Ok(v)
    }
}

/// A decoded payload chain. `sk` is set when the chain ends in an Encrypted payload: the
/// offset of its generic header in the chain's buffer and its Next Payload (the first
/// inner payload's type).
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// The payloads, in order.
    pub payloads: Vec<Payload>,
    /// (offset, first inner type) of the Encrypted payload.
    pub sk: Option<(usize, u8)>,
}

/// Decodes a payload chain whose first payload has type `first`.
pub fn parse_chain(data: &[u8], first: u8) -> Result<Chain, Error> {
    let mut c = Chain::default();
    for p in PayloadIter::new(data, first) {
        let p = p?;
        if p.kind == kind::SK {
            let inner_first = data[p.offset];
            c.sk = Some((p.offset, inner_first));
            break;
        }
        if p.kind == kind::SKF {
            // An IKE fragment: opened by crate::fragment, not here.
            break;
        }
        if let Some(x) = Payload::parse(p.kind, p.critical, p.body)? {
            c.payloads.push(x);
        }
    }
    Ok(c)
}

/// Encodes payloads as a chain; returns the first type (0 if none) and the bytes.
pub fn emit_chain(payloads: &[Payload]) -> Result<(u8, Vec<u8>), Error> {
    if payloads.len() > MAX_PAYLOADS {
        return Err(Error::TooManyPayloads);
    }
    let mut out = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        let next = payloads.get(i + 1).map_or(kind::NONE, Payload::kind);
        let body = p.body()?;
        let at = out.len();
        out.resize(at + GENERIC_HEADER_LEN, 0);
        emit_generic_header(&mut out[at..], next, false, GENERIC_HEADER_LEN + body.len())?;
        out.extend_from_slice(&body);
        if out.len() > MAX_MESSAGE_LEN {
            return Err(Error::MessageTooLong);
        }
    }
    Ok((payloads.first().map_or(kind::NONE, Payload::kind), out))
}

/// Builds an unencrypted message (IKE_SA_INIT).
pub fn build_plain(header: &HeaderRepr, payloads: &[Payload]) -> Result<Vec<u8>, Error> {
    let (first, chain) = emit_chain(payloads)?;
    let total = HEADER_LEN + chain.len();
    if total > MAX_MESSAGE_LEN {
        return Err(Error::MessageTooLong);
    }
    let mut msg = alloc::vec![0u8; total];
    let mut h = *header;
    h.next_payload = first;
    h.length = total as u32;
    h.emit(&mut msg)?;
    msg[HEADER_LEN..].copy_from_slice(&chain);
    Ok(msg)
}

/// A received message: the header and the outer chain. For an encrypted message the
/// inner payloads are decoded after [`crate::sk::SkCipher::open`].
#[derive(Debug, Clone)]
pub struct Message {
    /// The header.
    pub header: HeaderRepr,
    /// The outer payloads (for an encrypted message, only those before SK: normally none).
    pub chain: Chain,
}

impl Message {
    /// Parses the header and the outer chain of a whole message.
    pub fn parse(msg: &[u8]) -> Result<Self, Error> {
        let p = IkePacket::new_checked(msg)?;
        let header = HeaderRepr::parse(&p)?;
        let mut chain = parse_chain(p.payload(), header.next_payload)?;
        if let Some((off, first)) = chain.sk.as_mut().map(|(o, f)| (*o, *f)) {
            chain.sk = Some((off + HEADER_LEN, first));
        }
        Ok(Message { header, chain })
    }
}

/// Helpers for finding payloads.
pub trait Find {
    /// The notifies of one type.
    fn notifies(&self, kind: u16) -> Vec<&Notify>;
    /// The first notify of one type.
    fn notify(&self, kind: u16) -> Option<&Notify>;
    /// The first error notify (type < 16384), if any.
    fn error_notify(&self) -> Option<&Notify>;
    /// The first SA payload.
    fn sa(&self) -> Option<&SaPayload>;
    /// The first KE payload.
    fn ke(&self) -> Option<&KePayload>;
    /// The first nonce.
    fn nonce(&self) -> Option<&Vec<u8>>;
    /// The first IDi: the identity and its body as received.
    fn id_i(&self) -> Option<(&Identity, &Vec<u8>)>;
    /// The first IDr.
    fn id_r(&self) -> Option<(&Identity, &Vec<u8>)>;
    /// The first AUTH payload.
    fn auth(&self) -> Option<&AuthPayload>;
    /// The first TSi.
    fn ts_i(&self) -> Option<&Vec<TrafficSelector>>;
    /// The first TSr.
    fn ts_r(&self) -> Option<&Vec<TrafficSelector>>;
    /// The CERT payloads, in order (3.6: the first holds the key that signed AUTH).
    fn certs(&self) -> Vec<&crate::pki::CertPayload>;
    /// The CA key hashes of all CERTREQ payloads with X.509 encoding (3.7).
    fn certreq_cas(&self) -> Vec<[u8; 20]>;
}

impl Find for [Payload] {
    fn notifies(&self, k: u16) -> Vec<&Notify> {
        self.iter()
            .filter_map(|p| match p {
                Payload::Notify(n) if n.kind == k => Some(n),
                _ => None,
            })
            .collect()
    }
    fn notify(&self, k: u16) -> Option<&Notify> {
        self.notifies(k).into_iter().next()
    }
    fn error_notify(&self) -> Option<&Notify> {
        self.iter().find_map(|p| match p {
            Payload::Notify(n) if crate::notify::kind::is_error(n.kind) => Some(n),
            _ => None,
        })
    }
    fn sa(&self) -> Option<&SaPayload> {
        self.iter()
            .find_map(|p| if let Payload::Sa(x) = p { Some(x) } else { None })
    }
    fn ke(&self) -> Option<&KePayload> {
        self.iter()
            .find_map(|p| if let Payload::Ke(x) = p { Some(x) } else { None })
    }
    fn nonce(&self) -> Option<&Vec<u8>> {
        self.iter()
            .find_map(|p| if let Payload::Nonce(x) = p { Some(x) } else { None })
    }
    fn id_i(&self) -> Option<(&Identity, &Vec<u8>)> {
        self.iter()
            .find_map(|p| if let Payload::IdI(i, b) = p { Some((i, b)) } else { None })
    }
    fn id_r(&self) -> Option<(&Identity, &Vec<u8>)> {
        self.iter()
            .find_map(|p| if let Payload::IdR(i, b) = p { Some((i, b)) } else { None })
    }
    fn auth(&self) -> Option<&AuthPayload> {
        self.iter()
            .find_map(|p| if let Payload::Auth(x) = p { Some(x) } else { None })
    }
    fn ts_i(&self) -> Option<&Vec<TrafficSelector>> {
        self.iter()
            .find_map(|p| if let Payload::TsI(x) = p { Some(x) } else { None })
    }
    fn ts_r(&self) -> Option<&Vec<TrafficSelector>> {
        self.iter()
            .find_map(|p| if let Payload::TsR(x) = p { Some(x) } else { None })
    }
    fn certs(&self) -> Vec<&crate::pki::CertPayload> {
        self.iter()
            .filter_map(|p| if let Payload::Cert(x) = p { Some(x) } else { None })
            .collect()
    }
    fn certreq_cas(&self) -> Vec<[u8; 20]> {
        self.iter()
            .filter_map(|p| match p {
                Payload::CertReq(x) if x.encoding == crate::pki::cert_encoding::X509_SIGNATURE => Some(x),
                _ => None,
            })
            .flat_map(|x| x.ca_key_ids.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::ExchangeType;

    #[test]
    fn an_unreadable_cert_or_certreq_does_not_fail_the_message() {
        // CERTREQ with encoding 12 (hash and URL) and 7 bytes; CERT of 0 bytes.
        let certreq = Payload::parse(kind::CERTREQ, false, &[12, 1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(
            certreq,
            Some(Payload::Other(kind::CERTREQ, false, alloc::vec![12, 1, 2, 3, 4, 5, 6]))
        );
        let cert = Payload::parse(kind::CERT, false, &[]).unwrap();
        assert!(matches!(cert, Some(Payload::Other(kind::CERT, ..))));
        // A well-formed CERTREQ is read.
        let mut body = alloc::vec![4u8];
        body.extend_from_slice(&[7; 20]);
        assert!(matches!(
            Payload::parse(kind::CERTREQ, false, &body).unwrap(),
            Some(Payload::CertReq(_))
        ));
    }

    #[test]
    fn plain_message_round_trip_and_unknown_payloads() {
        let h = HeaderRepr {
            spi_i: 9,
            spi_r: 0,
            next_payload: 0,
            exchange: ExchangeType::IkeSaInit,
            initiator: true,
            response: false,
            message_id: 0,
            length: 0,
        };
        let ps = alloc::vec![
            Payload::Nonce(alloc::vec![1; 32]),
            Payload::Notify(Notify::ike(crate::notify::kind::NAT_DETECTION_SOURCE_IP, &[2; 20])),
            Payload::Vendor(b"x".to_vec()),
        ];
        let m = build_plain(&h, &ps).unwrap();
        let r = Message::parse(&m).unwrap();
        assert_eq!(r.chain.payloads, ps);
        assert_eq!(r.header.next_payload, kind::NONCE);
        // An unknown payload type 99: skipped when not critical, refused when critical.
        let mut u = m.clone();
        let vendor_at = u.len() - 5;
        assert_eq!(u[vendor_at - 28], kind::VENDOR); // the notify's Next Payload
        u[vendor_at - 28] = 99;
        assert_eq!(Message::parse(&u).unwrap().chain.payloads.len(), 2);
        u[vendor_at + 1] = 0x80;
        assert_eq!(Message::parse(&u).err(), Some(Error::UnsupportedCritical(99)));
    }
}
