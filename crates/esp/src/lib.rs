//! IP Encapsulating Security Payload (RFC 4303; RFC 2406 where it differs), in place on a
//! caller's buffer and sans-IO.
//!
//! An [`EspSa`] is made once from [`SaParams`]: keys are expanded then, never per packet.
//! [`EspSa::seal`] turns an IP packet in a [`PacketBuf`] into its ESP form (transport or
//! tunnel mode, IPv4 or IPv6) using the buffer's headroom and tailroom; [`EspSa::open`] checks
//! the replay window, verifies the ICV in constant time, and only then decrypts. Nothing
//! allocates per packet.
//!
//! # Example
//!
//! Seal one IPv4 packet with a tunnel-mode AES-128-GCM SA, open it on the other side, and see
//! a replay of it refused:
//!
//! ```
//! use ipsec_core::ip::{proto, Ipv4Repr};
//! use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
//! use ipsec_core::{AeadAlg, Error, PacketBuf, SaParams};
//! use ipsec_esp::EspSa;
//!
//! // The SA both ends share: SPI, tunnel endpoints, AES-128-GCM (16-byte key and 4-byte
//! // salt) with a 16-byte ICV. In real use the key comes from IKE or a config file.
//! let mut params = SaParams::new(Proto::Esp, 0x1000);
//! params.mode = Mode::Tunnel;
//! params.tunnel = Some(Tunnel { src: "192.0.2.1".parse()?, dst: "192.0.2.2".parse()? });
//! params.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x42; 20], 16));
//! let mut sender = EspSa::new(&params)?; // keys expanded here, once
//! let mut receiver = EspSa::new(&params)?;
//!
//! // The inner packet: an IPv4 header and 100 bytes of payload.
//! let mut inner = vec![0u8; 20 + 100];
//! Ipv4Repr {
//!     src: "10.0.0.1".parse()?,
//!     dst: "10.0.0.2".parse()?,
//!     protocol: proto::UDP,
//!     payload_len: 100,
//!     tos: 0,
//!     ident: 7,
//!     dont_frag: true,
//!     ttl: 64,
//! }
//! .emit(&mut inner)?;
//!
//! // The caller's buffer: the packet with room in front (outer header, ESP header, IV) and
//! // behind (padding, trailer, ICV), as `room()` says.
//! let room = sender.room();
//! let mut raw = vec![0u8; room.headroom + inner.len() + room.tailroom];
//! raw[room.headroom..][..inner.len()].copy_from_slice(&inner);
//! let mut buf = PacketBuf::new(&mut raw, room.headroom, inner.len())?;
//!
//! let seq = sender.seal(&mut buf)?;
//! assert_eq!(seq, 1);
//! assert_eq!(buf.packet()[9], proto::ESP, "the outer IPv4 header carries ESP");
//! assert_eq!(buf.len(), inner.len() + sender.overhead(inner.len(), 20));
//! let sealed = buf.packet().to_vec();
//!
//! let opened = receiver.open(&mut buf)?; // ICV checked before anything is decrypted
//! assert_eq!((opened.seq, opened.next_header), (1, proto::IPIP));
//! assert_eq!(buf.packet(), &inner[..], "the round trip gives the inner packet back");
//!
//! // The same packet again is a replay.
//! let mut raw2 = vec![0u8; sealed.len()];
//! raw2.copy_from_slice(&sealed);
//! let mut again = PacketBuf::new(&mut raw2, 0, sealed.len())?;
//! assert_eq!(receiver.open(&mut again).unwrap_err(), Error::Replay);
//! assert_eq!(again.packet(), &sealed[..], "a refused packet is left as it was");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`EspSa`] owns its IV generator and takes `&mut self`; [`Esp`] is the same SA shared by
//! reference between threads, each passing its own [`IvRng`] to [`Esp::seal`].
//!
//! # RFC 2406
//!
//! RFC 2406 has no extended sequence numbers and no combined-mode algorithms; an SA without
//! `esn` and with a CBC cipher behaves as RFC 2406 does. RFC 2406 receivers did not have to
//! check padding contents; [`Esp::set_check_padding`] turns the RFC 4303 check off for such
//! peers.
//!
//! # Features and `no_std`
//!
//! The crate is `no_std` (with `alloc`, which `ipsec-core` needs for the zeroized key
//! buffers) and forbids `unsafe`. Default features:
//! - `std`: [`EspSa::new`] seeds the IV generator from the operating system (`getrandom`);
//!   without it, use [`EspSa::with_rng`] with a seed of your own.
//! - `ring`: AES-128/256-GCM with a 16-byte ICV and ChaCha20-Poly1305 run on `ring`; without
//!   it (or for AES-192-GCM and 8/12-byte ICVs) on the RustCrypto path (see
//!   [`ipsec_core::aead`]).
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

