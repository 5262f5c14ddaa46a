//! The responder under a flood of IKE_SA_INIT requests (RFC 7296 2.6, RFC 8019): stateless
//! cookies past a threshold, the initiator's retry with the cookie, caps on half-open SAs per
//! source and in all, the size bound on unauthenticated requests. In memory, fake clock;
//! the spoofed requests are a real initiator's IKE_SA_INIT with other SPIs and sources.
mod common;
use common::*;
use ipsec_ike::message::{Message, Payload};
use ipsec_ike::notify::kind;
use ipsec_ike::*;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";

/// A (10.0.0.1) initiates; B (10.0.0.2) answers anyone (`%any`) with the same key.
fn pair_any() -> (Config, Config) {
    let (a, _) = pair(IKE, IKE, ESP, ESP);
    let mut b = conn("b-any", B_IP, None, b"correct horse", IKE);
    b.children
        .push(ChildConfig::new("net", "10.2.0.0/16", "10.1.0.0/16", ESP).unwrap());
    (a, Config::new(vec![b]))
}

fn b_local() -> SocketAddr {
    SocketAddr::new(ip(B_IP), 500)
}

/// A well-formed IKE_SA_INIT request (an initiator's own, as it sends it).
fn template() -> Vec<u8> {
    let (a, _) = pair(IKE, IKE, ESP, ESP);
    let mut e = Endpoint::new(a);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    e.initiate(Duration::ZERO, "a2b", &mut rng).unwrap();
    e.poll_transmit().unwrap().payload
}

/// `req` with SPIi `spi`.
fn with_spi(req: &[u8], spi: u64) -> Vec<u8> {
    let mut r = req.to_vec();
    r[..8].copy_from_slice(&spi.to_be_bytes());
    r
}

/// `req` with a payload of type `ptype` and body `body` put first (the header's next
/// payload and length fixed up).
fn insert_first(req: &[u8], ptype: u8, body: &[u8]) -> Vec<u8> {
    let mut r = req[..28].to_vec();
    let old_first = r[16];
    r[16] = ptype;
    let len = 4 + body.len();
    r.extend_from_slice(&[old_first, 0]);
    r.extend_from_slice(&(len as u16).to_be_bytes());
    r.extend_from_slice(body);
    r.extend_from_slice(&req[28..]);
    let total = r.len() as u32;
    r[24..28].copy_from_slice(&total.to_be_bytes());
    r
}

/// `req` with N(COOKIE) `cookie` first.
fn with_cookie(req: &[u8], cookie: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 0];
    body.extend_from_slice(&kind::COOKIE.to_be_bytes());
    body.extend_from_slice(cookie);
    insert_first(req, 41, &body)
}

/// The data of the notify of type `k` in a datagram, if any.
fn notify_in(payload: &[u8], k: u16) -> Option<Vec<u8>> {
    let m = Message::parse(payload).ok()?;
    m.chain.payloads.iter().find_map(|p| match p {
        Payload::Notify(n) if n.kind == k => Some(n.data.clone()),
        _ => None,
    })
}

fn nonce_of(payload: &[u8]) -> Vec<u8> {
    let m = Message::parse(payload).unwrap();
    m.chain
        .payloads
        .iter()
        .find_map(|p| {
            if let Payload::Nonce(n) = p {
                Some(n.clone())
            } else {
                None
            }
        })
        .unwrap()
}

fn first_is_cookie(payload: &[u8]) -> bool {
    let m = Message::parse(payload).unwrap();
    matches!(m.chain.payloads.first(), Some(Payload::Notify(n)) if n.kind == kind::COOKIE)
}

/// A responder and a source of spoofed requests.
struct Flood {
    b: Endpoint,
    now: Duration,
    rng: ChaCha20Rng,
    req: Vec<u8>,
}

impl Flood {
    fn new(b: Config) -> Self {
        Flood {
            b: Endpoint::new(b),
            now: Duration::from_secs(1000),
            rng: ChaCha20Rng::seed_from_u64(99),
            req: template(),
        }
    }

    /// Delivers `data` from `from`; returns the result and what B sent back.
    fn send(&mut self, from: SocketAddr, data: &[u8]) -> (Result<(), Dropped>, Vec<Transmit>) {
        let r = self.b.handle_datagram(self.now, b_local(), from, data, &mut self.rng);
        let mut out = Vec::new();
        while let Some(t) = self.b.poll_transmit() {
            out.push(t);
        }
        while self.b.poll_event().is_some() {}
        (r, out)
    }

