//! The skeleton ESP and AH share (RFC 4301 section 4.4.2.1): an SA's identity (SPI, mode,
//! tunnel endpoints, ESN), its outbound sequence counter and its inbound replay window, and
//! the receive order RFC 4303 section 3.4.3 and RFC 4302 section 3.4.3 prescribe: check the
//! sequence number, verify the ICV, only then move the window.
//!
//! An [`SaCore`] is immutable but for its two atomic parts, so one SA can be used from many
//! threads by shared reference: sequence numbers come from an [`AtomicSeq`], the window is a
//! [`SharedReplay`] locked only for the bitmap test and update.

use crate::buf::PacketBuf;
use crate::error::Error;
use crate::ip::{self, ipv4_field, ipv6_field, Ipv4Packet, Split};
use crate::replay::{AtomicSeq, ReplayWindow, SharedReplay};
use crate::sa::{Mode, Proto, SaParams, Tunnel};
use crate::tunnel::{InnerInfo, OuterHeader};
use crate::{esn, tunnel};

/// What an ESP or AH SA is besides its keys.
#[derive(Debug)]
pub struct SaCore {
    spi: u32,
    mode: Mode,
    tunnel: Option<Tunnel>,
    esn: bool,
    seq: AtomicSeq,
    replay: SharedReplay,
    /// The protocol number the outer header carries.
    proto: u8,
    /// The tunnel-mode outer header, laid out once (`None` in transport mode or when the
    /// endpoints' families differ, which sealing then refuses).
    outer: Option<OuterHeader>,
}

impl SaCore {
    /// The skeleton of an SA of protocol `proto`, from checked parameters.
    pub fn new(params: &SaParams, proto: Proto) -> Result<Self, Error> {
        params.validate()?;
        if params.proto != proto {
            return Err(Error::InvalidSa(match proto {
                Proto::Esp => "not an ESP SA",
                Proto::Ah => "not an AH SA",
                Proto::Comp => "not an IPComp SA",
            }));
        }
        let proto_number = match proto {
            Proto::Esp => ip::proto::ESP,
            Proto::Ah => ip::proto::AH,
            Proto::Comp => ip::proto::COMP,
        };
        let outer = match (params.mode, &params.tunnel) {
            (Mode::Tunnel, Some(t)) => OuterHeader::new(t, proto_number),
            _ => None,
        };
        Ok(SaCore {
            proto: proto_number,
            outer,
            spi: params.spi,
            mode: params.mode,
            tunnel: params.tunnel,
            esn: params.esn,
            // A bad window size is reported before a bad first sequence number.
            replay: SharedReplay::new(ReplayWindow::starting_at(
                params.replay_window,
                params.esn,
                params.initial_seq,
            )?),
            seq: AtomicSeq::new(params.initial_seq, params.esn)?,
        })
    }

    /// The SPI.
    #[inline]
    pub fn spi(&self) -> u32 {
        self.spi
    }
    /// Transport or tunnel.
    #[inline]
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// The endpoints.
    #[inline]
    pub fn tunnel(&self) -> Option<&Tunnel> {
        self.tunnel.as_ref()
    }
    /// Whether 64-bit sequence numbers are in use.
    #[inline]
    pub fn esn(&self) -> bool {
        self.esn
    }
    /// The send counter.
    #[inline]
    pub fn seq(&self) -> &AtomicSeq {
        &self.seq
    }
    /// The receive window.
    #[inline]
    pub fn replay(&self) -> &SharedReplay {
        &self.replay
    }
    /// The send counter, for a sole owner (see [`AtomicSeq::take_mut`]).
    #[inline]
    pub fn seq_mut(&mut self) -> &mut AtomicSeq {
        &mut self.seq
    }
    /// The receive window, for a sole owner: no lock (see [`SharedReplay::get_mut`]).
    #[inline]
    pub fn replay_mut(&mut self) -> &mut ReplayWindow {
        self.replay.get_mut()
    }

    /// Prepends the tunnel-mode outer header to the packet in `buf` (the bytes and errors of
    /// [`tunnel::push_outer`], from the header laid out when the SA was made).
    #[inline]
    pub fn push_outer(&self, buf: &mut PacketBuf, inner: InnerInfo, ident: u16) -> Result<(), Error> {
        match &self.outer {
            Some(o) => o.push(buf, inner, ident),
            None => tunnel::push_outer(buf, self.tunnel_endpoints()?, self.proto, inner, ident),
        }
    }

