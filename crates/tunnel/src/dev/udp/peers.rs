//! The peers of an ESP-in-UDP socket group and where each one's datagrams go (RFC 3948
//! NAT traversal): the configured peers, the clients IKE adds while running (a responder
//! with `remote_addrs = %any`), and the endpoint each of IKE's outbound SAs sends to.
//!
//! Read for every packet, changed rarely. The table is immutable behind an [`ArcSwap`] and
//! read without a lock; every lookup is one hash probe whatever the number of peers (by
//! address for a packet to send, by outbound SPI for IKE's SAs, by the datagram's source for
//! one received). A change (IKE adding or removing a child SA, a peer moving) goes through
//! [`ipsec_engine::left_right`], as the engine's SPD and SAD do: made on a *spare* copy, the
//! table as it was before the previous change, brought up to date by making the changes
//! logged since again, and swapped in; so a change costs O(1), not a copy of the table,
//! unless a worker still holds the spare (then the table is copied, as every change did
//! before).

use arc_swap::{ArcSwap, ArcSwapOption};
use hashbrown::HashMap;
use ipsec_engine::left_right;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

/// At most this many endpoints added at run time per socket group (a remote-access server's
/// clients), so a stream of peers that authenticate cannot grow the table without bound
/// (about 0.5 KB each with both copies, 32 MB at the limit).
pub const MAX_DYNAMIC_PEERS: usize = 65_536;

/// One endpoint of an ESP-in-UDP socket group: a peer's address and where its datagrams go
/// (the configured port until an authenticated packet of its SAs arrives from elsewhere,
/// RFC 3948 NAT traversal). A configured peer has one; peers IKE adds have one per address
/// *and port* they authenticated from, so clients behind one NAT address (which differ by
/// port only, RFC 3948) each keep their own.
pub(super) struct Endpoint {
    pub(super) peer: IpAddr,
    configured: SocketAddr,
    /// Set (rarely: only when the peer moves, under the writer's lock) by the receiving
    /// threads and IKE, read for every send.
    learned: ArcSwapOption<SocketAddr>,
    /// Added by IKE at run time (a connection that accepts any remote address) rather than
    /// configured: taken out again when the last child SA using it goes.
    pub(super) dynamic: bool,
    /// Its place in the order endpoints were configured or added (unique in a group).
    seq: u64,
}

impl Endpoint {
    /// Where its datagrams go now.
    pub(super) fn current(&self) -> SocketAddr {
        self.learned.load().as_deref().copied().unwrap_or(self.configured)
    }

    /// Whether where its datagrams go was learned from the peer's packets.
    pub(super) fn learned(&self) -> bool {
        self.learned.load().is_some()
    }
}

/// An endpoint in one copy of the table, with how many of IKE's child SAs use it.
#[derive(Clone)]
struct Slot {
    endpoint: Arc<Endpoint>,
    uses: u32,
    /// Where it is in `moved` (it moved to another address than its peer's).
    moved_to: Option<SocketAddr>,
}

/// A child SA IKE installed: its inbound SPI (ours, unique here: how it is taken out again)
/// and the endpoint its packets go to. Found by `(peer, outbound SPI)`: the engine names both
/// with every packet the SA seals ([`ipsec_engine::Route`]), which is how a sealed packet
/// finds its own endpoint.
#[derive(Clone)]
struct Child {
    spi_in: u32,
    endpoint: Arc<Endpoint>,
}

/// One immutable state of the peers ([`Peers`] holds the current one).
#[derive(Clone, Default)]
pub(super) struct PeerTable {
    /// The endpoints by [`Endpoint::seq`].
    slots: HashMap<u64, Slot>,
    /// The endpoints of each address, in `seq` order (almost always one).
    by_ip: HashMap<IpAddr, Vec<Arc<Endpoint>>>,
    /// The endpoints that moved to another address than their peer's, by where their
    /// datagrams go now (of several there, the latest to move).
    moved: HashMap<SocketAddr, Arc<Endpoint>>,
    /// IKE's child SAs by `(peer, outbound SPI)`.
    children: HashMap<(IpAddr, u32), Child>,
    /// The key in `children` of each inbound SPI.
    by_spi_in: HashMap<u32, (IpAddr, u32)>,
    /// How many endpoints IKE added.
    dynamic: usize,
}

impl PeerTable {
    /// The endpoints of address `peer`, in the order they were configured or added.
    pub(super) fn at(&self, peer: IpAddr) -> &[Arc<Endpoint>] {
        self.by_ip.get(&peer).map_or(&[], |v| &v[..])
    }