    /// A request with a fresh SPIi from `from`.
    fn spoof(&mut self, from: SocketAddr) -> (Result<(), Dropped>, Vec<Transmit>) {
        let spi = self.rng.next_u64() | 1;
        let req = with_spi(&self.req, spi);
        self.send(from, &req)
    }

    /// A request from `from` that first gets its cookie and comes back with it (a source
    /// that can receive at its address). Returns the second answer.
    fn with_round_trip(&mut self, from: SocketAddr) -> Result<(), Dropped> {
        let spi = self.rng.next_u64() | 1;
        let req = with_spi(&self.req, spi);
        let (r, out) = self.send(from, &req);
        if r != Err(Dropped::CookieRequired) {
            return r;
        }
        let cookie = notify_in(&out[0].payload, kind::COOKIE).expect("a COOKIE answer");
        self.send(from, &with_cookie(&req, &cookie)).0
    }
}

fn src(i: u32) -> SocketAddr {
    // 10.94.0.0/16 and beyond: a different address per i.
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a5e_0000 + i)), 500)
}

#[test]
fn past_the_threshold_a_request_gets_a_cookie_and_no_state() {
    let (_, b) = pair_any();
    let threshold = b.cookie_threshold;
    let mut f = Flood::new(b);
    for i in 0..threshold as u32 {
        let (r, out) = f.spoof(src(i));
        assert_eq!(r, Ok(()), "request {i} below the threshold makes an SA");
        assert!(notify_in(&out[0].payload, kind::COOKIE).is_none());
    }
    assert_eq!(f.b.half_open_count(), threshold);
    assert_eq!(f.b.ike_sa_count(), threshold);
    for i in 0..100 {
        let (r, out) = f.spoof(src(1000 + i));
        assert_eq!(r, Err(Dropped::CookieRequired));
        assert_eq!(out.len(), 1, "one answer");
        let t = &out[0];
        assert_eq!(t.remote, src(1000 + i));
        // HDR(SPIi, 0), N(COOKIE) and nothing else: no SA, no KE, no nonce (2.6)
        let m = Message::parse(&t.payload).unwrap();
        assert_eq!(m.header.spi_r, 0);
        assert!(m.header.response);
        assert_eq!(m.chain.payloads.len(), 1);
        let c = notify_in(&t.payload, kind::COOKIE).unwrap();
        assert_eq!(c.len(), cookie::COOKIE_LEN);
    }
    assert_eq!(f.b.ike_sa_count(), threshold, "no state for the cookie answers");
    assert_eq!(f.b.dos_stats().cookies_sent, 100);
}

#[test]
fn the_initiator_retries_with_the_cookie_and_gets_in() {
    let (a, mut b) = pair_any();
    b.force_cookies = true;
    let mut net = Net::new(a, b);
    net.up();
    assert_eq!((ike_up(&net.events_a).len(), ike_up(&net.events_b).len()), (1, 1));
    assert_eq!(child_up(&net.events_a).len(), 1);
    let inits: Vec<_> = net.sent.iter().filter(|s| kind_of(&s.t).0 == 34).collect();
    assert_eq!(inits.len(), 4, "request, COOKIE, request with the cookie, response");
    let (first, cookie_answer, second) = (&inits[0].t.payload, &inits[1].t.payload, &inits[2].t.payload);
    let cookie = notify_in(cookie_answer, kind::COOKIE).unwrap();
    assert!(first_is_cookie(second), "the cookie goes first (2.6)");
    assert_eq!(notify_in(second, kind::COOKIE).unwrap(), cookie);
    assert_eq!(first[..8], second[..8], "the same SPIi");
    assert_eq!(nonce_of(first), nonce_of(second), "the same Ni");
    // the same KE too: the retry is the first request with the cookie put first
    assert_eq!(with_cookie(first, &cookie), *second);
    assert_eq!(net.drops, [(false, Dropped::CookieRequired)]);
    let s = net.b.dos_stats();
    assert_eq!((s.cookies_sent, s.cookies_accepted, s.cookies_refused), (1, 1, 0));
    assert_eq!(net.b.half_open_count(), 0, "established: no longer half-open");
}

