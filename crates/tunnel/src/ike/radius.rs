//! The IKE thread's socket toward the RADIUS server (EAP-RADIUS, RFC 3579; the config's
//! `[radius]`, docs/ike-eap.md): one unconnected UDP socket on an ephemeral port, shared by
//! every IKE SA whose EAP conversation the server has. The endpoint gives each outstanding
//! request its own RADIUS Identifier and routes answers back by it
//! ([`ipsec_ike::Endpoint::handle_radius`]); here the socket sends what
//! [`ipsec_ike::Endpoint::poll_radius`] gives and reads what comes back.
//!
//! Several servers (`[[radius]]`, failover): the endpoint says which server each datagram
//! goes to ([`ipsec_ike::RadiusTransmit::server`], the servers' order of preference), and an
//! answer is handed on with the number of the server it came from.
//!
//! Only datagrams from a server's address and port are handed on: anything else on the
//! socket is dropped and counted (`wrong_source`), as are answers the endpoint refuses (no
//! request with their Identifier, a wrong authenticator: `dropped`), each with a log line
//! (at the first and then at every power of two, so a flood does not flood the log).
use crate::control::ChildUsage;
use ipsec_ike::ipsec_eap::radius::accounting as acct;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Datagrams read from the socket in one pass of the IKE thread at most.
const READS_PER_PASS: usize = 64;

/// The socket and what it dropped.
pub struct RadiusSocket {
    sock: UdpSocket,
    /// The servers, in the order of preference (the endpoint's server numbers).
    servers: Vec<SocketAddr>,
    /// Datagrams from another address or port than the server's.
    pub wrong_source: AtomicU64,
    /// Datagrams from the server the endpoint dropped (unmatched, wrong authenticator,
    /// malformed; the endpoint's `radius_stats` says which).
    pub dropped: AtomicU64,
    /// Sends that failed.
    pub send_errors: AtomicU64,
    /// Accounting, when on: its requests go out on this socket too.
    pub accounting: Option<Mutex<Accountant>>,
}

fn note(counter: &AtomicU64) -> Option<u64> {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    n.is_power_of_two().then_some(n)
}

impl RadiusSocket {
    /// A nonblocking socket on an ephemeral port of the server's address family.
    pub fn open(server: SocketAddr) -> std::io::Result<RadiusSocket> {
        RadiusSocket::open_many(&[server])
    }

