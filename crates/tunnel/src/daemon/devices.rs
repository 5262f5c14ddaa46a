//! The daemon's devices opened: the multi-queue TUN device, the underlay's sockets (ESP in
//! UDP per worker and IP version, raw IP sockets, `AF_PACKET` rings and senders) and the
//! IP versions the underlay needs.

use super::*;

/// Opens the TUN device's `workers` queues, sets its MTU (the configured one, or the largest
/// inner packet every outbound bundle fits into the underlay MTU) and brings it up.
pub(super) fn open_tun(engine: &Engine, opts: &Options, workers: usize) -> io::Result<(Vec<Tun>, u32)> {
    // ESP in UDP puts an 8-byte UDP header before each ESP header (RFC 3948).
    let underlay = opts.underlay_mtu as usize - if opts.udp_encap.is_some() { 8 } else { 0 };
    let mtu = opts
        .mtu
        .unwrap_or_else(|| tun_mtu_for(engine, underlay).map_or(FALLBACK_MTU, |m| m as u32));
    let tuns = Tun::open_queues(&opts.tun, workers, opts.offload, WAIT)
        .map_err(context(format!("creating TUN device {}", opts.tun)))?;
    sys::set_mtu(tuns[0].name(), mtu)?;
    sys::set_up(tuns[0].name())?;
    Ok((tuns, mtu))
}

/// The underlay's sockets: with ESP in UDP, a group of UDP sockets per IP version (one per
/// worker); else a raw sending socket per IP version; and a raw receiving socket per IP
/// protocol and version (with ESP in UDP, for AH and IPComp only).
pub(super) struct Underlay {
    udp4: Option<Vec<EncapSocket>>,
    udp6: Option<Vec<EncapSocket>>,
    raw_tx4: Option<RawTx>,
    raw_tx6: Option<RawTx>,
    rxs: Vec<RawRx>,
    /// Raw mode with rings: one per worker and IP version (a fanout group per version).
    rings: Vec<PacketRing>,
    /// Raw mode through `AF_PACKET`: one sender per worker, per IP version (else the raw
    /// sending sockets).
    packet_tx4: Vec<PacketTx>,
    packet_tx6: Vec<PacketTx>,
}