    /// The first endpoint of `peer`.
    pub(super) fn first(&self, peer: IpAddr) -> Option<&Endpoint> {
        self.at(peer).first().map(|e| &**e)
    }

    /// The endpoint of `peer` when it has exactly one (a configured peer always has): the
    /// one a packet to that address without a known SA goes to, and the one ESP from a new
    /// port moves. Clients behind one NAT address share it, so none is theirs alone.
    pub(super) fn sole(&self, peer: IpAddr) -> Option<&Endpoint> {
        match self.at(peer) {
            [e] => Some(e),
            _ => None,
        }
    }

    /// The endpoint of IKE's outbound SA `spi_out` to `peer`.
    pub(super) fn child(&self, peer: IpAddr, spi_out: u32) -> Option<&Endpoint> {
        self.children.get(&(peer, spi_out)).map(|c| &*c.endpoint)
    }

    /// Every endpoint, in the order they were configured or added (O(n log n): for reports).
    pub(super) fn endpoints(&self) -> Vec<&Endpoint> {
        let mut v: Vec<&Endpoint> = self.slots.values().map(|s| &*s.endpoint).collect();
        v.sort_unstable_by_key(|e| e.seq);
        v
    }

    /// Where a packet sealed by SA `spi_out` for `dst` goes (both named by the engine with
    /// the packet, [`ipsec_engine::Route`]): its SA's endpoint when IKE installed the SA, else
    /// the address's only endpoint.
    pub(super) fn route(&self, dst: IpAddr, spi_out: u32) -> Option<SocketAddr> {
        if !self.children.is_empty() {
            if let Some(e) = self.child(dst, spi_out) {
                return Some(e.current());
            }
        }
        self.sole(dst).map(Endpoint::current)
    }

    /// The source address put in the header rebuilt for a datagram from `from`: `from`'s
    /// address unless no endpoint there sends from `from` and a peer's endpoint moved there
    /// (a peer behind a NAT), then that peer's; with a single peer, that one.
    pub(super) fn source_of(&self, from: SocketAddr) -> IpAddr {
        if self.slots.len() == 1 {
            if let Some(only) = self.slots.values().next() {
                return only.endpoint.peer;
            }
        }
        if !self.moved.is_empty() && !self.at(from.ip()).iter().any(|e| e.current() == from) {
            if let Some(e) = self.moved.get(&from).filter(|e| e.current() == from) {
                return e.peer;
            }
        }
        from.ip()
    }

    fn insert(&mut self, endpoint: Arc<Endpoint>) {
        self.dynamic += usize::from(endpoint.dynamic);
        self.by_ip.entry(endpoint.peer).or_default().push(Arc::clone(&endpoint));
        self.slots.insert(
            endpoint.seq,
            Slot {
                endpoint,
                uses: 0,
                moved_to: None,
            },
        );
    }

    fn remove(&mut self, seq: u64) {
        let Some(s) = self.slots.remove(&seq) else {
            return;
        };
        let e = s.endpoint;
        self.dynamic -= usize::from(e.dynamic);
        if let Some(v) = self.by_ip.get_mut(&e.peer) {
            v.retain(|x| x.seq != seq);
            if v.is_empty() {
                self.by_ip.remove(&e.peer);
            }
        }
        if let Some(at) = s.moved_to {
            if self.moved.get(&at).is_some_and(|x| x.seq == seq) {
                self.moved.remove(&at);
            }
        }
    }

    /// One child SA fewer uses `e`: an endpoint IKE added goes with its last.
    fn release(&mut self, e: &Endpoint) {
        if let Some(s) = self.slots.get_mut(&e.seq) {
            s.uses = s.uses.saturating_sub(1);
            if s.uses == 0 && e.dynamic {
                self.remove(e.seq);
            }
        }
    }

    /// Takes out the child SA with inbound SPI `spi_in`, if it is here.
    fn forget_child(&mut self, spi_in: u32) {
        if let Some(key) = self.by_spi_in.remove(&spi_in) {
            if let Some(c) = self.children.remove(&key) {
                self.release(&c.endpoint);
            }
        }
    }
}

/// A change to the table, kept to be made again on the spare copy: each says everything it
/// does, so it does the same on both copies.
#[derive(Clone)]
enum Change {
    /// IKE's child SA `key` = (peer, outbound SPI) with inbound SPI `spi_in` sends to
    /// `endpoint` (added first when `new`).
    AddChild {
        key: (IpAddr, u32),
        spi_in: u32,
        endpoint: Arc<Endpoint>,
        new: bool,
    },
    RemoveChild(u32),
    /// Takes out the endpoints of an address IKE added that no child SA uses.
    RemovePeer(IpAddr),
    /// The endpoint's datagrams go to `to` now (its entry in `moved` follows).
    Moved {
        endpoint: Arc<Endpoint>,
        to: SocketAddr,
    },
}

