//! Packet processing through the SPD and SAD (RFC 4301 sections 5.1 and 5.2): outbound
//! packets are matched to a policy and sealed with its bundle; inbound packets are opened SA
//! by SA from the outside in, then checked against the inbound policy their inner headers
//! match. Sans-IO: the caller passes the packet buffer and the time.

use crate::bundle::{outer_ipsec, PacketError};
use crate::counters::{Counters, DropReason, Drops};
use crate::lifetime::{Limit, State, Usage};
use crate::sad::{InstallError, SaConfig, SaEntry, SaId, Sad};
use crate::spd::{Action, Direction, Flow, Policy, Spd};
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::time::Duration;
use ipsec_core::ip::{self, Ipv4Packet, Ipv6Packet};
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Mode, Proto};
use ipsec_core::PacketBuf;

/// The most SAs one inbound packet may be opened with (IPComp + ESP + AH, and one more for
/// a nested tunnel). Deeper nesting is dropped as malformed.
pub const MAX_DEPTH: usize = 4;

/// Something the caller should know about, in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A soft limit was reached: the SA still works; negotiate its replacement.
    SoftExpired {
        /// The SA.
        sa: SaId,
        /// The limit reached.
        limit: Limit,
    },
    /// A hard limit was reached (or the sequence space ran out): the SA drops its packets.
    HardExpired {
        /// The SA.
        sa: SaId,
        /// The limit reached.
        limit: Limit,
    },
}

/// A packet the engine dropped: why, and at which SA if one was involved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The reason it was counted under.
    pub reason: DropReason,
    /// The SA whose counters it went to (`None`: the engine's own counters).
    pub sa: Option<SaId>,
    /// The transform error behind it, if there was one.
    pub error: Option<PacketError>,
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason.name())?;
        if let Some(e) = &self.error {
            write!(f, " ({e})")?;
        }
        if let Some(id) = self.sa {
            write!(f, " at SA {}", id.0)?;
        }
        Ok(())
    }
}

/// What happened to a packet that was not dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A protect policy matched. Outbound: sealed by this many SAs (an IPComp SA that left
    /// the packet uncompressed is not counted). Inbound: opened by this many SAs, as the
    /// policy requires (a transport-mode IPComp SA whose peer did not compress is not counted;
    /// a tunnel-mode one, which removed the IP-in-IP header, is).
    Protected(usize),
    /// A bypass policy let it through unchanged.
    Bypass,
}

/// One SA in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SaSnapshot {
    /// Its id.
    pub id: SaId,
    /// Its configured name.
    pub name: String,
    /// `esp`, `ah` or `comp`.
    pub proto: &'static str,
    /// SPI (IPComp: CPI).
    pub spi: u32,
    /// `transport` or `tunnel`.
    pub mode: &'static str,
    /// Mature, dying or expired.
    pub state: State,
    /// The hard limit that expired it.
    pub expired_by: Option<Limit>,
    /// Bytes and packets counted against the lifetime.
    pub usage: Usage,
    /// Seconds since it was installed.
    pub age_seconds: u64,
    /// Inbound traffic and drops.
    pub inbound: Counters,
    /// Outbound traffic and drops.
    pub outbound: Counters,
}

/// All counters at one moment; serializes to JSON with the `serde` feature.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// Each SA, in install order.
    pub sas: Vec<SaSnapshot>,
    /// Inbound drops not charged to an SA (no SA, policy).
    pub inbound_drops: Drops,
    /// Outbound drops not charged to an SA (policy).
    pub outbound_drops: Drops,
}

/// The SPD and SAD with their event queue and engine-level drop counters.
#[derive(Debug, Default)]
pub struct Engine {
    spd: Spd,
    sad: Sad,
    events: VecDeque<Event>,
    inbound_drops: Drops,
    outbound_drops: Drops,
}

fn rank(p: Proto) -> u8 {
    match p {
        Proto::Comp => 0,
        Proto::Esp => 1,
        Proto::Ah => 2,
    }
}

/// (source, destination) of an IP packet.
fn addrs(packet: &[u8]) -> Result<(IpAddr, IpAddr), ipsec_core::Error> {
    Ok(match ip::version(packet)? {
        4 => {
            let p = Ipv4Packet::new_checked(packet)?;
            (IpAddr::V4(p.src()), IpAddr::V4(p.dst()))
        }
        _ => {
            let p = Ipv6Packet::new_checked(packet)?;
            (IpAddr::V6(p.src()), IpAddr::V6(p.dst()))
        }
    })
}

