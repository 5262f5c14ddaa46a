//! Remote access in memory: one responder with an address pool (a `%any` connection) and
//! several initiators asking for a virtual address (`vips = 0.0.0.0`), this crate on both
//! sides. The CFG_REQUEST / CFG_REPLY exchange (RFC 7296 3.15), the child's selectors
//! narrowed to the lease, leases kept per identity and released with their IKE SA, a full
//! pool refused with INTERNAL_ADDRESS_FAILURE, and `unique`.
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::*;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";
const SERVER: &str = "10.0.0.1";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The gateway: `%any` peers with any identity, one pool, the child `10.2.0.0/16 <-> dynamic`.
fn server(addrs: &str, unique: Unique) -> Config {
    let mut c = Connection::new(
        "rw",
        ip(SERVER),
        None,
        Identity::from_str_config(SERVER).unwrap(),
        None,
        Psk::new(b"road warrior"),
        IKE,
    )
    .unwrap();
    c.children
        .push(ChildConfig::new("net", "10.2.0.0/16", "dynamic", ESP).unwrap());
    c.pools = vec!["p4".into()];
    c.unique = unique;
    let mut pool = PoolConfig::new("p4", addrs).unwrap();
    pool.dns = vec![ip("10.2.0.53")];
    pool.subnets = vec![(ip("10.2.0.0"), 16)];
    pool.dns_domains = vec!["corp.example".into()];
    let mut cfg = Config::new(vec![c]);
    cfg.pools = vec![pool];
    cfg
}

/// A client at `addr` with identity `id` asking for an IPv4 address.
fn client(addr: &str, id: &str) -> Config {
    let mut c = Connection::new(
        "home",
        ip(addr),
        Some(ip(SERVER)),
        Identity::from_str_config(id).unwrap(),
        Some(Identity::from_str_config(SERVER).unwrap()),
        Psk::new(b"road warrior"),
        IKE,
    )
    .unwrap();
    c.children
        .push(ChildConfig::new("net", "dynamic", "10.2.0.0/16", ESP).unwrap());
    c.vips = vec![ip("0.0.0.0")];
    Config::new(vec![c])
}

/// The server and its clients, datagrams routed by destination address.
struct Star {
    server: Endpoint,
    clients: Vec<Endpoint>,
    now: Duration,
    rng: ChaCha20Rng,
    ev_s: Vec<Event>,
    ev_c: Vec<Vec<Event>>,
    /// Datagrams from the server to this address are lost.
    cut: Option<IpAddr>,
}

impl Star {
    fn new(server: Config, clients: Vec<Config>) -> Self {
        Star {
            server: Endpoint::new(server),
            ev_c: clients.iter().map(|_| Vec::new()).collect(),
            clients: clients.into_iter().map(Endpoint::new).collect(),
            now: Duration::from_secs(1000),
            rng: ChaCha20Rng::seed_from_u64(7),
            ev_s: Vec::new(),
            cut: None,
        }
    }

