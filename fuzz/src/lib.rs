//! Shared pieces of the fuzz targets: the SA suites a selector byte picks, valid packets to
//! seal, the mutation format of the structure-aware targets, and the input-size bound.
//!
//! Everything here is ordinary Rust (no libFuzzer), so `examples/seeds.rs` can use it to
//! write the seed corpora.

use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, PacketBuf, SaParams};
use ipsec_engine::bundle::{AnySa, Bundle};
use ipsec_ipcomp::Algorithm;

/// Inputs longer than this are ignored: the per-input work bound of every packet target
/// (a packet is at most 64 KB; a few KB reach every parser state).
pub const MAX_INPUT: usize = 8192;
/// Headroom and tailroom around a packet in the targets' buffers.
pub const ROOM: usize = 512;

/// The ESP suites the first input byte picks from (`sel % ESP_SUITES`): CBC ciphers with each
/// HMAC, AEADs with each ICV length, and the unauthenticated `digest_null` suites whose
/// parsing after decryption no ICV guards.
pub const ESP_SUITES: u8 = 12;

/// ESP parameters for selector `sel`: bits 0-3 pick the suite, bit 4 tunnel mode, bit 5 ESN,
/// bit 6 IPv6 tunnel endpoints.
pub fn esp_params(sel: u8) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    type Suite = (
        Option<(EncAlg, usize)>,
        Option<(IntegAlg, usize, usize)>,
        Option<(AeadAlg, usize, usize)>,
    );
    let (enc, integ, aead): Suite = match sel % ESP_SUITES {
        0 => (Some((EncAlg::AesCbc, 16)), Some((IntegAlg::HmacSha1, 20, 12)), None),
        1 => (None, None, Some((AeadAlg::AesGcm, 20, 16))),
        2 => (Some((EncAlg::Des3Cbc, 24)), Some((IntegAlg::HmacMd5, 16, 12)), None),
        3 => (None, None, Some((AeadAlg::ChaCha20Poly1305, 36, 16))),
        4 => (Some((EncAlg::Null, 0)), Some((IntegAlg::HmacSha256, 32, 16)), None),
        5 => (Some((EncAlg::AesCbc, 32)), Some((IntegAlg::Null, 0, 0)), None),
        6 => (Some((EncAlg::AesCbc, 16)), Some((IntegAlg::Null, 0, 0)), None),
        7 => (None, None, Some((AeadAlg::AesGcm, 36, 8))),
        8 => (Some((EncAlg::DesCbc, 8)), Some((IntegAlg::HmacSha512, 64, 32)), None),
        9 => (Some((EncAlg::AesCbc, 24)), Some((IntegAlg::HmacSha384, 48, 24)), None),
        10 => (None, None, Some((AeadAlg::AesGcm, 28, 12))),
        _ => (Some((EncAlg::Des3Cbc, 24)), Some((IntegAlg::Null, 0, 0)), None),
    };
    let key = |n: usize, b: u8| (0..n as u8).map(|i| i.wrapping_mul(7) ^ b).collect::<Vec<u8>>();
    p.enc = enc.map(|(a, n)| Keyed::new(a, &key(n, 1), 0));
    p.integ = integ.map(|(a, n, icv)| Keyed::new(a, &key(n, 2), icv));
    p.aead = aead.map(|(a, n, icv)| Keyed::new(a, &key(n, 3), icv));
    set_mode(&mut p, sel);
    p.esn = sel & 0x20 != 0;
    p
}

/// AH parameters for selector `sel`: bits 0-2 pick the HMAC, bit 4 tunnel mode, bit 5 ESN,
/// bit 6 IPv6 tunnel endpoints.
pub fn ah_params(sel: u8) -> SaParams {
    let mut p = SaParams::new(Proto::Ah, 0x2000);
    let (alg, n, icv) = match sel % 5 {
        0 => (IntegAlg::HmacSha1, 20, 12),
        1 => (IntegAlg::HmacMd5, 16, 12),
        2 => (IntegAlg::HmacSha256, 32, 16),
        3 => (IntegAlg::HmacSha384, 48, 24),
        _ => (IntegAlg::HmacSha512, 64, 32),
    };
    p.integ = Some(Keyed::new(alg, &vec![0x5a; n], icv));
    set_mode(&mut p, sel);
    p.esn = sel & 0x20 != 0;
    p
}

