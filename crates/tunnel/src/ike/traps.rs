//! Trap policies (swanctl `start_action = trap`): a packet that matches a trap child's
//! selectors starts that child (an acquire, RFC 4301 5.1's "no SA yet").
use super::selectors::selectors;
use ipsec_engine::Selector;
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::{ChildId, ConnId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The trap policies of the connections whose child has `start_action = trap`: a packet
/// matching one's selectors (local to remote) starts that child, at most every
/// [`Traps::EVERY`] per child. Each trap holds its child's handle, resolved when the traps
/// are installed: an acquire carries no name.
pub struct Traps {
    traps: Vec<Trap>,
    start: std::time::Instant,
}

struct Trap {
    child: ChildId,
    selectors: Vec<Selector>,
    /// When it last asked (ms since `start`; 0: never).
    last: AtomicU64,
}

impl Traps {
    /// How often a trap may ask for the same child.
    pub const EVERY: Duration = Duration::from_millis(500);

    /// The traps of `config`'s trap children (none: `None`), by the handles the endpoint
    /// given `config` knows them by (their indexes in it, [`ipsec_ike::Endpoint::child_id`]).
    pub fn of(config: &ipsec_ike::Config) -> Result<Option<Traps>, String> {
        let mut traps = Vec::new();
        for (ci, c) in config.connections.iter().enumerate() {
            // Trap children, and every child of a connection that goes back to a trap when
            // its peer is found dead or closes (dpd_action / close_action = trap): the
            // trap matches only packets no installed child's policy took.
            let retrap = c.dpd_action == ipsec_ike::DeadAction::Trap || c.close_action == ipsec_ike::DeadAction::Trap;
            for (chi, ch) in c
                .children
                .iter()
                .enumerate()
                .filter(|(_, ch)| retrap || ch.start_action == ipsec_ike::StartAction::Trap)
            {
                let l = if ch.local_ts.is_empty() {
                    vec![TrafficSelector::host(c.local_addr)]
                } else {
                    ch.local_ts.clone()
                };
                let r = match (&ch.remote_ts[..], c.remote_addr) {
                    ([], Some(a)) => vec![TrafficSelector::host(a)],
                    ([], None) => continue,
                    (r, _) => r.to_vec(),
                };
                let mut sel = Vec::new();
                for lt in &l {
                    for rt in &r {
                        sel.extend(selectors(lt, rt)?.into_iter().map(|(out, _)| out));
                    }
                }
                traps.push(Trap {
                    child: ChildId {
                        conn: ConnId(ci),
                        child: chi,
                    },
                    selectors: sel,
                    last: AtomicU64::new(0),
                });
            }
        }
        Ok((!traps.is_empty()).then(|| Traps {
            traps,
            start: std::time::Instant::now(),
        }))
    }

    /// The child whose trap `packet` matches, if it may ask now.
    pub fn matches(&self, packet: &[u8]) -> Option<(ChildId, ipsec_ike::PacketSelectors)> {
        let flow = ipsec_engine::Flow::from_packet(packet).ok()?;
        let now = self.start.elapsed().as_millis() as u64;
        let trap = self
            .traps
            .iter()
            .find(|t| t.selectors.iter().any(|s| s.matches(&flow)))?;
        let prev = trap.last.load(Ordering::Relaxed);
        if prev != 0 && now.saturating_sub(prev) < Self::EVERY.as_millis() as u64 {
            return None;
        }
        trap.last.store(now.max(1), Ordering::Relaxed);
        Some((
            trap.child,
            ipsec_ike::PacketSelectors {
                src: flow.src,
                dst: flow.dst,
                protocol: flow.proto,
                src_port: flow.src_port.unwrap_or(0),
                dst_port: flow.dst_port.unwrap_or(0),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn udp(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut out = Vec::new();
        etherparse::PacketBuilder::ipv4(src, dst, 64)
            .udp(4000, 53)
            .write(&mut out, b"x")
            .unwrap();
        out
    }

    /// A packet from the local selectors to the remote ones asks for its child, by the
    /// handle the endpoint resolves its names to (with the packet's own selectors), at most
    /// once per `Traps::EVERY`; others do not.
    #[test]
    fn a_trap_matches_its_selectors_and_asks_at_a_bounded_rate() {
        let psk = ipsec_ike::Psk::new(b"k");
        let id = ipsec_ike::Identity::from_str_config("a").unwrap();
        let mut c = ipsec_ike::Connection::new(
            "gw",
            "192.0.2.1".parse().unwrap(),
            Some("192.0.2.2".parse().unwrap()),
            id,
            None,
            psk,
            "aes128gcm16-prfsha256-x25519",
        )
        .unwrap();
        let mut ch = ipsec_ike::ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes128gcm16").unwrap();
        ch.start_action = ipsec_ike::StartAction::Trap;
        c.children.push(ch);
        let mut none = c.clone();
        none.children[0].start_action = ipsec_ike::StartAction::Start;
        assert!(Traps::of(&ipsec_ike::Config::new(vec![none.clone()]))
            .unwrap()
            .is_none());
        // The trap child is the second of the second connection.
        none.name = "other".into();
        c.children.insert(0, none.children[0].clone());
        c.children[0].name = "first".into();
        let config = ipsec_ike::Config::new(vec![none, c]);
        let traps = Traps::of(&config).unwrap().unwrap();
        let p = udp([10, 1, 0, 5], [10, 2, 3, 4]);
        let (child, sel) = traps.matches(&p).expect("matches");
        let endpoint = ipsec_ike::Endpoint::new(config);
        assert_eq!(Ok(child), endpoint.child_id("gw", "net"));
        assert_eq!(endpoint.child_names(child), Some(("gw", "net")));
        assert_eq!(
            (sel.src, sel.dst, sel.protocol, sel.dst_port),
            (ip("10.1.0.5"), ip("10.2.3.4"), 17, 53)
        );
        assert!(traps.matches(&p).is_none(), "again at once: rate-limited");
        assert!(
            traps.matches(&udp([10, 2, 0, 5], [10, 1, 3, 4])).is_none(),
            "the other way"
        );
        assert!(traps.matches(&udp([10, 3, 0, 5], [10, 2, 3, 4])).is_none(), "outside");
        assert!(traps.matches(b"\x45garbage").is_none());
        std::thread::sleep(Traps::EVERY + Duration::from_millis(20));
        assert!(traps.matches(&p).is_some(), "after the interval");
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
}
