//! Vendor ID payloads (RFC 7296 3.12): opaque to the protocol, but some clients are known by
//! them and need a behaviour of ours: the Windows built-in client behind a NAT refuses a
//! rekey the server starts (issue #36; [`crate::config::RekeyBy::Auto`]).
//!
//! Windows (Vista and later) sends, in its IKE_SA_INIT request, MD5("MS NT5 ISAKMPOAKLEY")
//! followed by a four-byte version (7 Vista, 8 Windows 7, 9 Windows 8 and later; strongSwan's
//! `ike_vendor.c` lists the three), with "MS-Negotiation Discovery Capable" and
//! "Vid-Initial-Contact". We send none.
use crate::message::Payload;

/// MD5("MS NT5 ISAKMPOAKLEY"): the first 16 bytes of Windows' vendor ID.
pub const MS_NT5_ISAKMPOAKLEY: [u8; 16] = [
    0x1e, 0x2b, 0x51, 0x69, 0x05, 0x99, 0x1c, 0x7d, 0x7c, 0x96, 0xfc, 0xbf, 0xb5, 0x87, 0xe4, 0x61,
];

/// Windows' vendor ID of version `v` (7, 8, 9): [`MS_NT5_ISAKMPOAKLEY`] and `v` as 32 bits.
pub fn windows(v: u32) -> [u8; 20] {
    let mut out = [0; 20];
    out[..16].copy_from_slice(&MS_NT5_ISAKMPOAKLEY);
    out[16..].copy_from_slice(&v.to_be_bytes());
    out
}

/// Whether a vendor ID is Windows' (any version: the 16-byte hash and a 4-byte version).
pub fn is_windows(vid: &[u8]) -> bool {
    vid.len() == 20 && vid[..16] == MS_NT5_ISAKMPOAKLEY
}

/// Whether a message carries Windows' vendor ID.
pub(crate) fn from_windows(ps: &[Payload]) -> bool {
    ps.iter().any(|p| matches!(p, Payload::Vendor(v) if is_windows(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_vendor_ids() {
        // What Windows 10 sends (strongSwan's log: "received MS NT5 ISAKMPOAKLEY v9 vendor ID").
        let v9 = [
            0x1e, 0x2b, 0x51, 0x69, 0x05, 0x99, 0x1c, 0x7d, 0x7c, 0x96, 0xfc, 0xbf, 0xb5, 0x87, 0xe4, 0x61, 0, 0, 0, 9,
        ];
        assert!(is_windows(&v9));
        assert_eq!(windows(9), v9);
        assert!(is_windows(&windows(7)));
        // MS-Negotiation Discovery Capable, the hash alone, another vendor: not it.
        let discovery = [
            0xfb, 0x1d, 0xe3, 0xcd, 0xf3, 0x41, 0xb7, 0xea, 0x16, 0xb7, 0xe5, 0xbe, 0x08, 0x55, 0xf1, 0x20,
        ];
        assert!(!is_windows(&discovery));
        assert!(!is_windows(&MS_NT5_ISAKMPOAKLEY));
        assert!(!is_windows(b"strongSwan"));
        assert!(!is_windows(&[]));
        assert!(from_windows(&[
            Payload::Vendor(b"x".to_vec()),
            Payload::Vendor(v9.to_vec())
        ]));
        assert!(!from_windows(&[Payload::Vendor(discovery.to_vec())]));
    }
}