impl Engine {
    /// An engine with no SAs and no policies (so every packet is discarded).
    pub fn new() -> Self {
        Engine::default()
    }

    /// Keys and installs an SA at time `now` (the start of its time limits).
    #[cfg(feature = "std")]
    pub fn add_sa(&mut self, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        self.sad.install(config, now)
    }

    /// As [`Engine::add_sa`], with a caller-seeded IV generator (for `no_std` targets).
    pub fn add_sa_with_rng(&mut self, config: SaConfig, rng: IvRng, now: Duration) -> Result<SaId, InstallError> {
        self.sad.install_with_rng(config, rng, now)
    }

    /// Appends a policy after the others of its direction. A protect policy's bundle must
    /// name installed SAs in seal order: IPComp, then ESP, then AH, each at most once.
    pub fn add_policy(&mut self, policy: Policy) -> Result<(), InstallError> {
        if let Action::Protect(ids) = &policy.action {
            if ids.is_empty() || ids.len() > 3 {
                return Err(InstallError::BundleOrder);
            }
            let mut last = None;
            for &id in ids {
                let e = self.sad.get(id).ok_or(InstallError::UnknownSa(id))?;
                let r = rank(e.config.params.proto);
                if last.is_some_and(|l| r <= l) {
                    return Err(InstallError::BundleOrder);
                }
                last = Some(r);
            }
        }
        self.spd.push(policy);
        Ok(())
    }

    /// Rekeying: installs `config` and points every policy that names `old` at it. The old SA
    /// stays in the SAD, so packets already in flight on it are still accepted (inbound
    /// policies match SAs by protocol, mode and endpoints); take it out with
    /// [`Engine::remove_sa`] when its peer has switched, or let its hard lifetime end it.
    #[cfg(feature = "std")]
    pub fn replace_sa(&mut self, old: SaId, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        let rng = IvRng::from_os().map_err(|e| InstallError::Sa(e.into()))?;
        self.replace_sa_with_rng(old, config, rng, now)
    }

    /// As [`Engine::replace_sa`], with a caller-seeded IV generator.
    pub fn replace_sa_with_rng(
        &mut self,
        old: SaId,
        config: SaConfig,
        rng: IvRng,
        now: Duration,
    ) -> Result<SaId, InstallError> {
        let old_proto = self
            .sad
            .get(old)
            .ok_or(InstallError::UnknownSa(old))?
            .config
            .params
            .proto;
        if config.params.proto != old_proto {
            return Err(InstallError::ReplaceProtocol);
        }
        let new = self.sad.install_with_rng(config, rng, now)?;
        self.spd.repoint(old, new);
        Ok(new)
    }

    /// Takes an SA out: inbound packets for it find no SA, and outbound policies that still
    /// name it drop their packets as `no_sa`. Its counters stay in snapshots.
    pub fn remove_sa(&mut self, id: SaId) -> Result<(), InstallError> {
        self.sad.get(id).ok_or(InstallError::UnknownSa(id))?;
        self.sad.unindex(id);
        Ok(())
    }

    /// The policies.
    pub fn spd(&self) -> &Spd {
        &self.spd
    }

    /// The SAs.
    pub fn sad(&self) -> &Sad {
        &self.sad
    }

    /// The oldest event not yet taken.
    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn expire(&mut self, id: SaId, limit: Limit) {
        if let Some(e) = self.sad.get_mut(id) {
            if matches!(e.state, State::Mature | State::Dying) {
                e.state = State::Expired;
                e.expired_by = Some(limit);
                self.events.push_back(Event::HardExpired { sa: id, limit });
            }
        }
    }

    /// Checks the SA's hard limits before it processes a packet.
    fn admit(&mut self, id: SaId, now: Duration) -> Result<(), DropReason> {
        let e = self.sad.get(id).ok_or(DropReason::NoSa)?;
        match e.state {
            State::Expired => return Err(DropReason::Expired),
            State::Removed => return Err(DropReason::NoSa),
            State::Mature | State::Dying => {}
        }
        if let Some(l) = e.config.lifetime.hard.reached(&e.usage, now) {
            self.expire(id, l);
            return Err(DropReason::Expired);
        }
        Ok(())
    }

    /// Charges a processed packet to the SA's lifetime and raises what it reached.
    fn charge(&mut self, id: SaId, bytes: usize, now: Duration) {
        if let Some(e) = self.sad.get_mut(id) {
            e.usage.charge(bytes);
        }
        self.check_limits(id, now);
    }

