//! An in-memory network of two endpoints with a fake clock, an optional NAT in front of A,
//! and a packet filter, for the exchange tests.
#![allow(dead_code)]
use ipsec_ike::*;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub const A_IP: &str = "10.0.0.1";
pub const B_IP: &str = "10.0.0.2";
pub const NAT_IP: &str = "192.0.2.1";

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn conn(name: &str, local: &str, remote: Option<&str>, psk: &[u8], ike: &str) -> Connection {
    Connection::new(
        name,
        ip(local),
        remote.map(ip),
        Identity::from_str_config(local).unwrap(),
        remote.map(|r| Identity::from_str_config(r).unwrap()),
        Psk::new(psk),
        ike,
    )
    .unwrap()
}

/// Initiator A (10.0.0.1) and responder B (10.0.0.2), one child each.
pub fn pair(ike_a: &str, ike_b: &str, esp_a: &str, esp_b: &str) -> (Config, Config) {
    let mut a = conn("a2b", A_IP, Some(B_IP), b"correct horse", ike_a);
    a.children
        .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", esp_a).unwrap());
    let mut b = conn("b2a", B_IP, Some(A_IP), b"correct horse", ike_b);
    b.children
        .push(ChildConfig::new("net", "10.2.0.0/16", "10.1.0.0/16", esp_b).unwrap());
    (Config::new(vec![a]), Config::new(vec![b]))
}

/// Decides whether to drop a datagram: (from A, the datagram).
pub type DropFn = Box<dyn FnMut(bool, &Transmit) -> bool>;

pub struct Sent {
    pub from_a: bool,
    pub at: Duration,
    pub t: Transmit,
}

pub struct Net {
    pub a: Endpoint,
    pub b: Endpoint,
    pub now: Duration,
    pub rng: ChaCha20Rng,
    /// NAT in front of A: A's private (ip, port) appear as NAT_IP:(port + offset).
    pub nat_port_offset: Option<u16>,
    /// Drop datagrams for which this returns true (from_a, bytes).
    pub drop: DropFn,
    pub sent: Vec<Sent>,
    pub events_a: Vec<Event>,
    pub events_b: Vec<Event>,
    pub drops: Vec<(bool, Dropped)>,
}

impl Net {
    pub fn new(a: Config, b: Config) -> Self {
        Net {
            a: Endpoint::new(a),
            b: Endpoint::new(b),
            now: Duration::from_secs(1000),
            rng: ChaCha20Rng::seed_from_u64(42),
            nat_port_offset: None,
            drop: Box::new(|_, _| false),
            sent: Vec::new(),
            events_a: Vec::new(),
            events_b: Vec::new(),
            drops: Vec::new(),
        }
    }

    fn translate_out(&self, t: &Transmit) -> Transmit {
        let mut t = t.clone();
        if let Some(off) = self.nat_port_offset {
            t.local = SocketAddr::new(ip(NAT_IP), t.local.port() + off);
        }
        t
    }

    fn translate_in(&self, t: &Transmit) -> Option<Transmit> {
        let mut t = t.clone();
        if let Some(off) = self.nat_port_offset {
            if t.remote.ip() != ip(NAT_IP) {
                return None;
            }
            t.remote = SocketAddr::new(ip(A_IP), t.remote.port().checked_sub(off)?);
        }
        Some(t)
    }

    /// Delivers datagrams both ways until none are left; collects events.
    pub fn pump(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit() {
                moved = true;
                self.sent.push(Sent {
                    from_a: true,
                    at: self.now,
                    t: t.clone(),
                });
                if (self.drop)(true, &t) {
                    continue;
                }
                let t = self.translate_out(&t);
                if let Err(d) = self
                    .b
                    .handle_datagram(self.now, t.remote, t.local, &t.payload, &mut self.rng)
                {
                    self.drops.push((false, d));
                }
            }
            while let Some(t) = self.b.poll_transmit() {
                moved = true;
                self.sent.push(Sent {
                    from_a: false,
                    at: self.now,
                    t: t.clone(),
                });
                if (self.drop)(false, &t) {
                    continue;
                }
                let Some(t) = self.translate_in(&t) else { continue };
                if let Err(d) = self
                    .a
                    .handle_datagram(self.now, t.remote, t.local, &t.payload, &mut self.rng)
                {
                    self.drops.push((true, d));
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.events_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                self.events_b.push(e);
            }
            if !moved {
                return;
            }
        }
        panic!("the exchange does not settle");
    }

    /// Advances the clock to the next deadline of either side (bounded by `limit`).
    pub fn advance(&mut self, limit: Duration) -> bool {
        let next = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t <= limit => {
                self.now = self.now.max(t);
                self.a.handle_timeout(self.now, &mut self.rng);
                self.b.handle_timeout(self.now, &mut self.rng);
                // Every deadline handle_timeout ran for is advanced or dropped: one left in
                // the past would be due again at once, for ever (issue #39 item 3).
                for (side, e) in [("A", &self.a), ("B", &self.b)] {
                    let next = e.poll_timeout();
                    assert!(
                        next.is_none_or(|d| d > self.now),
                        "{side}'s deadline {next:?} not advanced by handle_timeout at {:?}",
                        self.now
                    );
                }
                self.pump();
                true
            }
            _ => false,
        }
    }

    pub fn up(&mut self) {
        self.a.initiate(self.now, "a2b", &mut self.rng).unwrap();
        self.pump();
    }
}

pub fn child_up(ev: &[Event]) -> Vec<&ChildSaInfo> {
    ev.iter()
        .filter_map(|e| if let Event::ChildUp(c) = e { Some(c) } else { None })
        .collect()
}

pub fn ike_up(ev: &[Event]) -> Vec<&IkeSaInfo> {
    ev.iter()
        .filter_map(|e| {
            if let Event::IkeUp { info, .. } = e {
                Some(info)
            } else {
                None
            }
        })
        .collect()
}

pub fn downs(ev: &[Event]) -> Vec<DownReason> {
    ev.iter()
        .filter_map(|e| {
            if let Event::IkeDown { reason, .. } = e {
                Some(*reason)
            } else {
                None
            }
        })
        .collect()
}

pub fn child_downs(ev: &[Event]) -> Vec<(u32, DownReason)> {
    ev.iter()
        .filter_map(|e| {
            if let Event::ChildDown { spi_in, reason, .. } = e {
                Some((*spi_in, *reason))
            } else {
                None
            }
        })
        .collect()
}

/// The exchange type and response flag of a sent datagram (after any marker).
pub fn kind_of(t: &Transmit) -> (u8, bool) {
    let p = if t.payload.len() > 4 && t.payload[..4] == [0; 4] {
        &t.payload[4..]
    } else {
        &t.payload[..]
    };
    (p[18], p[19] & 0x20 != 0)
}