pub mod packet;
pub mod padding;

pub use packet::{EspPacket, EspRepr};

use alloc::boxed::Box;
use ipsec_core::aead::Aead;
use ipsec_core::cbc_multi::{self, CbcJob};
use ipsec_core::cipher::CbcCipher;
use ipsec_core::integrity::Integrity;
use ipsec_core::ip::{self, proto};
use ipsec_core::replay::ReplayWindow;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Mode, Proto};
use ipsec_core::sa_core::SaCore;
use ipsec_core::tunnel::{self, InnerInfo};
use ipsec_core::{esn, Error, IntegAlg, PacketBuf, SaParams};

/// The largest explicit IV (AES-CBC).
pub const MAX_IV: usize = 16;

/// The IV of the empty filler jobs of a multi-buffer CBC call.
static NO_IV: [u8; MAX_IV] = [0; MAX_IV];

// One per SA, never per packet. The CBC variant's key schedules are boxed (about 1.3 KB,
// against the AEAD's 560 bytes), so an AES-GCM SA does not pay for them: inline, every `Esp`
// was as large as a CBC one (issue #36 item 6, memory per remote-access client). The AEAD,
// the common case, stays inline: no pointer more per packet.
#[allow(clippy::large_enum_variant)]
enum Crypto {
    /// A CBC (or null) cipher with a separate integrity algorithm (possibly `digest_null`).
    Cbc {
        cipher: Box<CbcCipher>,
        integ: Box<Integrity>,
        block: usize,
        iv_len: usize,
    },
    /// A combined-mode algorithm.
    Aead(Aead),
}

/// Where the ESP header goes: after the IP header(s) in transport mode, in front of the
/// whole inner packet in tunnel mode.
#[derive(Debug, Clone, Copy)]
enum Layout {
    Transport(ip::Split),
    Tunnel(InnerInfo),
}

/// What a tunnel-mode SA puts in front of the ESP header it seals (transport mode keeps the
/// packet's own IP header either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterIp {
    /// The outer IP header (RFC 4303 3.1.2): a whole IP packet, for a raw IP socket or a pcap.
    Header,
    /// Nothing: the sealed packet starts at the ESP header, for a socket whose kernel writes
    /// the IP (and UDP) headers itself (ESP in UDP, RFC 3948 2.1). The bytes from the ESP
    /// header on are the ones [`OuterIp::Header`] gives after its outer header.
    Socket,
}

/// Room an SA needs around a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Bytes needed before the packet (outer header, ESP header, IV).
    pub headroom: usize,
    /// Bytes needed after the packet, at most (padding, trailer, ICV).
    pub tailroom: usize,
}

/// What [`EspSa::open`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The full (ESN-inferred) sequence number.
    pub seq: u64,
    /// The Next Header of the trailer: the protocol of what was protected.
    pub next_header: u8,
    /// Pad length.
    pub pad_len: usize,
    /// The SA checks replays and `seq` is above every number it accepted before: a new
    /// packet, not a late or replayed copy (only such a packet may move a NAT'd peer's
    /// endpoint, RFC 7296 2.23).
    pub newest: bool,
}

/// One keyed ESP SA that any number of threads may use at once: [`Esp::seal`] and
/// [`Esp::open`] take `&self` and a per-thread IV generator. The keys, SPI, mode and
/// endpoints are fixed at creation; the sequence counter is atomic and the replay window is
/// locked only for its bitmap test and update (see [`SaCore`]).
pub struct Esp {
    core: SaCore,
    crypto: Crypto,
    /// A fixed IV, for reproducible tests only.
    fixed_iv: Option<[u8; MAX_IV]>,
    check_padding: bool,
    /// Explicit IV, ICV and block lengths and the padding alignment, fixed by the algorithms
    /// (read per packet, so kept here rather than matched out of `crypto` each time).
    iv_len: usize,
    icv_len: usize,
    block: usize,
    align: usize,
}

impl core::fmt::Debug for Esp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Esp")
            .field("spi", &format_args!("{:#010x}", self.core.spi()))
            .field("mode", &self.core.mode())
            .field("esn", &self.core.esn())
            .finish_non_exhaustive()
    }
}

