//! Bytes on the wire for one TCP segment in the paper's setup (transport mode over IPv6),
//! computed with the SA engine's overhead calculator ([`ipsec_engine::overhead`]):
//!
//! `IPv6 [Frag] AH ESP-hdr IV [IPComp] TCP payload pad pad-len next-hdr`
//!
//! AH (authentication only, never ESP auth) is outside ESP; IPComp sits inside ESP. IPsec is
//! applied before fragmentation, so AH/ESP/IPComp are part of the fragmentable part of the
//! packet, and each fragment repeats the IPv6 header and adds an 8-byte Fragment header.

use super::Suite;
use ipsec_engine::overhead::{Calculator, CompAssumption, Encap, Inner, OverheadError, SaShape, Upper};

/// The IPComp header (RFC 3173 section 2.1), counted in compression ratios.
pub const IPCOMP_HEADER: usize = ipsec_ipcomp::HEADER_LEN;
/// IPv6 header.
const IPV6_HEADER: usize = 40;
/// TCP header without options.
const TCP_HEADER: usize = 20;

/// The setup's adjustable sizes (bytes); the protocol headers are fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overheads {
    /// Network MTU (1280).
    pub mtu: usize,
    /// Integrity check value carried in AH: HMAC truncated to 96 bits (12).
    pub icv: usize,
    /// Explicit CBC IV (8).
    pub esp_iv: usize,
    /// Cipher block the ESP payload + trailer is padded to (8).
    pub esp_block: usize,
}

impl Default for Overheads {
    /// The paper's setup.
    fn default() -> Self {
        Overheads {
            mtu: 1280,
            icv: 12,
            esp_iv: 8,
            esp_block: 8,
        }
    }
}

impl Overheads {
    /// Checks that the sizes make sense and fragments can carry data.
    pub fn validate(&self) -> Result<(), String> {
        let suite = Suite {
            cipher: Some(String::new()),
            integrity: Some(String::new()),
        };
        self.calculator(&suite, true)
            .and_then(|c| c.fragmented(Inner::ipv6(), Upper::Tcp, 1, self.mtu))
            .map(|_| ())
            .map_err(|e| format!("overheads (MTU {}): {e}", self.mtu))
    }

    /// The calculator for `suite`: IPComp (payload taken as already compressed), then ESP
    /// without ESP authentication, then AH, all in transport mode.
    fn calculator(&self, suite: &Suite, ipcomp: bool) -> Result<Calculator, OverheadError> {
        let mut shapes = Vec::new();
        if ipcomp {
            shapes.push(SaShape::Comp {
                encap: Encap::Transport,
            });
        }
        if suite.cipher.is_some() {
            shapes.push(SaShape::Esp {
                encap: Encap::Transport,
                iv_len: self.esp_iv,
                block_size: self.esp_block,
                icv_len: 0,
            });
        }
        if suite.integrity.is_some() {
            shapes.push(SaShape::Ah {
                encap: Encap::Transport,
                icv_len: self.icv,
            });
        }
        Ok(Calculator::new(shapes)?.comp_assumption(CompAssumption::Compressed))
    }
}

/// Byte counts of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketBytes {
    /// Everything transmitted, all fragments with their IPv6 and fragment headers.
    pub wire: usize,
    /// Number of IPv6 packets (1 when not fragmented).
    pub fragments: usize,
    /// Bytes the ESP cipher processes: TCP segment (with IPComp header if any) + padding +
    /// trailer; 0 without a cipher.
    pub encrypted: usize,
    /// Bytes the AH HMAC processes: the whole IPv6 packet before fragmentation (IPv6 header,
    /// AH, everything after); 0 without integrity.
    pub authenticated: usize,
}

/// Bytes for a TCP segment carrying `payload` bytes (already compressed, *without* the IPComp
/// header, when `ipcomp`) protected by `suite`. An error when the sealed segment would not fit
/// an IPv6 packet (65535 bytes of payload) or the MTU cannot carry a fragment.
pub fn wire_bytes(payload: usize, suite: &Suite, ipcomp: bool, o: &Overheads) -> Result<PacketBytes, OverheadError> {
    let calc = o.calculator(suite, ipcomp)?;
    let frag = calc.fragmented(Inner::ipv6(), Upper::Tcp, payload, o.mtu)?;
    let sealed = calc.overhead(Inner::ipv6(), IPV6_HEADER + TCP_HEADER + payload)?;
    // ESP is the last SA but one with AH, else the last; it encrypts what follows its header
    // and IV up to its ICV (none here).
    let encrypted = match suite.cipher {
        None => 0,
        Some(_) => {
            let i = sealed.len_after.len() - 1 - usize::from(suite.integrity.is_some());
            let b = &sealed.per_sa[i];
            sealed.len_after[i] - IPV6_HEADER - b.esp_header - b.esp_iv - b.esp_icv
        }
    };
    Ok(PacketBytes {
        wire: frag.wire_bytes,
        fragments: frag.packets,
        encrypted,
        authenticated: if suite.integrity.is_some() {
            sealed.sealed_len
        } else {
            0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(c: bool, i: bool) -> Suite {
        Suite {
            cipher: c.then(|| "c".to_string()),
            integrity: i.then(|| "i".to_string()),
        }
    }

    #[test]
    fn four_kilobytes() {
        let o = Overheads::default();
        // 4096 + 20 = 4116 fragmentable bytes; 1232 per fragment -> 4 fragments of 48 bytes header.
        let plain = wire_bytes(4096, &suite(false, false), false, &o).unwrap();
        assert_eq!(
            plain,
            PacketBytes {
                wire: 4308,
                fragments: 4,
                encrypted: 0,
                authenticated: 0
            }
        );
        // AH: +24.
        let ah = wire_bytes(4096, &suite(false, true), false, &o).unwrap();
        assert_eq!(
            ah,
            PacketBytes {
                wire: 4332,
                fragments: 4,
                encrypted: 0,
                authenticated: 40 + 24 + 4116
            }
        );
        // ESP: 4116 + 2 = 4118 -> padded to 4120; + 8 + 8.
        let esp = wire_bytes(4096, &suite(true, false), false, &o).unwrap();
        assert_eq!(
            esp,
            PacketBytes {
                wire: 4308 + 20,
                fragments: 4,
                encrypted: 4120,
                authenticated: 0
            }
        );
        let both = wire_bytes(4096, &suite(true, true), false, &o).unwrap();
        assert_eq!(
            both,
            PacketBytes {
                wire: 4352,
                fragments: 4,
                encrypted: 4120,
                authenticated: 40 + 24 + 4136
            }
        );
    }

    #[test]
    fn small_and_boundary() {
        let o = Overheads::default();
        let s = wire_bytes(100, &suite(false, false), false, &o).unwrap();
        assert_eq!((s.wire, s.fragments), (160, 1));
        // IPComp adds its 4-byte header.
        let s = wire_bytes(100, &suite(false, false), true, &o).unwrap();
        assert_eq!((s.wire, s.fragments), (164, 1));
        // Exactly the MTU: not fragmented; one byte more: 2 fragments.
        let s = wire_bytes(1280 - 60, &suite(false, false), false, &o).unwrap();
        assert_eq!((s.wire, s.fragments), (1280, 1));
        let s = wire_bytes(1280 - 59, &suite(false, false), false, &o).unwrap();
        assert_eq!((s.wire, s.fragments), (1221 + 20 + 2 * 48, 2));
        // ESP padding: 100 + 20 + 2 = 122 -> 128.
        assert_eq!(wire_bytes(100, &suite(true, false), false, &o).unwrap().encrypted, 128);
    }
}
