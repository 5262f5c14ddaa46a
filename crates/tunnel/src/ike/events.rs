//! What the IKE endpoint's events do to the running tunnel: a child pair installed (its SAs
//! and policies through the control side, its peer's ESP-in-UDP endpoint registered first),
//! removed or retired by its [`ChildSaKey`]s, the peer's endpoint moved, and the event line
//! for the monitors.

use super::*;
use crate::control::event::{self as ev, Event as ControlEvent};

pub(super) fn ts_words(ts: &[TrafficSelector]) -> Vec<String> {
    ts.iter().map(|t| format!("{t}")).collect()
}

pub(super) fn ike_up(info: &ipsec_ike::IkeSaInfo, now: Duration) -> ControlEvent {
    ControlEvent::IkeUp(ev::IkeUp {
        time: now.as_secs(),
        conn: info.conn.clone(),
        spi_i: format!("{:016x}", info.spi_i),
        spi_r: format!("{:016x}", info.spi_r),
        local: info.local.to_string(),
        remote: info.remote.to_string(),
        nat: info.nat,
    })
}

pub(super) fn ike_rekeyed(old_spi_i: u64, old_spi_r: u64, info: &ipsec_ike::IkeSaInfo, now: Duration) -> ControlEvent {
    ControlEvent::IkeRekeyed(ev::IkeRekeyed {
        time: now.as_secs(),
        conn: info.conn.clone(),
        old_spi_i: format!("{old_spi_i:016x}"),
        old_spi_r: format!("{old_spi_r:016x}"),
        spi_i: format!("{:016x}", info.spi_i),
        spi_r: format!("{:016x}", info.spi_r),
    })
}

pub(super) fn ike_down(
    conn: &str,
    spi_i: u64,
    spi_r: u64,
    reason: ipsec_ike::DownReason,
    now: Duration,
) -> ControlEvent {
    ControlEvent::IkeDown(ev::IkeDown {
        time: now.as_secs(),
        conn: conn.to_string(),
        spi_i: format!("{spi_i:016x}"),
        spi_r: format!("{spi_r:016x}"),
        why: format!("{reason:?}"),
    })
}

/// `child.up`'s (and `child.failed`'s) fields.
pub(super) fn child_up(c: &ipsec_ike::ChildSaInfo, now: Duration) -> ev::ChildUp {
    ev::ChildUp {
        time: now.as_secs(),
        conn: c.conn.clone(),
        child: c.child.clone(),
        spi_in: format!("{:08x}", c.spi_in),
        spi_out: format!("{:08x}", c.spi_out),
        local_ts: ts_words(&c.local_ts),
        remote_ts: ts_words(&c.remote_ts),
        encap: c.encap.map(|e| ev::ChildEncap {
            sport: e.local_port,
            dport: e.remote_port,
        }),
        rekeys: c.rekeys.map(|old| format!("{old:08x}")),
        error: None,
    }
}

pub(super) fn child_down(
    conn: &str,
    child: &str,
    spi_in: u32,
    spi_out: u32,
    reason: ipsec_ike::DownReason,
    now: Duration,
) -> ControlEvent {
    ControlEvent::ChildDown(ev::ChildDown {
        time: now.as_secs(),
        conn: conn.to_string(),
        child: child.to_string(),
        spi_in: format!("{spi_in:08x}"),
        spi_out: format!("{spi_out:08x}"),
        why: format!("{reason:?}"),
    })
}

pub(super) fn auth_failed(
    conn: &str,
    local: bool,
    reason: Option<&ipsec_ike::authenticator::Refusal>,
    now: Duration,
) -> ControlEvent {
    ControlEvent::IkeAuthFailed(ev::AuthFailed {
        time: now.as_secs(),
        conn: conn.to_string(),
        by: if local { "us" } else { "peer" }.to_string(),
        why: reason.map(|r| r.to_string()),
    })
}

pub(super) fn no_proposal(conn: &str, child: Option<&str>, now: Duration) -> ControlEvent {
    ControlEvent::IkeNoProposal(ev::ConnChild {
        time: now.as_secs(),
        conn: conn.to_string(),
        child: child.map(str::to_string),
    })
}

pub(super) fn ts_unacceptable(conn: &str, child: &str, now: Duration) -> ControlEvent {
    ControlEvent::IkeTsUnacceptable(ev::ConnChild {
        time: now.as_secs(),
        conn: conn.to_string(),
        child: Some(child.to_string()),
    })
}