/// What [`Esp::seal_plan`] found out about a packet to seal, before a sequence number is
/// taken.
#[derive(Debug, Clone, Copy)]
struct Plan {
    layout: Layout,
    /// Offset of the ESP header in the sealed packet.
    prefix: usize,
    next_header: u8,
    /// Padding plus the 2-byte trailer.
    trailer: usize,
}

/// What [`Esp::open_parse`] found in a received packet, before the replay check.
#[derive(Debug, Clone, Copy)]
struct Parsed {
    split: ip::Split,
    /// The sequence number as carried.
    seq_lo: u32,
    /// Length from the ESP header to the end of the ICV.
    esp_len: usize,
}

/// Where a sealed packet's parts lie, between [`Esp::seal_prepare`] and the crypto.
#[derive(Debug, Clone, Copy)]
struct Sealing {
    seq: u64,
    /// Offset of the ESP header in the packet.
    prefix: usize,
    /// ESP header + IV.
    hdr: usize,
    layout: Layout,
}

impl Esp {
    /// Keys an SA. CBC IVs come from the [`IvRng`] each caller passes to [`Esp::seal`].
    pub fn new(params: &SaParams) -> Result<Self, Error> {
        let core = SaCore::new(params, Proto::Esp)?;
        let crypto = if let Some(a) = &params.aead {
            Crypto::Aead(Aead::new(a.alg, &a.key, a.icv_len)?)
        } else {
            let e = params
                .enc
                .as_ref()
                .ok_or(Error::InvalidSa("ESP needs an enc or aead algorithm"))?;
            let integ = match &params.integ {
                Some(i) => Integrity::new(i.alg, &i.key, i.icv_len)?,
                None => Integrity::new(IntegAlg::Null, &[], 0)?,
            };
            Crypto::Cbc {
                cipher: Box::new(CbcCipher::new(e.alg, &e.key)?),
                integ: Box::new(integ),
                block: e.alg.block_size(),
                iv_len: e.alg.iv_len(),
            }
        };
        let (iv_len, icv_len, block) = match &crypto {
            Crypto::Cbc {
                integ, block, iv_len, ..
            } => (*iv_len, integ.icv_len(), *block),
            Crypto::Aead(a) => (8, a.icv_len(), 1),
        };
        Ok(Esp {
            core,
            crypto,
            fixed_iv: None,
            check_padding: true,
            iv_len,
            icv_len,
            block,
            align: padding::alignment(block),
        })
    }

    /// **For tests only.** Uses `iv` as the IV of every packet. A fixed IV destroys CBC's
    /// security and, for GCM and ChaCha20-Poly1305, reuses the nonce: never in production.
    pub fn set_fixed_iv_for_testing(&mut self, iv: &[u8]) -> Result<(), Error> {
        if iv.len() != self.iv_len() {
            return Err(Error::InvalidSa("fixed IV has the wrong length for the cipher"));
        }
        let mut f = [0u8; MAX_IV];
        f[..iv.len()].copy_from_slice(iv);
        self.fixed_iv = Some(f);
        Ok(())
    }

    /// Whether [`Esp::open`] checks that padding bytes are 1, 2, 3... (default: yes, as
    /// RFC 4303 2.4 recommends; RFC 2406 peers that pad randomly need it off).
    pub fn set_check_padding(&mut self, on: bool) {
        self.check_padding = on;
    }

    /// What ESP shares with AH: SPI, mode, endpoints, sequence counter, replay window.
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

    /// Explicit IV length.
    #[inline]
    pub fn iv_len(&self) -> usize {
        self.iv_len
    }
    /// ICV length.
    #[inline]
    pub fn icv_len(&self) -> usize {
        self.icv_len
    }
    /// Cipher block size the padding aligns to (1 for stream and null ciphers).
    #[inline]
    pub fn block_size(&self) -> usize {
        self.block
    }

    /// The headroom and (largest) tailroom [`Esp::seal`] needs.
    pub fn room(&self) -> Room {
        let align = if self.block_size().is_multiple_of(4) {
            self.block_size()
        } else {
            4 * self.block_size()
        };
        Room {
            headroom: self.core.outer_len() + packet::HEADER_LEN + self.iv_len(),
            tailroom: align - 1 + padding::TRAILER_LEN + self.icv_len(),
        }
    }

    /// Bytes ESP adds to an IP packet of `len` bytes (headers, IV, padding, trailer, ICV, and
    /// the outer header in tunnel mode). For transport mode, `len` counts the IP header too:
    /// only the part after it is padded, so pass `ip_header_len` to be exact.
    pub fn overhead(&self, len: usize, ip_header_len: usize) -> usize {
        let protected = match self.core.mode() {
            Mode::Tunnel => len,
            Mode::Transport => len.saturating_sub(ip_header_len),
        };
        self.core.outer_len()
            + packet::HEADER_LEN
            + self.iv_len()
            + padding::pad_len(protected, self.block_size())
            + padding::TRAILER_LEN
            + self.icv_len()
    }