    /// A nonblocking socket on an ephemeral port toward `servers` (in the order of
    /// preference; all of one address family).
    pub fn open_many(servers: &[SocketAddr]) -> std::io::Result<RadiusSocket> {
        let Some(server) = servers.first().copied() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no RADIUS server",
            ));
        };
        if servers.iter().any(|s| s.is_ipv4() != server.is_ipv4()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the RADIUS servers must be of one address family (IPv4 or IPv6)",
            ));
        }
        let any = match server.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let sock = UdpSocket::bind(SocketAddr::new(any, 0))?;
        sock.set_nonblocking(true)?;
        Ok(RadiusSocket {
            sock,
            servers: servers.to_vec(),
            wrong_source: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
            accounting: None,
        })
    }

    /// The first server (by preference).
    pub fn server(&self) -> SocketAddr {
        self.servers[0]
    }

    /// The servers, in the order of preference.
    pub fn servers(&self) -> &[SocketAddr] {
        &self.servers
    }

    /// The socket (for the IKE thread's poll).
    pub(super) fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// With accounting (its servers' accounting addresses in the same order).
    pub fn with_accounting(mut self, a: Accountant) -> RadiusSocket {
        self.accounting = Some(Mutex::new(a));
        self
    }

    /// Sends everything the endpoint has for the server.
    pub(super) fn send_all(&self, endpoint: &mut ipsec_ike::Endpoint) {
        if let Some(a) = &self.accounting {
            let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
            while let Some((server, data)) = a.client.poll_transmit() {
                let Some(&to) = a.servers.get(server) else { continue };
                if let Err(e) = self.sock.send_to(&data, to) {
                    if let Some(n) = note(&self.send_errors) {
                        warn!("IKE: sending to the RADIUS accounting server {to}: {e} ({n} failed sends)");
                    }
                }
            }
        }
        while let Some(t) = endpoint.poll_radius() {
            let Some(&to) = self.servers.get(t.server) else {
                note(&self.send_errors);
                continue;
            };
            if let Err(e) = self.sock.send_to(&t.data, to) {
                if let Some(n) = note(&self.send_errors) {
                    warn!("IKE: sending to the RADIUS server {to}: {e} ({n} failed sends)");
                }
            }
        }
    }

    /// Reads what is waiting (at most [`READS_PER_PASS`] datagrams) and hands the server's
    /// to the endpoint; returns how many were read.
    pub(super) fn receive(
        &self,
        endpoint: &mut ipsec_ike::Endpoint,
        now: Duration,
        buf: &mut [u8],
        rng: &mut impl rand_core::CryptoRngCore,
    ) -> usize {
        let mut read = 0;
        while read < READS_PER_PASS {
            let Ok((n, from)) = self.sock.recv_from(buf) else { break };
            read += 1;
            if let Some(a) = &self.accounting {
                if a.lock().unwrap_or_else(|p| p.into_inner()).handle(from, &buf[..n]) {
                    continue;
                }
            }
            let Some(server) = self.servers.iter().position(|s| *s == from) else {
                if let Some(k) = note(&self.wrong_source) {
                    warn!("IKE: a datagram from {from} on the RADIUS socket dropped: not a RADIUS server ({k} so far)");
                }
                continue;
            };
            if let Err(e) = endpoint.handle_radius_from(now, server, &buf[..n], rng) {
                debug!("IKE: RADIUS answer dropped: {e}");
                if let Some(k) = note(&self.dropped) {
                    warn!("IKE: an answer from the RADIUS server {from} dropped: {e} ({k} so far)");
                }
            }
        }
        read
    }
}

/// RADIUS accounting (RFC 2866; `[radius] accounting = true`): the sessions of the IKE SAs
/// that EAP-RADIUS let in, followed from the endpoint's events, and the sans-IO client
/// ([`ipsec_ike::ipsec_eap::radius::accounting`]) whose requests go out on the RADIUS
/// socket to the servers' accounting ports.
///
/// A Start goes when a client's IKE SA is up (after the pass's events, so its lease, told
/// in the same pass, is in it: Framed-IP-Address); each child's inbound and outbound SA's
/// counts are read from the data plane when the child goes (before its SAs are removed)
/// and added to the session; the Stop, when the IKE SA goes, carries them with the session
/// time and a cause made from the IKE SA's reason.
pub struct Accountant {
    client: acct::Accounting,
    /// The servers' accounting addresses, in the order of preference.
    servers: Vec<SocketAddr>,
    nas_identifier: Vec<u8>,
    /// The connections whose clients are accounted (`remote.auth = "eap-radius"`).
    conns: Vec<String>,
    sessions: HashMap<u64, Session>,
    /// A child's inbound SPI -> the initiator SPI of its IKE SA.
    children: HashMap<u32, u64>,
    /// Children reported up this pass: conn, the peer's address, inbound SPI.
    new_children: Vec<(String, SocketAddr, u32)>,
    /// Leases told this pass: initiator SPI, address.
    leases: Vec<(u64, IpAddr)>,
    /// Sessions started so far (NAS-Port, and part of Acct-Session-Id).
    started: u32,
    /// The daemon's start (Acct-Session-Id's prefix: unique across restarts).
    epoch: u64,
    /// Answers from the accounting ports the client dropped.
    pub dropped: u64,
    /// Interim-Updates at this interval (None: none).
    interim: Option<Duration>,
}

struct Session {
    record: acct::Record,
    conn: String,
    remote: SocketAddr,
    start: Option<Duration>,
    /// When the next Interim-Update is due.
    next_interim: Option<Duration>,
    /// The counts of its children that are gone.
    usage: acct::Usage,
}