/// 2.6's shorter exchange: COOKIE, then INVALID_KE_PAYLOAD; the initiator keeps the cookie
/// and Ni, sends a KE of the group asked for, and gets in with no second cookie.
#[test]
fn cookie_then_invalid_ke_keeps_the_cookie() {
    let (mut a, mut b) = pair_any();
    a.connections[0].ike_proposals =
        ipsec_ike::alg::parse_proposals("aes128gcm16-prfsha256-x25519-ecp256", ipsec_ike::alg::ProposalKind::Ike)
            .unwrap();
    b.connections[0].ike_proposals =
        ipsec_ike::alg::parse_proposals("aes128gcm16-prfsha256-ecp256", ipsec_ike::alg::ProposalKind::Ike).unwrap();
    b.force_cookies = true;
    let mut net = Net::new(a, b);
    net.up();
    assert_eq!(ike_up(&net.events_a).len(), 1, "{:?} {:?}", net.events_a, net.drops);
    assert_eq!(ike_up(&net.events_a)[0].suite.dh, ipsec_ike::alg::DhGroup::Ecp256);
    let inits: Vec<_> = net.sent.iter().filter(|s| kind_of(&s.t).0 == 34).collect();
    assert_eq!(
        inits.len(),
        6,
        "request, COOKIE, with cookie, INVALID_KE, with cookie and new KE, response"
    );
    assert!(notify_in(&inits[3].t.payload, kind::INVALID_KE_PAYLOAD).is_some());
    let cookie = notify_in(&inits[1].t.payload, kind::COOKIE).unwrap();
    assert!(first_is_cookie(&inits[4].t.payload));
    assert_eq!(
        notify_in(&inits[4].t.payload, kind::COOKIE).unwrap(),
        cookie,
        "the cookie kept"
    );
    let ni = nonce_of(&inits[0].t.payload);
    assert_eq!(nonce_of(&inits[2].t.payload), ni);
    assert_eq!(nonce_of(&inits[4].t.payload), ni, "the same Ni after INVALID_KE (2.6)");
    assert_ne!(inits[2].t.payload, inits[4].t.payload, "another KE");
    assert_eq!(net.b.dos_stats().cookies_sent, 1, "no second cookie");
    assert_eq!(net.b.dos_stats().cookies_accepted, 2);
}

#[test]
fn forged_misplaced_foreign_and_old_cookies_are_refused() {
    let (_, mut b) = pair_any();
    b.force_cookies = true;
    let mut f = Flood::new(b);
    let from = src(7);
    let req = with_spi(&f.req, 0x1234_5678);
    let (r, out) = f.send(from, &req);
    assert_eq!(r, Err(Dropped::CookieRequired));
    let cookie = notify_in(&out[0].payload, kind::COOKIE).unwrap();

    // forged: a new cookie comes back, no SA (2.6: handled as if it had none)
    let mut forged = cookie.clone();
    forged[5] ^= 0x40;
    let (r, out) = f.send(from, &with_cookie(&req, &forged));
    assert_eq!(r, Err(Dropped::CookieRequired));
    assert_eq!(
        notify_in(&out[0].payload, kind::COOKIE).unwrap(),
        cookie,
        "the right cookie again"
    );
    // random bytes of the right length
    let (r, _) = f.send(from, &with_cookie(&req, &[0xab; cookie::COOKIE_LEN]));
    assert_eq!(r, Err(Dropped::CookieRequired));
    // the right cookie from another address, or for another SPIi
    let (r, _) = f.send(src(8), &with_cookie(&req, &cookie));
    assert_eq!(r, Err(Dropped::CookieRequired));
    let (r, _) = f.send(from, &with_cookie(&with_spi(&req, 0x1234_5679), &cookie));
    assert_eq!(r, Err(Dropped::CookieRequired));
    // the right cookie, not first
    let vendor = insert_first(&with_cookie(&req, &cookie), 43, b"not first");
    let (r, _) = f.send(from, &vendor);
    assert_eq!(r, Err(Dropped::CookieRequired));
    assert_eq!(f.b.ike_sa_count(), 0);
    assert_eq!(f.b.dos_stats().cookies_refused, 4, "a cookie not first is no cookie");

    // in time (one period later, a new secret made meanwhile: the old one is the previous)
    f.now += cookie::SECRET_PERIOD + Duration::from_secs(1);
    assert_eq!(f.spoof(src(9)).0, Err(Dropped::CookieRequired));
    let (r, out) = f.send(from, &with_cookie(&req, &cookie));
    assert_eq!(r, Ok(()));
    assert!(
        Message::parse(&out[0].payload).unwrap().header.spi_r != 0,
        "the IKE_SA_INIT response"
    );
    assert_eq!(f.b.ike_sa_count(), 1);

    // too old: a cookie two periods after its secret started no longer verifies
    let req2 = with_spi(&req, 0x9999);
    let (_, out) = f.send(from, &req2);
    let cookie2 = notify_in(&out[0].payload, kind::COOKIE).unwrap();
    f.now += 2 * cookie::SECRET_PERIOD + Duration::from_secs(1);
    let (r, _) = f.send(from, &with_cookie(&req2, &cookie2));
    assert_eq!(r, Err(Dropped::CookieRequired));
    assert_eq!(f.b.ike_sa_count(), 1);
}