impl left_right::Change<PeerTable> for Change {
    type Out = ();

    fn apply(self, t: &mut PeerTable) {
        match self {
            Change::AddChild {
                key,
                spi_in,
                endpoint,
                new,
            } => {
                if new {
                    t.insert(Arc::clone(&endpoint));
                }
                // Counted first, so the same SA added again keeps its endpoint.
                if let Some(s) = t.slots.get_mut(&endpoint.seq) {
                    s.uses += 1;
                }
                // The same SA added again (moved to another endpoint): the old entry goes.
                t.forget_child(spi_in);
                // An outbound SPI that another SA to this address has (the peers chose the
                // same, 2^-32 per pair): the newer SA's.
                if let Some(old) = t.children.insert(key, Child { spi_in, endpoint }) {
                    t.by_spi_in.remove(&old.spi_in);
                    t.release(&old.endpoint);
                }
                t.by_spi_in.insert(spi_in, key);
            }
            Change::RemoveChild(spi_in) => t.forget_child(spi_in),
            Change::RemovePeer(peer) => {
                let idle: Vec<u64> = t
                    .at(peer)
                    .iter()
                    .filter(|e| e.dynamic && t.slots.get(&e.seq).is_some_and(|s| s.uses == 0))
                    .map(|e| e.seq)
                    .collect();
                for seq in idle {
                    t.remove(seq);
                }
            }
            Change::Moved { endpoint, to } => {
                let Some(s) = t.slots.get_mut(&endpoint.seq) else {
                    return; // gone from this table already
                };
                if let Some(at) = s.moved_to.take() {
                    if t.moved.get(&at).is_some_and(|x| x.seq == endpoint.seq) {
                        t.moved.remove(&at);
                    }
                }
                if to.ip() != endpoint.peer {
                    s.moved_to = Some(to);
                    t.moved.insert(to, endpoint);
                }
            }
        }
    }
}

/// The writer's side: the table it last published, the spare copy with the changes made
/// since it was current ([`left_right`]), and the next endpoint's place in the order.
struct Writer {
    current: Arc<PeerTable>,
    spare: Option<(Arc<PeerTable>, Vec<Change>)>,
    next_seq: u64,
}

/// The peers of a socket group, shared by its sockets: the current [`PeerTable`], and the
/// writer's side (taken by IKE's changes and, rarely, a peer moving; never per packet).
pub(super) struct Peers {
    current: ArcSwap<PeerTable>,
    writer: Mutex<Writer>,
}

impl Peers {
    /// Configured peers at `peers`, each sent to at port `port` until it moves.
    pub(super) fn configured(peers: &[IpAddr], port: u16) -> Peers {
        let mut t = PeerTable::default();
        for (seq, &peer) in (0u64..).zip(peers) {
            t.insert(Arc::new(Endpoint {
                peer,
                configured: SocketAddr::new(peer, port),
                learned: ArcSwapOption::empty(),
                dynamic: false,
                seq,
            }));
        }
        let t = Arc::new(t);
        Peers {
            current: ArcSwap::new(Arc::clone(&t)),
            writer: Mutex::new(Writer {
                current: t,
                spare: None,
                next_seq: peers.len() as u64,
            }),
        }
    }

