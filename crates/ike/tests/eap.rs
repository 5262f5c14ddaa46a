//! IKE_AUTH with EAP-MSCHAPv2 (RFC 7296 2.16) between two in-memory endpoints: A is the
//! road-warrior client (`LocalAuth::Eap`, checks B's certificate), B the server (signs with
//! moon's certificate of `tests/data/pki/`, asks the EAP identity, runs MSCHAPv2 against
//! its users). Success with the child of the first request installed on both sides and the
//! EAP identity as B's peer identity; a wrong password and an unknown user (EAP-Failure,
//! AUTHENTICATION_FAILED, nothing installed, the reason in the event, counted); a stalled
//! conversation (gone at the half-open deadline, nothing left); a retransmitted IKE_AUTH
//! request during EAP answered from the kept response. (Out-of-order EAP Responses: the
//! unit tests of `task/ike_auth_eap.rs`, which need to forge one inside the encryption.)
mod common;
use common::*;
use ipsec_ike::authenticator::Refusal;
use ipsec_ike::ipsec_eap::ms_chap::NtHash;
use ipsec_ike::ipsec_eap::mschapv2::Credentials;
use ipsec_ike::ipsec_eap::server::{Backend, FailureReason};
use ipsec_ike::pki::{Certificate, PrivateKey, RingSigner, TrustStore};
use ipsec_ike::*;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";
/// 2027-06-01: inside the fixtures' validity.
const NOW_UNIX: u64 = 1_811_808_000;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/pki/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn certs(name: &str) -> Vec<Certificate> {
    Certificate::parse_pem_or_der(&data(name)).unwrap()
}

/// The server's users: (EAP identity, password).
struct Users(Vec<(&'static str, &'static str)>);

impl Credentials for Users {
    fn nt_hash(&self, identity: &[u8]) -> Option<NtHash> {
        self.0
            .iter()
            .find(|(u, _)| u.as_bytes() == identity)
            .map(|(_, p)| NtHash::from_password(p).unwrap())
    }
}

/// A (10.0.0.1) is the client `eap_id` with `password`; B (10.0.0.2) the server with the
/// user alice / "Sup3r secret".
fn eap_pair(eap_id: &str, password: &str) -> Net {
    let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
    let (ca, cb) = (&mut a.connections[0], &mut b.connections[0]);
    // The client: IDi its address (as strongSwan's default), EAP as eap_id.
    ca.local_auth = LocalAuth::Eap {
        identity: eap_id.as_bytes().to_vec(),
        password: Psk::new(password.as_bytes()),
    };
    ca.remote_id = Some(Identity::from_str_config("moon.strongswan.org").unwrap());
    let mut t = TrustStore::new();
    for c in certs("root-ca.pem") {
        t.add_ca(c).unwrap();
    }
    ca.remote_auth = RemoteAuth::Pubkey { trust: Arc::new(t) };
    // The server: moon's certificate; any peer identity, EAP for all.
    cb.local_id = Identity::from_str_config("moon.strongswan.org").unwrap();
    cb.local_auth = LocalAuth::Pubkey {
        signer: Arc::new(RingSigner::new(PrivateKey::from_pem(&data("moon.key")).unwrap()).unwrap()),
        certs: ["moon.pem", "inter-ca.pem"].iter().flat_map(|f| certs(f)).collect(),
        send_cert: SendCert::Always,
    };
    cb.remote_id = None;
    cb.remote_auth = RemoteAuth::Eap {
        backend: Backend::Local,
        creds: Arc::new(Users(vec![("alice", "Sup3r secret"), ("bob", "other")])),
    };
    let mut net = Net::new(a, b);
    let now = net.now;
    net.a.set_unix_time(now, NOW_UNIX);
    net.b.set_unix_time(now, NOW_UNIX);
    net
}

/// IKE_AUTH requests A sent (retransmissions included).
fn ike_auth_requests(net: &Net) -> usize {
    net.sent
        .iter()
        .filter(|s| s.from_a && kind_of(&s.t) == (35, false))
        .count()
}

