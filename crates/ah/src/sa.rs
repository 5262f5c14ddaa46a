//! An AH security association: outbound processing (RFC 4302 section 3.3) and inbound
//! processing (section 3.4), in place on a [`PacketBuf`].

use crate::mutable_fields::{zeroed_copy, MAX_ICV_HEADER};
use crate::wire::{self, AhPacket, AhRepr, FIXED_LEN};
use ipsec_core::integrity::{Integrity, MAX_DIGEST};
use ipsec_core::ip::{self, ipv4_field, ipv6_field, proto, Ipv4Packet};
use ipsec_core::replay::ReplayWindow;
use ipsec_core::sa::{Mode, Proto};
use ipsec_core::sa_core::SaCore;
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
    /// The SA checks replays and `seq` is above every number it accepted before (see
    /// `ipsec_esp::Opened::newest`).
    pub newest: bool,
}

/// Room an SA needs around a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Bytes needed before the packet (the outer header in tunnel mode, the AH header).
    pub headroom: usize,
    /// Bytes needed after the packet (none: AH adds nothing at the end).
    pub tailroom: usize,
}

/// One keyed AH SA that any number of threads may use at once: [`Ah::seal`] draws from the
/// atomic sequence counter, [`Ah::open`] locks the replay window only for its bitmap test and
/// update (see [`SaCore`]).
pub struct Ah {
    core: SaCore,
    integ: Integrity,
}

impl core::fmt::Debug for Ah {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ah")
            .field("spi", &format_args!("{:#010x}", self.core.spi()))
            .field("mode", &self.core.mode())
            .field("esn", &self.core.esn())
            .field("integ", &self.integ)
            .finish_non_exhaustive()
    }
}

/// One AH SA for a single owner: the `&mut self` face of [`Ah`] (which it derefs to).
#[derive(Debug)]
pub struct AhSa(Ah);

impl core::ops::Deref for AhSa {
    type Target = Ah;
    fn deref(&self) -> &Ah {
        &self.0
    }
}