    /// Encapsulates the IP packet in `buf`, in place, and returns the sequence number used.
    /// `rng` makes CBC IVs (one generator per thread; GCM and ChaCha20 use the sequence number).
    ///
    /// Bytes after the length the IP header claims (link-layer padding) are dropped first.
    /// On any other error the packet is left as it was and no sequence number is used up.
    pub fn seal(&self, rng: &mut IvRng, buf: &mut PacketBuf) -> Result<u64, Error> {
        self.core.seq().peek()?;
        let plan = self.seal_plan(buf)?;
        let seq = self.core.seq().take()?;
        self.seal_with(rng, buf, &plan, seq, OuterIp::Header)
    }

    /// A planned packet sealed with sequence number `seq`: framing, crypto, IP header(s).
    #[inline(always)]
    fn seal_with(
        &self,
        rng: &mut IvRng,
        buf: &mut PacketBuf,
        plan: &Plan,
        seq: u64,
        outer: OuterIp,
    ) -> Result<u64, Error> {
        let s = self.seal_frame(rng, buf, plan, seq)?;
        self.seal_crypto(buf, &s)?;
        self.seal_finish(buf, &s, outer)?;
        Ok(seq)
    }

    /// The checks, then the trailer, ESP header and IV written around the plaintext, with
    /// `seq`, a number the caller already took (a batch).
    fn seal_prepare(&self, rng: &mut IvRng, buf: &mut PacketBuf, seq: u64) -> Result<Sealing, Error> {
        let plan = self.seal_plan(buf)?;
        self.seal_frame(rng, buf, &plan, seq)
    }

    /// The checks before a sequence number is taken: the packet is trimmed to its IP length
    /// and parsed (once), the padding computed, the room and final size checked. Nothing else
    /// in `buf` changes.
    #[inline(always)]
    fn seal_plan(&self, buf: &mut PacketBuf) -> Result<Plan, Error> {
        let icv_len = self.icv_len;
        let hdr = packet::HEADER_LEN + self.iv_len;
        let outer_len = self.core.outer_len();

        // Where the protected part starts, what it is, and how long the IP header stays.
        let layout = match self.core.mode() {
            Mode::Transport => {
                // RFC 4303 3.3.4: transport-mode ESP is applied only to whole IP datagrams.
                // One parse (of an IPv4 header) gives the length to trim to, the fragment
                // check and where the ESP header goes.
                let (claimed, split) = SaCore::transport_locate(buf.packet())?;
                buf.trim_back(buf.len() - claimed)?;
                Layout::Transport(split)
            }
            Mode::Tunnel => {
                // One parse gives the length to trim to and what the outer header copies.
                let (info, claimed) = InnerInfo::with_len(buf.packet())?;
                buf.trim_back(buf.len() - claimed)?;
                Layout::Tunnel(info)
            }
        };
        let (prefix, next_header) = match layout {
            Layout::Transport(s) => (s.offset, s.next),
            Layout::Tunnel(info) => (0, info.next_header),
        };
        let payload_len = buf.len() - prefix;
        let trailer = padding::pad_to(payload_len, self.align) + padding::TRAILER_LEN;
        if buf.tailroom() < trailer + icv_len {
            return Err(Error::NoTailroom);
        }
        if buf.headroom() < hdr + outer_len {
            return Err(Error::NoHeadroom);
        }
        self.core
            .check_size(buf.packet(), buf.len() + hdr + trailer + icv_len + outer_len)?;
        Ok(Plan {
            layout,
            prefix,
            next_header,
            trailer,
        })
    }

