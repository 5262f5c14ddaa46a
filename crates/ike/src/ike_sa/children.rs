//! An IKE SA's child SA pairs (RFC 7296 1.3, 2.8): each with its state in its life and its
//! timers, kept in the IKE SA's list, which only these methods change.
use super::{Cx, IkeSa};
use crate::config::Config;
use crate::event::{ChildSaInfo, DownReason, Event};
use core::time::Duration;

/// Lifetimes of a child SA pair, as deadlines on the endpoint's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildTimers {
    /// Start a rekey (ours) at this time.
    pub rekey_at: Option<Duration>,
    /// Delete it at this time if it was not rekeyed (hard lifetime).
    pub expire_at: Option<Duration>,
}

/// Where a child SA pair is in its life (2.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChildState {
    /// Installed and carrying traffic.
    Installed,
    /// A rekey of ours is outstanding; `peer`: the peer rekeyed it too meanwhile (2.8.1).
    Rekeying {
        peer: Option<crate::task::child_rekey::PeerRekey>,
    },
    /// Replaced by a new pair; kept for packets still in flight until its Delete (ours
    /// when `we_delete`, else the peer's; ours anyway at `until`).
    Rekeyed { until: Duration, we_delete: bool },
    /// Our Delete of it is outstanding.
    Deleting,
}

/// A child SA pair of this IKE SA.
pub(crate) struct Child {
    pub info: ChildSaInfo,
    pub state: ChildState,
    pub timers: ChildTimers,
    /// Index of its [`crate::config::ChildConfig`] in the connection.
    pub cfg: usize,
}

impl Child {
    pub fn spi_in(&self) -> u32 {
        self.info.spi_in
    }
}

/// The child SAs (RFC 7296 1.3, 2.8).
impl IkeSa {
    pub fn children(&self) -> &[Child] {
        &self.children
    }

    /// The child whose inbound SPI is `spi_in`.
    pub fn child(&self, spi_in: u32) -> Option<&Child> {
        self.children.iter().find(|c| c.spi_in() == spi_in)
    }

    pub fn child_mut(&mut self, spi_in: u32) -> Option<&mut Child> {
        self.children.iter_mut().find(|c| c.spi_in() == spi_in)
    }

    /// The child whose outbound SPI is `spi_out`: the one a peer's Delete or REKEY_SA names
    /// (the SPI it receives on).
    pub fn child_by_spi_out(&self, spi_out: u32) -> Option<&Child> {
        self.children.iter().find(|c| c.info.spi_out == spi_out)
    }

    /// Each child, to update its state or timers.
    pub fn children_mut(&mut self) -> impl Iterator<Item = &mut Child> {
        self.children.iter_mut()
    }

    /// Keeps a child just installed, without its keys: they went up in its `ChildUp` and
    /// nothing here reads them again (dropped, they are zeroed). The list grows one child at
    /// a time: a `Vec`'s first push reserves four, about 1.3 KB per IKE SA that nearly always
    /// holds one child (two during a rekey), issue #36 item 6.
    pub fn add_child(&mut self, mut info: ChildSaInfo, cfg: usize, timers: ChildTimers) {
        for k in [
            &mut info.encr_out,
            &mut info.integ_out,
            &mut info.encr_in,
            &mut info.integ_in,
        ] {
            *k = Default::default();
        }
        self.children.reserve_exact(1);
        self.children.push(Child {
            info,
            state: ChildState::Installed,
            timers,
            cfg,
        });
    }

    /// Reports a child down and forgets it.
    pub fn child_down(&mut self, cx: &mut Cx, spi_in: u32, reason: DownReason) {
        let name = self.conn_name(cx.cfg);
        if let Some(i) = self.children.iter().position(|c| c.spi_in() == spi_in) {
            let c = self.children.remove(i);
            cx.out.event(Event::ChildDown {
                conn: name,
                child: c.info.child.clone(),
                spi_in: c.info.spi_in,
                spi_out: c.info.spi_out,
                reason,
            });
        }
    }

