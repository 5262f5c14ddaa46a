//! IP Encapsulating Security Payload (RFC 4303; RFC 2406 where it differs), in place on a
//! caller's buffer and sans-IO.
//!
//! An [`EspSa`] is made once from [`SaParams`]: keys are expanded then, never per packet.
//! [`EspSa::seal`] turns an IP packet in a [`PacketBuf`] into its ESP form (transport or
//! tunnel mode, IPv4 or IPv6) using the buffer's headroom and tailroom; [`EspSa::open`] checks
//! the replay window, verifies the ICV in constant time, and only then decrypts. Nothing
//! allocates per packet.
//!
//! Where RFC 2406 differs: RFC 2406 has no extended sequence numbers and no combined-mode
//! algorithms; an SA without `esn` and with a CBC cipher behaves as RFC 2406 does. RFC 2406
//! receivers did not have to check padding contents; [`EspSa::set_check_padding`] turns the
//! RFC 4303 check off for such peers.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod packet;
pub mod padding;

pub use packet::{EspPacket, EspRepr};

use ipsec_core::aead::Aead;
use ipsec_core::cipher::CbcCipher;
use ipsec_core::integrity::Integrity;
use ipsec_core::ip::{self, proto};
use ipsec_core::replay::{ReplayWindow, SeqCounter};
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Mode, Proto, Tunnel};
use ipsec_core::tunnel::{self, InnerInfo};
use ipsec_core::{esn, Error, IntegAlg, PacketBuf, SaParams};

/// The largest explicit IV (AES-CBC).
pub const MAX_IV: usize = 16;

// One per SA, never per packet: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Crypto {
    /// A CBC (or null) cipher with a separate integrity algorithm (possibly `digest_null`).
    Cbc {
        cipher: CbcCipher,
        integ: Integrity,
        block: usize,
        iv_len: usize,
    },
    /// A combined-mode algorithm.
    Aead(Aead),
}

/// How explicit IVs are made.
#[allow(clippy::large_enum_variant)] // one per SA
enum IvMode {
    /// From the per-SA CSPRNG (CBC).
    Random(IvRng),
    /// The 64-bit sequence number (GCM, ChaCha20-Poly1305): unique per key, as RFC 4106
    /// section 3.1 and RFC 7634 section 2 require.
    Counter,
    /// A fixed IV, for reproducible tests only.
    Fixed([u8; MAX_IV]),
}

/// Where the ESP header goes: after the IP header(s) in transport mode, in front of the
/// whole inner packet in tunnel mode.
#[derive(Clone, Copy)]
enum Layout {
    Transport(ip::Split),
    Tunnel(InnerInfo),
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
}

/// One ESP security association, for one direction or both (a pcap tool may use one SA to
/// seal and another instance to open).
pub struct EspSa {
    spi: u32,
    mode: Mode,
    tunnel: Option<Tunnel>,
    esn: bool,
    crypto: Crypto,
    iv: IvMode,
    seq: SeqCounter,
    replay: ReplayWindow,
    check_padding: bool,
}