    /// Moves the SA to dying or expired if its usage or age reached a limit.
    fn check_limits(&mut self, id: SaId, now: Duration) {
        let Some(e) = self.sad.get_mut(id) else { return };
        if e.state == State::Mature {
            if let Some(limit) = e.config.lifetime.soft.reached(&e.usage, now) {
                e.state = State::Dying;
                self.events.push_back(Event::SoftExpired { sa: id, limit });
            }
        }
        if let Some(limit) = e.config.lifetime.hard.reached(&e.usage, now) {
            self.expire(id, limit);
        }
    }

    fn drop_at(&mut self, dir: Direction, id: SaId, reason: DropReason, error: Option<PacketError>) -> Dropped {
        if let Some(e) = self.sad.get_mut(id) {
            let c = match dir {
                Direction::In => &mut e.inbound,
                Direction::Out => &mut e.outbound,
            };
            c.drops.count(reason);
        }
        Dropped {
            reason,
            sa: Some(id),
            error,
        }
    }

    fn drop_engine(&mut self, dir: Direction, reason: DropReason, error: Option<PacketError>) -> Dropped {
        match dir {
            Direction::In => self.inbound_drops.count(reason),
            Direction::Out => self.outbound_drops.count(reason),
        }
        Dropped {
            reason,
            sa: None,
            error,
        }
    }

    /// Whether SA `got` satisfies a policy that names `want`: the same SA, or one with its
    /// protocol, mode and endpoints (its predecessor or successor across a rekey).
    fn stands_in(&self, got: SaId, want: SaId) -> bool {
        got == want
            || match (self.sad.get(got), self.sad.get(want)) {
                (Some(g), Some(w)) => g.same_template(w),
                _ => false,
            }
    }

    /// Processes an outbound packet (RFC 4301 5.1): the first matching outbound policy
    /// decides; a protect policy seals the packet in place with its bundle, in order.
    pub fn outbound(&mut self, buf: &mut PacketBuf, now: Duration) -> Result<Verdict, Dropped> {
        let flow = match Flow::from_packet(buf.packet()) {
            Ok(f) => f,
            Err(e) => return Err(self.drop_engine(Direction::Out, DropReason::Malformed, Some(e.into()))),
        };
        let bundle: [Option<SaId>; 3] = match self.spd.lookup(Direction::Out, &flow).map(|(_, p)| &p.action) {
            None | Some(Action::Discard) => {
                return Err(self.drop_engine(Direction::Out, DropReason::PolicyDiscard, None))
            }
            Some(Action::Bypass) => return Ok(Verdict::Bypass),
            Some(Action::Protect(ids)) => {
                let mut b = [None; 3];
                for (slot, id) in b.iter_mut().zip(ids) {
                    *slot = Some(*id);
                }
                b
            }
        };
        let mut applied = 0;
        for id in bundle.into_iter().flatten() {
            if let Err(r) = self.admit(id, now) {
                return Err(self.drop_at(Direction::Out, id, r, None));
            }
            let before = buf.len();
            let e = self.sad.get_mut(id).expect("admitted above");
            match e.sa.seal(buf) {
                Ok(compressed) => {
                    let after = buf.len();
                    e.outbound.count(before, after, after as i64 - before as i64);
                    if e.config.params.proto == Proto::Comp && !compressed {
                        e.outbound.not_compressed += 1;
                    } else {
                        applied += 1;
                    }
                    self.charge(id, before, now);
                }
                Err(err) => {
                    let reason = DropReason::of(&err);
                    if reason == DropReason::Expired {
                        self.expire(id, Limit::Sequence);
                    }
                    return Err(self.drop_at(Direction::Out, id, reason, Some(err)));
                }
            }
        }
        Ok(Verdict::Protected(applied))
    }