/// Adds a child's counts (inbound: from the client, Acct-Input) to a session's.
fn add_usage(u: &mut acct::Usage, (inb, out): ChildUsage) {
    if let Some((b, p)) = inb {
        u.input_octets += b;
        u.input_packets = u.input_packets.saturating_add(p.min(u64::from(u32::MAX)) as u32);
    }
    if let Some((b, p)) = out {
        u.output_octets += b;
        u.output_packets = u.output_packets.saturating_add(p.min(u64::from(u32::MAX)) as u32);
    }
}

impl Accountant {
    /// Accounting to `servers` (accounting addresses, by preference) for the clients of
    /// `conns`.
    pub fn new(config: acct::Config, servers: Vec<SocketAddr>, nas_identifier: &str, conns: Vec<String>) -> Accountant {
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Accountant {
            client: acct::Accounting::new(config),
            servers,
            nas_identifier: nas_identifier.as_bytes().to_vec(),
            conns,
            sessions: HashMap::new(),
            children: HashMap::new(),
            new_children: Vec::new(),
            leases: Vec::new(),
            started: 0,
            epoch,
            dropped: 0,
            interim: None,
        }
    }

    /// Interim-Updates every `interval` (strongSwan's `interim_interval`).
    pub fn with_interim(mut self, interval: Option<Duration>) -> Accountant {
        self.interim = interval;
        self
    }

    /// The accounting client's counters.
    pub fn stats(&self) -> acct::Stats {
        self.client.stats()
    }

    /// Sessions accounted now.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// An endpoint event, before tunneld acts on it (a child's SAs are still in the data
    /// plane: `usage(spi_in)` reads their counts).
    pub fn observe(&mut self, ev: &ipsec_ike::Event, now: Duration, usage: &dyn Fn(u32) -> ChildUsage) {
        use ipsec_ike::Event;
        match ev {
            Event::LeaseAssigned { spi_i, address, .. } => self.leases.push((*spi_i, *address)),
            Event::IkeUp { info, .. } => {
                if info.role != ipsec_ike::Role::Responder || !self.conns.contains(&info.conn) {
                    return;
                }
                let user_name = match &info.remote_id {
                    ipsec_ike::Identity::Fqdn(s) | ipsec_ike::Identity::UserFqdn(s) => s.as_bytes().to_vec(),
                    ipsec_ike::Identity::KeyId(k) => k.clone(),
                    other => other.to_string().into_bytes(),
                };
                self.started = self.started.wrapping_add(1);
                let record = acct::Record {
                    user_name,
                    session_id: format!("{:08x}-{:08x}-{:016x}", self.epoch, self.started, info.spi_i).into_bytes(),
                    nas_identifier: self.nas_identifier.clone(),
                    nas_ip: Some(info.local.ip()),
                    nas_port: self.started,
                    called: info.local.ip().to_string().into_bytes(),
                    calling: info.remote.ip().to_string().into_bytes(),
                    framed: Vec::new(),
                };
                self.sessions.insert(
                    info.spi_i,
                    Session {
                        record,
                        conn: info.conn.clone(),
                        remote: info.remote,
                        start: None,
                        next_interim: None,
                        usage: acct::Usage::default(),
                    },
                );
                let _ = now;
            }
            Event::ChildUp(c) => self.new_children.push((c.conn.clone(), c.remote, c.spi_in)),
            Event::ChildDown { spi_in, .. } => {
                let Some(spi_i) = self.children.remove(spi_in) else {
                    return;
                };
                let Some(s) = self.sessions.get_mut(&spi_i) else { return };
                let (inb, out) = usage(*spi_in);
                if let Some((b, p)) = inb {
                    s.usage.input_octets += b;
                    s.usage.input_packets = s.usage.input_packets.saturating_add(p as u32);
                }
                if let Some((b, p)) = out {
                    s.usage.output_octets += b;
                    s.usage.output_packets = s.usage.output_packets.saturating_add(p as u32);
                }
            }
            Event::IkeDown { spi_i, reason, .. } => {
                let Some(mut s) = self.sessions.remove(spi_i) else {
                    return;
                };
                self.children.retain(|_, v| v != spi_i);
                let Some(start) = s.start else { return };
                use ipsec_ike::DownReason as R;
                let cause = match reason {
                    R::Peer => acct::TerminateCause::UserRequest,
                    R::Timeout => acct::TerminateCause::LostCarrier,
                    R::Expired => acct::TerminateCause::SessionTimeout,
                    R::Local | R::Replaced => acct::TerminateCause::AdminReset,
                    _ => acct::TerminateCause::NasError,
                };
                s.usage.session_time = now.saturating_sub(start).as_secs().min(u64::from(u32::MAX)) as u32;
                self.request(acct::StatusType::Stop, &s.record, Some(s.usage), Some(cause), now);
            }
            _ => {}
        }
    }

