//! Key derivation: SKEYSEED and the IKE SA keys (RFC 7296 section 2.14) and the child SA
//! KEYMAT (2.17). Keys are zeroized on drop and never printed.
use crate::alg::{ChildSuite, IkeSuite, Prf};
use crate::prf::{prf, prf_plus, KeyBytes};
use core::fmt;

/// The seven IKE SA secrets of 2.14.
pub struct IkeKeys {
    /// SK_d: derives child SA keys.
    pub sk_d: KeyBytes,
    /// SK_ai: integrity, initiator to responder.
    pub sk_ai: KeyBytes,
    /// SK_ar: integrity, responder to initiator.
    pub sk_ar: KeyBytes,
    /// SK_ei: encryption (with salt for AEADs), initiator to responder.
    pub sk_ei: KeyBytes,
    /// SK_er: encryption, responder to initiator.
    pub sk_er: KeyBytes,
    /// SK_pi: the initiator's AUTH computation.
    pub sk_pi: KeyBytes,
    /// SK_pr: the responder's AUTH computation.
    pub sk_pr: KeyBytes,
}

impl fmt::Debug for IkeKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IkeKeys(..)")
    }
}

/// SKEYSEED = prf(Ni | Nr, g^ir) (2.14; for HMAC PRFs the whole nonces are the key).
pub fn skeyseed(p: Prf, ni: &[u8], nr: &[u8], shared: &[u8]) -> KeyBytes {
    let mut k = zeroize::Zeroizing::new(alloc::vec::Vec::with_capacity(ni.len() + nr.len()));
    k.extend_from_slice(ni);
    k.extend_from_slice(nr);
    prf(p, &k, &[shared])
}

/// SKEYSEED from an old SK_d: `prf(SK_d (old), g^ir (new) | Ni | Nr)` for an IKE SA rekey
/// (2.18) and after each IKE_INTERMEDIATE key exchange (RFC 9370 2.2.2, `add` empty);
/// `prf(SK_d (old), SK(0) | Ni | Nr | SK(1) | ... | SK(n))` for a rekey with additional key
/// exchanges (RFC 9370 2.2.4), `add` being SK(1) | ... | SK(n).
pub fn rekey_skeyseed(p: Prf, old_sk_d: &[u8], shared: &[u8], ni: &[u8], nr: &[u8], add: &[u8]) -> KeyBytes {
    prf(p, old_sk_d, &[shared, ni, nr, add])
}

/// {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr | SPIi | SPIr).
pub fn derive_ike_keys(suite: &IkeSuite, skeyseed: &[u8], ni: &[u8], nr: &[u8], spi_i: u64, spi_r: u64) -> IkeKeys {
    let p = suite.prf;
    let (lp, la, le) = (
        p.output_len(),
        suite.integ.map_or(0, |i| i.key_len()),
        suite.encr.keymat_len(),
    );
    let total = 3 * lp + 2 * la + 2 * le;
    let m = prf_plus(
        p,
        skeyseed,
        &[ni, nr, &spi_i.to_be_bytes(), &spi_r.to_be_bytes()],
        total,
    );
    let mut off = 0;
    let mut take = |n: usize| {
        let v = zeroize::Zeroizing::new(m[off..off + n].to_vec());
        off += n;
        v
    };
    IkeKeys {
        sk_d: take(lp),
        sk_ai: take(la),
        sk_ar: take(la),
        sk_ei: take(le),
        sk_er: take(le),
        sk_pi: take(lp),
        sk_pr: take(lp),
    }
}

/// Keys of one child SA pair, by direction.
pub struct ChildKeys {
    /// Encryption key (salt appended for AEADs), initiator to responder.
    pub encr_i: KeyBytes,
    /// Integrity key, initiator to responder (empty with AEADs).
    pub integ_i: KeyBytes,
    /// Encryption key, responder to initiator.
    pub encr_r: KeyBytes,
    /// Integrity key, responder to initiator.
    pub integ_r: KeyBytes,
}

impl fmt::Debug for ChildKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChildKeys(..)")
    }
}

impl Clone for ChildKeys {
    fn clone(&self) -> Self {
        ChildKeys {
            encr_i: self.encr_i.clone(),
            integ_i: self.integ_i.clone(),
            encr_r: self.encr_r.clone(),
            integ_r: self.integ_r.clone(),
        }
    }
}

/// KEYMAT of a child whose CREATE_CHILD_SA had additional key exchanges (RFC 9370 2.2.4):
/// `prf+(SK_d, SK(0) | Ni | Nr | SK(1) | ... | SK(n))`, `add` being SK(1) | ... | SK(n).
pub fn derive_child_keys_addke(
    p: Prf,
    sk_d: &[u8],
    shared: &[u8],
    ni: &[u8],
    nr: &[u8],
    add: &[u8],
    suite: &ChildSuite,
) -> ChildKeys {
    let mut nr_add = zeroize::Zeroizing::new(alloc::vec::Vec::with_capacity(nr.len() + add.len()));
    nr_add.extend_from_slice(nr);
    nr_add.extend_from_slice(add);
    derive_child_keys(p, sk_d, Some(shared), ni, &nr_add, suite)
}

/// KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr) (2.17: the new shared secret with PFS), taken in the order: the initiator-to-responder
/// encryption key, its integrity key, then the responder-to-initiator ones.
pub fn derive_child_keys(
    p: Prf,
    sk_d: &[u8],
    shared: Option<&[u8]>,
    ni: &[u8],
    nr: &[u8],
    suite: &ChildSuite,
) -> ChildKeys {
    let (le, la) = (suite.encr.keymat_len(), suite.integ.map_or(0, |i| i.key_len()));
    let m = match shared {
        None => prf_plus(p, sk_d, &[ni, nr], 2 * (le + la)),
        Some(g) => prf_plus(p, sk_d, &[g, ni, nr], 2 * (le + la)),
    };
    let part = |a: usize, n: usize| zeroize::Zeroizing::new(m[a..a + n].to_vec());
    ChildKeys {
        encr_i: part(0, le),
        integ_i: part(le, la),
        encr_r: part(le + la, le),
        integ_r: part(2 * le + la, la),
    }
}
