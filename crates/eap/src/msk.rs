//! The Master Session Key an EAP method exports (RFC 3748 §7.10: at least 64 octets), which
//! IKEv2 uses as the shared secret of the AUTH payload (RFC 7296 §2.16).

use alloc::vec::Vec;
use core::fmt;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// RFC 3748 §7.10: an MSK is at least 64 octets.
pub const MSK_MIN_LEN: usize = 64;

/// A Master Session Key. Zeroized on drop; its Debug shows the length only.
#[derive(Clone, PartialEq, Eq, Zeroize, ZeroizeOnDrop)]
pub struct Msk(Vec<u8>);

impl Msk {
    /// An MSK from the MPPE receive and send keys (RFC 2548 §2.4.2/2.4.3 order as
    /// strongSwan's eap-mschapv2 and eap-radius build it: receive key, then send key), zero
    /// padded to the 64 octets of RFC 3748 §7.10. For MSCHAPv2 this is
    /// MasterReceiveKey | MasterSendKey | 32 zero octets (RFC 3079 §3.4, server side). The
    /// padding does not change the IKEv2 AUTH: HMAC zero-pads a short key to its block size.
    pub fn from_recv_send(recv: &[u8], send: &[u8]) -> Msk {
        let mut v = Vec::with_capacity(MSK_MIN_LEN.max(recv.len() + send.len()));
        v.extend_from_slice(recv);
        v.extend_from_slice(send);
        if v.len() < MSK_MIN_LEN {
            v.resize(MSK_MIN_LEN, 0);
        }
        Msk(v)
    }

    /// An MSK of the given octets (an EAP-TLS MSK is the first 64 octets of its Key_Material,
    /// RFC 5216 §2.3, RFC 9190 §2.3), zero padded to 64 octets if shorter.
    pub fn from_slice(key: &[u8]) -> Msk {
        Msk::from_recv_send(key, &[])
    }

    /// The key bytes (for the IKEv2 AUTH computation).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Msk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Msk({} bytes)", self.0.len())
    }
}