#[test]
fn half_open_sas_are_capped_per_source() {
    let (_, b) = pair_any();
    let (per_ip_cookie, per_ip) = (b.cookie_threshold_ip, b.half_open_per_source);
    assert!(per_ip_cookie < per_ip);
    let mut f = Flood::new(b);
    let from = src(1);
    // below cookie_threshold_ip: no cookie asked
    for _ in 0..per_ip_cookie {
        assert_eq!(f.spoof(from).0, Ok(()));
    }
    // then only with a cookie; spoofing the address alone gets no further
    assert_eq!(f.spoof(from).0, Err(Dropped::CookieRequired));
    for _ in per_ip_cookie..per_ip {
        assert_eq!(f.with_round_trip(from), Ok(()));
    }
    assert_eq!(f.with_round_trip(from), Err(Dropped::HalfOpenPerSource));
    assert_eq!(f.b.half_open_count(), per_ip);
    // another port of the same address counts the same
    let other_port = SocketAddr::new(from.ip(), 4501);
    assert_eq!(f.with_round_trip(other_port), Err(Dropped::HalfOpenPerSource));
    // other sources are not affected
    assert_eq!(f.spoof(src(2)).0, Ok(()));
    assert_eq!(f.b.dos_stats().half_open_refused, 2);
    // expiry frees the source's quota
    f.now += Duration::from_secs(31);
    f.b.handle_timeout(f.now, &mut f.rng);
    assert_eq!((f.b.half_open_count(), f.b.ike_sa_count()), (0, 0));
    assert_eq!(f.spoof(from).0, Ok(()));
}

/// The total cap: reached only by sources that answer cookies, and typed; the half-open SAs
/// never fill the table (room is left for established SAs and our own initiations).
#[test]
fn half_open_sas_are_capped_in_all() {
    let (_, mut b) = pair_any();
    b.half_open_max = 60;
    let mut f = Flood::new(b);
    for i in 0..60 {
        assert_eq!(f.with_round_trip(src(i)), Ok(()), "source {i}");
    }
    assert_eq!(f.b.half_open_count(), 60);
    assert_eq!(f.with_round_trip(src(100)), Err(Dropped::HalfOpenLimit));
    // the spoofed are answered with cookies still (stateless), not refused for everyone
    assert_eq!(f.spoof(src(101)).0, Err(Dropped::CookieRequired));
    assert_eq!(f.b.ike_sa_count(), 60);
    assert!(Config::new(vec![]).half_open_max < limits::MAX_IKE_SAS / 2);
}

#[test]
fn a_flood_of_spoofed_requests_then_a_real_initiator_connects_at_once() {
    let (a, b) = pair_any();
    let threshold = b.cookie_threshold;
    let mut net = Net::new(a, b);
    let req = template();
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let n = 20_000u32;
    let mut cookies = 0;
    for _ in 0..n {
        let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a5e_0000 | (rng.next_u32() & 0xffff))), 500);
        let spoofed = with_spi(&req, rng.next_u64() | 1);
        match net.b.handle_datagram(net.now, b_local(), from, &spoofed, &mut net.rng) {
            Ok(()) => {}
            Err(Dropped::CookieRequired) => cookies += 1,
            Err(e) => panic!("{e}"),
        }
        while net.b.poll_transmit().is_some() {}
        assert!(net.b.ike_sa_count() <= threshold, "state bounded by the threshold");
    }
    assert_eq!(net.b.ike_sa_count(), threshold);
    assert_eq!(cookies, n as u64 - threshold as u64);
    assert_eq!(net.b.dos_stats().cookies_sent, cookies);
    while net.b.poll_event().is_some() {}
    // at once: no clock advance, no retransmission
    net.up();
    assert_eq!(ike_up(&net.events_a).len(), 1, "{:?}", net.drops);
    assert_eq!(child_up(&net.events_a).len(), 1);
    assert!(
        net.sent.iter().filter(|s| s.from_a).count() <= 3,
        "IKE_SA_INIT twice and IKE_AUTH"
    );
    assert_eq!(net.b.ike_sa_count(), threshold + 1);
    // the spoofed half-open SAs expire; the established one stays
    net.now += Duration::from_secs(31);
    net.b.handle_timeout(net.now, &mut net.rng);
    assert_eq!((net.b.ike_sa_count(), net.b.half_open_count()), (1, 0));
}