    /// A child SA pair's [`ChildSaInfo`] from its negotiated parameters and keys.
    pub fn child_info(&self, cfg: &Config, a: &crate::child::Agreed, keys: &crate::keys::ChildKeys) -> ChildSaInfo {
        let c = &self.conn(cfg).children[a.cfg];
        let (encr_out, integ_out, encr_in, integ_in) = ChildSaInfo::new_keys(a.initiator, keys);
        ChildSaInfo {
            conn: self.conn_name(cfg),
            child: c.name.clone(),
            protocol: 50,
            spi_in: a.spi_in,
            spi_out: a.spi_out,
            suite: a.suite,
            mode: a.mode,
            local_ts: a.local_ts.clone(),
            remote_ts: a.remote_ts.clone(),
            lifetimes: c.lifetimes,
            encap: self.child_encap(cfg),
            local: self.path.local,
            remote: self.path.remote,
            initiator: a.initiator,
            rekeys: None,
            encr_out,
            integ_out,
            encr_in,
            integ_in,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Connection};
    use crate::{Endpoint, Event};
    use alloc::vec::Vec;
    use core::net::SocketAddr;
    use core::time::Duration;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn conn(name: &str, local: &str, remote: &str, l: &str, r: &str) -> Connection {
        crate::test_util::psk_conn(name, local, remote, l, r)
    }

    /// Issue #36 item 6: an IKE SA keeps its one child in a list of one (not the four a
    /// `Vec`'s first push reserves) and without the child's keys, which went up in
    /// `ChildUp` (those carry them).
    #[test]
    fn a_kept_child_has_no_keys_and_no_spare_slots() {
        let (a, b) = ("10.0.0.1", "10.0.0.2");
        let mut ea = Endpoint::new(Config::new(alloc::vec![conn(
            "a2b",
            a,
            b,
            "10.1.0.0/16",
            "10.2.0.0/16"
        )]));
        let mut eb = Endpoint::new(Config::new(alloc::vec![conn(
            "b2a",
            b,
            a,
            "10.2.0.0/16",
            "10.1.0.0/16"
        )]));
        let mut rng = ChaCha20Rng::seed_from_u64(36);
        let now = Duration::from_secs(1);
        let (sa, sb): (SocketAddr, SocketAddr) = ("10.0.0.1:500".parse().unwrap(), "10.0.0.2:500".parse().unwrap());
        ea.initiate(now, "a2b", &mut rng).unwrap();
        let mut ups = Vec::new();
        for _ in 0..10 {
            while let Some(t) = ea.poll_transmit() {
                let _ = eb.handle_datagram(now, sb, sa, &t.payload, &mut rng);
            }
            while let Some(t) = eb.poll_transmit() {
                let _ = ea.handle_datagram(now, sa, sb, &t.payload, &mut rng);
            }
            for e in core::iter::from_fn(|| ea.poll_event()).chain(core::iter::from_fn(|| eb.poll_event())) {
                if let Event::ChildUp(i) = e {
                    ups.push(i);
                }
            }
        }
        assert_eq!(ups.len(), 2, "a child up on each side");
        assert!(
            ups.iter().all(|i| !i.encr_out.is_empty() && !i.encr_in.is_empty()),
            "ChildUp carries the keys"
        );
        for e in [&mut ea, &mut eb] {
            let ike = e.sas_mut().next().expect("an IKE SA");
            assert_eq!(ike.children.len(), 1);
            assert_eq!(ike.children.capacity(), 1, "no spare slots");
            let i = &ike.children[0].info;
            assert!(
                [&i.encr_out, &i.integ_out, &i.encr_in, &i.integ_in]
                    .iter()
                    .all(|k| k.is_empty()),
                "the kept child holds no key"
            );
        }
    }
}