fn set_mode(p: &mut SaParams, sel: u8) {
    if sel & 0x10 != 0 {
        p.mode = Mode::Tunnel;
        p.tunnel = Some(if sel & 0x40 != 0 {
            Tunnel {
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8::2".parse().unwrap(),
            }
        } else {
            Tunnel {
                src: "192.0.2.1".parse().unwrap(),
                dst: "192.0.2.2".parse().unwrap(),
            }
        });
    }
}

/// A fixed IV generator: the targets are deterministic.
pub fn rng() -> IvRng {
    IvRng::from_seed([7; 32])
}

/// A valid UDP packet (IPv4 if `v6` is false) carrying `payload`, checksums filled.
pub fn udp_packet(v6: bool, payload: &[u8]) -> Vec<u8> {
    udp_packet_between(v6, [10, 0, 0, 1], [10, 0, 0, 2], payload)
}

/// As [`udp_packet`], between the given IPv4 addresses (IPv6 uses fixed ones).
pub fn udp_packet_between(v6: bool, src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let mut udp = vec![0x30, 0x39, 0x00, 0x35, (udp_len >> 8) as u8, udp_len as u8, 0, 0];
    udp.extend_from_slice(payload);
    if v6 {
        let mut p = vec![0x60, 0, 0, 0, (udp_len >> 8) as u8, udp_len as u8, 17, 64];
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b]);
        p.extend_from_slice(&udp);
        p
    } else {
        let total = 20 + udp_len;
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            17,
            0,
            0,
        ];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        let c = ipsec_core::ip::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&udp);
        p
    }
}

/// Runs `f` on `packet` in a buffer with [`ROOM`] bytes each side; returns the resulting packet.
pub fn in_buf<E>(packet: &[u8], f: impl FnOnce(&mut PacketBuf) -> Result<(), E>) -> Result<Vec<u8>, E> {
    let mut raw = vec![0u8; packet.len() + 2 * ROOM + 70_000];
    raw[ROOM..ROOM + packet.len()].copy_from_slice(packet);
    let mut b = PacketBuf::new(&mut raw, ROOM, packet.len()).expect("buffer fits");
    f(&mut b)?;
    Ok(b.packet().to_vec())
}

/// The mutation format of the structure-aware targets: `edits` is a list of 3-byte records
/// `(offset_hi, offset_lo, xor)`, each XORing one byte of the packet (offset modulo its
/// length; xor 0 means "truncate to offset" instead). At most 64 records are applied.
pub fn apply_edits(packet: &mut Vec<u8>, edits: &[u8]) {
    for e in edits.chunks_exact(3).take(64) {
        if packet.is_empty() {
            return;
        }
        let at = usize::from(u16::from_be_bytes([e[0], e[1]])) % packet.len();
        if e[2] == 0 {
            packet.truncate(at);
        } else {
            packet[at] ^= e[2];
        }
    }
}

/// An IPComp SA of `alg` (CPI = the algorithm's), transport or tunnel 192.0.2.1 -> .2.
pub fn comp(alg: Algorithm, tunnel: bool) -> AnySa {
    let mut p = SaParams::new(Proto::Comp, u32::from(alg.cpi()));
    if tunnel {
        p.mode = Mode::Tunnel;
        p.tunnel = Some(Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "192.0.2.2".parse().unwrap(),
        });
    }
    AnySa::with_rng(&p, Some(alg), rng()).unwrap()
}

/// The bundles of the `bundle_open` target (byte 0 = `sel`): IPComp alone (transport or
/// tunnel), IPComp inside `digest_null` ESP, IPComp + ESP + AH; algorithm `sel % 3`.
pub fn open_bundle(sel: u8) -> Bundle {
    let alg = [Algorithm::Deflate, Algorithm::Lzs, Algorithm::Lzf][usize::from(sel % 3)];
    let sas = match (sel / 3) % 4 {
        0 => vec![comp(alg, false)],
        1 => vec![comp(alg, true)],
        2 => {
            // `digest_null`: what the fuzzer puts in the ciphertext reaches IPComp.
            vec![comp(alg, false), AnySa::with_rng(&esp_params(5), None, rng()).unwrap()]
        }
        _ => vec![
            comp(alg, false),
            AnySa::with_rng(&esp_params(0), None, rng()).unwrap(),
            AnySa::with_rng(&ah_params(2), None, rng()).unwrap(),
        ],
    };
    Bundle::new(sas)
}

