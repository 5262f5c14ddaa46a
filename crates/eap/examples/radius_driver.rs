//! Drives one EAP-MSCHAPv2 authentication through a real RADIUS server (scripts/ci/eap-radius.sh
//! runs it against FreeRADIUS): this crate's peer <-> this crate's authenticator with the
//! RADIUS backend <-> the server over a std UdpSocket (the only I/O, here, not in the crate).
//!
//!   EAP_RADIUS_ADDR=127.0.0.1:18120 EAP_RADIUS_SECRET=... EAP_USER=bob EAP_PASSWORD=... \
//!     cargo run -p ipsec-eap --example radius_driver -- accept|reject|badsecret|down
//!
//! accept:    the exchange succeeds and the peer's MSK equals the one made from the
//!            server's MS-MPPE keys; every real answer is also fed first with one bit flipped,
//!            which must be dropped as a bad authenticator (counted), before the real one.
//! reject:    (a wrong password) the server answers Access-Reject.
//! badsecret: (a wrong shared secret) no valid answer: server down after every try, with
//!            whatever answers arrived dropped as bad authenticators.
//! down:      (nothing listening) server down after every try.
//! Prints one line with the outcome and the RADIUS counters; exits 1 when the outcome is not
//! the one the case expects.

use ipsec_eap::ms_chap::NtHash;
use ipsec_eap::mschapv2::{Credentials, Peer, PeerStep};
use ipsec_eap::radius::client::Config;
use ipsec_eap::server::{Authenticator, Backend, FailureReason, Step};
use ipsec_eap::Error;
use rand_core::OsRng;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

struct NoLocalUsers;
impl Credentials for NoLocalUsers {
    fn nt_hash(&self, _: &[u8]) -> Option<NtHash> {
        None
    }
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "accept".into());
    let addr = env("EAP_RADIUS_ADDR", "127.0.0.1:1812");
    let secret = env("EAP_RADIUS_SECRET", "testing123");
    let user = env("EAP_USER", "bob");
    let password = env("EAP_PASSWORD", "hunter2");
    let retransmit_ms: u64 = env("EAP_RADIUS_RETRANSMIT_MS", "500").parse().expect("a number");
    let tries: u8 = env("EAP_RADIUS_TRIES", "3").parse().expect("a number");

    let mut cfg = Config::new(secret.as_bytes(), b"ipsec-eap-driver");
    cfg.retransmit_after = Duration::from_millis(retransmit_ms);
    cfg.max_tries = tries;
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.connect(&addr).expect("connect");
    let start = Instant::now();
    let mut rng = OsRng;

    let mut peer = Peer::new(user.as_bytes(), &password).expect("password");
    let (mut auth, id_req) = Authenticator::start(Backend::Radius(cfg), &mut rng);
    let mut to_peer = id_req;
    let mut tampered = 0u64;
    let mut rounds = 0;
    let outcome: Result<Step, String> = 'outer: loop {
        rounds += 1;
        let resp = match peer.handle(&to_peer, &mut rng) {
            Ok(PeerStep::Send(b)) => b,
            other => break Err(format!("peer: {other:?}")),
        };
        let mut step = match auth.handle_response(&resp, &NoLocalUsers, start.elapsed(), &mut rng) {
            Ok(s) => s,
            Err(e) => break Err(format!("authenticator: {e}")),
        };
        while step == Step::Pending {
            if let Some(d) = auth.poll_radius_transmit() {
                sock.send(&d).expect("send");
            }
            let deadline = auth.poll_timeout().expect("a deadline while pending");
            let wait = deadline.saturating_sub(start.elapsed()).max(Duration::from_millis(1));
            sock.set_read_timeout(Some(wait)).expect("timeout");
            let mut buf = [0u8; 4096];
            match sock.recv(&mut buf) {
                Ok(n) => {
                    let answer = &buf[..n];
                    if case == "accept" {
                        let mut bad = answer.to_vec();
                        bad[n / 2] ^= 0x01;
                        match auth.handle_radius(&bad) {
                            Err(Error::BadAuthenticator) => tampered += 1,
                            other => break 'outer Err(format!("tampered answer taken: {other:?}")),
                        }
                    }
                    match auth.handle_radius(answer) {
                        Ok(s) => step = s,
                        Err(e) => eprintln!("dropped a RADIUS answer: {e}"),
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => panic!("recv: {e}"),
            }
            if step == Step::Pending {
                if let Some(s) = auth.handle_timeout(start.elapsed()) {
                    step = s;
                }
            }
        }
        match step {
            Step::Send(b) => to_peer = b,
            Step::Success { ref msk, ref eap } => match peer.handle(eap, &mut rng) {
                Ok(PeerStep::Success(peer_msk)) if &peer_msk == msk => break Ok(step),
                Ok(PeerStep::Success(_)) => break Err("MSKs differ".into()),
                other => break Err(format!("peer refused the success: {other:?}")),
            },
            Step::Failure { ref eap, .. } => {
                let _ = peer.handle(eap, &mut rng);
                break Ok(step);
            }
            Step::Pending => unreachable!(),
        }
    };
    let stats = auth.radius_stats();
    let elapsed = start.elapsed().as_secs_f64();
    let (ok, what) = match (&case[..], &outcome) {
        ("accept", Ok(Step::Success { msk, .. })) => (
            tampered > 0,
            format!(
                "success, MSK equal on both sides ({} bytes), {tampered} tampered answers dropped",
                msk.as_bytes().len()
            ),
        ),
        (
            "reject",
            Ok(Step::Failure {
                reason: FailureReason::RadiusReject,
                ..
            }),
        ) => (true, "Access-Reject".into()),
        (
            "badsecret" | "down",
            Ok(Step::Failure {
                reason: FailureReason::RadiusServerDown,
                ..
            }),
        ) => (true, "server down".into()),
        (_, other) => (false, format!("unexpected outcome {other:?}")),
    };
    println!(
        "{case}: {} - {what}; {rounds} EAP rounds, {elapsed:.2} s, stats {stats:?}",
        if ok { "ok" } else { "FAILED" }
    );
    std::process::exit(if ok { 0 } else { 1 });
}
