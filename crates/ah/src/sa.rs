//! An AH security association: outbound processing (RFC 4302 section 3.3) and inbound
//! processing (section 3.4), in place on a [`PacketBuf`].

use crate::mutable_fields::{zeroed_copy, MAX_ICV_HEADER};
use crate::wire::{self, AhPacket, AhRepr, FIXED_LEN};
use ipsec_core::integrity::{Integrity, MAX_DIGEST};
use ipsec_core::ip::{self, ipv4_field, ipv6_field, proto, Ipv4Packet};
use ipsec_core::replay::{ReplayWindow, SeqCounter};
use ipsec_core::sa::{Mode, Proto, Tunnel};
use ipsec_core::tunnel::{self, InnerInfo};
use ipsec_core::{esn, Error, PacketBuf, SaParams};

/// Zeros standing in for the ICV in the ICV input (RFC 4302 section 3.3.3.1).
static ZERO_ICV: [u8; MAX_DIGEST] = [0; MAX_DIGEST];

/// What [`AhSa::open`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The full (ESN-inferred) sequence number.
    pub seq: u64,
    /// AH's Next Header: the protocol of what was protected (4 or 41 in tunnel mode).
    pub next_header: u8,
}

/// Room an SA needs around a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Bytes needed before the packet (the outer header in tunnel mode, the AH header).
    pub headroom: usize,
    /// Bytes needed after the packet (none: AH adds nothing at the end).
    pub tailroom: usize,
}

/// One AH security association, for one direction or both: [`AhSa::seal`] uses the sequence
/// counter, [`AhSa::open`] the replay window.
pub struct AhSa {
    spi: u32,
    mode: Mode,
    tunnel: Option<Tunnel>,
    esn: bool,
    integ: Integrity,
    seq: SeqCounter,
    replay: ReplayWindow,
}

impl core::fmt::Debug for AhSa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AhSa")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("mode", &self.mode)
            .field("esn", &self.esn)
            .field("integ", &self.integ)
            .finish_non_exhaustive()
    }
}

/// The ICV input (RFC 4302 section 3.3.3): the headers in front of AH with mutable fields
/// zeroed (`headers`), AH's fixed fields, a zero ICV, the padding as carried, everything
/// after AH, and with ESN the high 32 bits of the sequence number (section 3.3.3.1 / 2.5.1).
fn icv_parts<'a>(headers: &'a [u8], ah: &'a [u8], icv_len: usize, rest: &'a [u8], hi: &'a [u8]) -> [&'a [u8]; 6] {
    [
        headers,
        &ah[..FIXED_LEN],
        &ZERO_ICV[..icv_len],
        &ah[FIXED_LEN + icv_len..],
        rest,
        hi,
    ]
}

impl AhSa {
    /// Sets up an SA: checks the parameters and keys the integrity algorithm once.
    pub fn new(params: &SaParams) -> Result<Self, Error> {
        params.validate()?;
        if params.proto != Proto::Ah {
            return Err(Error::InvalidSa("not an AH SA"));
        }
        let i = params
            .integ
            .as_ref()
            .ok_or(Error::InvalidSa("AH needs an auth algorithm"))?;
        let integ = Integrity::new(i.alg, &i.key, i.icv_len)?;
        Ok(AhSa {
            spi: params.spi,
            mode: params.mode,
            tunnel: params.tunnel,
            esn: params.esn,
            integ,
            // A bad window size is reported before a bad first sequence number.
            replay: ReplayWindow::for_sa(params)?,
            seq: SeqCounter::for_sa(params)?,
        })
    }

    /// The SPI.
    pub fn spi(&self) -> u32 {
        self.spi
    }
    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// The receive window.
    pub fn replay_window(&self) -> &ReplayWindow {
        &self.replay
    }
    /// ICV length in bytes.
    pub fn icv_len(&self) -> usize {
        self.integ.icv_len()
    }
    /// The AH header length, padding included, in an IPv4 or an IPv6 packet.
    pub fn header_len(&self, ipv6: bool) -> usize {
        wire::header_len(self.icv_len(), ipv6)
    }