/// IKE (crates/ike): the responder the `ike_responder` target drives and the initiator the
/// seed corpus records an exchange with. Both draw from ChaCha20 seeded with fixed values,
/// so replaying a recorded exchange into a fresh responder reproduces its keys and the
/// recorded IKE_AUTH and INFORMATIONAL requests verify: mutations reach the inner payloads.
pub mod ike {
    use ipsec_ike::{ChildConfig, Config, Connection, Identity, Psk};
    use std::net::SocketAddr;

    /// The responder's address.
    pub const RESPONDER: &str = "10.0.0.2";
    /// The initiator's address.
    pub const INITIATOR: &str = "10.0.0.1";
    /// The responder's RNG seed.
    pub const RESPONDER_SEED: u64 = 1;
    /// The initiator's RNG seed.
    pub const INITIATOR_SEED: u64 = 2;

    fn conn(name: &str, local: &str, remote: &str, ike: &str, lts: &str, rts: &str, esp: &str) -> Connection {
        let mut c = Connection::new(
            name,
            local.parse().unwrap(),
            Some(remote.parse().unwrap()),
            Identity::from_str_config(local).unwrap(),
            Some(Identity::from_str_config(remote).unwrap()),
            Psk::new(b"fuzzing psk"),
            ike,
        )
        .unwrap();
        c.children.push(ChildConfig::new("net", lts, rts, esp).unwrap());
        c.dpd_delay = Some(std::time::Duration::from_secs(30));
        c
    }

    /// The responder: two IKE proposals (GCM and CBC), ESP with and without ESN.
    pub fn responder() -> Config {
        Config::new(vec![conn(
            "r",
            RESPONDER,
            INITIATOR,
            "aes128gcm16-prfsha256-x25519-ecp256, aes256-sha256-modp2048",
            "10.2.0.0/16",
            "10.1.0.0/16",
            "aes128gcm16-esn-noesn, aes128-sha256",
        )])
    }

    /// An initiator matching [`responder`] with proposal `ike`.
    pub fn initiator(ike: &str) -> Config {
        Config::new(vec![conn(
            "i",
            INITIATOR,
            RESPONDER,
            ike,
            "10.1.0.0/16",
            "10.2.0.0/16",
            "aes128gcm16",
        )])
    }

    /// The post-quantum pair (issue #37): x25519 + ke1 ML-KEM-768 for the IKE SA (an
    /// IKE_INTERMEDIATE exchange runs while it comes up) and children rekeyed with x25519 +
    /// ke1 ML-KEM-768 (CREATE_CHILD_SA, then IKE_FOLLOWUP_KE).
    pub const PQ_IKE: &str = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";
    /// The ESP proposal of the post-quantum pair.
    pub const PQ_ESP: &str = "aes256gcm16-x25519-ke1_mlkem768";

    /// The post-quantum responder and initiator configs.
    pub fn pq_pair() -> (Config, Config) {
        let mut r = conn("r", RESPONDER, INITIATOR, PQ_IKE, "10.2.0.0/16", "10.1.0.0/16", PQ_ESP);
        let mut i = conn("i", INITIATOR, RESPONDER, PQ_IKE, "10.1.0.0/16", "10.2.0.0/16", PQ_ESP);
        // Whole messages (an ML-KEM key passes 1,280 bytes): the records are whole requests.
        r.fragmentation = false;
        i.fragmentation = false;
        (Config::new(vec![r]), Config::new(vec![i]))
    }

    /// (local, remote) of a datagram to the responder on port 500 or 4500.
    pub fn addrs(natt: bool) -> (SocketAddr, SocketAddr) {
        let p = if natt { 4500 } else { 500 };
        (
            format!("{RESPONDER}:{p}").parse().unwrap(),
            format!("{INITIATOR}:{p}").parse().unwrap(),
        )
    }

    /// Splits a fuzz input into datagrams: `[flags u8][len u16 BE][bytes]`...; flag bit 0 =
    /// NAT-T port, bit 1 = advance the clock 60 s first. At most 16 datagrams.
    pub fn split(mut data: &[u8]) -> Vec<(u8, &[u8])> {
        let mut v = Vec::new();
        while data.len() >= 3 && v.len() < 16 {
            let flags = data[0];
            let len = (u16::from_be_bytes([data[1], data[2]]) as usize).min(data.len() - 3);
            v.push((flags, &data[3..3 + len]));
            data = &data[3 + len..];
        }
        v
    }