    /// Trailer, then the ESP header and IV in front of the payload, room for the ICV.
    #[inline(always)]
    fn seal_frame(&self, rng: &mut IvRng, buf: &mut PacketBuf, plan: &Plan, seq: u64) -> Result<Sealing, Error> {
        let iv_len = self.iv_len;
        let hdr = packet::HEADER_LEN + iv_len;
        let l = buf.len();
        buf.push_back(plan.trailer)?;
        padding::write_trailer(&mut buf.packet_mut()[l..], plan.next_header);
        match plan.layout {
            Layout::Transport(s) => buf.insert_gap(s.offset, hdr)?,
            Layout::Tunnel(_) => buf.push_front(hdr)?,
        }
        buf.push_back(self.icv_len)?;
        let esp = &mut buf.packet_mut()[plan.prefix..];
        EspRepr {
            spi: self.core.spi(),
            seq: esn::low(seq),
        }
        .emit(esp)?;
        let iv = &mut esp[packet::HEADER_LEN..hdr];
        match (&self.fixed_iv, &self.crypto) {
            (Some(f), _) => iv.copy_from_slice(&f[..iv_len]),
            (None, Crypto::Aead(_)) => iv.copy_from_slice(&seq.to_be_bytes()),
            (None, Crypto::Cbc { .. }) => rng.fill(iv),
        }
        Ok(Sealing {
            seq,
            prefix: plan.prefix,
            hdr,
            layout: plan.layout,
        })
    }

    /// Encrypts and computes the ICV of a prepared packet.
    #[inline(always)]
    fn seal_crypto(&self, buf: &mut PacketBuf, s: &Sealing) -> Result<(), Error> {
        match &self.crypto {
            Crypto::Cbc { cipher, .. } => {
                let esp = &mut buf.packet_mut()[s.prefix..];
                let body_end = esp.len() - self.icv_len();
                let (head, data) = esp[..body_end].split_at_mut(s.hdr);
                cipher.encrypt(&head[packet::HEADER_LEN..], data)?;
                self.seal_icv(buf, s)
            }
            Crypto::Aead(a) => {
                let mut hi = [0u8; 4];
                let hi = self.core.esn_hi(s.seq, &mut hi);
                let esp = &mut buf.packet_mut()[s.prefix..];
                let (head, rest) = esp.split_at_mut(s.hdr);
                let mut aad = [0u8; 12];
                let aad = aead_aad(&mut aad, &head[..packet::HEADER_LEN], hi);
                let iv8: &[u8; 8] = head[packet::HEADER_LEN..].try_into().map_err(|_| Error::Truncated)?;
                let (data, icv) = rest.split_at_mut(rest.len() - a.icv_len());
                a.seal(iv8, aad, data, icv)
            }
        }
    }

    /// The ICV of an encrypted CBC packet (RFC 4303 2.2.1 / 3.3.2.1: with ESN the high bits
    /// follow the payload in the ICV input).
    fn seal_icv(&self, buf: &mut PacketBuf, s: &Sealing) -> Result<(), Error> {
        let Crypto::Cbc { integ, .. } = &self.crypto else {
            return Ok(());
        };
        let mut hi = [0u8; 4];
        let hi = self.core.esn_hi(s.seq, &mut hi);
        let esp = &mut buf.packet_mut()[s.prefix..];
        let (body, icv) = esp.split_at_mut(esp.len() - integ.icv_len());
        integ.compute(&[body, hi], icv)
    }

    /// The IP header(s) of a sealed packet: transport mode's own, fixed; tunnel mode's outer
    /// one, unless a socket writes it ([`OuterIp::Socket`]).
    #[inline(always)]
    fn seal_finish(&self, buf: &mut PacketBuf, s: &Sealing, outer: OuterIp) -> Result<(), Error> {
        match (s.layout, outer) {
            (Layout::Transport(t), _) => ip::set_next_and_length(buf.packet_mut(), t.nh_offset, proto::ESP),
            (Layout::Tunnel(info), OuterIp::Header) => self.core.push_outer(buf, info, s.seq as u16),
            (Layout::Tunnel(_), OuterIp::Socket) => Ok(()),
        }
    }

    /// Seals a batch of packets with one draw from the sequence counter
    /// ([`AtomicSeq::take_n`](ipsec_core::replay::AtomicSeq::take_n)). On entry, `out[i]` says
    /// whether to seal packet `i` (`Ok`) or leave it alone (`Err`, kept); on return it is the
    /// packet's sequence number or why it was not sealed. A packet refused by the checks does
    /// not give its number back (numbers are never reused), which leaves a gap receivers
    /// accept. The numbers follow the packets' order.
    pub fn seal_batch(&self, rng: &mut IvRng, bufs: &mut [PacketBuf], out: &mut [Result<u64, Error>]) {
        self.seal_batch_outer(rng, bufs, out, OuterIp::Header);
    }