pub(super) fn peer_moved(conn: &str, old: SocketAddr, new: SocketAddr, mobike: bool, now: Duration) -> ControlEvent {
    ControlEvent::IkePeerMoved(ev::PeerMoved {
        time: now.as_secs(),
        conn: conn.to_string(),
        old: old.to_string(),
        new: new.to_string(),
        mobike,
    })
}

pub(super) fn mobike_refused(
    conn: &str,
    spi_i: u64,
    from: SocketAddr,
    why: ipsec_ike::MobikeRefusal,
    now: Duration,
) -> ControlEvent {
    ControlEvent::IkeMobikeRefused(ev::MobikeRefused {
        time: now.as_secs(),
        conn: conn.to_string(),
        spi_i: format!("{spi_i:016x}"),
        from: from.to_string(),
        why: why.to_string(),
    })
}

/// What the endpoint's own status says about the SAs that remain, read once per pass (the
/// endpoint does not change while its events are taken): the IKE SAs' peers, and the child
/// pairs a rekey replaced (their successor names them, [`ipsec_ike::ChildSaStatus::rekeys`]).
#[derive(Debug, Default)]
pub(super) struct Live {
    /// The addresses of the peers of the IKE SAs up (established, or rekeyed and not yet gone).
    peers: std::collections::HashSet<std::net::IpAddr>,
    /// The inbound SPIs of the child pairs a live child replaces.
    replaced: std::collections::HashSet<u32>,
}

impl Live {
    pub(super) fn of(endpoint: &ipsec_ike::Endpoint, now: Duration) -> Live {
        Live::from_status(&endpoint.status(now))
    }

    fn from_status(status: &[ipsec_ike::IkeSaStatus]) -> Live {
        let mut l = Live::default();
        for s in status {
            if matches!(s.state, "established" | "rekeyed") {
                l.peers.insert(s.remote.ip());
            }
            l.replaced.extend(s.children.iter().filter_map(|c| c.rekeys));
        }
        l
    }
}

/// Whether handling `ev` needs [`Live`].
pub(super) fn needs_live(ev: &Event) -> bool {
    matches!(ev, Event::IkeDown { .. } | Event::ChildDown { .. })
}

