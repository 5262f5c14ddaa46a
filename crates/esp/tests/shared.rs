//! One SA used from many threads at once (`Esp` by shared reference), batches, and received
//! fragments.

use ipsec_core::ip;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Proto};
use ipsec_core::{AeadAlg, EncAlg, Error, IntegAlg, PacketBuf, SaParams};
use ipsec_esp::{Esp, EspSa};
use std::collections::HashSet;
use std::sync::Arc;

const HEAD: usize = 64;
const TAIL: usize = 64;

fn udp_v4(tag: u32, payload_len: usize) -> Vec<u8> {
    let total = 28 + payload_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p[24..26].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(31).wrapping_add(tag) as u8;
    }
    p[28..32].copy_from_slice(&tag.to_be_bytes());
    ip::fix_length(&mut p).unwrap();
    p
}

fn params(cbc: bool, window: u32) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x4242);
    if cbc {
        p.enc = Some(Keyed::new(EncAlg::AesCbc, &[7; 16], 0));
        p.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[9; 20], 12));
    } else {
        p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[5; 20], 16));
    }
    p.replay_window = window;
    p
}

fn framed(pkt: &[u8]) -> Vec<u8> {
    let mut raw = vec![0u8; HEAD + pkt.len() + TAIL];
    raw[HEAD..HEAD + pkt.len()].copy_from_slice(pkt);
    raw
}

/// N threads sealing on one SA use every sequence number exactly once; a receiver fed their
/// output in an interleaving (here: reversed in blocks, inside the window) accepts all of
/// them and rejects every replay.
#[test]
fn threads_share_one_sa_and_every_number_is_used_once() {
    for cbc in [false, true] {
        const THREADS: usize = 4;
        const PER: usize = 500;
        let tx = Arc::new(Esp::new(&params(cbc, 4096)).unwrap());
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let tx = Arc::clone(&tx);
                std::thread::spawn(move || {
                    let mut rng = IvRng::from_seed([t as u8; 32]);
                    let mut out = Vec::new();
                    for i in 0..PER {
                        let pkt = udp_v4((t * PER + i) as u32, 100);
                        let mut raw = framed(&pkt);
                        let mut b = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
                        let seq = if i % 2 == 0 {
                            tx.seal(&mut rng, &mut b).unwrap()
                        } else {
                            // Half of them through the batch path, a batch of one.
                            let mut r = [Ok(0)];
                            tx.seal_batch(&mut rng, core::slice::from_mut(&mut b), &mut r);
                            r[0].unwrap()
                        };
                        out.push((seq, pkt, b.packet().to_vec()));
                    }
                    out
                })
            })
            .collect();
        let mut all: Vec<_> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let seqs: HashSet<u64> = all.iter().map(|(s, _, _)| *s).collect();
        assert_eq!(seqs.len(), THREADS * PER, "a sequence number was used twice");
        assert_eq!(seqs, (1..=(THREADS * PER) as u64).collect());

        // Reorder: sort by sequence, then reverse each block of 64.
        all.sort_by_key(|(s, _, _)| *s);
        for chunk in all.chunks_mut(64) {
            chunk.reverse();
        }
        let rx = Esp::new(&params(cbc, 4096)).unwrap();
        for (seq, plain, sealed) in &all {
            let mut raw = sealed.clone();
            let mut b = PacketBuf::new(&mut raw, 0, sealed.len()).unwrap();
            let o = rx.open(&mut b).unwrap();
            assert_eq!(o.seq, *seq);
            assert_eq!(b.packet(), &plain[..]);
        }
        for (_, _, sealed) in all.iter().step_by(97) {
            let mut raw = sealed.clone();
            let mut b = PacketBuf::new(&mut raw, 0, sealed.len()).unwrap();
            assert_eq!(rx.open(&mut b).err(), Some(Error::Replay));
        }
    }
}