    fn pump(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            for c in &mut self.clients {
                while let Some(t) = c.poll_transmit() {
                    moved = true;
                    let _ = self
                        .server
                        .handle_datagram(self.now, t.remote, t.local, &t.payload, &mut self.rng);
                }
            }
            while let Some(t) = self.server.poll_transmit() {
                moved = true;
                let to: SocketAddr = t.remote;
                if self.cut == Some(to.ip()) {
                    continue;
                }
                if let Some(c) = self
                    .clients
                    .iter_mut()
                    .find(|c| c.config().connections[0].local_addr == to.ip())
                {
                    let _ = c.handle_datagram(self.now, t.remote, t.local, &t.payload, &mut self.rng);
                }
            }
            while let Some(e) = self.server.poll_event() {
                self.ev_s.push(e);
            }
            for (i, c) in self.clients.iter_mut().enumerate() {
                while let Some(e) = c.poll_event() {
                    self.ev_c[i].push(e);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("does not settle");
    }

    fn connect(&mut self, i: usize) {
        self.clients[i].initiate(self.now, "home", &mut self.rng).unwrap();
        self.pump();
    }

    fn disconnect(&mut self, i: usize) {
        self.clients[i].terminate(self.now, "home", &mut self.rng).unwrap();
        self.pump();
    }

    /// The client's virtual addresses from its events (the last VirtualIp).
    fn vip(&self, i: usize) -> Option<(Vec<IpAddr>, Vec<IpAddr>)> {
        self.ev_c[i].iter().rev().find_map(|e| match e {
            Event::VirtualIp { addresses, dns, .. } => Some((addresses.clone(), dns.clone())),
            _ => None,
        })
    }

    fn children_up(ev: &[Event]) -> Vec<&ChildSaInfo> {
        ev.iter()
            .filter_map(|e| if let Event::ChildUp(c) = e { Some(c) } else { None })
            .collect()
    }
}

fn host(s: &str) -> TrafficSelector {
    TrafficSelector::host(ip(s))
}

#[test]
fn two_clients_get_distinct_leases_dns_and_narrowed_selectors() {
    let mut net = Star::new(
        server("10.3.0.0/24", Unique::No),
        vec![
            client("192.0.2.10", "alice@example.org"),
            client("192.0.2.11", "bob@example.org"),
        ],
    );
    net.connect(0);
    net.connect(1);
    let (a, dns) = net.vip(0).expect("client 0 got a CFG_REPLY");
    assert_eq!(a, [ip("10.3.0.1")]);
    assert_eq!(dns, [ip("10.2.0.53")]);
    assert_eq!(net.vip(1).unwrap().0, [ip("10.3.0.2")]);
    // The child: the client's side narrowed from 0.0.0.0/0 to its lease, both ends agreeing.
    for (i, lease) in [(0, "10.3.0.1"), (1, "10.3.0.2")] {
        let c = Star::children_up(&net.ev_c[i]);
        assert_eq!(c.len(), 1, "{:?}", net.ev_c[i]);
        assert_eq!(c[0].local_ts, [host(lease)]);
        assert_eq!(
            c[0].remote_ts,
            [TrafficSelector::from_str_config("10.2.0.0/16").unwrap()]
        );
    }
    let s = Star::children_up(&net.ev_s);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].remote_ts, [host("10.3.0.1")]);
    assert_eq!(s[1].remote_ts, [host("10.3.0.2")]);
    // Events with identity and address; the leases in the status.
    let assigned: Vec<(String, IpAddr)> = net
        .ev_s
        .iter()
        .filter_map(|e| match e {
            Event::LeaseAssigned {
                identity,
                address,
                pool,
                ..
            } => {
                assert_eq!(pool, "p4");
                Some((identity.to_string(), *address))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        assigned,
        [
            ("alice@example.org".to_string(), ip("10.3.0.1")),
            ("bob@example.org".to_string(), ip("10.3.0.2"))
        ]
    );
    let mut vips: Vec<Vec<IpAddr>> = net.server.status(net.now).into_iter().map(|s| s.virtual_ips).collect();
    vips.sort();
    assert_eq!(vips, [vec![ip("10.3.0.1")], vec![ip("10.3.0.2")]]);
    assert_eq!(net.clients[0].status(net.now)[0].virtual_ips, [ip("10.3.0.1")]);
    let st = net.server.pool_stats();
    assert_eq!((st[0].size, st[0].online, st[0].offline), (254, 2, 0));
}

#[test]
fn the_same_identity_gets_its_address_again_after_a_disconnect() {
    let mut net = Star::new(
        server("10.3.0.10-10.3.0.20", Unique::No),
        vec![
            client("192.0.2.10", "alice@example.org"),
            client("192.0.2.11", "bob@example.org"),
            // Alice again, from another address.
            client("192.0.2.12", "alice@example.org"),
        ],
    );
    net.connect(0);
    net.connect(1);
    net.disconnect(0);
    let released: Vec<_> = net
        .ev_s
        .iter()
        .filter_map(|e| match e {
            Event::LeaseReleased { address, identity, .. } => Some((identity.to_string(), *address)),
            _ => None,
        })
        .collect();
    assert_eq!(released, [("alice@example.org".to_string(), ip("10.3.0.10"))]);
    assert_eq!(net.server.pool_stats()[0].offline, 1);
    net.connect(2);
    assert_eq!(net.vip(2).unwrap().0, [ip("10.3.0.10")]);
    assert_eq!(net.vip(1).unwrap().0, [ip("10.3.0.11")]);
}

#[test]
fn a_full_pool_answers_internal_address_failure_and_keeps_serving() {
    let mut net = Star::new(
        server("10.3.0.7/32", Unique::No),
        vec![
            client("192.0.2.10", "alice@example.org"),
            client("192.0.2.11", "bob@example.org"),
            client("192.0.2.12", "carol@example.org"),
        ],
    );
    net.connect(0);
    assert_eq!(net.vip(0).unwrap().0, [ip("10.3.0.7")]);
    net.connect(1);
    // Bob: no address, no child; the event says why; his client gives the IKE SA up.
    assert_eq!(net.vip(1).unwrap().0, Vec::<IpAddr>::new());
    assert!(Star::children_up(&net.ev_c[1]).is_empty());
    assert!(net.ev_s.iter().any(|e| matches!(e,
        Event::PoolExhausted { identity, pools, .. }
            if identity.to_string() == "bob@example.org" && pools == &["p4".to_string()])));
    assert!(
        net.clients[1].status(net.now).is_empty(),
        "bob's client deleted its IKE SA"
    );
    assert_eq!(net.server.status(net.now).len(), 1, "and the server's went with it");
    // Alice still up; once she leaves, carol gets the address.
    assert_eq!(Star::children_up(&net.ev_c[0]).len(), 1);
    net.disconnect(0);
    net.connect(2);
    assert_eq!(net.vip(2).unwrap().0, [ip("10.3.0.7")]);
    assert_eq!(Star::children_up(&net.ev_c[2]).len(), 1);
}

#[test]
fn unique_keep_refuses_and_replace_takes_over_the_lease() {
    // Two devices of alice. Clients send INITIAL_CONTACT; with `never` it is ignored and each
    // gets its own lease.
    let devices = || {
        vec![
            client("192.0.2.10", "alice@example.org"),
            client("192.0.2.11", "alice@example.org"),
        ]
    };
    let mut net = Star::new(server("10.3.0.0/24", Unique::Never), devices());
    net.connect(0);
    net.connect(1);
    assert_eq!(net.vip(0).unwrap().0, [ip("10.3.0.1")]);
    assert_eq!(net.vip(1).unwrap().0, [ip("10.3.0.2")]);
    assert_eq!(net.server.status(net.now).len(), 2);

    let mut net = Star::new(server("10.3.0.0/24", Unique::Keep), devices());
    net.connect(0);
    net.connect(1);
    assert!(net.ev_s.iter().any(|e| matches!(
        e,
        Event::AuthFailed {
            reason: Some(authenticator::Refusal::UniqueKeep),
            ..
        }
    )));
    assert!(net.vip(1).is_none());
    assert_eq!(net.server.status(net.now).len(), 1);

    let mut net = Star::new(server("10.3.0.0/24", Unique::Replace), devices());
    net.connect(0);
    net.connect(1);
    // The second device has the first one's address; the first IKE SA is gone on the server.
    assert_eq!(net.vip(1).unwrap().0, [ip("10.3.0.1")]);
    let st = net.server.status(net.now);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].remote.ip(), ip("192.0.2.11"));
    assert_eq!(net.server.pool_stats()[0].online, 1);
}

