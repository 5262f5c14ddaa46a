//! Bytes on the wire for one TCP segment in the paper's setup (transport mode over IPv6):
//!
//! `IPv6 [Frag] AH ESP-hdr IV [IPComp] TCP payload pad pad-len next-hdr`
//!
//! AH (authentication only, never ESP auth) precedes ESP; IPComp sits inside ESP. IPsec is
//! applied before fragmentation, so AH/ESP/IPComp are part of the fragmentable part of the
//! packet. A stand-in until a general overhead calculator replaces it.

use super::Suite;

/// Header and trailer sizes (bytes) and the MTU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overheads {
    /// IPv6 header (40), repeated on every fragment.
    pub ip_header: usize,
    /// TCP header (20).
    pub transport_header: usize,
    /// Network MTU (1280).
    pub mtu: usize,
    /// IPv6 fragment header on each fragment when fragmented (8).
    pub fragment_header: usize,
    /// AH fixed part: next header, length, reserved, SPI, sequence number (12).
    pub ah_fixed: usize,
    /// Integrity check value carried in AH: HMAC truncated to 96 bits (12).
    pub icv: usize,
    /// ESP header: SPI and sequence number (8).
    pub esp_header: usize,
    /// Explicit CBC IV (8).
    pub esp_iv: usize,
    /// Cipher block the ESP payload + trailer is padded to (8).
    pub esp_block: usize,
    /// Pad length and next header (2).
    pub esp_trailer: usize,
    /// IPComp header (4).
    pub ipcomp_header: usize,
}

impl Default for Overheads {
    /// The paper's setup.
    fn default() -> Self {
        Overheads {
            ip_header: 40,
            transport_header: 20,
            mtu: 1280,
            fragment_header: 8,
            ah_fixed: 12,
            icv: 12,
            esp_header: 8,
            esp_iv: 8,
            esp_block: 8,
            esp_trailer: 2,
            ipcomp_header: 4,
        }
    }
}

impl Overheads {
    /// Checks that fragments can carry data at all.
    pub fn validate(&self) -> Result<(), String> {
        if self.mtu < self.ip_header + self.fragment_header + 8 {
            return Err(format!("MTU {} too small for IPv6 fragments", self.mtu));
        }
        if self.esp_block == 0 {
            return Err("ESP block size must be > 0".into());
        }
        Ok(())
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
/// header, when `ipcomp`) protected by `suite`.
pub fn wire_bytes(payload: usize, suite: &Suite, ipcomp: bool, o: &Overheads) -> PacketBytes {
    let mut upper = o.transport_header + payload;
    if ipcomp {
        upper += o.ipcomp_header;
    }
    let mut encrypted = 0;
    if suite.cipher.is_some() {
        encrypted = (upper + o.esp_trailer).div_ceil(o.esp_block) * o.esp_block;
        upper = o.esp_header + o.esp_iv + encrypted;
    }
    let mut authenticated = 0;
    if suite.integrity.is_some() {
        // IPv6 extension headers are multiples of 8 bytes.
        upper += (o.ah_fixed + o.icv).div_ceil(8) * 8;
        authenticated = o.ip_header + upper;
    }
    let (wire, fragments) = fragment(upper, o);
    PacketBytes {
        wire,
        fragments,
        encrypted,
        authenticated,
    }
}

/// IPv6 fragmentation of `fragmentable` bytes (everything after the IPv6 header): each fragment
/// carries a multiple of 8 bytes except the last, plus the IPv6 and fragment headers.
fn fragment(fragmentable: usize, o: &Overheads) -> (usize, usize) {
    if o.ip_header + fragmentable <= o.mtu {
        return (o.ip_header + fragmentable, 1);
    }
    let per = (o.mtu - o.ip_header - o.fragment_header) / 8 * 8;
    let n = fragmentable.div_ceil(per);
    (fragmentable + n * (o.ip_header + o.fragment_header), n)
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
        let plain = wire_bytes(4096, &suite(false, false), false, &o);
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
        let ah = wire_bytes(4096, &suite(false, true), false, &o);
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
        let esp = wire_bytes(4096, &suite(true, false), false, &o);
        assert_eq!(
            esp,
            PacketBytes {
                wire: 4308 + 20,
                fragments: 4,
                encrypted: 4120,
                authenticated: 0
            }
        );
        let both = wire_bytes(4096, &suite(true, true), false, &o);
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
        let s = wire_bytes(100, &suite(false, false), false, &o);
        assert_eq!((s.wire, s.fragments), (160, 1));
        // IPComp adds its 4-byte header.
        let s = wire_bytes(100, &suite(false, false), true, &o);
        assert_eq!((s.wire, s.fragments), (164, 1));
        // Exactly the MTU: not fragmented; one byte more: 2 fragments.
        let s = wire_bytes(1280 - 60, &suite(false, false), false, &o);
        assert_eq!((s.wire, s.fragments), (1280, 1));
        let s = wire_bytes(1280 - 59, &suite(false, false), false, &o);
        assert_eq!((s.wire, s.fragments), (1221 + 20 + 2 * 48, 2));
        // ESP padding: 100 + 20 + 2 = 122 -> 128.
        assert_eq!(wire_bytes(100, &suite(true, false), false, &o).encrypted, 128);
    }
}