impl Underlay {
    /// `dynamic`: IKE adds peers while running, so the ESP-in-UDP sockets open even for an IP
    /// version with no configured peer.
    pub(super) fn open(
        opts: &Options,
        workers: usize,
        want4: bool,
        want6: bool,
        protocols: &[u8],
        dynamic: bool,
    ) -> io::Result<Underlay> {
        let local4 = opts.local.iter().find_map(|a| match a {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        });
        let local6 = opts.local.iter().find_map(|a| match a {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        });
        let local6 =
            match (want6, local6) {
                (false, _) => Ipv6Addr::UNSPECIFIED, // no IPv6 socket is opened
                (true, Some(a)) => a,
                (true, None) => return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the SAs tunnel to IPv6 addresses: an IPv6 underlay needs an IPv6 local address ([tunnel] local)",
                )),
            };
        let peers_of = |v6: bool| -> Vec<IpAddr> { opts.peers.iter().copied().filter(|p| p.is_ipv6() == v6).collect() };
        let mut udp4 = None;
        let mut udp6 = None;
        if let Some((sport, dport)) = opts.udp_encap {
            for (want, v6, slot) in [(want4, false, &mut udp4), (want6, true, &mut udp6)] {
                let peers = peers_of(v6);
                if !want || (peers.is_empty() && !dynamic) {
                    continue;
                }
                let local = if v6 {
                    IpAddr::V6(local6)
                } else {
                    IpAddr::V4(local4.ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidInput, "ESP in UDP needs an IPv4 local address")
                    })?)
                };
                *slot = Some(
                    EncapSocket::open_group(local, sport, &peers, dport, workers, WAIT)
                        .map_err(context(format!("opening UDP port {sport} on {local} for ESP in UDP")))?,
                );
            }
        }
        let udp = opts.udp_encap.is_some();
        let raw_tx4 = match want4 && !udp {
            true => Some(RawTx::open().map_err(context("opening the raw IPv4 sending socket".into()))?),
            false => None,
        };
        let raw_tx6 = match want6 && !udp {
            true => Some(RawTx::open_v6().map_err(context(
                "opening the raw IPv6 sending socket (IPV6_HDRINCL: Linux 4.5 or later)".into(),
            ))?),
            false => None,
        };
        // With ESP in UDP, ESP arrives on the UDP sockets; AH and IPComp still on raw sockets.
        let mut rxs = Vec::new();
        for &p in protocols.iter().filter(|&&p| !udp || p != 50) {
            if want4 {
                rxs.push(
                    RawRx::open(p, local4, WAIT)
                        .map_err(context(format!("opening the raw IPv4 socket for protocol {p}")))?,
                );
            }
            if want6 {
                rxs.push(
                    RawRx::open_v6(p, local6, WAIT)
                        .map_err(context(format!("opening the raw IPv6 socket for protocol {p}")))?,
                );
            }
        }
        let rings = match opts.af_packet && !udp && !protocols.is_empty() {
            true => open_rings(
                opts,
                workers,
                want4.then_some(local4).flatten(),
                // IPv6 is received on the raw sockets (see open_rings: its fragments would be
                // lost); AF_PACKET sends both versions.
                None,
                protocols,
                &rxs,
            ),
            false => Vec::new(),
        };
        if let (true, Some(a)) = (rings.is_empty() && want4 && !udp, local4) {
            // IPv4 on the raw sockets alone (the rings are IPv4 only): no tc filter a killed
            // tunneld left behind may take their packets.
            match packet_ring::IngressDrop::remove_stale(a) {
                Ok(true) => warn!("removed a tc ingress filter a previous tunneld left for {a}"),
                Ok(false) => {}
                Err(e) => info!("looking for a stale tc ingress filter for {a}: {e}"),
            }
        }
        let senders = |want: bool, v6: bool| -> Vec<PacketTx> {
            if !(want && opts.af_packet && !udp) {
                return Vec::new();
            }
            match (0..workers).map(|_| PacketTx::open(v6, opts.qdisc_bypass)).collect() {
                Ok(s) => s,
                Err(e) => {
                    warn!(
                        "AF_PACKET sender for IPv{} refused ({e}): sending through the raw socket",
                        if v6 { 6 } else { 4 }
                    );
                    Vec::new()
                }
            }
        };
        let (packet_tx4, packet_tx6) = (senders(want4, false), senders(want6, true));
        if !packet_tx4.is_empty() || !packet_tx6.is_empty() {
            info!(
                "sending raw IP packets through AF_PACKET to the next hop{}, the raw socket where there is none",
                if opts.qdisc_bypass {
                    " (PACKET_QDISC_BYPASS)"
                } else {
                    ""
                }
            );
        }
        Ok(Underlay {
            udp4,
            udp6,
            raw_tx4,
            raw_tx6,
            rxs,
            rings,
            packet_tx4,
            packet_tx6,
        })
    }

    /// Worker `i`'s sender: its UDP socket of each IP version, else the raw sockets.
    pub(super) fn sender<'a>(&'a self, i: usize) -> ByFamily<'a> {
        fn one<'a>(udp: &'a Option<Vec<EncapSocket>>, raw: &'a Option<RawTx>, i: usize) -> Option<&'a dyn UnderlayTx> {
            match (udp, raw) {
                (Some(u), _) => Some(&u[i] as &dyn UnderlayTx),
                (None, Some(r)) => Some(r as &dyn UnderlayTx),
                (None, None) => None,
            }
        }
        let packet = |p: &'a [PacketTx]| p.get(i).map(|t| t as &dyn UnderlayTx);
        ByFamily {
            v4: packet(&self.packet_tx4).or_else(|| one(&self.udp4, &self.raw_tx4, i)),
            v6: packet(&self.packet_tx6).or_else(|| one(&self.udp6, &self.raw_tx6, i)),
        }
    }

    /// The receiving sockets, each with its thread's name and the TUN queue it writes to:
    /// raw sockets (one per protocol and version: each gets a copy of every packet, so they
    /// cannot be spread) write to queue 0, worker `i`'s UDP sockets to queue `i`.
    pub(super) fn readers<'a>(&'a self, tuns: &'a [Tun]) -> Vec<(String, &'a dyn UnderlayRx, &'a Tun)> {
        let mut readers: Vec<(String, &dyn UnderlayRx, &Tun)> = self
            .rxs
            .iter()
            .map(|rx| {
                let v = if rx.is_v6() { "6" } else { "" };
                (format!("underlay{v}-{}", rx.proto()), rx as &dyn UnderlayRx, &tuns[0])
            })
            .collect();
        for (i, r) in self.rings.iter().enumerate() {
            readers.push((format!("underlay-ring-{i}"), r, &tuns[i % tuns.len()]));
        }
        for (v, group) in [("", &self.udp4), ("6", &self.udp6)] {
            if let Some(u) = group {
                for (i, (s, q)) in u.iter().zip(tuns).enumerate() {
                    readers.push((format!("underlay-udp{v}-{i}"), s, q));
                }
            }
        }
        readers
    }

    /// One socket of each UDP group (they share the peers' endpoints and the GSO/GRO tallies).
    pub(super) fn udp_firsts(&self) -> Vec<&EncapSocket> {
        [&self.udp4, &self.udp6].into_iter().flatten().map(|g| &g[0]).collect()
    }

    /// Each IP version's ESP-in-UDP sockets (one per worker).
    pub(super) fn udp_groups(&self) -> Vec<&[EncapSocket]> {
        [&self.udp4, &self.udp6].into_iter().flatten().map(|g| &g[..]).collect()
    }
}