    /// [`Esp::seal_batch`] with `outer` in front of tunnel-mode packets: [`OuterIp::Socket`]
    /// leaves the outer IP header to the socket that sends them (ESP in UDP), so none is
    /// built here to be taken off again there.
    pub fn seal_batch_outer(
        &self,
        rng: &mut IvRng,
        bufs: &mut [PacketBuf],
        out: &mut [Result<u64, Error>],
        outer: OuterIp,
    ) {
        let n = bufs.len().min(out.len());
        let live = out[..n].iter().filter(|o| o.is_ok()).count() as u64;
        if live == 0 {
            return;
        }
        let (first, got) = match self.core.seq().take_n(live) {
            Ok(r) => r,
            Err(e) => {
                out[..n].iter_mut().filter(|o| o.is_ok()).for_each(|o| *o = Err(e));
                return;
            }
        };
        let mut prepared: [Option<Sealing>; MAX_BATCH] = [None; MAX_BATCH];
        let mut k = 0u64;
        for (i, (buf, o)) in bufs.iter_mut().zip(out.iter_mut()).take(n).enumerate() {
            if o.is_err() {
                continue;
            }
            let seq = first + k;
            k += 1;
            if k > got {
                *o = Err(Error::SequenceExhausted);
                continue;
            }
            *o = match self.seal_prepare(rng, buf, seq) {
                Ok(s) => match prepared.get_mut(i) {
                    Some(slot) => {
                        *slot = Some(s);
                        Ok(seq)
                    }
                    // Beyond the batch size: sealed on its own.
                    None => self
                        .seal_crypto(buf, &s)
                        .and_then(|_| self.seal_finish(buf, &s, outer))
                        .map(|_| seq),
                },
                Err(e) => Err(e),
            };
        }
        self.seal_crypto_batch(bufs, &prepared, out, outer);
    }

    /// The crypto of a prepared batch: with a CBC cipher the packets' chains are encrypted
    /// together ([`cbc_multi::encrypt_many`]), then each gets its ICV and IP header; AEADs
    /// seal packet by packet.
    fn seal_crypto_batch(
        &self,
        bufs: &mut [PacketBuf],
        prepared: &[Option<Sealing>; MAX_BATCH],
        out: &mut [Result<u64, Error>],
        outer: OuterIp,
    ) {
        let mut encrypted = false;
        if let Crypto::Cbc { cipher, .. } = &self.crypto {
            let icv_len = self.icv_len();
            let iv_len = self.iv_len();
            let count = prepared.iter().filter(|p| p.is_some()).count();
            let mut it = bufs.iter_mut().zip(prepared.iter());
            let mut jobs: [CbcJob; MAX_BATCH] = core::array::from_fn(|_| {
                for (buf, s) in it.by_ref() {
                    if let Some(s) = s {
                        let esp = &mut buf.packet_mut()[s.prefix..];
                        let body_end = esp.len() - icv_len;
                        let (head, data) = esp[..body_end].split_at_mut(s.hdr);
                        return CbcJob {
                            iv: &head[packet::HEADER_LEN..],
                            data,
                        };
                    }
                }
                CbcJob {
                    iv: &NO_IV[..iv_len],
                    data: &mut [],
                }
            });
            encrypted = cbc_multi::encrypt_many(cipher, &mut jobs[..count]).is_ok();
        }
        for (i, buf) in bufs.iter_mut().enumerate().take(MAX_BATCH) {
            if let Some(s) = &prepared[i] {
                let r = if encrypted {
                    self.seal_icv(buf, s)
                } else {
                    self.seal_crypto(buf, s)
                };
                if let Err(e) = r.and_then(|_| self.seal_finish(buf, s, outer)) {
                    out[i] = Err(e);
                }
            }
        }
    }

    /// Decapsulates the ESP packet in `buf`, in place: replay check, ICV check (constant
    /// time, before decryption), decryption, padding check, then the window update.
    pub fn open(&self, buf: &mut PacketBuf) -> Result<Opened, Error> {
        let split = Self::locate(buf)?;
        self.open_at(buf, split)
    }

    /// Trims a received packet to its IP length and finds its ESP header, refusing
    /// fragments ([`SaCore::locate`]: one parse of an IPv4 header).
    #[inline(always)]
    fn locate(buf: &mut PacketBuf) -> Result<ip::Split, Error> {
        let (claimed, split) = SaCore::locate(buf.packet(), proto::ESP)?;
        buf.trim_back(buf.len() - claimed)?;
        Ok(split)
    }

    /// [`Esp::open`] for a caller that already found the ESP header with
    /// [`SaCore::find_header`] (which also refuses fragments) on a packet trimmed to its IP
    /// length: the headers are not parsed again.
    pub fn open_at(&self, buf: &mut PacketBuf, split: ip::Split) -> Result<Opened, Error> {
        // RFC 4303 3.4.3 (as `SaCore::receive`): the replay check, which also infers the ESN
        // high bits; the ICV check and decryption; only when they succeeded the window
        // update. The window's lock is taken for each step, never across the crypto.
        let p = self.open_parse(buf, split)?;
        let seq = self.core.replay().check(p.seq_lo)?;
        self.open_crypto(buf, &p, seq)?;
        let newest = self.core.replay().accept(seq)?;
        self.open_finish(buf, &p, seq, newest, true)
    }

