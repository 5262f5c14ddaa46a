//! The Certificate (CERT, RFC 7296 3.6) and Certificate Request (CERTREQ, 3.7) payload
//! bodies. Wiring them into messages is the exchange code's job.
use super::cert::Certificate;
use crate::error::Error;
use alloc::vec::Vec;

/// Largest Certificate Data accepted in a CERT payload (one DER certificate; real ones are
/// 1-4 KiB). Also the largest certificate [`Certificate::from_der`] reads.
pub const MAX_CERT_LEN: usize = 16 * 1024;
/// Most CA key IDs in one CERTREQ payload.
pub const MAX_CERTREQ_CAS: usize = 64;

/// Certificate Encoding values (RFC 7296 3.6).
pub mod cert_encoding {
    /// X.509 Certificate - Signature: one DER certificate.
    pub const X509_SIGNATURE: u8 = 4;
    /// Certificate Revocation List (CRL).
    pub const CRL: u8 = 7;
    /// Raw RSA Key (deprecated by RFC 7296).
    pub const RAW_RSA_KEY: u8 = 11;
    /// Hash and URL of X.509 certificate.
    pub const HASH_AND_URL_X509: u8 = 12;
    /// Hash and URL of X.509 bundle.
    pub const HASH_AND_URL_BUNDLE: u8 = 13;
}

/// A CERT payload body: Cert Encoding, Certificate Data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPayload {
    /// Cert Encoding (see [`cert_encoding`]).
    pub encoding: u8,
    /// Certificate Data (for [`cert_encoding::X509_SIGNATURE`], a DER certificate).
    pub data: Vec<u8>,
}

impl CertPayload {
    /// A CERT carrying `cert` as X.509 Certificate - Signature.
    pub fn x509(cert: &Certificate) -> CertPayload {
        CertPayload {
            encoding: cert_encoding::X509_SIGNATURE,
            data: cert.der().to_vec(),
        }
    }

    /// Parses the body (after the generic payload header). The data must not be empty nor
    /// longer than [`MAX_CERT_LEN`].
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        let (&encoding, data) = body.split_first().ok_or(Error::Truncated)?;
        if data.is_empty() {
            return Err(Error::Truncated);
        }
        if data.len() > MAX_CERT_LEN {
            return Err(Error::BadLength);
        }
        Ok(CertPayload {
            encoding,
            data: data.to_vec(),
        })
    }

    /// The body.
    pub fn to_body(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + self.data.len());
        v.push(self.encoding);
        v.extend_from_slice(&self.data);
        v
    }

    /// The certificate, when the encoding is X.509 Certificate - Signature and the data
    /// parses.
    pub fn certificate(&self) -> Option<Certificate> {
        if self.encoding != cert_encoding::X509_SIGNATURE {
            return None;
        }
        Certificate::from_der(self.data.clone()).ok()
    }
}

/// A CERTREQ payload body: Cert Encoding, then the Certification Authority field, for X.509
/// the concatenated SHA-1 hashes of the acceptable CAs' SubjectPublicKeyInfo (RFC 7296 3.7;
/// see [`Certificate::ca_key_id`]). An empty list is allowed (some peers send one to ask for
/// any certificate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertReqPayload {
    /// Cert Encoding (see [`cert_encoding`]).
    pub encoding: u8,
    /// SHA-1 hashes of the CAs' public keys.
    pub ca_key_ids: Vec<[u8; 20]>,
}

impl CertReqPayload {
    /// A CERTREQ for X.509 certificates from the CAs with these key IDs.
    pub fn x509(ca_key_ids: Vec<[u8; 20]>) -> CertReqPayload {
        CertReqPayload {
            encoding: cert_encoding::X509_SIGNATURE,
            ca_key_ids,
        }
    }

    /// Parses the body: 1 + 20k octets with k at most [`MAX_CERTREQ_CAS`]
    /// ([`Error::BadLength`] otherwise), whatever the encoding.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        let (&encoding, cas) = body.split_first().ok_or(Error::Truncated)?;
        if cas.len() % 20 != 0 || cas.len() / 20 > MAX_CERTREQ_CAS {
            return Err(Error::BadLength);
        }
        let ca_key_ids = cas
            .chunks_exact(20)
            .map(|c| <[u8; 20]>::try_from(c).unwrap_or([0; 20]))
            .collect();
        Ok(CertReqPayload { encoding, ca_key_ids })
    }

    /// The body.
    pub fn to_body(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + 20 * self.ca_key_ids.len());
        v.push(self.encoding);
        for id in &self.ca_key_ids {
            v.extend_from_slice(id);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn cert_bounds() {
        assert_eq!(CertPayload::parse(&[]), Err(Error::Truncated));
        assert_eq!(CertPayload::parse(&[4]), Err(Error::Truncated));
        let p = CertPayload::parse(&[4, 0x30, 0x00]).unwrap();
        assert_eq!((p.encoding, &p.data[..]), (4, &[0x30u8, 0][..]));
        assert_eq!(p.to_body(), [4, 0x30, 0]);
        assert_eq!(p.certificate(), None);
        let mut max = vec![4u8; 1 + MAX_CERT_LEN];
        assert_eq!(CertPayload::parse(&max).unwrap().to_body(), max);
        max.push(0);
        assert_eq!(CertPayload::parse(&max), Err(Error::BadLength));
    }

    #[test]
    fn certreq_bounds() {
        assert_eq!(CertReqPayload::parse(&[]), Err(Error::Truncated));
        assert_eq!(CertReqPayload::parse(&[4]).unwrap(), CertReqPayload::x509(vec![]));
        assert_eq!(CertReqPayload::parse(&[4; 20]), Err(Error::BadLength));
        assert_eq!(CertReqPayload::parse(&[4; 22]), Err(Error::BadLength));
        let mut body = vec![4u8];
        for i in 0..MAX_CERTREQ_CAS as u8 {
            body.extend_from_slice(&[i; 20]);
        }
        let p = CertReqPayload::parse(&body).unwrap();
        assert_eq!(p.ca_key_ids.len(), MAX_CERTREQ_CAS);
        assert_eq!(p.ca_key_ids[3], [3; 20]);
        assert_eq!(p.to_body(), body);
        body.extend_from_slice(&[0xff; 20]);
        assert_eq!(CertReqPayload::parse(&body), Err(Error::BadLength));
    }
}
