//! Writes the seed corpora of every fuzz target into `fuzz/corpus/<target>/` from valid
//! packets sealed here with the targets' own keys (nothing binary is committed).
//! Run by `scripts/fuzz/fuzz-seeds.sh` (and `scripts/fuzz/fuzz.sh`).
use ipsec_ah::AhSa;
use ipsec_esp::EspSa;
use ipsec_fuzz::{ah_params, esp_params, in_buf, open_bundle, rng, udp_packet, udp_packet_between};
use ipsec_ipcomp::{Algorithm, Compressor};
use std::path::Path;

const TEXT: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: example.org\r\nAccept: text/html, text/html, */*\r\n\r\n";

fn write(root: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = root.join(target);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), bytes).unwrap();
}

fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
    [a, b].concat()
}

/// A classic pcap (LINKTYPE_RAW = 101) holding `packets`.
fn pcap(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [
        0xa1b2c3d4u32.to_le_bytes(),
        [2, 0, 4, 0],
        [0; 4],
        [0; 4],
        65535u32.to_le_bytes(),
        101u32.to_le_bytes(),
    ] {
        out.extend_from_slice(&v);
    }
    for (i, p) in packets.iter().enumerate() {
        for v in [i as u32, 0, p.len() as u32, p.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(p);
    }
    out
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let root = std::env::args().nth(1).map(Into::into).unwrap_or(root);
    let mut esp_sealed = Vec::new();
    for sel in 0..=255u8 {
        let v6 = sel & 0x80 != 0;
        // A spread of suites, modes, ESN and IP versions, not all 256.
        if sel % 7 != 0 && sel % 12 != u8::from(v6) {
            continue;
        }
        let inner = udp_packet(v6, &TEXT[..usize::from(sel) % TEXT.len()]);
        if let Ok(mut sa) = EspSa::with_rng(&esp_params(sel), rng()) {
            let sealed = in_buf(&inner, |b| sa.seal(b).map(|_| ())).unwrap();
            write(&root, "esp_open", &format!("s{sel}"), &cat(&[sel], &sealed));
            write(
                &root,
                "esp_mutate",
                &format!("s{sel}"),
                &[sel, sel, 0, 30, 1, 0, 200, 0],
            );
            write(&root, "esp_seal", &format!("s{sel}"), &cat(&[sel], &inner));
            write(&root, "ip_views", &format!("esp{sel}"), &sealed);
            write(&root, "engine_inbound", &format!("esp{sel}"), &sealed);
            esp_sealed.push(sealed);
        }
        if let Ok(mut sa) = AhSa::new(&ah_params(sel)) {
            let sealed = in_buf(&inner, |b| sa.seal(b).map(|_| ())).unwrap();
            write(&root, "ah_open", &format!("s{sel}"), &cat(&[sel], &sealed));
            write(&root, "ah_mutate", &format!("s{sel}"), &[sel, sel, 0, 8, 1]);
            write(&root, "ip_views", &format!("ah{sel}"), &sealed);
        }
    }
    for sel in 0..8u8 {
        write(
            &root,
            "esp_diff",
            &format!("s{sel}"),
            &cat(&[sel], &TEXT[..usize::from(sel) * 11]),
        );
        write(
            &root,
            "deflate_diff",
            &format!("s{sel}"),
            &cat(&[sel], &TEXT.repeat(usize::from(sel))),
        );
    }
    for (i, alg) in [Algorithm::Deflate, Algorithm::Lzs, Algorithm::Lzf]
        .into_iter()
        .enumerate()
    {
        let mut c = Compressor::new(alg);
        let mut out = vec![0u8; 4096];
        let input = TEXT.repeat(3);
        let n = c.compress(&input, &mut out).unwrap();
        write(
            &root,
            "ipcomp_decompress",
            alg.name(),
            &cat(&[i as u8, 0x10, 0], &out[..n]),
        );
    }
    for sel in 0..12u8 {
        let inner = udp_packet_between(false, [192, 0, 2, 1], [192, 0, 2, 2], &TEXT.repeat(2));
        let mut b = open_bundle(sel);
        if let Ok(sealed) = in_buf(&inner, |buf| b.seal(buf)) {
            write(&root, "bundle_open", &format!("s{sel}"), &cat(&[sel], &sealed));
            write(&root, "engine_inbound", &format!("bundle{sel}"), &sealed);
        }
    }
    write(&root, "pcap_read", "raw", &pcap(&esp_sealed[..4]));
    for (i, spec) in [
        "proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' 0x000102030405060708090a0b0c0d0e0f auth-trunc 'hmac(sha1)' 0x0001020304050607080910111213141516171819 96",
        "proto esp spi 0x1001 mode transport aead 'rfc4106(gcm(aes))' 0x000102030405060708090a0b0c0d0e0f10111213 128 esn replay-window 128",
        "proto ah spi 0x2001 mode tunnel src 2001:db8::a dst 2001:db8::b auth 'hmac(md5)' 0x000102030405060708090a0b0c0d0e0f",
        "proto comp spi 61440 mode transport comp lzf",
    ]
    .iter()
    .enumerate()
    {
        write(&root, "spec_parse", &format!("s{i}"), spec.as_bytes());
    }
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/config");
    for f in ["host-a.toml", "host-b.toml"] {
        write(&root, "config_toml", f, &std::fs::read(examples.join(f)).unwrap());
    }
    write(
        &root,
        "config_setkey",
        "setkey.conf",
        &std::fs::read(examples.join("setkey.conf")).unwrap(),
    );
    // tunneld (host B) receives what host A's engine sends.
    let text = std::fs::read_to_string(examples.join("host-a.toml")).unwrap();
    let mut a = ipsec::config::parse(&text, ipsec::config::Format::Toml)
        .unwrap()
        .config
        .build(std::time::Duration::ZERO)
        .unwrap();
    for n in [10usize, 200, 1000] {
        let inner = udp_packet_between(false, [192, 0, 2, 1], [192, 0, 2, 2], &TEXT.repeat(n / 50 + 1)[..n]);
        if let Ok(sealed) = in_buf(&inner, |b| a.outbound(b, std::time::Duration::ZERO).map(|_| ())) {
            write(&root, "tunnel_inbound", &format!("a{n}"), &sealed);
        }
    }
    write(&root, "tunnel_inbound", "plain", &udp_packet(false, TEXT));
    ike_seeds(&root);
    ike_established_seeds(&root);
    ike_pq_seeds(&root);
    pki_seeds(&root);
    eap_seeds(&root);
    eap_tls_seeds(&root);
    println!("seed corpora written under {}", root.display());
}

/// IKE: an initiator runs a whole exchange (IKE_SA_INIT, IKE_AUTH, a liveness check, a
/// Delete) against the `ike_responder` target's responder with the target's RNG seed; each
/// datagram to the responder is an `ike_parse` seed, the sequence an `ike_responder` seed.
fn ike_seeds(root: &Path) {
    use ipsec_fuzz::ike;
    use rand_chacha::rand_core::SeedableRng;
    for (n, proposal) in [
        "aes128gcm16-prfsha256-x25519",
        "aes256-sha256-modp2048",
        "aes128gcm16-prfsha256-ecp256",
    ]
    .iter()
    .enumerate()
    {
        let mut i = ipsec_ike::Endpoint::new(ike::initiator(proposal));
        let mut r = ipsec_ike::Endpoint::new(ike::responder());
        let mut irng = rand_chacha::ChaCha20Rng::seed_from_u64(ike::INITIATOR_SEED);
        let mut rrng = rand_chacha::ChaCha20Rng::seed_from_u64(ike::RESPONDER_SEED);
        let now = std::time::Duration::from_secs(1000);
        let mut to_r: Vec<(u8, Vec<u8>)> = Vec::new();
        i.initiate(now, "i", &mut irng).unwrap();
        for step in 0..3 {
            for _ in 0..8 {
                let mut moved = false;
                while let Some(t) = i.poll_transmit() {
                    moved = true;
                    let natt = t.remote.port() == 4500;
                    to_r.push((natt as u8, t.payload.clone()));
                    let _ = r.handle_datagram(now, t.remote, t.local, &t.payload, &mut rrng);
                }
                while let Some(t) = r.poll_transmit() {
                    moved = true;
                    let _ = i.handle_datagram(now, t.remote, t.local, &t.payload, &mut irng);
                }
                if !moved {
                    break;
                }
            }
            match step {
                0 => i.check_liveness(now, "i", &mut irng).unwrap(),
                1 => i.terminate(now, "i", &mut irng).unwrap(),
                _ => {}
            }
        }
        for (k, (_, d)) in to_r.iter().enumerate() {
            write(root, "ike_parse", &format!("p{n}m{k}"), d);
        }
        let seed = ike::join(&to_r);
        // The replay reaches IKE_AUTH: the target's responder brings the SA up and down.
        let mut fresh = ipsec_ike::Endpoint::new(ike::responder());
        let mut frng = rand_chacha::ChaCha20Rng::seed_from_u64(ike::RESPONDER_SEED);
        let (mut up, mut down) = (false, false);
        for (flags, d) in ike::split(&seed) {
            let (local, remote) = ike::addrs(flags & 1 != 0);
            let _ = fresh.handle_datagram(now, local, remote, d, &mut frng);
            while let Some(e) = fresh.poll_event() {
                up |= matches!(e, ipsec_ike::Event::IkeUp { .. });
                down |= matches!(e, ipsec_ike::Event::IkeDown { .. });
            }
        }
        assert!(up && down, "the ike_responder seed {proposal} does not replay");
        write(root, "ike_responder", &format!("x{n}"), &seed);
    }
    for s in [
        "aes128gcm16-prfsha256-x25519, aes256-sha256-ecp384",
        "10.1.0.0/16[tcp/443]",
        "vpn.example.org",
    ] {
        write(root, "ike_parse", &format!("t{}", s.len()), s.as_bytes());
    }
}

/// `ike_established` seeds: the initiator's own CREATE_CHILD_SA (child rekey with and without
/// PFS-less proposals, IKE rekey) and INFORMATIONAL (Delete of the child, liveness) requests on
/// the target's SA, decrypted into the target's records, so mutations start from real
/// exchanges. Checked: replayed into the target's responder, the child rekey is answered
/// with a new pair.
fn ike_established_seeds(root: &Path) {
    use ipsec_fuzz::ike;
    use rand_chacha::rand_core::SeedableRng;
    let record = |kind: u8, e: &ike::Established, raw: &[u8]| -> Vec<u8> {
        let m = ipsec_ike::message::Message::parse(raw).unwrap();
        let (off, first) = m.chain.sk.unwrap();
        let inner = e.seal.open(raw, off).unwrap();
        let mut v = vec![kind, first];
        v.extend_from_slice(&(inner.len() as u16).to_be_bytes());
        v.extend_from_slice(&inner);
        v
    };
    let now = std::time::Duration::from_secs(1000);
    for (n, what) in ["rekey_child", "rekey_ike", "delete_child", "liveness"]
        .iter()
        .enumerate()
    {
        let mut ri = rand_chacha::ChaCha20Rng::seed_from_u64(ike::INITIATOR_SEED);
        let mut rr = rand_chacha::ChaCha20Rng::seed_from_u64(ike::RESPONDER_SEED);
        let mut e = ike::established(&mut ri, &mut rr);
        let spi = e.i.children("i").first().map(|c| c.1).unwrap();
        match *what {
            "rekey_child" => e.i.rekey_child(now, spi, &mut ri).unwrap(),
            "rekey_ike" => e.i.rekey_ike(now, "i", &mut ri).unwrap(),
            "delete_child" => e.i.delete_child(now, spi, &mut ri).unwrap(),
            _ => e.i.check_liveness(now, "i", &mut ri).unwrap(),
        }
        let t = e.i.poll_transmit().expect("a request");
        let kind = u8::from(matches!(*what, "delete_child" | "liveness"));
        let rec = record(kind, &e, &t.payload);
        if n == 0 {
            // The record replayed through the target's path makes a new pair.
            let mut h = e.header;
            h.exchange = ipsec_ike::header::ExchangeType::CreateChildSa;
            let msg = e.seal.seal(&h, rec[1], &rec[4..], &mut ri).unwrap();
            e.r.handle_datagram(now, e.to, e.from, &msg, &mut rr).unwrap();
            let up = std::iter::from_fn(|| e.r.poll_event())
                .any(|ev| matches!(ev, ipsec_ike::Event::ChildUp(c) if c.rekeys.is_some()));
            assert!(up, "the ike_established rekey seed does not replay");
        }
        write(root, "ike_established", what, &rec);
    }
}

/// `ike_pq` seeds: on the target's post-quantum SA, the initiator's own child rekey and IKE
/// rekey, each its CREATE_CHILD_SA request and then (after the responder's answer) its
/// IKE_FOLLOWUP_KE, decrypted into the target's records. Checked: replayed into the target's
/// responder, the child rekey makes a new pair.
fn ike_pq_seeds(root: &Path) {
    use ipsec_fuzz::ike;
    use rand_chacha::rand_core::SeedableRng;
    let now = std::time::Duration::from_secs(1000);
    for what in ["rekey_child", "rekey_ike"] {
        let mut ri = rand_chacha::ChaCha20Rng::seed_from_u64(ike::INITIATOR_SEED);
        let mut rr = rand_chacha::ChaCha20Rng::seed_from_u64(ike::RESPONDER_SEED);
        let mut e = ike::established_pq(&mut ri, &mut rr);
        let spi = e.i.children("i").first().map(|c| c.1).unwrap();
        match what {
            "rekey_child" => e.i.rekey_child(now, spi, &mut ri).unwrap(),
            _ => e.i.rekey_ike(now, "i", &mut ri).unwrap(),
        }
        let mut seed = Vec::new();
        // CREATE_CHILD_SA (kind 0), then IKE_FOLLOWUP_KE (kind 1): each request of the
        // initiator, decrypted; the responder answers so the initiator goes on.
        for kind in [0u8, 1] {
            let mut frags = Vec::new();
            while let Some(t) = e.i.poll_transmit() {
                frags.push(t);
            }
            let raw = frags.first().expect("a request").payload.clone();
            let m = ipsec_ike::message::Message::parse(&raw).unwrap();
            for t in &frags {
                e.r.handle_datagram(now, t.remote, t.local, &t.payload, &mut rr)
                    .unwrap();
            }
            // The pair does not fragment (ipsec_fuzz::ike::pq_pair): one whole message.
            assert_eq!(frags.len(), 1, "{what}: one datagram");
            let (off, first) = m.chain.sk.expect("an Encrypted payload");
            let inner = e.seal.open(&raw, off).unwrap();
            seed.push(kind);
            seed.push(first);
            seed.extend_from_slice(&(inner.len() as u16).to_be_bytes());
            seed.extend_from_slice(&inner);
            while let Some(t) = e.r.poll_transmit() {
                let _ = e.i.handle_datagram(now, t.remote, t.local, &t.payload, &mut ri);
            }
            while e.r.poll_event().is_some() {}
            while e.i.poll_event().is_some() {}
        }
        if what == "rekey_child" {
            // Replayed through the target's path, the child rekey makes a new pair.
            let mut ri = rand_chacha::ChaCha20Rng::seed_from_u64(ike::INITIATOR_SEED);
            let mut rr = rand_chacha::ChaCha20Rng::seed_from_u64(ike::RESPONDER_SEED);
            let mut e = ike::established_pq(&mut ri, &mut rr);
            let mut h = e.header;
            let mut rest = &seed[..];
            let mut up = false;
            while rest.len() >= 4 {
                let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
                h.exchange = if rest[0] == 0 {
                    ipsec_ike::header::ExchangeType::CreateChildSa
                } else {
                    ipsec_ike::header::ExchangeType::IkeFollowupKe
                };
                let msg = e.seal.seal(&h, rest[1], &rest[4..4 + len], &mut ri).unwrap();
                e.r.handle_datagram(now, e.to, e.from, &msg, &mut rr).unwrap();
                up |= std::iter::from_fn(|| e.r.poll_event())
                    .any(|ev| matches!(ev, ipsec_ike::Event::ChildUp(c) if c.rekeys.is_some()));
                h.message_id += 1;
                rest = &rest[4 + len..];
            }
            assert!(up, "the ike_pq child rekey seed does not replay");
        }
        write(root, "ike_pq", what, &seed);
    }
}

/// `pki_cert` and `pki_payloads` seeds from the certificate fixtures of crates/ike
/// (scripts/lib/gen-test-certs.sh): every certificate's DER and subject DN, the CRL; CERT and
/// CERTREQ bodies; openssl's signatures as AUTH data for each method (over msg.bin, which the
/// target does not verify against).
fn pki_seeds(root: &Path) {
    use ipsec_ike::pki::{CertPayload, CertReqPayload, Certificate, SigScheme};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/ike/tests/data/pki");
    let read = |n: &str| std::fs::read(dir.join(n)).unwrap();
    let names = [
        "root-ca", "inter-ca", "moon", "sun", "carol", "dave", "expired", "revoked", "codesign", "unknown",
    ];
    let mut ids = Vec::new();
    for n in names {
        let c = Certificate::parse_pem_or_der(&read(&format!("{n}.pem")))
            .unwrap()
            .remove(0);
        write(root, "pki_cert", &format!("c-{n}"), c.der());
        write(root, "pki_cert", &format!("dn-{n}"), &c.subject().to_der());
        write(
            root,
            "pki_payloads",
            &format!("cert-{n}"),
            &cat(&[0], &CertPayload::x509(&c).to_body()),
        );
        let mut id = vec![0, 9, 0, 0, 0];
        id.extend_from_slice(&c.subject().to_der());
        write(root, "pki_payloads", &format!("id-{n}"), &id);
        ids.push(c.ca_key_id());
    }
    write(root, "pki_cert", "crl", &read("root-ca.crl.der"));
    write(
        root,
        "pki_payloads",
        "certreq",
        &cat(&[0], &CertReqPayload::x509(ids).to_body()),
    );
    write(root, "pki_payloads", "hashes", &[0, 0, 2, 0, 3, 0, 4, 0, 5]);
    let m14 = |scheme: SigScheme, sig: &[u8]| {
        let alg = scheme.algorithm_identifier();
        [&[alg.len() as u8][..], alg, sig].concat()
    };
    // Selector: high nibble the certificate (moon, sun, carol, dave), low nibble the method.
    let sigs: [(u8, &str, Option<SigScheme>); 8] = [
        (0x00, "moon-pkcs1-sha1.bin", None),
        (0x04, "moon-pkcs1-sha256.bin", Some(SigScheme::RsaPkcs1Sha256)),
        (0x04, "moon-pss-sha384.bin", Some(SigScheme::RsaPssSha384)),
        (0x14, "sun-ecdsa-sha256.der", Some(SigScheme::EcdsaP256Sha256)),
        (0x11, "sun-ecdsa-sha256.der", None),
        (0x24, "carol-ecdsa-sha384.der", Some(SigScheme::EcdsaP384Sha384)),
        (0x22, "carol-ecdsa-sha384.der", None),
        (0x34, "dave-ed25519.bin", Some(SigScheme::Ed25519)),
    ];
    for (k, (sel, file, scheme)) in sigs.into_iter().enumerate() {
        let sig = read(file);
        let data = match scheme {
            Some(s) => m14(s, &sig),
            // Classic ECDSA: r||s; a DER signature of 70-ish bytes is near enough for a seed.
            None => sig,
        };
        write(root, "pki_payloads", &format!("auth{k}"), &cat(&[sel], &data));
    }
}

/// `eap_parse` seeds: each message of a local EAP-MSCHAPv2 conversation alone, and the
/// peer-side and server-side sequences (1-octet length prefixes, as the target splits them);
/// `radius_parse` seeds: signed Access-Challenge and Access-Accept answers (with MS-MPPE keys
/// and a fragmented EAP-Message) and a signed Access-Request.
fn eap_seeds(root: &Path) {
    use ipsec_eap::mschapv2::{Credentials, Peer, PeerStep, Server};
    use ipsec_eap::radius::packet::{attr, code, Builder};
    use ipsec_eap::radius::{auth, mppe};
    use ipsec_eap::server::Step;
    use rand_chacha::rand_core::SeedableRng;
    struct One;
    impl Credentials for One {
        fn nt_hash(&self, _: &[u8]) -> Option<ipsec_eap::ms_chap::NtHash> {
            Some(ipsec_eap::ms_chap::NtHash::from_bytes([7; 16]))
        }
    }
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
    let mut peer = Peer::with_hash(b"alice", ipsec_eap::ms_chap::NtHash::from_bytes([7; 16]));
    let (mut server, mut req) = Server::start(b"alice", 1, &One, &mut rng).unwrap();
    let (mut to_peer, mut to_server) = (Vec::new(), Vec::new());
    let mut all = Vec::new();
    loop {
        to_peer.push(req.clone());
        let PeerStep::Send(resp) = peer.handle(&req, &mut rng).unwrap() else {
            break;
        };
        to_server.push(resp.clone());
        all.push(req.clone());
        all.push(resp.clone());
        match server.handle(&resp).unwrap() {
            Step::Send(b) => req = b,
            Step::Success { eap, .. } | Step::Failure { eap, .. } => {
                to_peer.push(eap.clone());
                all.push(eap);
                break;
            }
            Step::Pending => unreachable!(),
        }
    }
    let seq = |v: &[Vec<u8>]| -> Vec<u8> { v.iter().flat_map(|p| [&[p.len() as u8][..], p].concat()).collect() };
    for (i, p) in all.iter().enumerate() {
        write(root, "eap_parse", &format!("m{i}"), p);
    }
    write(root, "eap_parse", "peer_seq", &seq(&to_peer));
    write(root, "eap_parse", "server_seq", &seq(&to_server));
    let req_auth = [2u8; 16];
    for (name, c) in [("challenge", code::ACCESS_CHALLENGE), ("accept", code::ACCESS_ACCEPT)] {
        let mut b = Builder::new(c, 1, &[0; 16]);
        b.attr(attr::STATE, b"state").unwrap();
        if c == code::ACCESS_ACCEPT {
            let k = mppe::encrypt(b"secret", &req_auth, [0x80, 1], &[9; 16]);
            b.attr(
                attr::VENDOR_SPECIFIC,
                &mppe::vendor_specific(mppe::MS_MPPE_RECV_KEY, &k),
            )
            .unwrap();
            b.attr(
                attr::VENDOR_SPECIFIC,
                &mppe::vendor_specific(mppe::MS_MPPE_SEND_KEY, &k),
            )
            .unwrap();
        }
        b.fragmented(attr::EAP_MESSAGE, &[all[0].clone(), vec![0; 300]].concat())
            .unwrap();
        b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
        let mut out = b.finish();
        auth::sign_response(b"secret", &req_auth, &mut out).unwrap();
        write(root, "radius_parse", name, &out);
    }
    let mut b = Builder::new(code::ACCESS_REQUEST, 1, &req_auth);
    b.attr(attr::USER_NAME, b"alice").unwrap();
    b.fragmented(attr::EAP_MESSAGE, &all[1]).unwrap();
    b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
    let mut out = b.finish();
    auth::sign_request(b"secret", &mut out).unwrap();
    write(root, "radius_parse", "request", &out);
}

/// `eap_tls` seeds: a real EAP-TLS conversation between the crate's authenticator and peer
/// with the target's PKI and fragment size (every packet under 256 octets, as the target's
/// 1-octet length prefixes need): each packet alone, and the peer's Responses and the
/// server's Requests as sequences. (rustls draws its own randoms, so a replayed sequence
/// gets as far as the first message that depends on them.)
fn eap_tls_seeds(root: &Path) {
    use ipsec_eap::server::Step;
    use ipsec_eap::tls::rustls::pki_types::pem::PemObject;
    use ipsec_eap::tls::rustls::pki_types::CertificateDer;
    use ipsec_eap::tls::{Peer, PeerConfig, PeerStep, PrivateKeyDer, Server, ServerConfig, Versions};
    macro_rules! pki {
        ($f:literal) => {
            include_bytes!(concat!("../../crates/eap/tests/data/tls/", $f))
        };
    }
    let cert = |pem: &[u8]| CertificateDer::from_pem_slice(pem).unwrap().to_vec();
    const NOW_UNIX: u64 = 1_830_000_000;
    for (name, versions) in [("tls12", Versions::Tls12), ("tls13", Versions::Tls13)] {
        let server_cfg = ServerConfig::new(
            &[cert(pki!("server.pem"))],
            PrivateKeyDer::from_pem_slice(pki!("server.key")).unwrap(),
            &[cert(pki!("ca.pem"))],
            &[],
            Versions::Both,
        )
        .unwrap()
        .with_fragment_size(200);
        let peer_cfg = PeerConfig::new(
            &[cert(pki!("alice.pem"))],
            PrivateKeyDer::from_pem_slice(pki!("alice.key")).unwrap(),
            &[cert(pki!("ca.pem"))],
            "vpn.example.org",
            versions,
        )
        .unwrap()
        .with_fragment_size(200);
        let (mut server, mut req) = Server::start(&server_cfg, 1).unwrap();
        let mut peer = Peer::new(peer_cfg);
        let (mut to_peer, mut to_server) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            to_peer.push(req.clone());
            let Ok(PeerStep::Send(resp)) = peer.handle(&req, Some(NOW_UNIX)) else {
                break;
            };
            to_server.push(resp.clone());
            match server.handle(&resp, Some(NOW_UNIX)).unwrap() {
                Step::Send(b) => req = b,
                Step::Success { eap, .. } | Step::Failure { eap, .. } => {
                    to_peer.push(eap);
                    break;
                }
                Step::Pending => unreachable!(),
            }
        }
        let seq = |v: &[Vec<u8>]| -> Vec<u8> { v.iter().flat_map(|p| [&[p.len() as u8][..], p].concat()).collect() };
        for (i, p) in to_peer.iter().chain(&to_server).enumerate() {
            write(root, "eap_tls", &format!("{name}_m{i}"), p);
        }
        write(root, "eap_tls", &format!("{name}_server_seq"), &seq(&to_server));
        write(root, "eap_tls", &format!("{name}_peer_seq"), &seq(&to_peer));
    }
}