    /// Opens a packet that starts at its ESP header: the payload of a datagram whose IP and
    /// UDP headers the socket took off (ESP in UDP, RFC 3948 3.1.2 and 3.2.2 with the kernel
    /// doing steps 1 and 2), checked as [`Esp::open_at`] checks it. Tunnel mode leaves the
    /// inner packet, as [`Esp::open_at`] does; transport mode leaves what ESP protected
    /// without an IP header (it came in the datagram's), its protocol in
    /// [`Opened::next_header`], for the caller to put the datagram's addresses in front.
    pub fn open_payload(&self, buf: &mut PacketBuf) -> Result<Opened, Error> {
        let split = ip::Split {
            nh_offset: 0,
            offset: 0,
            next: proto::ESP,
        };
        let p = self.open_parse(buf, split)?;
        let seq = self.core.replay().check(p.seq_lo)?;
        self.open_crypto(buf, &p, seq)?;
        let newest = self.core.replay().accept(seq)?;
        self.open_finish(buf, &p, seq, newest, false)
    }

    /// The length, alignment and SPI checks of a received packet, and its sequence number.
    #[inline(always)]
    fn open_parse(&self, buf: &mut PacketBuf, split: ip::Split) -> Result<Parsed, Error> {
        if split.offset > buf.len() || split.next != proto::ESP {
            return Err(Error::WrongProtocol(split.next));
        }
        let hdr = packet::HEADER_LEN + self.iv_len;
        let esp_len = buf.len() - split.offset;
        if esp_len < hdr + self.icv_len + padding::TRAILER_LEN {
            return Err(Error::Truncated);
        }
        let ct_len = esp_len - hdr - self.icv_len;
        if self.block > 1 && !ct_len.is_multiple_of(self.block) {
            return Err(Error::BadAlignment);
        }
        let repr = EspRepr::parse(&EspPacket::new_checked(&buf.packet()[split.offset..])?)?;
        if repr.spi != self.core.spi() {
            return Err(Error::UnknownSpi(repr.spi));
        }
        Ok(Parsed {
            split,
            seq_lo: repr.seq,
            esp_len,
        })
    }

    /// The ICV check (constant time, before decryption) and the decryption, in place.
    #[inline(always)]
    fn open_crypto(&self, buf: &mut PacketBuf, p: &Parsed, seq: u64) -> Result<(), Error> {
        let hdr = packet::HEADER_LEN + self.iv_len;
        let esp = &mut buf.packet_mut()[p.split.offset..];
        let (body, icv) = esp.split_at_mut(p.esp_len - self.icv_len);
        let mut hi = [0u8; 4];
        let hi = self.core.esn_hi(seq, &mut hi);
        match &self.crypto {
            Crypto::Cbc { cipher, integ, .. } => {
                integ.verify(&[body, hi], icv)?;
                let (head, data) = body.split_at_mut(hdr);
                cipher.decrypt(&head[packet::HEADER_LEN..], data)
            }
            Crypto::Aead(a) => {
                let (head, data) = body.split_at_mut(hdr);
                let mut aad = [0u8; 12];
                let aad = aead_aad(&mut aad, &head[..packet::HEADER_LEN], hi);
                let iv8: &[u8; 8] = head[packet::HEADER_LEN..hdr].try_into().map_err(|_| Error::Truncated)?;
                a.open(iv8, aad, data, icv)
            }
        }
    }