    /// An IKE SA established between [`initiator`] (`ike`, keys exported) and
    /// [`responder`], for targets that drive it with authenticated requests: the two
    /// endpoints, the initiator's SK_ei/SK_ai cipher, the header of its next request (message
    /// ID 2) and the datagrams' addresses.
    pub struct Established {
        /// The initiator (its transmits already delivered).
        pub i: ipsec_ike::Endpoint,
        /// The responder.
        pub r: ipsec_ike::Endpoint,
        /// Seals what the initiator would send.
        pub seal: ipsec_ike::sk::SkCipher,
        /// The header of the initiator's next request.
        pub header: ipsec_ike::header::HeaderRepr,
        /// The initiator's (NAT-T) address and the responder's.
        pub from: SocketAddr,
        /// The responder's address.
        pub to: SocketAddr,
    }

    /// Brings [`Established`] up (seeded RNGs: the same SA every time).
    pub fn established(rng_i: &mut rand_chacha::ChaCha20Rng, rng_r: &mut rand_chacha::ChaCha20Rng) -> Established {
        established_between(initiator("aes128gcm16-prfsha256-x25519"), responder(), rng_i, rng_r)
    }

    /// [`established`] with the post-quantum pair ([`pq_pair`]).
    pub fn established_pq(rng_i: &mut rand_chacha::ChaCha20Rng, rng_r: &mut rand_chacha::ChaCha20Rng) -> Established {
        let (r, i) = pq_pair();
        established_between(i, r, rng_i, rng_r)
    }

    fn established_between(
        mut icfg: Config,
        rcfg: Config,
        rng_i: &mut rand_chacha::ChaCha20Rng,
        rng_r: &mut rand_chacha::ChaCha20Rng,
    ) -> Established {
        icfg.export_ike_keys = true;
        let mut i = ipsec_ike::Endpoint::new(icfg);
        let mut r = ipsec_ike::Endpoint::new(rcfg);
        let now = std::time::Duration::from_secs(1000);
        i.initiate(now, "i", rng_i).unwrap();
        let mut keys = None;
        for _ in 0..8 {
            while let Some(t) = i.poll_transmit() {
                let _ = r.handle_datagram(now, t.remote, t.local, &t.payload, rng_r);
            }
            while let Some(t) = r.poll_transmit() {
                let _ = i.handle_datagram(now, t.remote, t.local, &t.payload, rng_i);
            }
            while let Some(e) = i.poll_event() {
                if let ipsec_ike::Event::IkeUp { info, keys: Some(k) } = e {
                    keys = Some((info, k));
                }
            }
            while r.poll_event().is_some() {}
        }
        let (info, k) = keys.expect("the fuzzing IKE SA comes up");
        // 2 after IKE_SA_INIT and IKE_AUTH; one more a IKE_INTERMEDIATE exchange.
        let next_id = i.status(now).first().map_or(2, |s| s.next_request_id);
        let seal = ipsec_ike::sk::SkCipher::new(info.suite.encr, info.suite.integ, &k.sk_ei, &k.sk_ai).unwrap();
        Established {
            i,
            r,
            seal,
            header: ipsec_ike::header::HeaderRepr {
                spi_i: info.spi_i,
                spi_r: info.spi_r,
                next_payload: 0,
                exchange: ipsec_ike::header::ExchangeType::CreateChildSa,
                initiator: true,
                response: false,
                message_id: next_id,
                length: 0,
            },
            from: info.local,
            to: info.remote,
        }
    }

    /// [`Established`] with what drives it: the two RNGs (seeded as [`established`] wants
    /// them) and the clock (1000 s). The shared setup of the targets that send the responder
    /// authenticated requests (`ike_established`, `ike_fragments`).
    pub struct Driver {
        /// The IKE SA pair.
        pub sa: Established,
        /// The initiator's RNG (sealing draws IVs from it).
        pub rng_i: rand_chacha::ChaCha20Rng,
        /// The responder's RNG.
        pub rng_r: rand_chacha::ChaCha20Rng,
        /// The clock.
        pub now: std::time::Duration,
    }