#[test]
fn an_oversize_ike_sa_init_is_refused_typed() {
    let (_, b) = pair_any();
    let mut f = Flood::new(b);
    let room = limits::MAX_INIT_LEN - f.req.len() - 4;
    let fits = insert_first(&f.req, 43, &vec![0x11; room]);
    assert_eq!(fits.len(), limits::MAX_INIT_LEN);
    let (r, out) = f.send(src(1), &fits);
    assert_eq!(r, Ok(()), "as long as allowed: taken");
    assert_eq!(out.len(), 1);
    let over = insert_first(&with_spi(&f.req, 77), 43, &vec![0x11; room + 1]);
    let (r, out) = f.send(src(2), &over);
    assert_eq!(r, Err(Dropped::TooLarge));
    assert!(out.is_empty(), "not answered");
    assert_eq!(f.b.ike_sa_count(), 1);
    assert_eq!(f.b.dos_stats().too_large, 1);
    // a 60 KB one (the probe's) too
    let (r, _) = f.send(src(3), &insert_first(&with_spi(&f.req, 78), 43, &vec![0; 60_000]));
    assert_eq!(r, Err(Dropped::TooLarge));
    assert_eq!(f.b.ike_sa_count(), 1);
}

/// A responder that answers every request with a COOKIE (or a forger doing so) does not
/// keep the initiator going: three retries, then the attempt ends.
#[test]
fn the_initiator_gives_up_after_a_few_cookies() {
    let (a, _) = pair(IKE, IKE, ESP, ESP);
    let mut e = Endpoint::new(a);
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let now = Duration::from_secs(1);
    e.initiate(now, "a2b", &mut rng).unwrap();
    let mut requests = Vec::new();
    for round in 0..10 {
        let Some(t) = e.poll_transmit() else { break };
        requests.push(t.payload.clone());
        // HDR(SPIi, 0, IKE_SA_INIT, response), N(COOKIE)
        let mut resp = t.payload[..28].to_vec();
        resp[8..16].fill(0);
        resp[16] = 41;
        resp[19] = 0x20;
        let mut body = vec![0, 0];
        body.extend_from_slice(&kind::COOKIE.to_be_bytes());
        body.extend_from_slice(&[round as u8 + 1; 20]);
        resp.extend_from_slice(&[0, 0]);
        resp.extend_from_slice(&((4 + body.len()) as u16).to_be_bytes());
        resp.extend_from_slice(&body);
        let total = resp.len() as u32;
        resp[24..28].copy_from_slice(&total.to_be_bytes());
        let _ = e.handle_datagram(now, t.local, t.remote, &resp, &mut rng);
    }
    assert_eq!(requests.len(), 4, "the request and three retries");
    for (i, r) in requests.iter().enumerate().skip(1) {
        assert!(first_is_cookie(r));
        assert_eq!(
            notify_in(r, kind::COOKIE).unwrap(),
            vec![i as u8; 20],
            "the latest cookie"
        );
        assert_eq!(nonce_of(r), nonce_of(&requests[0]));
    }
    let mut downs = Vec::new();
    while let Some(ev) = e.poll_event() {
        if let Event::IkeDown { reason, .. } = ev {
            downs.push(reason);
        }
    }
    assert_eq!(downs, [DownReason::PeerError(kind::COOKIE)]);
    assert_eq!(e.ike_sa_count(), 0);
}

/// A request below the threshold needs no cookie and the retransmission of a request that
/// made an SA gets the kept answer even when cookies are required by then.
#[test]
fn a_retransmitted_request_gets_its_answer_not_a_cookie() {
    let (_, b) = pair_any();
    let threshold = b.cookie_threshold;
    let mut f = Flood::new(b);
    let first = with_spi(&f.req, 42);
    let (r, out) = f.send(src(0), &first);
    assert_eq!(r, Ok(()));
    let answer = out[0].payload.clone();
    for i in 1..threshold as u32 + 5 {
        let _ = f.spoof(src(i));
    }
    let (r, out) = f.send(src(0), &first);
    assert_eq!(r, Ok(()));
    assert_eq!(out[0].payload, answer, "the kept response (2.1)");
}