#[test]
fn an_ike_rekey_keeps_the_lease() {
    let mut net = Star::new(
        server("10.3.0.0/24", Unique::No),
        vec![client("192.0.2.10", "alice@example.org")],
    );
    net.connect(0);
    net.clients[0].rekey_ike(net.now, "home", &mut net.rng).unwrap();
    net.pump();
    assert!(net.ev_s.iter().any(|e| matches!(e, Event::IkeRekeyed { .. })));
    assert!(
        !net.ev_s.iter().any(|e| matches!(e, Event::LeaseReleased { .. })),
        "{:?}",
        net.ev_s
    );
    let st = net.server.status(net.now);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].virtual_ips, [ip("10.3.0.1")]);
    assert_eq!(net.server.pool_stats()[0].online, 1);
    net.disconnect(0);
    assert_eq!(net.server.pool_stats()[0].online, 0);
}

/// The old device's events: its IKE SA's down reason, and how many children went down.
fn downs(ev: &[Event]) -> (Vec<DownReason>, usize) {
    let ike = ev
        .iter()
        .filter_map(|e| match e {
            Event::IkeDown { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    let children = ev.iter().filter(|e| matches!(e, Event::ChildDown { .. })).count();
    (ike, children)
}

#[test]
fn unique_replace_sends_the_old_ike_sa_a_delete_and_forgets_it() {
    // Two devices of alice, `unique = replace`: the second one's IKE_AUTH replaces the first
    // one's IKE SA, which the server deletes with an INFORMATIONAL Delete (RFC 7296 1.4.1),
    // as strongSwan does, instead of dropping it silently.
    let mut net = Star::new(
        server("10.3.0.0/24", Unique::Replace),
        vec![
            client("192.0.2.10", "alice@example.org"),
            client("192.0.2.11", "alice@example.org"),
        ],
    );
    net.connect(0);
    let old = net.server.status(net.now)[0].clone();
    net.connect(1);
    // The first device was told: its IKE SA and child are down by the peer's Delete.
    assert_eq!(downs(&net.ev_c[0]), (vec![DownReason::Peer], 1), "{:?}", net.ev_c[0]);
    assert!(net.clients[0].status(net.now).is_empty());
    // The server: the old SA down as replaced, its child with it; the lease moved to the new
    // SA (not released), the new device up.
    let gone: Vec<_> = net
        .ev_s
        .iter()
        .filter_map(|e| match e {
            Event::IkeDown { spi_i, reason, .. } => Some((*spi_i, *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(gone, [(old.spi_i, DownReason::Replaced)]);
    assert_eq!(downs(&net.ev_s).1, 1);
    assert!(!net.ev_s.iter().any(|e| matches!(e, Event::LeaseReleased { .. })));
    assert_eq!(net.vip(1).unwrap().0, [ip("10.3.0.1")]);
    let st = net.server.status(net.now);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].remote.ip(), ip("192.0.2.11"));
    assert_eq!(Star::children_up(&net.ev_c[1]).len(), 1);
    assert_eq!(net.server.pool_stats()[0].online, 1);
}

#[test]
fn unique_replace_forgets_the_old_sa_even_when_its_delete_is_lost() {
    // The Delete does not reach the first device: the server does not wait for its answer
    // (no retransmission, no state left), and the device's next request meets no SA there:
    // an unknown SPI, dropped and counted, not an error.
    let mut net = Star::new(
        server("10.3.0.0/24", Unique::Replace),
        vec![
            client("192.0.2.10", "alice@example.org"),
            client("192.0.2.11", "alice@example.org"),
        ],
    );
    net.connect(0);
    net.cut = Some(ip("192.0.2.10"));
    net.connect(1);
    assert_eq!(downs(&net.ev_c[0]), (vec![], 0), "the Delete was lost");
    assert_eq!(net.server.status(net.now).len(), 1);
    assert_eq!(
        net.server.poll_timeout().map(|t| t > net.now + Duration::from_secs(60)),
        Some(true),
        "no retransmission of the Delete is due"
    );
    net.clients[0].check_liveness(net.now, "home", &mut net.rng).unwrap();
    let t = net.clients[0].poll_transmit().expect("a liveness check");
    let r = net
        .server
        .handle_datagram(net.now, t.remote, t.local, &t.payload, &mut net.rng);
    assert_eq!(r, Err(Dropped::UnknownSpi));
    assert!(net.server.poll_transmit().is_none(), "not answered");
}