    fn outer_len(&self) -> usize {
        match (self.mode, &self.tunnel) {
            (Mode::Tunnel, Some(t)) => tunnel::outer_len(t),
            _ => 0,
        }
    }

    /// The room [`AhSa::seal`] needs. In transport mode the headroom is the IPv6 header
    /// length, the larger of the two.
    pub fn room(&self) -> Room {
        let v6 = match (self.mode, &self.tunnel) {
            (Mode::Tunnel, Some(t)) => t.dst.is_ipv6(),
            _ => true,
        };
        Room {
            headroom: self.outer_len() + self.header_len(v6),
            tailroom: 0,
        }
    }
    /// Headroom [`AhSa::seal`] needs (see [`AhSa::room`]).
    pub fn headroom(&self) -> usize {
        self.room().headroom
    }
    /// Tailroom [`AhSa::seal`] needs: none.
    pub fn tailroom(&self) -> usize {
        0
    }

    /// Authenticates the IP packet in `buf`, in place, and returns the sequence number used.
    ///
    /// Transport mode inserts AH where [`ip::transport_split`] says; tunnel mode prepends AH
    /// and an outer header built by [`tunnel::push_outer`]. Bytes after the length the IP
    /// header claims are dropped. On error the packet is left as it was and no sequence
    /// number is used up.
    pub fn seal(&mut self, buf: &mut PacketBuf) -> Result<u64, Error> {
        let seq = self.seq.peek()?;
        let hi_bytes = esn::high(seq).to_be_bytes();
        let hi: &[u8] = if self.esn { &hi_bytes } else { &[] };
        let icv_len = self.icv_len();
        let claimed = ip::claimed_len(buf.packet())?;
        let mut icv = [0u8; MAX_DIGEST];
        let mut scratch = [0u8; MAX_ICV_HEADER];

        match (self.mode, self.tunnel) {
            (Mode::Transport, _) => {
                let pkt = &buf.packet()[..claimed];
                let split = ip::transport_split(pkt)?;
                let v6 = ip::version(pkt)? == 6;
                let fragment = if v6 {
                    split.next == proto::FRAGMENT
                } else {
                    Ipv4Packet::new_checked(pkt)?.is_fragment()
                };
                if fragment {
                    // RFC 4302 3.3.4: AH is applied before fragmentation, never to a fragment.
                    return Err(Error::MalformedIp);
                }
                let ah_len = wire::header_len(icv_len, v6);
                let new_len = claimed + ah_len;
                if new_len > ip::MAX_PACKET + if v6 { ipv6_field::HEADER_LEN } else { 0 } {
                    return Err(Error::TooBig);
                }
                if buf.headroom() < ah_len {
                    return Err(Error::NoHeadroom);
                }
                // The zeroed headers, from the packet before it changes; then the fields the
                // insertion will change: the Next Header byte and the length.
                let hl = zeroed_copy(&pkt[..split.offset], &mut scratch)?.len();
                scratch[split.nh_offset] = proto::AH;
                if v6 {
                    let pl = (new_len - ipv6_field::HEADER_LEN) as u16;
                    scratch[ipv6_field::PAYLOAD_LEN].copy_from_slice(&pl.to_be_bytes());
                } else {
                    scratch[ipv4_field::LENGTH].copy_from_slice(&(new_len as u16).to_be_bytes());
                }
                self.seq.next()?;

                buf.trim_back(buf.len() - claimed)?;
                buf.insert_gap(split.offset, ah_len)?;
                let p = buf.packet_mut();
                AhRepr::new(split.next, self.spi, esn::low(seq), icv_len, v6).emit(&mut p[split.offset..])?;
                p[split.nh_offset] = proto::AH;
                ip::fix_length(p)?;
                let (_, ah_rest) = p.split_at_mut(split.offset);
                let (ah, rest) = ah_rest.split_at_mut(ah_len);
                self.integ
                    .digest(&icv_parts(&scratch[..hl], ah, icv_len, rest, hi), &mut icv);
                ah[FIXED_LEN..FIXED_LEN + icv_len].copy_from_slice(&icv[..icv_len]);
            }
            (Mode::Tunnel, Some(t)) => {
                let info = InnerInfo::of(&buf.packet()[..claimed])?;
                let v6 = t.dst.is_ipv6();
                let ah_len = wire::header_len(icv_len, v6);
                let outer = tunnel::outer_len(&t);
                if claimed + ah_len + outer > ip::MAX_PACKET + if v6 { ipv6_field::HEADER_LEN } else { 0 } {
                    return Err(Error::TooBig);
                }
                if buf.headroom() < ah_len + outer {
                    return Err(Error::NoHeadroom);
                }
                self.seq.next()?;

                buf.trim_back(buf.len() - claimed)?;
                buf.push_front(ah_len)?;
                AhRepr::new(info.next_header, self.spi, esn::low(seq), icv_len, v6).emit(buf.packet_mut())?;
                tunnel::push_outer(buf, &t, proto::AH, info, seq as u16)?;
                let p = buf.packet_mut();
                let (head, ah_rest) = p.split_at_mut(outer);
                let (ah, rest) = ah_rest.split_at_mut(ah_len);
                let hdr = zeroed_copy(head, &mut scratch)?;
                self.integ.digest(&icv_parts(hdr, ah, icv_len, rest, hi), &mut icv);
                ah[FIXED_LEN..FIXED_LEN + icv_len].copy_from_slice(&icv[..icv_len]);
            }
            (Mode::Tunnel, None) => return Err(Error::InvalidSa("tunnel mode needs src and dst addresses")),
        }
        Ok(seq)
    }