fn auth_failures(ev: &[Event]) -> Vec<(bool, Option<Refusal>)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::AuthFailed { local, reason, .. } => Some((*local, *reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn eap_mschapv2_success_installs_the_first_requests_child() {
    let mut net = eap_pair("alice", "Sup3r secret");
    net.up();
    let (ua, ub) = (ike_up(&net.events_a), ike_up(&net.events_b));
    assert_eq!(
        (ua.len(), ub.len()),
        (1, 1),
        "A: {:?}\nB: {:?}",
        net.events_a,
        net.events_b
    );
    // B knows the client by its EAP identity; A knows B by its certificate's identity.
    assert_eq!(ub[0].remote_id, Identity::Fqdn("alice".into()));
    assert_eq!(
        ua[0].remote_id,
        Identity::from_str_config("moon.strongswan.org").unwrap()
    );
    // The child of the first IKE_AUTH request, the same pair on both sides.
    let (ca, cb) = (child_up(&net.events_a), child_up(&net.events_b));
    assert_eq!((ca.len(), cb.len()), (1, 1));
    assert_eq!((ca[0].spi_in, ca[0].spi_out), (cb[0].spi_out, cb[0].spi_in));
    assert_eq!(ca[0].encr_out, cb[0].encr_in);
    // First (no AUTH), Identity, MSCHAPv2 Response, Success-Response, AUTH.
    assert_eq!(ike_auth_requests(&net), 5);
    assert!(auth_failures(&net.events_a).is_empty() && auth_failures(&net.events_b).is_empty());
    assert_eq!(net.b.half_open_count(), 0);
    let st = net.b.status(net.now);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].state, "established");
    assert_eq!(st[0].remote_id.as_deref(), Some("alice"));
    assert_eq!(st[0].stats.eap_failures + st[0].stats.eap_out_of_order, 0);
    // `ipsec ike list` names the method that authenticated the client; the client's own
    // status has none (it is the responder's record), nor has a PSK peer's (exchanges.rs).
    assert_eq!(st[0].eap_method, Some("eap-mschapv2"));
    assert_eq!(net.a.status(net.now)[0].eap_method, None);
    // It stays with the IKE SA through the client's rekey of it (2.18).
    net.a.rekey_ike(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    let st = net.b.status(net.now);
    let st = st.iter().find(|s| s.state == "established").unwrap();
    assert_eq!(
        (st.eap_method, st.remote_id.as_deref()),
        (Some("eap-mschapv2"), Some("alice"))
    );
}

/// Both sides refused, nothing installed, the SAs gone; B's event says why.
fn assert_refused(net: &Net, why: FailureReason) {
    assert!(ike_up(&net.events_a).is_empty() && ike_up(&net.events_b).is_empty());
    assert!(child_up(&net.events_a).is_empty() && child_up(&net.events_b).is_empty());
    assert_eq!(auth_failures(&net.events_b), vec![(true, Some(Refusal::Eap(why)))]);
    // A was told AUTHENTICATION_FAILED (the peer refused it).
    assert_eq!(auth_failures(&net.events_a), vec![(false, None)]);
    assert_eq!((net.a.ike_sa_count(), net.b.ike_sa_count()), (0, 0));
    assert_eq!(net.b.half_open_count(), 0);
    assert_eq!(net.b.totals().eap_failures, 1);
}

#[test]
fn eap_wrong_password_is_refused_and_nothing_installed() {
    let mut net = eap_pair("alice", "wrong");
    net.up();
    assert_refused(&net, FailureReason::WrongPassword);
}

#[test]
fn eap_unknown_user_is_refused_like_a_wrong_password() {
    let mut net = eap_pair("mallory", "Sup3r secret");
    net.up();
    assert_refused(&net, FailureReason::UnknownIdentity);
}

#[test]
fn eap_stalled_conversation_ends_at_the_half_open_deadline() {
    let mut net = eap_pair("alice", "Sup3r secret");
    // A goes silent after its EAP-Identity Response (its third IKE_AUTH request on).
    let mut n = 0;
    net.drop = Box::new(move |from_a, t| {
        if from_a && kind_of(t) == (35, false) {
            n += 1;
            return n >= 3;
        }
        false
    });
    net.up();
    assert_eq!(net.b.ike_sa_count(), 1);
    assert_eq!(net.b.half_open_count(), 1, "an EAP conversation is half-open");
    let start = net.now;
    while net.advance(start + Duration::from_secs(300)) {}
    assert!(ike_up(&net.events_b).is_empty() && child_up(&net.events_b).is_empty());
    assert_eq!(net.b.ike_sa_count(), 0, "B left the stalled SA behind");
    assert_eq!(net.b.half_open_count(), 0);
    assert!(
        downs(&net.events_b).contains(&DownReason::HalfOpenTimeout),
        "{:?}",
        net.events_b
    );
    assert_eq!(net.a.ike_sa_count(), 0);
}

#[test]
fn eap_retransmitted_ike_auth_request_is_answered_from_the_kept_response() {
    let mut net = eap_pair("alice", "Sup3r secret");
    // B's answer to A's third IKE_AUTH request (the MSCHAPv2 Response) is lost once.
    let mut n = 0;
    net.drop = Box::new(move |from_a, t| {
        if !from_a && kind_of(t) == (35, true) {
            n += 1;
            return n == 3;
        }
        false
    });
    net.up();
    assert!(ike_up(&net.events_b).is_empty());
    let start = net.now;
    while ike_up(&net.events_a).is_empty() && net.advance(start + Duration::from_secs(20)) {}
    assert_eq!((ike_up(&net.events_a).len(), ike_up(&net.events_b).len()), (1, 1));
    assert_eq!((child_up(&net.events_a).len(), child_up(&net.events_b).len()), (1, 1));
    // Six requests sent, one a retransmission B answered without running EAP again.
    assert_eq!(ike_auth_requests(&net), 6);
    let st = &net.b.status(net.now)[0];
    assert_eq!(st.stats.requests_answered, 5, "IKE_AUTH rounds B ran");
    assert_eq!(st.stats.eap_out_of_order, 0);
}

/// The road warrior's whole IKE_AUTH: EAP and a virtual address (the first request's
/// CFG_REQUEST answered after EAP, RFC 7296 3.15): the lease is the EAP identity's, the
/// child's selectors are narrowed to it, the client takes the address.
#[test]
fn eap_with_a_virtual_ip_leases_to_the_eap_identity() {
    let mut net = eap_pair("alice", "Sup3r secret");
    let (a, b) = (net.a.config().clone(), net.b.config().clone());
    let (mut a, mut b) = (a, b);
    a.connections[0].children[0] = ChildConfig::new("net", "dynamic", "10.2.0.0/16", ESP).unwrap();
    a.connections[0].vips = vec![ip("0.0.0.0")];
    b.connections[0].children[0] = ChildConfig::new("net", "10.2.0.0/16", "dynamic", ESP).unwrap();
    b.connections[0].pools = vec!["p4".into()];
    b.pools = vec![PoolConfig::new("p4", "10.3.0.0/24").unwrap()];
    net = Net::new(a, b);
    let now = net.now;
    net.a.set_unix_time(now, NOW_UNIX);
    net.b.set_unix_time(now, NOW_UNIX);
    net.up();
    assert_eq!(
        (ike_up(&net.events_a).len(), ike_up(&net.events_b).len()),
        (1, 1),
        "{:?}",
        net.events_b
    );
    let leases: Vec<(Identity, IpAddr)> = net
        .events_b
        .iter()
        .filter_map(|e| match e {
            Event::LeaseAssigned { identity, address, .. } => Some((identity.clone(), *address)),
            _ => None,
        })
        .collect();
    assert_eq!(leases, vec![(Identity::Fqdn("alice".into()), ip("10.3.0.1"))]);
    assert_eq!(net.a.status(net.now)[0].virtual_ips, [ip("10.3.0.1")]);
    let cb = child_up(&net.events_b);
    assert_eq!(cb.len(), 1);
    assert!(
        format!("{:?}", cb[0].remote_ts).contains("10.3.0.1"),
        "{:?}",
        cb[0].remote_ts
    );
}
