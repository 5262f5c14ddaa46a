//! Arbitrary bytes to the EAP-TLS parser and reassembler (crates/eap/src/tls; RFC 5216 §3.1
//! flags L/M/S and the TLS Message Length, §2.1.5 fragments): the packet (what parses must
//! emit back to the same packet), a bounded reassembler fed the input as a sequence of
//! EAP-TLS packets (a length-prefixed list, as `eap_parse` splits it), and the state
//! machines with rustls behind them: the authenticator and the peer, each fed the sequence.
//! Typed errors only, never a panic, and nothing longer than the reassembly bound.
#![no_main]
use ipsec_eap::tls::fragment::Reassembler;
use ipsec_eap::tls::packet::Repr;
use ipsec_eap::tls::rustls::pki_types::pem::PemObject;
use ipsec_eap::tls::rustls::pki_types::CertificateDer;
use ipsec_eap::tls::{Peer, PeerConfig, PrivateKeyDer, Server, ServerConfig, Versions};
use ipsec_fuzz::MAX_INPUT;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// Inside the test certificates' validity (crates/eap/tests/data/tls).
const NOW_UNIX: u64 = 1_830_000_000;
const CAP: usize = 2048;

macro_rules! pki {
    ($f:literal) => {
        include_bytes!(concat!("../../crates/eap/tests/data/tls/", $f))
    };
}

fn cert(pem: &[u8]) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem).unwrap().to_vec()
}

fn configs() -> &'static (ServerConfig, PeerConfig) {
    static C: OnceLock<(ServerConfig, PeerConfig)> = OnceLock::new();
    C.get_or_init(|| {
        let ca = cert(pki!("ca.pem"));
        let s = ServerConfig::new(
            &[cert(pki!("server.pem"))],
            PrivateKeyDer::from_pem_slice(pki!("server.key")).unwrap(),
            std::slice::from_ref(&ca),
            &[],
            Versions::Both,
        )
        .unwrap()
        .with_fragment_size(200);
        let p = PeerConfig::new(
            &[cert(pki!("alice.pem"))],
            PrivateKeyDer::from_pem_slice(pki!("alice.key")).unwrap(),
            &[ca],
            "vpn.example.org",
            Versions::Both,
        )
        .unwrap()
        .with_fragment_size(200);
        (s, p)
    })
}

/// The input as packets: each a 1-octet length then that many octets.
fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        out.push(&tail[..n]);
        rest = &tail[n..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    if let Ok(r) = Repr::parse_eap(data) {
        let v = r.to_vec().unwrap();
        assert_eq!(Repr::parse_eap(&v).unwrap(), r);
    }
    let packets = split(data);
    let mut re = Reassembler::new(CAP);
    for p in &packets {
        if let Ok(r) = Repr::parse_eap(p) {
            if let Ok(Some(m)) = re.push(&r) {
                assert!(m.len() <= CAP);
            }
        }
    }
    let (server_cfg, peer_cfg) = configs();
    let (mut server, _) = Server::start(server_cfg, 1).unwrap();
    for p in &packets {
        let _ = server.handle(p, Some(NOW_UNIX));
    }
    let mut peer = Peer::new(peer_cfg.clone());
    for p in &packets {
        let _ = peer.handle(p, Some(NOW_UNIX));
    }
});
