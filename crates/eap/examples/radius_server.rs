//! A minimal RADIUS server made of this crate's pieces, so that an EAP peer nobody here
//! wrote can test the authenticator side: wpa_supplicant's `eapol_test` (scripts/ci/eap-radius.sh)
//! authenticates against it with EAP-MSCHAPv2 and compares the MS-MPPE keys of the
//! Access-Accept with the MSK its own peer derived.
//!
//!   EAP_RADIUS_LISTEN=127.0.0.1:18121 EAP_RADIUS_SECRET=... EAP_USER=bob EAP_PASSWORD=... \
//!     EAP_SERVER_SECONDS=30 cargo run -p ipsec-eap --example radius_server
//!
//! Each Access-Request's Message-Authenticator is checked (a bad one dropped), its
//! EAP-Message runs the crate's `mschapv2::Server` (one per State), and the answer is an
//! Access-Challenge (with a State), an Access-Accept (EAP-Success, MS-MPPE-Recv-Key =
//! MSK[0..16], MS-MPPE-Send-Key = MSK[16..32], RFC 2548) or an Access-Reject (EAP-Failure),
//! signed (RFC 2865 §3, RFC 3579 §3.2). A retransmitted request gets the same answer. Prints
//! one line per answer; exits after EAP_SERVER_SECONDS.

use ipsec_eap::ms_chap::NtHash;
use ipsec_eap::mschapv2::{Credentials, Server};
use ipsec_eap::packet::{Repr as EapRepr, Type};
use ipsec_eap::radius::packet::{attr, code, Builder, Packet, Repr};
use ipsec_eap::radius::{auth, mppe};
use ipsec_eap::server::Step;
use rand_core::{OsRng, RngCore};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

struct OneUser {
    name: Vec<u8>,
    hash: NtHash,
}
impl Credentials for OneUser {
    fn nt_hash(&self, identity: &[u8]) -> Option<NtHash> {
        (identity == &self.name[..]).then(|| self.hash.clone())
    }
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn main() {
    let listen = env("EAP_RADIUS_LISTEN", "127.0.0.1:18121");
    let secret = env("EAP_RADIUS_SECRET", "testing123").into_bytes();
    let user = OneUser {
        name: env("EAP_USER", "bob").into_bytes(),
        hash: NtHash::from_password(&env("EAP_PASSWORD", "hunter2")).expect("password"),
    };
    let lifetime = Duration::from_secs(env("EAP_SERVER_SECONDS", "30").parse().expect("a number"));
    let sock = UdpSocket::bind(&listen).expect("bind");
    println!("radius_server: listening on {listen}");
    let start = Instant::now();
    let mut rng = OsRng;
    let mut sessions: HashMap<Vec<u8>, Server> = HashMap::new();
    let mut answered: HashMap<(SocketAddr, u8, [u8; 16]), Vec<u8>> = HashMap::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < lifetime {
        sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let req = &buf[..n];
        let Ok(p) = Packet::new_checked(req) else {
            println!("dropped: malformed");
            continue;
        };
        let r = Repr::parse(&p).unwrap();
        if r.code != code::ACCESS_REQUEST {
            continue;
        }
        if auth::verify_request(&secret, req).is_err() {
            println!("dropped: bad Message-Authenticator");
            continue;
        }
        let key = (from, r.identifier, r.authenticator);
        if let Some(a) = answered.get(&key) {
            sock.send_to(a, from).unwrap();
            continue;
        }
        let Some(eap) = r.eap_message() else { continue };
        let state = r.get(attr::STATE).map(|s| s.to_vec());
        let step = match state.as_ref().and_then(|s| sessions.get_mut(s)) {
            None => {
                let Ok(e) = EapRepr::parse_bytes(&eap) else { continue };
                let Some((Type::Identity, ident)) = e.data else {
                    continue;
                };
                match Server::start(ident, e.identifier.wrapping_add(1), &user, &mut rng) {
                    Ok((s, challenge)) => {
                        let mut st = vec![0u8; 16];
                        rng.fill_bytes(&mut st);
                        sessions.insert(st.clone(), s);
                        (Step::Send(challenge), Some(st))
                    }
                    Err(e) => {
                        println!("dropped: {e}");
                        continue;
                    }
                }
            }
            Some(s) => match s.handle(&eap) {
                Ok(step) => (step, state.clone()),
                Err(e) => {
                    println!("dropped: {e}");
                    continue;
                }
            },
        };
        let (code, eap_out, keys, st, what) = match step {
            (Step::Send(b), st) => (code::ACCESS_CHALLENGE, b, None, st, "Access-Challenge".to_string()),
            (Step::Success { msk, eap }, _) => (code::ACCESS_ACCEPT, eap, Some(msk), None, "Access-Accept".into()),
            (Step::Failure { reason, eap }, _) => (
                code::ACCESS_REJECT,
                eap,
                None,
                None,
                format!("Access-Reject ({reason:?})"),
            ),
            (Step::Pending, _) => unreachable!(),
        };
        let mut b = Builder::new(code, r.identifier, &[0; 16]);
        if let Some(st) = &st {
            b.attr(attr::STATE, st).unwrap();
        }
        if let Some(msk) = &keys {
            let k = msk.as_bytes();
            let mut salt = [0u8; 2];
            rng.fill_bytes(&mut salt);
            salt[0] |= 0x80;
            let recv = mppe::encrypt(&secret, &r.authenticator, salt, &k[..16]);
            salt[1] ^= 1;
            let send = mppe::encrypt(&secret, &r.authenticator, salt, &k[16..32]);
            b.attr(
                attr::VENDOR_SPECIFIC,
                &mppe::vendor_specific(mppe::MS_MPPE_RECV_KEY, &recv),
            )
            .unwrap();
            b.attr(
                attr::VENDOR_SPECIFIC,
                &mppe::vendor_specific(mppe::MS_MPPE_SEND_KEY, &send),
            )
            .unwrap();
        }
        b.fragmented(attr::EAP_MESSAGE, &eap_out).unwrap();
        b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
        let mut out = b.finish();
        auth::sign_response(&secret, &r.authenticator, &mut out).unwrap();
        sock.send_to(&out, from).unwrap();
        println!("answered {from} id {}: {what}", r.identifier);
        answered.insert(key, out);
    }
}