    /// Processes an inbound packet (RFC 4301 5.2): opens it in place SA by SA, from the
    /// outside in, while the outer header is ESP, AH or IPComp with an SA here (or IP-in-IP
    /// between a tunnel-mode IPComp SA's endpoints); then the first inbound policy matching the
    /// result must ask for exactly the SAs used (a transport-mode IPComp SA may be missing: its
    /// peer sent the packet uncompressed).
    pub fn inbound(&mut self, buf: &mut PacketBuf, now: Duration) -> Result<Verdict, Dropped> {
        let mut used = [SaId(0); MAX_DEPTH];
        let mut depth = 0;
        loop {
            let outer = outer_ipsec(buf.packet()).and_then(|o| Ok((o, addrs(buf.packet())?)));
            // An IP-in-IP packet between the endpoints of a tunnel-mode IPComp SA is that SA's
            // packet sent uncompressed (RFC 3173 2.2): the SA removes the outer header.
            let (id, uncompressed) = match outer {
                Ok((Ok((p, spi)), (_, dst))) => match self.sad.lookup(p, spi, dst) {
                    Some(id) => (id, false),
                    None if depth == 0 => {
                        let err = PacketError::Ipsec(ipsec_core::Error::UnknownSpi(spi));
                        return Err(self.drop_engine(Direction::In, DropReason::NoSa, Some(err)));
                    }
                    None => break,
                },
                Ok((Err(ip::proto::IPIP | ip::proto::IPV6), (src, dst))) => {
                    match self.sad.lookup_ipcomp_tunnel(src, dst) {
                        Some(id) if !used[..depth].contains(&id) => (id, true),
                        _ => break,
                    }
                }
                Ok((Err(_upper), _)) => break,
                Err(e) => return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(e.into()))),
            };
            if depth == MAX_DEPTH {
                return Err(self.drop_engine(Direction::In, DropReason::Malformed, None));
            }
            if let Err(r) = self.admit(id, now) {
                return Err(self.drop_at(Direction::In, id, r, None));
            }
            let before = buf.len();
            let e = self.sad.get_mut(id).expect("admitted above");
            if let Err(err) = e.sa.open(buf) {
                return Err(self.drop_at(Direction::In, id, DropReason::of(&err), Some(err)));
            }
            let after = buf.len();
            e.inbound.count(before, after, before as i64 - after as i64);
            if uncompressed {
                e.inbound.not_compressed += 1;
            }
            self.charge(id, after, now);
            used[depth] = id;
            depth += 1;
        }
        let flow = match Flow::from_packet(buf.packet()) {
            Ok(f) => f,
            Err(e) => return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(e.into()))),
        };
        let used = &used[..depth];
        let action = self.spd.lookup(Direction::In, &flow).map(|(_, p)| &p.action);
        let bypass = matches!(action, Some(Action::Bypass));
        let ok = match action {
            None | Some(Action::Discard) => false,
            Some(Action::Bypass) => used.is_empty(),
            Some(Action::Protect(ids)) => {
                // Opened outside-in = the bundle's seal order reversed.
                let mut rest = used.iter().copied().peekable();
                let mut skipped: [Option<SaId>; 3] = [None; 3];
                let mut ok = true;
                for (i, &want) in ids.iter().rev().enumerate() {
                    if rest.peek().is_some_and(|&got| self.stands_in(got, want)) {
                        rest.next();
                    } else if self.sad.get(want).is_some_and(|e| {
                        // A transport-mode IPComp packet sent uncompressed is the plain packet;
                        // a tunnel-mode one arrives as IP-in-IP and went through the SA above.
                        e.config.params.proto == Proto::Comp && e.config.params.mode == Mode::Transport
                    }) {
                        if let Some(slot) = skipped.get_mut(i) {
                            *slot = Some(want);
                        }
                    } else {
                        ok = false;
                        break;
                    }
                }
                let ok = ok && rest.next().is_none();
                if ok {
                    for id in skipped.into_iter().flatten() {
                        if let Some(e) = self.sad.get_mut(id) {
                            e.inbound.not_compressed += 1;
                        }
                    }
                }
                ok
            }
        };
        if !ok {
            return Err(self.drop_engine(Direction::In, DropReason::PolicyDiscard, None));
        }
        Ok(if bypass {
            Verdict::Bypass
        } else {
            Verdict::Protected(depth)
        })
    }

    /// Expires SAs whose time limits have passed without traffic, raising their events.
    pub fn poll(&mut self, now: Duration) {
        for i in 0..self.sad.len() {
            self.check_limits(SaId(i as u32), now);
        }
    }

    /// Every counter, now.
    pub fn snapshot(&self, now: Duration) -> Snapshot {
        Snapshot {
            sas: self.sad.iter().map(|(id, e)| sa_snapshot(id, e, now)).collect(),
            inbound_drops: self.inbound_drops,
            outbound_drops: self.outbound_drops,
        }
    }
}

fn sa_snapshot(id: SaId, e: &SaEntry, now: Duration) -> SaSnapshot {
    let p = &e.config.params;
    SaSnapshot {
        id,
        name: e.config.name.clone(),
        proto: p.proto.name(),
        spi: p.spi,
        mode: p.mode.name(),
        state: e.state,
        expired_by: e.expired_by,
        usage: e.usage,
        age_seconds: e.usage.age(now).as_secs(),
        inbound: e.inbound,
        outbound: e.outbound,
    }
}