    /// After the window update: the trailer checked and dropped, the ESP header (and in
    /// tunnel mode the outer header) removed; in transport mode the IP header in front of
    /// the ESP header, if `ip_header` (else there is none), gets the protocol and length.
    #[inline(always)]
    fn open_finish(
        &self,
        buf: &mut PacketBuf,
        p: &Parsed,
        seq: u64,
        newest: bool,
        ip_header: bool,
    ) -> Result<Opened, Error> {
        let split = p.split;
        let hdr = packet::HEADER_LEN + self.iv_len;
        let icv_len = self.icv_len;
        let plaintext = &buf.packet()[split.offset + hdr..split.offset + p.esp_len - icv_len];
        let (pad_len, next_header) = padding::check_trailer(plaintext, self.check_padding)?;
        let payload_len = plaintext.len() - pad_len - padding::TRAILER_LEN;
        let opened = Opened {
            seq,
            next_header,
            pad_len,
            newest,
        };

        match self.core.mode() {
            Mode::Tunnel => {
                let inner = &plaintext[..payload_len];
                let inner_len = tunnel::check_inner(next_header, inner)?;
                buf.pull_front(split.offset + hdr)?;
                buf.trim_back(buf.len() - inner_len)?;
            }
            Mode::Transport if !ip_header => {
                buf.trim_back(icv_len + pad_len + padding::TRAILER_LEN)?;
                buf.pull_front(split.offset + hdr)?;
            }
            Mode::Transport => {
                buf.trim_back(icv_len + pad_len + padding::TRAILER_LEN)?;
                buf.remove_gap(split.offset, hdr)?;
                // The Next Header byte lies before the ESP header, so it did not move.
                ip::set_next_and_length(buf.packet_mut(), split.nh_offset, next_header)?;
            }
        }
        Ok(opened)
    }
}

/// The most packets [`Esp::seal_batch`] prepares before its crypto pass (more are sealed one
/// by one).
pub const MAX_BATCH: usize = 64;

/// One ESP SA with its own IV generator, for a single owner (a pcap tool, a test): the
/// `&mut self` face of [`Esp`]. Share an [`Esp`] instead to use one SA from many threads.
pub struct EspSa {
    sa: Esp,
    rng: IvRng,
}

impl core::fmt::Debug for EspSa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.sa.fmt(f)
    }
}

impl core::ops::Deref for EspSa {
    type Target = Esp;
    fn deref(&self) -> &Esp {
        &self.sa
    }
}

impl core::ops::DerefMut for EspSa {
    fn deref_mut(&mut self) -> &mut Esp {
        &mut self.sa
    }
}

impl EspSa {
    /// Sets up an SA, with CBC IVs from a CSPRNG seeded by the operating system.
    #[cfg(feature = "std")]
    pub fn new(params: &SaParams) -> Result<Self, Error> {
        Self::with_rng(params, IvRng::from_os()?)
    }

    /// Sets up an SA with a caller-seeded IV generator (for `no_std` targets).
    pub fn with_rng(params: &SaParams, rng: IvRng) -> Result<Self, Error> {
        Ok(EspSa {
            sa: Esp::new(params)?,
            rng,
        })
    }

    /// The shared SA and the IV generator, parted.
    pub fn into_parts(self) -> (Esp, IvRng) {
        (self.sa, self.rng)
    }

    /// [`Esp::seal`] with this SA's IV generator. The SA is this owner's alone, so the
    /// sequence number is taken without an atomic operation.
    pub fn seal(&mut self, buf: &mut PacketBuf) -> Result<u64, Error> {
        let sa = &mut self.sa;
        sa.core.seq().peek()?;
        let plan = sa.seal_plan(buf)?;
        let seq = sa.core.seq_mut().take_mut()?;
        sa.seal_with(&mut self.rng, buf, &plan, seq, OuterIp::Header)
    }

    /// [`Esp::open`]. The SA is this owner's alone, so the replay window is checked and
    /// updated without its lock (in the same order: check, ICV and decryption, update).
    pub fn open(&mut self, buf: &mut PacketBuf) -> Result<Opened, Error> {
        let sa = &mut self.sa;
        let split = Esp::locate(buf)?;
        let p = sa.open_parse(buf, split)?;
        let seq = sa.core.replay_mut().check(p.seq_lo)?;
        sa.open_crypto(buf, &p, seq)?;
        let newest = sa.core.replay_mut().accept(seq)?;
        sa.open_finish(buf, &p, seq, newest, true)
    }
}

/// RFC 4106 section 5 / RFC 7634 section 2.1: the AAD is SPI || Sequence Number, or with
/// ESN, SPI || high 32 bits || low 32 bits.
#[inline(always)]
fn aead_aad<'a>(out: &'a mut [u8; 12], esp_header: &[u8], hi: &[u8]) -> &'a [u8] {
    // Two fixed shapes (the ESN high bits are 4 bytes or none), so every copy has a length
    // known at compile time.
    out[..4].copy_from_slice(&esp_header[..4]);
    if let Ok(hi) = <&[u8; 4]>::try_from(hi) {
        out[4..8].copy_from_slice(hi);
        out[8..12].copy_from_slice(&esp_header[4..8]);
        &out[..]
    } else {
        out[4..8].copy_from_slice(&esp_header[4..8]);
        &out[..8]
    }
}