impl AhSa {
    /// Sets up an SA (see [`Ah::new`]).
    pub fn new(params: &SaParams) -> Result<Self, Error> {
        Ok(AhSa(Ah::new(params)?))
    }
    /// The shared SA.
    pub fn into_shared(self) -> Ah {
        self.0
    }
    /// [`Ah::seal`].
    pub fn seal(&mut self, buf: &mut PacketBuf) -> Result<u64, Error> {
        self.0.seal(buf)
    }
    /// [`Ah::open`].
    pub fn open(&mut self, buf: &mut PacketBuf) -> Result<Opened, Error> {
        self.0.open(buf)
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

impl Ah {
    /// Sets up an SA: checks the parameters and keys the integrity algorithm once.
    pub fn new(params: &SaParams) -> Result<Self, Error> {
        let core = SaCore::new(params, Proto::Ah)?;
        let i = params
            .integ
            .as_ref()
            .ok_or(Error::InvalidSa("AH needs an auth algorithm"))?;
        let integ = Integrity::new(i.alg, &i.key, i.icv_len)?;
        Ok(Ah { core, integ })
    }

    /// What AH shares with ESP: SPI, mode, endpoints, sequence counter, replay window.
    pub fn core(&self) -> &SaCore {
        &self.core
    }
    /// The SPI.
    pub fn spi(&self) -> u32 {
        self.core.spi()
    }
    /// The mode.
    pub fn mode(&self) -> Mode {
        self.core.mode()
    }
    /// The receive window as it is now.
    pub fn replay_window(&self) -> ReplayWindow {
        self.core.replay().snapshot()
    }
    /// ICV length in bytes.
    pub fn icv_len(&self) -> usize {
        self.integ.icv_len()
    }
    /// The AH header length, padding included, in an IPv4 or an IPv6 packet.
    pub fn header_len(&self, ipv6: bool) -> usize {
        wire::header_len(self.icv_len(), ipv6)
    }

    /// The room [`AhSa::seal`] needs. In transport mode the headroom is the IPv6 header
    /// length, the larger of the two.
    pub fn room(&self) -> Room {
        let v6 = match (self.core.mode(), self.core.tunnel()) {
            (Mode::Tunnel, Some(t)) => t.dst.is_ipv6(),
            _ => true,
        };
        Room {
            headroom: self.core.outer_len() + self.header_len(v6),
            tailroom: 0,
        }
    }
    /// Headroom [`Ah::seal`] needs (see [`Ah::room`]).
    pub fn headroom(&self) -> usize {
        self.room().headroom
    }
    /// Tailroom [`Ah::seal`] needs: none.
    pub fn tailroom(&self) -> usize {
        0
    }

    /// Authenticates the IP packet in `buf`, in place, and returns the sequence number used.
    ///
    /// Transport mode inserts AH where [`ip::transport_split`] says; tunnel mode prepends AH
    /// and an outer header built by [`tunnel::push_outer`]. Bytes after the length the IP
    /// header claims are dropped. On error the packet is left as it was and no sequence
    /// number is used up.
    pub fn seal(&self, buf: &mut PacketBuf) -> Result<u64, Error> {
        self.core.seq().peek()?;
        let icv_len = self.icv_len();
        let claimed = ip::claimed_len(buf.packet())?;
        let mut icv = [0u8; MAX_DIGEST];
        let mut scratch = [0u8; MAX_ICV_HEADER];

        match (self.core.mode(), self.core.tunnel().copied()) {
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
                self.core.check_size(pkt, new_len)?;
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
                let seq = self.core.seq().take()?;
                let mut hi = [0u8; 4];
                let hi = self.core.esn_hi(seq, &mut hi);

                buf.trim_back(buf.len() - claimed)?;
                buf.insert_gap(split.offset, ah_len)?;
                let p = buf.packet_mut();
                AhRepr::new(split.next, self.core.spi(), esn::low(seq), icv_len, v6).emit(&mut p[split.offset..])?;
                p[split.nh_offset] = proto::AH;
                ip::fix_length(p)?;
                let (_, ah_rest) = p.split_at_mut(split.offset);
                let (ah, rest) = ah_rest.split_at_mut(ah_len);
                self.integ
                    .digest(&icv_parts(&scratch[..hl], ah, icv_len, rest, hi), &mut icv);
                ah[FIXED_LEN..FIXED_LEN + icv_len].copy_from_slice(&icv[..icv_len]);
                Ok(seq)
            }
            (Mode::Tunnel, Some(t)) => {
                let info = InnerInfo::of(&buf.packet()[..claimed])?;
                let v6 = t.dst.is_ipv6();
                let ah_len = wire::header_len(icv_len, v6);
                let outer = tunnel::outer_len(&t);
                self.core
                    .check_size(&buf.packet()[..claimed], claimed + ah_len + outer)?;
                if buf.headroom() < ah_len + outer {
                    return Err(Error::NoHeadroom);
                }
                let seq = self.core.seq().take()?;
                let mut hi = [0u8; 4];
                let hi = self.core.esn_hi(seq, &mut hi);

                buf.trim_back(buf.len() - claimed)?;
                buf.push_front(ah_len)?;
                AhRepr::new(info.next_header, self.core.spi(), esn::low(seq), icv_len, v6).emit(buf.packet_mut())?;
                tunnel::push_outer(buf, &t, proto::AH, info, seq as u16)?;
                let p = buf.packet_mut();
                let (head, ah_rest) = p.split_at_mut(outer);
                let (ah, rest) = ah_rest.split_at_mut(ah_len);
                let hdr = zeroed_copy(head, &mut scratch)?;
                self.integ.digest(&icv_parts(hdr, ah, icv_len, rest, hi), &mut icv);
                ah[FIXED_LEN..FIXED_LEN + icv_len].copy_from_slice(&icv[..icv_len]);
                Ok(seq)
            }
            (Mode::Tunnel, None) => Err(Error::InvalidSa("tunnel mode needs src and dst addresses")),
        }
    }

    /// Verifies and removes AH from the packet in `buf`, in place: SPI, replay check, ICV
    /// check (constant time), then, only once the packet is known to be authentic and
    /// decapsulable, the window update and the decapsulation.
    ///
    /// On any error the buffer is left exactly as it was (content and length).
    pub fn open(&self, buf: &mut PacketBuf) -> Result<Opened, Error> {
        let pkt = buf.packet();
        let claimed = ip::claimed_len(pkt)?;
        // RFC 4302 3.4.1: fragments are discarded.
        let split = SaCore::find_header(&pkt[..claimed], proto::AH)?;
        self.open_at(buf, split)
    }

    /// [`Ah::open`] for a caller that already found the AH header with
    /// [`SaCore::find_header`] (which also refuses fragments): the headers are not parsed
    /// again.
    pub fn open_at(&self, buf: &mut PacketBuf, split: ip::Split) -> Result<Opened, Error> {
        let icv_len = self.icv_len();
        let pkt = buf.packet();
        let claimed = ip::claimed_len(pkt)?;
        let pkt = &pkt[..claimed];
        let v6 = ip::version(pkt)? == 6;
        if split.offset > pkt.len() || split.next != proto::AH {
            return Err(Error::WrongProtocol(split.next));
        }
        let (head, ah_rest) = pkt.split_at(split.offset);
        let ahp = AhPacket::new_checked(ah_rest)?;
        let repr = AhRepr::parse(&ahp, icv_len)?;
        if repr.spi != self.core.spi() {
            return Err(Error::UnknownSpi(repr.spi));
        }
        let ah_len = ahp.header_len();
        if ah_len != wire::header_len(icv_len, v6) {
            return Err(Error::MalformedIp);
        }
        let (ah, rest) = ah_rest.split_at(ah_len);
        let (seq, newest, inner_len) = self.core.receive(repr.seq, |seq| {
            let mut hi = [0u8; 4];
            let hi = self.core.esn_hi(seq, &mut hi);
            let mut scratch = [0u8; MAX_ICV_HEADER];
            let hdr = zeroed_copy(head, &mut scratch)?;
            self.integ.verify(
                &icv_parts(hdr, ah, icv_len, rest, hi),
                &ah[FIXED_LEN..FIXED_LEN + icv_len],
            )?;
            // Authentic. Check that it can be decapsulated before anything changes.
            match self.core.mode() {
                Mode::Tunnel => Ok(Some(tunnel::check_inner(repr.next_header, rest)?)),
                Mode::Transport => Ok(None),
            }
        })?;

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
            newest,
        })
    }
}