    /// The current table.
    pub(super) fn load(&self) -> arc_swap::Guard<Arc<PeerTable>> {
        self.current.load()
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes change `c` ([`left_right::change`]), publishes the new table, and brings the
    /// one it replaced up to date if no worker holds it any more (usually so a moment later),
    /// so it lets go of what was taken out.
    fn change(&self, w: &mut Writer, c: Change) {
        left_right::change(&mut w.current, &mut w.spare, c);
        self.current.store(Arc::clone(&w.current));
        left_right::catch_up(&mut w.spare);
    }

    /// Datagrams to `e` go to `src` from now on (logged when that is news).
    pub(super) fn learn(&self, e: &Arc<Endpoint>, src: SocketAddr) {
        if e.learned.load().as_deref() == Some(&src) {
            return;
        }
        let mut w = self.writer();
        if e.learned.load().as_deref() == Some(&src) {
            return; // another thread just did
        }
        e.learned.store(Some(Arc::new(src)));
        tracing::info!("ESP-in-UDP (peer {}): the peer's endpoint is now {src}", e.peer);
        self.change(
            &mut w,
            Change::Moved {
                endpoint: Arc::clone(e),
                to: src,
            },
        );
    }

    /// See [`EncapSocket::add_peer`](super::EncapSocket::add_peer): `Some(added)` (whether a new
    /// endpoint was added), `None` when there is no room for one.
    pub(super) fn add_child(&self, at: SocketAddr, spi_out: u32, spi_in: u32) -> Option<bool> {
        let peer = at.ip();
        let mut w = self.writer();
        let at_addr = w.current.at(peer);
        let existing = at_addr
            .iter()
            .find(|e| !e.dynamic)
            .or_else(|| at_addr.iter().find(|e| e.current() == at))
            .cloned();
        let room = w.current.dynamic < MAX_DYNAMIC_PEERS;
        let (endpoint, new) = match existing {
            Some(e) => (e, false),
            None if room => {
                w.next_seq += 1;
                let e = Arc::new(Endpoint {
                    peer,
                    configured: at,
                    learned: ArcSwapOption::empty(),
                    dynamic: true,
                    seq: w.next_seq,
                });
                (e, true)
            }
            None => return None,
        };
        self.change(
            &mut w,
            Change::AddChild {
                key: (peer, spi_out),
                spi_in,
                endpoint: Arc::clone(&endpoint),
                new,
            },
        );
        drop(w);
        if !endpoint.dynamic {
            // A configured peer is moved.
            self.learn(&endpoint, at);
        }
        Some(new)
    }

    /// IKE's child SA with inbound SPI `spi_in` is gone: see
    /// [`EncapSocket::remove_child`](super::EncapSocket::remove_child).
    pub(super) fn remove_child(&self, spi_in: u32) {
        let mut w = self.writer();
        if w.current.by_spi_in.contains_key(&spi_in) {
            self.change(&mut w, Change::RemoveChild(spi_in));
        }
    }

    /// See [`EncapSocket::remove_peer`](super::EncapSocket::remove_peer).
    pub(super) fn remove_peer(&self, peer: IpAddr) {
        let mut w = self.writer();
        if w.current.at(peer).iter().any(|e| e.dynamic) {
            self.change(&mut w, Change::RemovePeer(peer));
        }
    }

    /// See [`EncapSocket::moved`](super::EncapSocket::moved).
    pub(super) fn moved(&self, old: SocketAddr, new: SocketAddr) {
        let t = self.load();
        let mut any = false;
        for e in t.at(old.ip()).iter().filter(|e| e.current() == old) {
            self.learn(e, new);
            any = true;
        }
        if !any {
            if let [e] = t.at(old.ip()) {
                self.learn(e, new);
            }
        }
    }

    /// An authenticated ESP packet of `peer`'s SAs came from `src`: see
    /// [`UnderlayRx::authenticated`](crate::dev::underlay::UnderlayRx::authenticated).
    pub(super) fn authenticated(&self, peer: IpAddr, src: SocketAddr) {
        // Only an address's sole endpoint follows its ESP (a configured peer, or one client
        // IKE added there): of clients behind one NAT address the SA that authenticated the
        // packet does not say which, and another's endpoint must not move to this port.
        // IKE's authenticated messages move each of those ([`Peers::moved`]).
        let t = self.load();
        match t.at(peer) {
            [e] => self.learn(e, src),
            at @ [_, _, ..] if !at.iter().any(|e| e.current() == src) => {
                tracing::debug!("ESP-in-UDP: ESP of {peer} from {src}: several clients at that address, none moved");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use left_right::Change as _;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Every endpoint (peer, where it goes, added by IKE) and every child SA (key, inbound
    /// SPI, where its endpoint goes).
    type Picture = (Vec<(IpAddr, SocketAddr, bool)>, Vec<((IpAddr, u32), u32, SocketAddr)>);

    /// The table as a model would see it.
    fn picture(t: &PeerTable) -> Picture {
        let eps = t.endpoints().iter().map(|e| (e.peer, e.current(), e.dynamic)).collect();
        let mut ch: Vec<_> = t
            .children
            .iter()
            .map(|(k, c)| (*k, c.spi_in, c.endpoint.current()))
            .collect();
        ch.sort_unstable();
        (eps, ch)
    }

    /// Random walks of IKE's changes and moves, with old tables held by "workers" at random:
    /// after every step the current table, and the spare once it is brought up to date,
    /// equal a copy-per-change model (the old implementation's semantics), every index
    /// agrees with the slots, and added endpoints with no child SA are gone.
    #[test]
    fn left_right_changes_match_a_copying_model() {
        use rand_core::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(30);
        let mut rnd = move |n: u64| rng.next_u64() % n;
        for _walk in 0..40 {
            let configured: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
            let p = Peers::configured(&configured, 4500);
            let mut held: Vec<arc_swap::Guard<Arc<PeerTable>>> = Vec::new();
            // The model: child spi_in -> (key, endpoint address); endpoint addresses in use.
            let mut model: HashMap<u32, ((IpAddr, u32), SocketAddr)> = HashMap::new();
            for _step in 0..200 {
                let ip = IpAddr::from([10, 0, 0, 1 + rnd(4) as u8]);
                let at = SocketAddr::new(ip, 4500 + rnd(3) as u16);
                match rnd(10) {
                    0..=4 => {
                        let (spi_out, spi_in) = (rnd(6) as u32, rnd(8) as u32);
                        assert!(p.add_child(at, spi_out, spi_in).is_some());
                        model.retain(|k, (key, _)| *k != spi_in && *key != (ip, spi_out));
                        let t = p.load();
                        let e = t.child(ip, spi_out).expect("just added");
                        model.insert(spi_in, ((ip, spi_out), e.current()));
                    }
                    5..=6 => {
                        let spi_in = rnd(8) as u32;
                        p.remove_child(spi_in);
                        model.remove(&spi_in);
                    }
                    7 => p.remove_peer(ip),
                    8 => p.authenticated(ip, at),
                    _ => {
                        if rnd(2) == 0 {
                            held.push(p.load());
                        } else if !held.is_empty() {
                            held.remove(rnd(held.len() as u64) as usize);
                        }
                    }
                }
                let t = p.load();
                let (eps, ch) = picture(&t);
                // Every child of the model is there, with its endpoint.
                let mut want: Vec<_> = model.iter().map(|(spi_in, (k, _))| (*k, *spi_in)).collect();
                want.sort_unstable();
                let got: Vec<_> = ch.iter().map(|(k, s, _)| (*k, *s)).collect();
                assert_eq!(got, want);
                // The configured endpoints stay; an added one lives while a child uses it.
                assert_eq!(eps.iter().filter(|e| !e.2).count(), 2);
                for slot in t.slots.values().filter(|s| s.endpoint.dynamic) {
                    let users = t
                        .children
                        .values()
                        .filter(|c| Arc::ptr_eq(&c.endpoint, &slot.endpoint))
                        .count();
                    assert!(users > 0, "an added endpoint nobody uses");
                    assert_eq!(users, slot.uses as usize);
                }
                // The indexes agree with the slots.
                let n: usize = t.by_ip.values().map(Vec::len).sum();
                assert_eq!(n, t.slots.len());
                assert_eq!(t.dynamic, eps.iter().filter(|e| e.2).count());
                assert_eq!(t.by_spi_in.len(), t.children.len());
                for (k, e) in &t.moved {
                    assert!(t.slots.get(&e.seq).is_some_and(|s| Arc::ptr_eq(&s.endpoint, e)));
                    assert_eq!(e.current(), *k);
                    assert_eq!(
                        t.source_of(*k),
                        if t.at(k.ip()).iter().any(|x| x.current() == *k) {
                            k.ip()
                        } else {
                            e.peer
                        }
                    );
                }
                // The spare with the changes logged since made again (on a copy: the
                // writer's own catching up is what is tested) is the same table.
                drop(t);
                let w = p.writer();
                if let Some((s, log)) = w.spare.as_ref() {
                    let mut m = PeerTable::clone(s);
                    for l in log.iter().cloned() {
                        l.apply(&mut m);
                    }
                    let cur = p.load();
                    assert_eq!(picture(&m), picture(&cur), "the spare went its own way");
                    assert_eq!(m.slots.len(), cur.slots.len());
                    assert_eq!(m.moved.len(), cur.moved.len());
                }
            }
        }
    }

    /// A configured peer behind a NAT: datagrams from its new address are its own, until an
    /// endpoint at that address sends from there; moving back clears it.
    #[test]
    fn source_of_follows_a_moved_peer() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let p = Peers::configured(&[a, b], 4500);
        let nat = addr("192.0.2.9:40000");
        assert_eq!(p.load().source_of(nat), nat.ip(), "nobody's yet");
        p.authenticated(a, nat);
        assert_eq!(p.load().source_of(nat), a);
        assert_eq!(p.load().source_of(addr("192.0.2.9:40001")), nat.ip(), "another port");
        assert_eq!(p.load().source_of(addr("10.0.0.2:4500")), b);
        p.authenticated(a, addr("10.0.0.1:4501"));
        assert_eq!(p.load().source_of(nat), nat.ip(), "moved back home");
        assert!(p.load().moved.is_empty());
    }
}