    /// After a pass's events: Start for the sessions that came up (with their leases), the
    /// new children filed under their IKE SA, the Interim-Updates that are due (the counts
    /// of the children gone and of those up, read with `usage`).
    pub fn flush(&mut self, now: Duration, usage: &dyn Fn(u32) -> ChildUsage) {
        for (spi_i, a) in self.leases.drain(..) {
            if let Some(s) = self.sessions.get_mut(&spi_i) {
                if !s.record.framed.contains(&a) {
                    s.record.framed.push(a);
                }
            }
        }
        for (conn, remote, spi_in) in self.new_children.drain(..) {
            if let Some((spi_i, _)) = self.sessions.iter().find(|(_, s)| s.conn == conn && s.remote == remote) {
                self.children.insert(spi_in, *spi_i);
            }
        }
        let mut starts = Vec::new();
        for s in self.sessions.values_mut().filter(|s| s.start.is_none()) {
            s.start = Some(now);
            s.next_interim = self.interim.map(|i| now + i);
            starts.push(s.record.clone());
        }
        for r in starts {
            self.request(acct::StatusType::Start, &r, None, None, now);
        }
        if let Some(interval) = self.interim {
            let mut due = Vec::new();
            for (spi_i, s) in self.sessions.iter_mut() {
                let (Some(start), Some(next)) = (s.start, s.next_interim) else {
                    continue;
                };
                if now < next {
                    continue;
                }
                s.next_interim = Some(now + interval);
                let mut u = s.usage;
                for (spi_in, _) in self.children.iter().filter(|(_, v)| *v == spi_i) {
                    add_usage(&mut u, usage(*spi_in));
                }
                u.session_time = now.saturating_sub(start).as_secs().min(u64::from(u32::MAX)) as u32;
                due.push((s.record.clone(), u));
            }
            for (r, u) in due {
                self.request(acct::StatusType::InterimUpdate, &r, Some(u), None, now);
            }
        }
        self.client.handle_timeout(now);
    }

    fn request(
        &mut self,
        status: acct::StatusType,
        record: &acct::Record,
        usage: Option<acct::Usage>,
        cause: Option<acct::TerminateCause>,
        now: Duration,
    ) {
        let user = String::from_utf8_lossy(&record.user_name).into_owned();
        match self.client.send(status, record, usage, cause, now) {
            Ok(()) => info!(
                "IKE: RADIUS accounting {status:?} for {user} ({})",
                String::from_utf8_lossy(&record.session_id)
            ),
            Err(e) => warn!("IKE: RADIUS accounting {status:?} for {user} not sent: {e}"),
        }
    }