    /// Length of the outer header this SA adds (tunnel mode), else 0.
    #[inline]
    pub fn outer_len(&self) -> usize {
        match (self.mode, &self.tunnel) {
            (Mode::Tunnel, Some(t)) => tunnel::outer_len(t),
            _ => 0,
        }
    }

    /// The endpoints of a tunnel-mode SA.
    #[inline]
    pub fn tunnel_endpoints(&self) -> Result<&Tunnel, Error> {
        self.tunnel
            .as_ref()
            .ok_or(Error::InvalidSa("tunnel mode needs endpoints"))
    }

    /// The high 32 bits of `seq` as they enter the ICV (RFC 4303 2.2.1, RFC 4302 2.5.1): 4
    /// bytes with ESN, none without.
    #[inline]
    pub fn esn_hi<'a>(&self, seq: u64, out: &'a mut [u8; 4]) -> &'a [u8] {
        *out = esn::high(seq).to_be_bytes();
        if self.esn {
            &out[..]
        } else {
            &out[..0]
        }
    }

    /// Refuses a sealed length above what IP can carry: 65535 bytes, plus the fixed header
    /// for IPv6, whose length field does not count it. `packet` is the packet before sealing.
    pub fn check_size(&self, packet: &[u8], final_len: usize) -> Result<(), Error> {
        let final_v6 = match (&self.tunnel, self.mode) {
            (Some(t), Mode::Tunnel) => t.dst.is_ipv6(),
            _ => ip::version(packet)? == 6,
        };
        if final_len > ip::MAX_PACKET + if final_v6 { ipv6_field::HEADER_LEN } else { 0 } {
            return Err(Error::TooBig);
        }
        Ok(())
    }

    /// Finds this SA's header (`proto`) in a received packet and refuses IP fragments: RFC
    /// 4303 section 3.4.1 and RFC 4302 section 3.4.1 process only whole packets, so an
    /// IPv4 packet with MF set or a non-zero offset, or an IPv6 packet with a Fragment header
    /// before the IPsec header, is [`Error::Fragment`].
    pub fn find_header(packet: &[u8], proto: u8) -> Result<Split, Error> {
        let split = ip::find_header(packet, proto)?;
        if Self::is_fragment(packet)? {
            return Err(Error::Fragment);
        }
        Ok(split)
    }

    /// [`SaCore::find_header`] on a packet that may carry link-layer padding: returns the
    /// length the IP header claims (trim the packet to it) and where the `proto` header lies
    /// in the trimmed packet. Errors as [`ip::claimed_len`] then [`SaCore::find_header`];
    /// an IPv4 header is parsed once for all three.
    #[inline]
    pub fn locate(packet: &[u8], proto: u8) -> Result<(usize, Split), Error> {
        if ip::version(packet)? == 4 {
            let p = Ipv4Packet::new_checked(packet)?;
            if p.protocol() != proto {
                return Err(Error::WrongProtocol(p.protocol()));
            }
            if p.is_fragment() {
                return Err(Error::Fragment);
            }
            let split = Split {
                nh_offset: ipv4_field::PROTOCOL,
                offset: p.header_len(),
                next: proto,
            };
            return Ok((p.total_len(), split));
        }
        let claimed = ip::claimed_len(packet)?;
        let split = Self::find_header(&packet[..claimed], proto)?;
        Ok((claimed, split))
    }

    /// What sealing a packet in transport mode needs to know of it: the length its IP header
    /// claims (trim the packet to it) and where the ESP or AH header goes
    /// ([`ip::transport_split`] of the trimmed packet); a fragment is [`Error::Fragment`]
    /// (RFC 4303 3.3.4, RFC 4302 3.3.3: transport mode protects whole datagrams). Errors as
    /// [`ip::claimed_len`], then [`SaCore::is_fragment`], then [`ip::transport_split`], each
    /// on the trimmed packet; an IPv4 header is parsed once for all three.
    #[inline]
    pub fn transport_locate(packet: &[u8]) -> Result<(usize, Split), Error> {
        if ip::version(packet)? == 4 {
            let p = Ipv4Packet::new_checked(packet)?;
            if p.is_fragment() {
                return Err(Error::Fragment);
            }
            let split = Split {
                nh_offset: ipv4_field::PROTOCOL,
                offset: p.header_len(),
                next: p.protocol(),
            };
            return Ok((p.total_len(), split));
        }
        let claimed = ip::claimed_len(packet)?;
        let trimmed = &packet[..claimed];
        if Self::is_fragment(trimmed)? {
            return Err(Error::Fragment);
        }
        Ok((claimed, ip::transport_split(trimmed)?))
    }

    /// Whether an IP packet is a fragment: IPv4 with MF set or a non-zero offset, IPv6 with a
    /// Fragment header in its extension chain (the walk stops at the first non-extension
    /// header, so only a Fragment header before the IPsec or upper header counts).
    pub fn is_fragment(packet: &[u8]) -> Result<bool, Error> {
        Ok(match ip::version(packet)? {
            4 => Ipv4Packet::new_checked(packet)?.is_fragment(),
            _ => ip::find_header(packet, ip::proto::FRAGMENT).is_ok(),
        })
    }

    /// The receive sequence of RFC 4303 3.4.3 / RFC 4302 3.4.3 around `verify`: the replay
    /// check (which also infers the ESN high bits), then `verify(seq)` (the ICV check and, for
    /// ESP, decryption), and only when it succeeded the window update. The window lock is held
    /// for the check and for the update, never while `verify` runs. Returns the full sequence
    /// number, whether the packet was new ([`ReplayWindow::accept`](crate::replay::ReplayWindow::accept))
    /// and what `verify` returned.
    pub fn receive<T>(
        &self,
        seq_lo: u32,
        verify: impl FnOnce(u64) -> Result<T, Error>,
    ) -> Result<(u64, bool, T), Error> {
        let seq = self.replay.check(seq_lo)?;
        let out = verify(seq)?;
        let newest = self.replay.accept(seq)?;
        Ok((seq, newest, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{proto, Ipv4Repr, Ipv6Repr};

    /// `transport_locate` gives what its three steps gave (trim to the claimed length, refuse
    /// fragments, `transport_split` of the trimmed packet): for IPv4 with and without options,
    /// link-layer padding, MF and offset fragments, IPv6 with an extension chain and a
    /// Fragment header, and broken headers.
    #[test]
    fn transport_locate_is_trim_fragment_check_and_split() {
        let three_steps = |p: &[u8]| -> Result<(usize, Split), Error> {
            let claimed = ip::claimed_len(p)?;
            let t = &p[..claimed];
            if SaCore::is_fragment(t)? {
                return Err(Error::Fragment);
            }
            Ok((claimed, ip::transport_split(t)?))
        };
        let mut v4 = [0u8; 80];
        Ipv4Repr {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            protocol: proto::UDP,
            payload_len: 40,
            tos: 0,
            ident: 9,
            dont_frag: false,
            ttl: 3,
        }
        .emit(&mut v4)
        .unwrap();
        let mut opts = v4;
        opts[0] = 0x46;
        let (mut mf, mut off) = (v4, v4);
        mf[6] = 0x20;
        off[7] = 0x01;
        let mut v6 = [0u8; 100];
        Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: proto::HOPOPTS,
            payload_len: 24,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 1,
        }
        .emit(&mut v6)
        .unwrap();
        v6[40] = proto::UDP; // a Hop-by-Hop header of 8 bytes, then UDP
        let mut v6frag = v6;
        v6frag[40] = proto::FRAGMENT;
        v6frag[48] = proto::UDP;
        let cases: [&[u8]; 10] = [
            &v4,
            &v4[..60],
            &opts,
            &mf,
            &off,
            &v4[..30],
            &v6,
            &v6frag,
            &v6[..50],
            &[0x45; 10],
        ];
        for p in cases {
            assert_eq!(
                SaCore::transport_locate(p),
                three_steps(p),
                "{:02x?}",
                &p[..p.len().min(8)]
            );
        }
        assert_eq!(SaCore::transport_locate(&v4).unwrap().0, 60);
        assert_eq!(SaCore::transport_locate(&mf), Err(Error::Fragment));
        assert_eq!(SaCore::transport_locate(&v6).unwrap().1.offset, 48);
    }
}