    /// Verifies and removes AH from the packet in `buf`, in place: SPI, replay check, ICV
    /// check (constant time), then, only once the packet is known to be authentic and
    /// decapsulable, the window update and the decapsulation.
    ///
    /// On any error the buffer is left exactly as it was (content and length).
    pub fn open(&mut self, buf: &mut PacketBuf) -> Result<Opened, Error> {
        let icv_len = self.icv_len();
        let pkt = buf.packet();
        let claimed = ip::claimed_len(pkt)?;
        let pkt = &pkt[..claimed];
        let v6 = ip::version(pkt)? == 6;
        if !v6 && Ipv4Packet::new_checked(pkt)?.is_fragment() {
            // RFC 4302 3.4.1: fragments are discarded (IPv6: a Fragment header in front of
            // AH is refused by the mutable-field walk).
            return Err(Error::MalformedIp);
        }
        let split = ip::find_header(pkt, proto::AH)?;
        let (head, ah_rest) = pkt.split_at(split.offset);
        let ahp = AhPacket::new_checked(ah_rest)?;
        let repr = AhRepr::parse(&ahp, icv_len)?;
        if repr.spi != self.spi {
            return Err(Error::UnknownSpi(repr.spi));
        }
        let ah_len = ahp.header_len();
        if ah_len != wire::header_len(icv_len, v6) {
            return Err(Error::MalformedIp);
        }
        let seq = self.replay.check(repr.seq)?;
        let hi_bytes = esn::high(seq).to_be_bytes();
        let hi: &[u8] = if self.esn { &hi_bytes } else { &[] };

        let (ah, rest) = ah_rest.split_at(ah_len);
        let mut scratch = [0u8; MAX_ICV_HEADER];
        let hdr = zeroed_copy(head, &mut scratch)?;
        self.integ.verify(
            &icv_parts(hdr, ah, icv_len, rest, hi),
            &ah[FIXED_LEN..FIXED_LEN + icv_len],
        )?;

        // Authentic. Check that it can be decapsulated before anything changes.
        let inner_len = match self.mode {
            Mode::Tunnel => Some(tunnel::check_inner(repr.next_header, rest)?),
            Mode::Transport => None,
        };
        self.replay.accept(seq)?;

        buf.trim_back(buf.len() - claimed)?;
        match inner_len {
            Some(inner_len) => {
                buf.pull_front(split.offset + ah_len)?;
                buf.trim_back(buf.len() - inner_len)?;
            }
            None => {
                buf.remove_gap(split.offset, ah_len)?;
                // The Next Header byte lies in front of AH, so it did not move.
                buf.packet_mut()[split.nh_offset] = repr.next_header;
                ip::fix_length(buf.packet_mut())?;
            }
        }
        Ok(Opened {
            seq,
            next_header: repr.next_header,
        })
    }
}