    /// An answer from `from`: one of the accounting addresses, or not ours (false).
    fn handle(&mut self, from: SocketAddr, data: &[u8]) -> bool {
        let Some(server) = self.servers.iter().position(|s| *s == from) else {
            return false;
        };
        if let Err(e) = self.client.handle_datagram(server, data) {
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                warn!(
                    "IKE: an answer from the RADIUS accounting server {from} dropped: {e} ({} so far)",
                    self.dropped
                );
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bad input: a datagram from another address or port than the server's is dropped and
    /// counted, never handed to the endpoint; one from the server that matches no request
    /// is the endpoint's to count.
    #[test]
    fn datagrams_from_anywhere_but_the_server_are_dropped_and_counted() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        let r = RadiusSocket::open(server.local_addr().unwrap()).unwrap();
        let to = SocketAddr::new("127.0.0.1".parse().unwrap(), r.sock.local_addr().unwrap().port());
        let mut endpoint = ipsec_ike::Endpoint::new(ipsec_ike::Config::new(Vec::new()));
        // An Access-Accept header with Identifier 7: no request has it.
        let mut answer = vec![2u8, 7, 0, 20];
        answer.extend_from_slice(&[0; 16]);
        stranger.send_to(&answer, to).unwrap();
        server.send_to(&answer, to).unwrap();
        let mut buf = [0u8; 4096];
        let mut rng = rand_core::OsRng;
        let mut read = 0;
        for _ in 0..100 {
            read += r.receive(&mut endpoint, Duration::ZERO, &mut buf, &mut rng);
            if read == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(read, 2);
        assert_eq!(r.wrong_source.load(Ordering::Relaxed), 1);
        assert_eq!(r.dropped.load(Ordering::Relaxed), 1);
        // Only the server's reached the endpoint (and matched nothing there).
        assert_eq!(endpoint.radius_stats().unmatched, 1);
    }

    /// Accounting follows the endpoint's events: an EAP-RADIUS client's IKE SA up (its
    /// lease told in the same pass) gives one Start with the lease as Framed-IP-Address
    /// after the pass; its child's data-plane counts, read when the child goes, and the
    /// session time are in the Stop, whose cause is the IKE SA's reason; an IKE SA of
    /// another connection, or one we initiated, is not accounted.
    #[test]
    fn start_and_stop_follow_the_events() {
        use ipsec_ike::ipsec_eap::radius::packet::{attr, Packet, Repr};
        use ipsec_ike::{DownReason, Event, Identity, Role};
        let server: SocketAddr = "127.0.0.1:1813".parse().unwrap();
        let cfg = acct::Config {
            secrets: vec![zeroize::Zeroizing::new(b"s".to_vec())],
            retransmit_after: Duration::from_secs(2),
            max_tries: 2,
        };
        let mut a = Accountant::new(cfg, vec![server], "gw", vec!["rw".into()]);
        let client: SocketAddr = "198.51.100.2:4500".parse().unwrap();
        let info = |conn: &str, spi_i: u64, role: Role| ipsec_ike::IkeSaInfo {
            conn: conn.into(),
            spi_r: 9,
            role,
            remote: client,
            local_id: Identity::Fqdn("vpn.example".into()),
            remote_id: Identity::Fqdn("alice".into()),
            nat: false,
            ..crate::ike::events::tests::info(spi_i)
        };
        let child = ipsec_ike::ChildSaInfo {
            conn: "rw".into(),
            local_ts: vec![],
            remote_ts: vec![],
            encap: None,
            remote: client,
            initiator: false,
            ..crate::ike::events::tests::child(None, false)
        };
        let none = |_: u32| -> ChildUsage { (None, None) };
        let counts = |_: u32| -> ChildUsage { (Some((1000, 10)), Some((2000, 20))) };
        let t = Duration::from_secs;
        // Not accounted: another connection, and an IKE SA we initiated.
        a.observe(
            &Event::IkeUp {
                info: info("site", 7, Role::Responder),
                keys: None,
            },
            t(10),
            &none,
        );
        a.observe(
            &Event::IkeUp {
                info: info("rw", 8, Role::Initiator),
                keys: None,
            },
            t(10),
            &none,
        );
        // The client: its lease, its IKE SA, its child, in one pass.
        a.observe(
            &Event::LeaseAssigned {
                conn: "rw".into(),
                pool: "p".into(),
                identity: Identity::Fqdn("alice".into()),
                address: "10.3.0.1".parse().unwrap(),
                spi_i: 1,
            },
            t(10),
            &none,
        );
        a.observe(
            &Event::IkeUp {
                info: info("rw", 1, Role::Responder),
                keys: None,
            },
            t(10),
            &none,
        );
        a.observe(&Event::ChildUp(child), t(10), &none);
        assert!(a.client.poll_transmit().is_none(), "the Start waits for the pass's end");
        a.flush(t(10), &none);
        assert_eq!(a.sessions(), 1);
        let (to, start) = a.client.poll_transmit().unwrap();
        assert_eq!(to, 0);
        assert!(a.client.poll_transmit().is_none(), "one Start");
        acct::verify_request(b"s", &start).unwrap();
        let get = |d: &[u8], t: u8| {
            Repr::parse(&Packet::new_checked(d).unwrap())
                .unwrap()
                .get(t)
                .map(|v| v.to_vec())
        };
        let n = |d: &[u8], t: u8| u32::from_be_bytes(get(d, t).unwrap().try_into().unwrap());
        assert_eq!(n(&start, acct::acct_attr::ACCT_STATUS_TYPE), 1);
        assert_eq!(get(&start, attr::USER_NAME), Some(b"alice".to_vec()));
        assert_eq!(get(&start, acct::acct_attr::FRAMED_IP_ADDRESS), Some(vec![10, 3, 0, 1]));
        assert_eq!(get(&start, attr::CALLING_STATION_ID), Some(b"198.51.100.2".to_vec()));
        assert_eq!(get(&start, attr::NAS_IP_ADDRESS), Some(vec![192, 0, 2, 1]));
        // The child goes (its counts read now), then the IKE SA: the Stop.
        a.observe(
            &Event::ChildDown {
                conn: "rw".into(),
                child: "net".into(),
                spi_in: 0xc000_0001,
                spi_out: 0xc000_0002,
                reason: DownReason::IkeSaDown,
            },
            t(70),
            &counts,
        );
        a.observe(
            &Event::IkeDown {
                conn: "rw".into(),
                spi_i: 1,
                spi_r: 9,
                remote: client,
                reason: DownReason::Peer,
            },
            t(70),
            &none,
        );
        let (_, stop) = a.client.poll_transmit().unwrap();
        assert_eq!(n(&stop, acct::acct_attr::ACCT_STATUS_TYPE), 2);
        assert_eq!(
            get(&stop, acct::acct_attr::ACCT_SESSION_ID),
            get(&start, acct::acct_attr::ACCT_SESSION_ID)
        );
        assert_eq!(n(&stop, acct::acct_attr::ACCT_SESSION_TIME), 60);
        assert_eq!(n(&stop, acct::acct_attr::ACCT_INPUT_OCTETS), 1000);
        assert_eq!(n(&stop, acct::acct_attr::ACCT_OUTPUT_OCTETS), 2000);
        assert_eq!(n(&stop, acct::acct_attr::ACCT_INPUT_PACKETS), 10);
        assert_eq!(n(&stop, acct::acct_attr::ACCT_OUTPUT_PACKETS), 20);
        assert_eq!(n(&stop, acct::acct_attr::ACCT_TERMINATE_CAUSE), 1, "User-Request");
        assert_eq!(a.sessions(), 0);
        // An answer from the server with the right authenticator ends the request; one from
        // elsewhere is not the accountant's.
        let mut resp =
            ipsec_ike::ipsec_eap::radius::packet::Builder::new(acct::code::ACCOUNTING_RESPONSE, start[1], &[0; 16])
                .finish();
        let mut ra = [0u8; 16];
        ra.copy_from_slice(&start[4..20]);
        acct::sign_response(b"s", &ra, &mut resp).unwrap();
        assert!(!a.handle("127.0.0.1:9".parse().unwrap(), &resp));
        assert!(a.handle(server, &resp));
        assert_eq!(a.stats().responses, 1);
        assert_eq!(a.client.outstanding(), 1, "the Stop still waits");
    }
}