impl core::fmt::Debug for EspSa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EspSa")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("mode", &self.mode)
            .field("esn", &self.esn)
            .finish_non_exhaustive()
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
        params.validate()?;
        if params.proto != Proto::Esp {
            return Err(Error::InvalidSa("not an ESP SA"));
        }
        let (crypto, iv) = if let Some(a) = &params.aead {
            (Crypto::Aead(Aead::new(a.alg, &a.key, a.icv_len)?), IvMode::Counter)
        } else {
            let e = params
                .enc
                .as_ref()
                .ok_or(Error::InvalidSa("ESP needs an enc or aead algorithm"))?;
            let integ = match &params.integ {
                Some(i) => Integrity::new(i.alg, &i.key, i.icv_len)?,
                None => Integrity::new(IntegAlg::Null, &[], 0)?,
            };
            let crypto = Crypto::Cbc {
                cipher: CbcCipher::new(e.alg, &e.key)?,
                integ,
                block: e.alg.block_size(),
                iv_len: e.alg.iv_len(),
            };
            (crypto, IvMode::Random(rng))
        };
        Ok(EspSa {
            spi: params.spi,
            mode: params.mode,
            tunnel: params.tunnel,
            esn: params.esn,
            crypto,
            iv,
            // A bad window size is reported before a bad first sequence number.
            replay: ReplayWindow::for_sa(params)?,
            seq: SeqCounter::for_sa(params)?,
            check_padding: true,
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
        self.iv = IvMode::Fixed(f);
        Ok(())
    }

    /// Whether [`EspSa::open`] checks that padding bytes are 1, 2, 3... (default: yes, as
    /// RFC 4303 2.4 recommends; RFC 2406 peers that pad randomly need it off).
    pub fn set_check_padding(&mut self, on: bool) {
        self.check_padding = on;
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

    /// Explicit IV length.
    pub fn iv_len(&self) -> usize {
        match &self.crypto {
            Crypto::Cbc { iv_len, .. } => *iv_len,
            Crypto::Aead(_) => 8,
        }
    }
    /// ICV length.
    pub fn icv_len(&self) -> usize {
        match &self.crypto {
            Crypto::Cbc { integ, .. } => integ.icv_len(),
            Crypto::Aead(a) => a.icv_len(),
        }
    }
    /// Cipher block size the padding aligns to (1 for stream and null ciphers).
    pub fn block_size(&self) -> usize {
        match &self.crypto {
            Crypto::Cbc { block, .. } => *block,
            Crypto::Aead(_) => 1,
        }
    }

    fn outer_len(&self) -> usize {
        match (self.mode, &self.tunnel) {
            (Mode::Tunnel, Some(t)) => tunnel::outer_len(t),
            _ => 0,
        }
    }

    /// The headroom and (largest) tailroom [`EspSa::seal`] needs.
    pub fn room(&self) -> Room {
        let align = if self.block_size().is_multiple_of(4) {
            self.block_size()
        } else {
            4 * self.block_size()
        };
        Room {
            headroom: self.outer_len() + packet::HEADER_LEN + self.iv_len(),
            tailroom: align - 1 + padding::TRAILER_LEN + self.icv_len(),
        }
    }

    /// Bytes ESP adds to an IP packet of `len` bytes (headers, IV, padding, trailer, ICV, and
    /// the outer header in tunnel mode). For transport mode, `len` counts the IP header too:
    /// only the part after it is padded, so pass `ip_header_len` to be exact.
    pub fn overhead(&self, len: usize, ip_header_len: usize) -> usize {
        let protected = match self.mode {
            Mode::Tunnel => len,
            Mode::Transport => len.saturating_sub(ip_header_len),
        };
        self.outer_len()
            + packet::HEADER_LEN
            + self.iv_len()
            + padding::pad_len(protected, self.block_size())
            + padding::TRAILER_LEN
            + self.icv_len()
    }

    /// Encapsulates the IP packet in `buf`, in place, and returns the sequence number used.
    ///
    /// Bytes after the length the IP header claims (link-layer padding) are dropped first.
    /// On any other error the packet is left as it was and no sequence number is used up.
    pub fn seal(&mut self, buf: &mut PacketBuf) -> Result<u64, Error> {
        let seq = self.seq.peek()?;
        let iv_len = self.iv_len();
        let icv_len = self.icv_len();
        let hdr = packet::HEADER_LEN + iv_len;

        // Where the protected part starts, what it is, and how long the IP header stays.
        buf.trim_to_ip_len()?;
        let layout = match self.mode {
            Mode::Transport => Layout::Transport(ip::transport_split(buf.packet())?),
            Mode::Tunnel => Layout::Tunnel(InnerInfo::of(buf.packet())?),
        };
        let (prefix, next_header) = match layout {
            Layout::Transport(s) => (s.offset, s.next),
            Layout::Tunnel(info) => (0, info.next_header),
        };
        let payload_len = buf.len() - prefix;
        let pad = padding::pad_len(payload_len, self.block_size());
        let trailer = pad + padding::TRAILER_LEN;
        if buf.tailroom() < trailer + icv_len {
            return Err(Error::NoTailroom);
        }
        if buf.headroom() < hdr + self.outer_len() {
            return Err(Error::NoHeadroom);
        }
        let final_len = buf.len() + hdr + trailer + icv_len + self.outer_len();
        let final_v6 = match (&self.tunnel, self.mode) {
            (Some(t), Mode::Tunnel) => t.dst.is_ipv6(),
            _ => ip::version(buf.packet())? == 6,
        };
        if final_len > ip::MAX_PACKET + if final_v6 { ip::ipv6_field::HEADER_LEN } else { 0 } {
            return Err(Error::TooBig);
        }
        self.seq.next()?;

        // Trailer, then the ESP header and IV in front of the payload.
        let l = buf.len();
        buf.push_back(trailer)?;
        padding::write_trailer(&mut buf.packet_mut()[l..], next_header);
        match layout {
            Layout::Transport(s) => buf.insert_gap(s.offset, hdr)?,
            Layout::Tunnel(_) => buf.push_front(hdr)?,
        }
        let mut iv = [0u8; MAX_IV];
        match &mut self.iv {
            IvMode::Random(r) => r.fill(&mut iv[..iv_len]),
            IvMode::Counter => iv[..8].copy_from_slice(&seq.to_be_bytes()),
            IvMode::Fixed(f) => iv = *f,
        }
        buf.push_back(icv_len)?;
        let esp_len = buf.len() - prefix;
        let esp = &mut buf.packet_mut()[prefix..];
        EspRepr {
            spi: self.spi,
            seq: esn::low(seq),
        }
        .emit(esp)?;
        esp[packet::HEADER_LEN..hdr].copy_from_slice(&iv[..iv_len]);
        let (body, icv) = esp.split_at_mut(esp_len - icv_len);
        let seq_hi = esn::high(seq).to_be_bytes();
        let hi: &[u8] = if self.esn { &seq_hi } else { &[] };
        match &self.crypto {
            Crypto::Cbc { cipher, integ, .. } => {
                cipher.encrypt(&iv[..iv_len], &mut body[hdr..])?;
                // RFC 4303 2.2.1 / 3.3.2.1: with ESN the high bits follow the payload in the ICV input.
                integ.compute(&[body, hi], icv)?;
            }
            Crypto::Aead(a) => {
                let (head, data) = body.split_at_mut(hdr);
                let mut aad = [0u8; 12];
                let aad = aead_aad(&mut aad, &head[..packet::HEADER_LEN], hi);
                let iv8: &[u8; 8] = head[packet::HEADER_LEN..hdr].try_into().map_err(|_| Error::Truncated)?;
                a.seal(iv8, aad, data, icv)?;
            }
        }

        // The IP header(s).
        match layout {
            Layout::Transport(s) => {
                buf.packet_mut()[s.nh_offset] = proto::ESP;
                ip::fix_length(buf.packet_mut())?;
            }
            Layout::Tunnel(info) => {
                let t = self
                    .tunnel
                    .as_ref()
                    .ok_or(Error::InvalidSa("tunnel mode needs endpoints"))?;
                tunnel::push_outer(buf, t, proto::ESP, info, seq as u16)?;
            }
        }
        Ok(seq)
    }

    /// Decapsulates the ESP packet in `buf`, in place: replay check, ICV check (constant
    /// time, before decryption), decryption, padding check, then the window update.
    pub fn open(&mut self, buf: &mut PacketBuf) -> Result<Opened, Error> {
        buf.trim_to_ip_len()?;
        let split = ip::find_header(buf.packet(), proto::ESP)?;
        let iv_len = self.iv_len();
        let icv_len = self.icv_len();
        let hdr = packet::HEADER_LEN + iv_len;
        let esp_len = buf.len() - split.offset;
        if esp_len < hdr + icv_len + padding::TRAILER_LEN {
            return Err(Error::Truncated);
        }
        let ct_len = esp_len - hdr - icv_len;
        let block = self.block_size();
        if block > 1 && !ct_len.is_multiple_of(block) {
            return Err(Error::BadAlignment);
        }
        let esp = &mut buf.packet_mut()[split.offset..];
        let repr = EspRepr::parse(&EspPacket::new_checked(&*esp)?)?;
        if repr.spi != self.spi {
            return Err(Error::UnknownSpi(repr.spi));
        }
        let seq = self.replay.check(repr.seq)?;
        let seq_hi = esn::high(seq).to_be_bytes();
        let hi: &[u8] = if self.esn { &seq_hi } else { &[] };
        let (body, icv) = esp.split_at_mut(esp_len - icv_len);
        match &self.crypto {
            Crypto::Cbc { cipher, integ, .. } => {
                integ.verify(&[body, hi], icv)?;
                let (head, data) = body.split_at_mut(hdr);
                cipher.decrypt(&head[packet::HEADER_LEN..], data)?;
            }
            Crypto::Aead(a) => {
                let (head, data) = body.split_at_mut(hdr);
                let mut aad = [0u8; 12];
                let aad = aead_aad(&mut aad, &head[..packet::HEADER_LEN], hi);
                let iv8: &[u8; 8] = head[packet::HEADER_LEN..hdr].try_into().map_err(|_| Error::Truncated)?;
                a.open(iv8, aad, data, icv)?;
            }
        }
        // Authentic: the window may move (RFC 4303 3.4.3).
        self.replay.accept(seq)?;
        let plaintext = &body[hdr..];
        let (pad_len, next_header) = padding::check_trailer(plaintext, self.check_padding)?;
        let payload_len = plaintext.len() - pad_len - padding::TRAILER_LEN;
        let opened = Opened {
            seq,
            next_header,
            pad_len,
        };

        match self.mode {
            Mode::Tunnel => {
                let inner = &plaintext[..payload_len];
                let inner_len = tunnel::check_inner(next_header, inner)?;
                buf.pull_front(split.offset + hdr)?;
                buf.trim_back(buf.len() - inner_len)?;
            }
            Mode::Transport => {
                buf.trim_back(icv_len + pad_len + padding::TRAILER_LEN)?;
                buf.remove_gap(split.offset, hdr)?;
                // The Next Header byte lies before the ESP header, so it did not move.
                buf.packet_mut()[split.nh_offset] = next_header;
                ip::fix_length(buf.packet_mut())?;
            }
        }
        Ok(opened)
    }
}

/// RFC 4106 section 5 / RFC 7634 section 2.1: the AAD is SPI || Sequence Number, or with
/// ESN, SPI || high 32 bits || low 32 bits.
fn aead_aad<'a>(out: &'a mut [u8; 12], esp_header: &[u8], hi: &[u8]) -> &'a [u8] {
    out[..4].copy_from_slice(&esp_header[..4]);
    out[4..4 + hi.len()].copy_from_slice(hi);
    out[4 + hi.len()..8 + hi.len()].copy_from_slice(&esp_header[4..8]);
    &out[..8 + hi.len()]
}