pub(super) fn handle_event(
    t: &Tunnel,
    control: &Control,
    sockets: &IkeSockets<'_>,
    ev: Event,
    live: Option<&Live>,
    keylog: Option<&KeyLog>,
) -> Option<u32> {
    let now = t.now();
    let mut failed = None;
    let out = match ev {
        Event::IkeUp { info, keys } => {
            info!(
                "IKE: {} up ({:?}, {} <-> {}, peer {:?}{})",
                info.conn,
                info.role,
                info.local,
                info.remote,
                info.remote_id,
                if info.nat { ", NAT" } else { "" }
            );
            if let (Some(k), Some(log)) = (keys.as_ref(), keylog) {
                log.append("ikev2_decryption_table", &[ipsec_ike::keylog::ikev2_line(k)]);
            }
            ike_up(&info, now)
        }
        Event::IkeRekeyed {
            old_spi_i,
            old_spi_r,
            info,
            keys,
        } => {
            info!(
                "IKE: {} rekeyed: SPIs {:016x}_i {:016x}_r -> {:016x}_i {:016x}_r",
                info.conn, old_spi_i, old_spi_r, info.spi_i, info.spi_r
            );
            if let (Some(k), Some(log)) = (keys.as_ref(), keylog) {
                log.append("ikev2_decryption_table", &[ipsec_ike::keylog::ikev2_line(k)]);
            }
            ike_rekeyed(old_spi_i, old_spi_r, &info, now)
        }
        Event::IkeDown {
            conn,
            spi_i,
            spi_r,
            remote,
            reason,
        } => {
            info!("IKE: {conn} down ({reason:?})");
            // Its peer's endpoint leaves with its last IKE SA.
            if !live.is_some_and(|l| l.peers.contains(&remote.ip())) {
                sockets.remove_peer(remote.ip());
            }
            ike_down(&conn, spi_i, spi_r, reason, now)
        }
        Event::ChildUp(mut c) => {
            if let Some(log) = keylog {
                log.append("esp_sa", &ipsec_ike::keylog::esp_sa_lines(&c));
            }
            // After `ipsec ike update` the data plane names our address as before the move.
            c.local.set_ip(sockets.dataplane_local(c.local.ip()));
            let v = child_up(&c, now);
            // Our rekey: the new pair's policies go before the old pair's (outbound traffic
            // moves at once); the peer's: after (it moves when the peer deletes the old).
            let before = c.rekeys.filter(|_| c.initiator);
            // Sealed packets go to where the peer's IKE messages come from (behind a NAT, not
            // its configured address), at its NAT-T port (the encapsulation IKE negotiated,
            // not the IKE port its messages may still come from); registered before the SAs
            // are installed, so no packet of the new pair goes anywhere else.
            let esp_to = c
                .encap
                .map_or(c.remote, |e| SocketAddr::new(c.remote.ip(), e.remote_port));
            let room = sockets.add_peer(esp_to, c.spi_out, c.spi_in);
            let installed = child_sas(&c).and_then(|mut sas| {
                sas.before = before;
                control.ike_install(t, sas)
            });
            if installed.is_err() {
                sockets.child_down(c.spi_in);
            }
            match installed {
                Ok(()) => {
                    info!(
                        "IKE: {}/{} up: ESP in {:08x}, out {:08x}, {:?} <-> {:?}",
                        c.conn, c.child, c.spi_in, c.spi_out, c.local_ts, c.remote_ts
                    );
                    if !room {
                        warn!(
                            "IKE: {}/{}: {} peers added already: packets to {} cannot go",
                            c.conn,
                            c.child,
                            crate::dev::udp::MAX_DYNAMIC_PEERS,
                            c.remote
                        );
                    }
                }
                Err(e) => {
                    warn!("IKE: {}/{}: installing the child SA failed: {e}", c.conn, c.child);
                    failed = Some(c.spi_in);
                    let mut v = v;
                    v.error = Some(e);
                    control.publish(&[ControlEvent::ChildFailed(v)]);
                    return failed;
                }
            }
            ControlEvent::ChildUp(v)
        }
        Event::ChildDown {
            conn,
            child,
            spi_in,
            spi_out,
            reason,
        } => {
            // A rekey replaced it: its successor (still up) names it.
            let replaced = live.is_some_and(|l| l.replaced.contains(&spi_in));
            let (out, inb) = (ChildSaKey::out(spi_in), ChildSaKey::inb(spi_in));
            if replaced {
                // Make before break's last step: the old outbound SA goes, the old inbound one
                // stays until the packets in flight on it are through (RFC 7296 2.8).
                control.ike_remove(t, &[out]);
                control.ike_retire(t, inb);
            } else {
                control.ike_remove(t, &[out, inb]);
            }
            sockets.child_down(spi_in);
            info!("IKE: {conn}/{child} down ({reason:?}): its SAs and policies removed");
            child_down(&conn, &child, spi_in, spi_out, reason, now)
        }
        Event::AuthFailed { conn, local, reason } => {
            match (local, reason) {
                (true, Some(why)) => warn!("IKE: {conn}: authentication failed: we refused the peer: {why}"),
                (true, None) => warn!("IKE: {conn}: authentication failed: we refused the peer"),
                (false, _) => warn!("IKE: {conn}: authentication failed: the peer refused us"),
            }
            auth_failed(&conn, local, reason.as_ref(), now)
        }
        Event::ProposalMismatch { conn, child } => {
            warn!(
                "IKE: {conn}: no proposal in common{}",
                child.as_deref().map_or(String::new(), |c| format!(" for child {c}"))
            );
            no_proposal(&conn, child.as_deref(), now)
        }
        Event::TsUnacceptable { conn, child } => {
            warn!("IKE: {conn}/{child}: traffic selectors unacceptable");
            ts_unacceptable(&conn, &child, now)
        }
        Event::PeerEndpointChanged {
            conn, old, new, mobike, ..
        } => {
            let how = if mobike { " (MOBIKE UPDATE_SA_ADDRESSES)" } else { "" };
            info!("IKE: {conn}: the peer moved from {old} to {new}{how}");
            // Its children's sealed packets follow (the ESP-in-UDP peer table, RFC 4555 3.5).
            sockets.peer_moved(old, new);
            peer_moved(&conn, old, new, mobike, now)
        }
        Event::MobikeRefused {
            conn,
            spi_i,
            from,
            reason,
        } => {
            warn!("IKE: {conn}: MOBIKE request from {from} not acted on, nothing moved: {reason}");
            mobike_refused(&conn, spi_i, from, reason, now)
        }
        Event::LeaseAssigned {
            conn,
            pool,
            identity,
            address,
            spi_i,
        } => {
            info!("IKE: {conn}: {identity} leased {address} from pool {pool}");
            ControlEvent::IkeLeaseAssigned(ev::LeaseAssigned {
                time: now.as_secs(),
                conn,
                pool,
                id: identity.to_string(),
                address: address.to_string(),
                spi_i: format!("{spi_i:016x}"),
            })
        }
        Event::LeaseReleased {
            pool,
            identity,
            address,
        } => {
            info!("IKE: lease {address} of {identity} (pool {pool}) released");
            ControlEvent::IkeLeaseReleased(ev::LeaseReleased {
                time: now.as_secs(),
                pool,
                id: identity.to_string(),
                address: address.to_string(),
            })
        }
        Event::PoolExhausted { conn, identity, pools } => {
            warn!("IKE: {conn}: no address for {identity}: pools {pools:?} full (INTERNAL_ADDRESS_FAILURE)");
            ControlEvent::IkePoolExhausted(ev::PoolExhausted {
                time: now.as_secs(),
                conn,
                id: identity.to_string(),
                pools,
            })
        }
        Event::VirtualIp {
            conn,
            spi_i,
            addresses,
            dns,
        } => {
            info!("IKE: {conn}: virtual addresses {addresses:?}, DNS {dns:?}");
            let s = |v: &[std::net::IpAddr]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
            ControlEvent::IkeVirtualIp(ev::VirtualIp {
                time: now.as_secs(),
                conn,
                spi_i: format!("{spi_i:016x}"),
                addresses: s(&addresses),
                dns: s(&dns),
            })
        }
        Event::RadiusServer { server, up } => {
            let addr = sockets
                .radius
                .as_ref()
                .and_then(|r| r.servers().get(server).copied())
                .map_or_else(|| format!("number {server}"), |a| a.to_string());
            if up {
                info!("IKE: RADIUS server {addr} answers again: up");
            } else {
                warn!("IKE: RADIUS server {addr} marked down: every try of a request timed out (the next server takes its requests; tried again later)");
            }
            return failed;
        }
        other => {
            tracing::debug!("IKE: {other:?}");
            return failed;
        }
    };
    control.publish(&[out]);
    failed
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::control::response::Response;
    use ipsec_ike::alg::{ChildSuite, DhGroup, Encr, IkeSuite, Prf};
    use ipsec_ike::{DownReason, Identity, Role};
    use std::fmt::Write as _;

    /// An IKE SA's info for the tests here and in `radius.rs`: `gw`, initiator, AES-GCM.
    pub(in crate::ike) fn info(spi_i: u64) -> ipsec_ike::IkeSaInfo {
        ipsec_ike::IkeSaInfo {
            conn: "gw".into(),
            spi_i,
            spi_r: 0xfedc_ba98_7654_3210,
            role: Role::Initiator,
            local: "192.0.2.1:4500".parse().unwrap(),
            remote: "198.51.100.2:4500".parse().unwrap(),
            suite: IkeSuite {
                encr: Encr::AesGcm16_128,
                integ: None,
                prf: Prf::HmacSha256,
                dh: DhGroup::Ecp256,
                addke: Default::default(),
            },
            local_id: Identity::Fqdn("a.example".into()),
            remote_id: Identity::Fqdn("b.example".into()),
            nat: true,
        }
    }

    /// A child's info for the tests here and in `radius.rs`: `gw/net`, AES-GCM, tunnel mode.
    pub(in crate::ike) fn child(rekeys: Option<u32>, encap: bool) -> ipsec_ike::ChildSaInfo {
        let ts = |s: &str| TrafficSelector::from_str_config(s).unwrap();
        ipsec_ike::ChildSaInfo {
            conn: "gw".into(),
            child: "net".into(),
            protocol: 50,
            spi_in: 0xc000_0001,
            spi_out: 0xc000_0002,
            suite: ChildSuite {
                encr: Encr::AesGcm16_128,
                integ: None,
                esn: false,
            },
            mode: ipsec_ike::Mode::Tunnel,
            local_ts: vec![ts("10.1.0.0/16")],
            remote_ts: vec![ts("10.2.0.0/24"), ts("10.3.0.1")],
            lifetimes: Default::default(),
            encap: encap.then_some(ipsec_ike::EncapPorts {
                local_port: 4500,
                remote_port: 31000,
            }),
            local: "192.0.2.1:4500".parse().unwrap(),
            remote: "198.51.100.2:31000".parse().unwrap(),
            initiator: true,
            rekeys,
            encr_out: zeroize::Zeroizing::new(vec![1; 20]),
            integ_out: zeroize::Zeroizing::new(vec![]),
            encr_in: zeroize::Zeroizing::new(vec![3; 20]),
            integ_in: zeroize::Zeroizing::new(vec![]),
        }
    }

    /// Every IKE event line and the `ike.list` answer, byte for byte (`ike/golden.txt`).
    #[test]
    fn every_ike_event_and_list_is_as_documented() {
        let now = Duration::from_secs(7);
        let mut out = String::new();
        let mut line = |v: &dyn std::fmt::Display| {
            let _ = writeln!(out, "{v}");
        };
        line(&ike_up(&info(0x0123_4567_89ab_cdef), now));
        line(&ike_rekeyed(
            0x0123_4567_89ab_cdef,
            0xfedc_ba98_7654_3210,
            &info(0x1111),
            now,
        ));
        line(&ike_down("gw", 1, 0, DownReason::Rekeyed, now));
        line(&ike_down("gw", 1, 2, DownReason::PeerError(24), now));
        line(&ControlEvent::ChildUp(child_up(&child(None, true), now)));
        line(&ControlEvent::ChildUp(child_up(&child(Some(0xc000_0009), false), now)));
        let mut failed = child_up(&child(None, true), now);
        failed.error = Some("SA `ike:gw/net/out-c0000002`: no room".into());
        line(&ControlEvent::ChildFailed(failed));
        line(&child_down(
            "gw",
            "net",
            0xc000_0001,
            0xc000_0002,
            DownReason::Local,
            now,
        ));
        line(&auth_failed(
            "gw",
            true,
            Some(&ipsec_ike::authenticator::Refusal::Psk),
            now,
        ));
        line(&auth_failed("gw", false, None, now));
        line(&no_proposal("gw", None, now));
        line(&no_proposal("", Some("net"), now));
        line(&ts_unacceptable("gw", "net", now));
        line(&peer_moved(
            "gw",
            "198.51.100.2:4500".parse().unwrap(),
            "198.51.100.2:31001".parse().unwrap(),
            false,
            now,
        ));
        // MOBIKE (RFC 4555): a client's UPDATE_SA_ADDRESSES, and one refused.
        line(&peer_moved(
            "rw",
            "198.51.100.2:4500".parse().unwrap(),
            "203.0.113.5:4500".parse().unwrap(),
            true,
            now,
        ));
        line(&mobike_refused(
            "rw",
            0x0123_4567_89ab_cdef,
            "203.0.113.5:4500".parse().unwrap(),
            ipsec_ike::MobikeRefusal::NotNegotiated,
            now,
        ));
        // Remote access (RFC 7296 3.15): leases, a full pool, our virtual address. The
        // events themselves go through handle_event; their lines are the typed Event's.
        let id = || Identity::Fqdn("c.example".into()).to_string();
        line(&ControlEvent::IkeLeaseAssigned(ev::LeaseAssigned {
            time: 7,
            conn: "rw".into(),
            pool: "rw4".into(),
            id: id(),
            address: "10.3.0.2".into(),
            spi_i: format!("{:016x}", 0x0123_4567_89ab_cdef_u64),
        }));
        line(&ControlEvent::IkeLeaseReleased(ev::LeaseReleased {
            time: 7,
            pool: "rw4".into(),
            id: id(),
            address: "10.3.0.2".into(),
        }));
        line(&ControlEvent::IkePoolExhausted(ev::PoolExhausted {
            time: 7,
            conn: "rw".into(),
            id: id(),
            pools: vec!["rw4".into(), "rw6".into()],
        }));
        line(&ControlEvent::IkeVirtualIp(ev::VirtualIp {
            time: 7,
            conn: "rw".into(),
            spi_i: "0123456789abcdef".into(),
            addresses: vec!["10.3.0.2".into()],
            dns: vec![],
        }));
        let status = ipsec_ike::IkeSaStatus {
            conn: "gw".into(),
            state: "established",
            role: Role::Responder,
            spi_i: 0x0123_4567_89ab_cdef,
            spi_r: 0xfedc_ba98_7654_3210,
            local: "192.0.2.1:4500".parse().unwrap(),
            remote: "198.51.100.2:4500".parse().unwrap(),
            remote_id: Some("b.example".into()),
            proposal: Some("aes128gcm16-prfsha256-ecp256".into()),
            nat: false,
            virtual_ips: vec!["10.3.0.2".parse().unwrap()],
            mobike: false,
            peer_addresses: vec![],
            eap_method: None,
            next_request_id: 3,
            expected_peer_id: 2,
            age: Duration::from_secs(75),
            rekey_in: Some(Duration::from_secs(14100)),
            stats: ipsec_ike::IkeSaStats {
                requests_sent: 3,
                requests_answered: 2,
                child_rekeys: 1,
                ..Default::default()
            },
            children: vec![
                ipsec_ike::ChildSaStatus {
                    child: "net".into(),
                    state: "installed",
                    spi_in: 0xc000_0001,
                    spi_out: 0xc000_0002,
                    proposal: "aes128gcm16-noesn".into(),
                    rekeys: Some(0xc000_0003),
                    rekey_in: Some(Duration::from_secs(3300)),
                    expires_in: None,
                },
                ipsec_ike::ChildSaStatus {
                    child: "net".into(),
                    state: "rekeyed",
                    spi_in: 0xc000_0003,
                    spi_out: 0xc000_0004,
                    proposal: "aes128gcm16-noesn".into(),
                    rekeys: None,
                    rekey_in: None,
                    expires_in: Some(Duration::from_secs(10)),
                },
            ],
        };
        let list = IkeList {
            ike_sas: vec![
                ike_sa_info(&status, Some("a.example".into())),
                // A road warrior authenticated by EAP: its EAP identity and method.
                ike_sa_info(
                    &ipsec_ike::IkeSaStatus {
                        remote_id: Some("alice".into()),
                        eap_method: Some("eap-mschapv2"),
                        ..status.clone()
                    },
                    None,
                ),
            ],
        };
        // The children's bytes, as the control side fills them in from the data plane.
        let mut list = list;
        list.ike_sas[1].children[0].bytes_in = Some(123_456);
        list.ike_sas[1].children[0].bytes_out = Some(7_890_123);
        line(&Response::Ok(Answer::IkeList(list)));
        line(&Response::Ok(Answer::IkeList(IkeList { ike_sas: vec![] })));
        crate::control::golden::check_golden("ike/golden.txt", &out);
    }

    /// What a down SA's handling reads from the endpoint: the peers of the IKE SAs that were
    /// up (not one still connecting or dead), and the pairs a live child replaced.
    #[test]
    fn live_sas_name_their_peers_and_the_pairs_they_replaced() {
        let sa = |state: &'static str, remote: &str, rekeys: Option<u32>| ipsec_ike::IkeSaStatus {
            conn: "gw".into(),
            state,
            role: Role::Responder,
            spi_i: 1,
            spi_r: 2,
            local: "192.0.2.1:4500".parse().unwrap(),
            remote: remote.parse().unwrap(),
            remote_id: None,
            proposal: None,
            nat: false,
            virtual_ips: vec![],
            mobike: false,
            peer_addresses: vec![],
            eap_method: None,
            next_request_id: 0,
            expected_peer_id: 0,
            age: Duration::ZERO,
            rekey_in: None,
            stats: Default::default(),
            children: vec![ipsec_ike::ChildSaStatus {
                child: "net".into(),
                state: "installed",
                spi_in: 0xc000_0005,
                spi_out: 0xc000_0006,
                proposal: String::new(),
                rekeys,
                rekey_in: None,
                expires_in: None,
            }],
        };
        let l = Live::from_status(&[
            sa("established", "198.51.100.2:4500", Some(0xc000_0001)),
            sa("rekeyed", "198.51.100.3:4500", None),
            sa("connecting", "198.51.100.4:500", None),
            sa("dead", "198.51.100.5:4500", Some(0xc000_0002)),
        ]);
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(l.peers.contains(&ip("198.51.100.2")) && l.peers.contains(&ip("198.51.100.3")));
        assert!(!l.peers.contains(&ip("198.51.100.4")) && !l.peers.contains(&ip("198.51.100.5")));
        assert!(l.replaced.contains(&0xc000_0001));
        assert!(!l.replaced.contains(&0xc000_0005));
    }
}