/// Opening from several threads at once: every packet accepted exactly once even when each
/// is offered by two threads.
#[test]
fn threads_open_concurrently_and_duplicates_lose() {
    let mut tx = EspSa::new(&params(false, 4096)).unwrap();
    let sealed: Vec<Vec<u8>> = (0..2000)
        .map(|i| {
            let pkt = udp_v4(i, 64);
            let mut raw = framed(&pkt);
            let mut b = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
            tx.seal(&mut b).unwrap();
            b.packet().to_vec()
        })
        .collect();
    let sealed = Arc::new(sealed);
    let rx = Arc::new(Esp::new(&params(false, 4096)).unwrap());
    let accepted: usize = (0..2)
        .map(|_| {
            let (rx, sealed) = (Arc::clone(&rx), Arc::clone(&sealed));
            std::thread::spawn(move || {
                sealed
                    .iter()
                    .filter(|s| {
                        let mut raw = s.to_vec();
                        let mut b = PacketBuf::new(&mut raw, 0, s.len()).unwrap();
                        match rx.open(&mut b) {
                            Ok(_) => true,
                            Err(Error::Replay) => false,
                            Err(e) => panic!("unexpected {e}"),
                        }
                    })
                    .count()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    assert_eq!(accepted, 2000, "each packet accepted exactly once across both threads");
}

/// A batch gives each packet its own number, in order, and refuses the packets that do not
/// fit without sealing them; its output opens like one-at-a-time output.
#[test]
fn batch_seals_like_single_and_reports_each_packet() {
    for cbc in [false, true] {
        let tx = Esp::new(&params(cbc, 64)).unwrap();
        let rx = Esp::new(&params(cbc, 64)).unwrap();
        let mut rng = IvRng::from_seed([1; 32]);
        let pkts: Vec<Vec<u8>> = (0..20).map(|i| udp_v4(i, 10 + 70 * i as usize)).collect();
        let mut raws: Vec<Vec<u8>> = pkts.iter().map(|p| framed(p)).collect();
        // Packet 5 has no tailroom: refused, the others sealed.
        let short = HEAD + pkts[5].len();
        raws[5].truncate(short);
        let mut bufs: Vec<PacketBuf> = raws
            .iter_mut()
            .zip(&pkts)
            .map(|(r, p)| PacketBuf::new(r, HEAD, p.len()).unwrap())
            .collect();
        let mut out = vec![Ok(0); bufs.len()];
        tx.seal_batch(&mut rng, &mut bufs, &mut out);
        for (i, (o, b)) in out.iter().zip(bufs.iter_mut()).enumerate() {
            if i == 5 {
                assert_eq!(*o, Err(Error::NoTailroom));
                assert_eq!(b.packet(), &pkts[5][..], "a refused packet is left as it was");
                continue;
            }
            assert_eq!(*o, Ok(i as u64 + 1));
            let mut raw = b.packet().to_vec();
            let mut ob = PacketBuf::new(&mut raw, 0, b.len()).unwrap();
            assert_eq!(rx.open(&mut ob).unwrap().seq, i as u64 + 1);
            assert_eq!(ob.packet(), &pkts[i][..]);
        }
    }
}

/// RFC 4303 3.4.1: an ESP packet that is an IP fragment is discarded, IPv4 (MF or offset)
/// and IPv6 (a Fragment header before ESP), and the window does not move.
#[test]
fn fragments_are_refused() {
    let mut tx = EspSa::new(&params(true, 64)).unwrap();
    let pkt = udp_v4(1, 40);
    let mut raw = framed(&pkt);
    let mut b = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
    tx.seal(&mut b).unwrap();
    let sealed = b.packet().to_vec();
    for (byte, bit) in [(6usize, 0x20u8), (7, 0x01)] {
        let mut f = sealed.clone();
        f[byte] |= bit;
        ip::fix_length(&mut f).unwrap();
        let rx = Esp::new(&params(true, 64)).unwrap();
        let mut b = PacketBuf::new(&mut f, 0, sealed.len()).unwrap();
        assert_eq!(rx.open(&mut b).err(), Some(Error::Fragment));
        assert_eq!(rx.replay_window().top(), 0);
    }
    // IPv6: a transport-mode ESP packet with a Fragment header in front of ESP.
    let mut six = vec![0u8; 40];
    six[0] = 0x60;
    six[6] = ipsec_core::ip::proto::FRAGMENT;
    six[7] = 64;
    six[8..24].copy_from_slice(&"2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    six[24..40].copy_from_slice(&"2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    six.extend_from_slice(&[ipsec_core::ip::proto::ESP, 0, 0, 0, 0, 0, 0, 9]);
    six.extend_from_slice(&sealed[20..]);
    ip::fix_length(&mut six).unwrap();
    let rx = Esp::new(&params(true, 64)).unwrap();
    let len = six.len();
    let mut b = PacketBuf::new(&mut six, 0, len).unwrap();
    assert_eq!(rx.open(&mut b).err(), Some(Error::Fragment));
}

/// With a fixed IV (tests only) a batch's bytes equal one-at-a-time sealing, packet for
/// packet: the multi-buffer CBC path computes exactly the single-chain ciphertext.
#[test]
fn batch_bytes_equal_single_bytes() {
    for (cbc, iv) in [(true, vec![0x5a; 16]), (false, vec![0x5a; 8])] {
        let mut single = Esp::new(&params(cbc, 64)).unwrap();
        let mut batch = Esp::new(&params(cbc, 64)).unwrap();
        single.set_fixed_iv_for_testing(&iv).unwrap();
        batch.set_fixed_iv_for_testing(&iv).unwrap();
        let mut rng = IvRng::from_seed([3; 32]);
        let pkts: Vec<Vec<u8>> = (0..37).map(|i| udp_v4(i, 4 + (i as usize * 41) % 1400)).collect();
        let one: Vec<Vec<u8>> = pkts
            .iter()
            .map(|p| {
                let mut raw = framed(p);
                let mut b = PacketBuf::new(&mut raw, HEAD, p.len()).unwrap();
                single.seal(&mut rng, &mut b).unwrap();
                b.packet().to_vec()
            })
            .collect();
        let mut raws: Vec<Vec<u8>> = pkts.iter().map(|p| framed(p)).collect();
        let mut bufs: Vec<PacketBuf> = raws
            .iter_mut()
            .zip(&pkts)
            .map(|(r, p)| PacketBuf::new(r, HEAD, p.len()).unwrap())
            .collect();
        let mut out = vec![Ok(0); bufs.len()];
        batch.seal_batch(&mut rng, &mut bufs, &mut out);
        for (i, (b, o)) in bufs.iter().zip(&one).enumerate() {
            assert_eq!(out[i], Ok(i as u64 + 1));
            assert_eq!(b.packet(), &o[..], "packet {i} (cbc {cbc})");
        }
    }
}

/// RFC 4303 3.3.4: transport-mode ESP is applied only to whole datagrams, so a fragment is
/// refused at seal (found by the `esp_seal` fuzz target: it sealed a fragment its own open then
/// refused). Tunnel mode carries fragments as any inner packet.
#[test]
fn transport_mode_does_not_seal_fragments() {
    let mut frag = udp_v4(1, 40);
    frag[6] |= 0x20; // MF
    ip::fix_length(&mut frag).unwrap();
    let tx = Esp::new(&params(false, 64)).unwrap();
    let mut raw = framed(&frag);
    let mut b = PacketBuf::new(&mut raw, HEAD, frag.len()).unwrap();
    assert_eq!(
        tx.seal(&mut IvRng::from_seed([0; 32]), &mut b).err(),
        Some(Error::Fragment)
    );
    assert_eq!(b.packet(), &frag[..], "left as it was");
    assert_eq!(tx.core().seq().peek(), Ok(1), "no sequence number used");
    let mut p = params(false, 64);
    p.mode = ipsec_core::sa::Mode::Tunnel;
    p.tunnel = Some(ipsec_core::sa::Tunnel {
        src: "192.0.2.1".parse().unwrap(),
        dst: "192.0.2.2".parse().unwrap(),
    });
    let (tx, rx) = (Esp::new(&p).unwrap(), Esp::new(&p).unwrap());
    let mut raw = framed(&frag);
    let mut b = PacketBuf::new(&mut raw, HEAD, frag.len()).unwrap();
    tx.seal(&mut IvRng::from_seed([0; 32]), &mut b).unwrap();
    rx.open(&mut b).unwrap();
    assert_eq!(b.packet(), &frag[..]);
}