/// Raw mode: with an IPv4 local address, one `AF_PACKET` ring per worker on the interface
/// that has that address (one fanout group), taking the `protocols` to it; the IPv4 raw
/// sockets then keep, of what comes in on that interface, only the packets too long for the
/// rings (and all that comes in elsewhere). Without a local address IPv4 stays on the raw
/// sockets: a ring could not tell packets to this host from packets it forwards. IPv6 stays
/// on the raw sockets too: the kernel reassembles IPv6 fragments (and walks extension
/// headers) only for them, and a raw IPv6 socket hands over the payload without saying
/// whether it came in fragments, so a ring beside it would lose the ESP packets that were
/// fragmented on the way. A failure (no CAP_NET_RAW for packet sockets, a kernel before 4.20,
/// an address on no interface) is logged and leaves IPv4 on the raw sockets.
pub(super) fn open_rings(
    opts: &Options,
    workers: usize,
    local4: Option<Ipv4Addr>,
    local6: Option<Ipv6Addr>,
    protocols: &[u8],
    rxs: &[RawRx],
) -> Vec<PacketRing> {
    let max_len = packet_ring::max_len_for(opts.underlay_mtu);
    let mut rings = Vec::new();
    let locals = [local4.map(IpAddr::V4), local6.map(IpAddr::V6)];
    for (k, local) in locals.into_iter().flatten().enumerate() {
        let v6 = local.is_ipv6();
        let filter = packet_ring::RingFilter {
            protocols: protocols.to_vec(),
            local4: local4.filter(|_| !v6),
            local6: local6.filter(|_| v6),
            max_len,
        };
        // One fanout group per daemon and IP version, its id from the process id (another
        // daemon's group with the same id makes the join fail, and the raw sockets carry on).
        let group = (std::process::id() as u16).wrapping_mul(2).wrapping_add(k as u16);
        let opened = packet_ring::interface_of(local).and_then(|i| {
            let i = i.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface has {local}")))?;
            let r: io::Result<Vec<PacketRing>> = (0..workers)
                .map(|_| PacketRing::open(&filter, i, opts.underlay_mtu, group, WAIT))
                .collect();
            Ok((i, r?))
        });
        let (ifindex, mut these) = match opened {
            Ok(x) => x,
            Err(e) => {
                warn!("AF_PACKET receive rings for {local} refused ({e}): received on the raw sockets only");
                continue;
            }
        };
        let mine: Vec<&RawRx> = rxs.iter().filter(|rx| rx.is_v6() == v6).collect();
        if let Err(e) = mine.iter().try_for_each(|rx| rx.keep_longer_than(ifindex, max_len)) {
            warn!("filtering the raw sockets for {local} ({e}): received on the raw sockets only");
            for rx in &mine {
                let _ = rx.keep_all();
            }
            continue;
        }
        info!(
            "receiving raw IP protocols {protocols:?} to {local} through {workers} AF_PACKET ring(s) on interface {ifindex} (packets over {max_len} bytes, and from other interfaces, on the raw sockets)"
        );
        if std::env::var("TUNNELD_RING_INGRESS").as_deref() != Ok("off") {
            match packet_ring::IngressDrop::install(ifindex, &filter) {
                Ok(d) => {
                    info!("the packets the rings take end at interface {ifindex}'s tc ingress (before the IP stack)");
                    these[0].hold(d);
                }
                Err(e) => info!("no tc ingress filter on interface {ifindex} ({e}): the IP stack sees the packets the rings took too"),
            }
        }
        rings.append(&mut these);
    }
    rings
}

/// The IP versions the underlay needs, `(IPv4, IPv6)`: the peers' when any are given; else
/// those of the addresses the SAs tunnel to (outbound bundles' outer destinations, inbound
/// SAs' destinations) and of the local addresses; IPv4 when there are none.
pub(super) fn underlay_versions(engine: &Engine, local: &[IpAddr], peers: &[IpAddr]) -> (bool, bool) {
    let mut v = (false, false);
    let mut note = |a: &IpAddr| match a {
        IpAddr::V4(_) => v.0 = true,
        IpAddr::V6(_) => v.1 = true,
    };
    if !peers.is_empty() {
        peers.iter().for_each(&mut note);
    } else {
        local.iter().for_each(&mut note);
        let plane = engine.data_plane();
        for p in plane.spd().policies() {
            let ipsec_engine::Action::Protect(ids) = &p.action else {
                continue;
            };
            for id in ids {
                if let Some(t) = plane.sad().get(*id).and_then(|e| e.config.params.tunnel) {
                    // Outbound: the peer's address; inbound: ours. Either way, a version in use.
                    note(&t.dst);
                }
            }
        }
    }
    if v == (false, false) {
        v.0 = true;
    }
    v
}