    impl Default for Driver {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Driver {
        /// Brings the SA up (the same every time).
        pub fn new() -> Driver {
            Self::new_with(established)
        }

        /// Brings the post-quantum SA up ([`established_pq`]).
        pub fn new_pq() -> Driver {
            Self::new_with(established_pq)
        }

        fn new_with(make: fn(&mut rand_chacha::ChaCha20Rng, &mut rand_chacha::ChaCha20Rng) -> Established) -> Driver {
            use rand_chacha::rand_core::SeedableRng;
            let mut rng_i = rand_chacha::ChaCha20Rng::seed_from_u64(INITIATOR_SEED);
            let mut rng_r = rand_chacha::ChaCha20Rng::seed_from_u64(RESPONDER_SEED);
            let sa = make(&mut rng_i, &mut rng_r);
            Driver {
                sa,
                rng_i,
                rng_r,
                now: std::time::Duration::from_secs(1000),
            }
        }

        /// Moves the clock `secs` on and lets the responder's timers see it.
        pub fn advance(&mut self, secs: u64) {
            self.now += std::time::Duration::from_secs(secs);
            self.sa.r.handle_timeout(self.now, &mut self.rng_r);
        }

        /// The header of the initiator's next request: INFORMATIONAL if `informational`,
        /// else CREATE_CHILD_SA.
        pub fn request_header(&self, informational: bool) -> ipsec_ike::header::HeaderRepr {
            let mut h = self.sa.header;
            h.exchange = if informational {
                ipsec_ike::header::ExchangeType::Informational
            } else {
                ipsec_ike::header::ExchangeType::CreateChildSa
            };
            h
        }

        /// The next request gets the next message ID.
        pub fn next_message_id(&mut self) {
            self.sa.header.message_id = self.sa.header.message_id.wrapping_add(1);
        }

        /// Hands `datagram` to the responder (from the initiator's address) and throws away
        /// what it sends and reports.
        pub fn deliver(&mut self, datagram: &[u8]) {
            let _ = self
                .sa
                .r
                .handle_datagram(self.now, self.sa.to, self.sa.from, datagram, &mut self.rng_r);
            self.drain();
        }

        /// Runs the responder's timers (at most 8 expiries), as the end of an input.
        pub fn run_timers(&mut self) {
            for _ in 0..8 {
                match self.sa.r.poll_timeout() {
                    Some(t) => {
                        self.now = self.now.max(t);
                        self.sa.r.handle_timeout(self.now, &mut self.rng_r);
                    }
                    None => break,
                }
                self.drain();
            }
        }

        /// The targets' loop: unless `data` is longer than [`MAX_INPUT`](crate::MAX_INPUT),
        /// a fresh driver gets at most `max` records of `data`, each a `head`-byte head whose
        /// last two bytes are the body's length (u16 BE, cut to what is left) and the body:
        /// `record(driver, head, body)` for each; then the timers run.
        pub fn run(data: &[u8], head: usize, max: usize, record: impl FnMut(&mut Driver, &[u8], &[u8])) {
            Self::run_with(Driver::new, data, head, max, record)
        }

        /// [`Driver::run`] on the driver `make` brings up ([`Driver::new_pq`], say).
        pub fn run_with(
            make: fn() -> Driver,
            data: &[u8],
            head: usize,
            max: usize,
            mut record: impl FnMut(&mut Driver, &[u8], &[u8]),
        ) {
            if data.len() > crate::MAX_INPUT {
                return;
            }
            let mut d = make();
            let mut rest = data;
            for _ in 0..max {
                if rest.len() < head {
                    break;
                }
                let len = usize::from(u16::from_be_bytes([rest[head - 2], rest[head - 1]])).min(rest.len() - head);
                let (h, body) = (&rest[..head], &rest[head..head + len]);
                rest = &rest[head + len..];
                record(&mut d, h, body);
            }
            d.run_timers();
        }

        fn drain(&mut self) {
            while self.sa.r.poll_transmit().is_some() {}
            while self.sa.r.poll_event().is_some() {}
        }
    }

    /// The inverse of [`split`].
    pub fn join(datagrams: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (f, d) in datagrams {
            out.push(*f);
            out.extend_from_slice(&(d.len() as u16).to_be_bytes());
            out.extend_from_slice(d);
        }
        out
    }
}
