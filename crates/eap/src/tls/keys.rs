//! The EAP-TLS key material (RFC 5216 §2.3 for TLS 1.2, RFC 9190 §2.3 for TLS 1.3), made
//! with the TLS exporter (RFC 5705, RFC 8446 §7.5) of the finished handshake:
//!
//! ```text
//! TLS 1.2:  Key_Material = TLS-PRF-128(master_secret, "client EAP encryption",
//!                                      client.random || server.random)
//!           (the RFC 5705 exporter with that label and no context)
//! TLS 1.3:  Key_Material = TLS-Exporter("EXPORTER_EAP_TLS_Key_Material", 0x0D, 128)
//! MSK  = Key_Material(0, 63)     EMSK = Key_Material(64, 127)
//! ```
//!
//! Only the MSK leaves here (IKEv2 uses it for AUTH, RFC 7296 §2.16); the buffer is
//! zeroized.

use crate::Msk;
use rustls::{ConnectionCommon, ProtocolVersion};
use zeroize::Zeroizing;

/// RFC 5216 §2.3: the TLS 1.2 exporter label.
pub const LABEL_TLS12: &[u8] = b"client EAP encryption";
/// RFC 9190 §2.3: the TLS 1.3 exporter label.
pub const LABEL_TLS13: &[u8] = b"EXPORTER_EAP_TLS_Key_Material";
/// RFC 9190 §2.3: the TLS 1.3 exporter context, the EAP-TLS Type-Code (13).
pub const CONTEXT_TLS13: &[u8] = &[0x0D];
/// The length of Key_Material (MSK and EMSK).
pub const KEY_MATERIAL_LEN: usize = 128;

/// The MSK of a connection whose handshake finished; None before that (or for a version
/// other than 1.2 and 1.3, which is never negotiated here).
pub fn msk<D>(conn: &ConnectionCommon<D>) -> Option<Msk> {
    let (label, context) = match conn.protocol_version()? {
        ProtocolVersion::TLSv1_3 => (LABEL_TLS13, Some(CONTEXT_TLS13)),
        ProtocolVersion::TLSv1_2 => (LABEL_TLS12, None),
        _ => return None,
    };
    let km = conn
        .export_keying_material(Zeroizing::new([0u8; KEY_MATERIAL_LEN]), label, context)
        .ok()?;
    Some(Msk::from_slice(&km[..64]))
}
