//! What the IKE endpoint's events do to the running tunnel: a child pair installed (its SAs
//! and policies through the control side, its peer's ESP-in-UDP endpoint registered first),
//! removed or retired by its [`ChildSaKey`]s, the peer's endpoint moved, and the event line
//! for the monitors.

use super::*;

/// An event line as the control side's (`{"v":1,"event":KIND,"time":SECONDS,...}`).
pub(super) fn event_json(kind: &str, now: Duration, fields: Value) -> Value {
    crate::control::event(kind, now, fields)
}

pub(super) fn ts_json(ts: &[TrafficSelector]) -> Vec<String> {
    ts.iter().map(|t| format!("{t}")).collect()
}

/// A child pair as the IKE thread's status lists it.
pub(super) struct ChildEntry {
    spi_in: u32,
    /// A rekey made its successor: when it goes, its inbound SA is retired, not removed.
    replaced: bool,
}

pub(super) fn handle_event(
    t: &Tunnel,
    control: &Control,
    sockets: &IkeSockets<'_>,
    ev: Event,
    status: &Mutex<Vec<(ipsec_ike::IkeSaInfo, Vec<ChildEntry>)>>,
    keylog: Option<&KeyLog>,
) -> Option<u32> {
    let now = t.now();
    let mut failed = None;
    let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
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
            let v = json!({"conn": info.conn, "spi_i": format!("{:016x}", info.spi_i), "spi_r": format!("{:016x}", info.spi_r),
                "local": info.local.to_string(), "remote": info.remote.to_string(), "nat": info.nat});
            st.retain(|(i, _)| !(i.spi_i == info.spi_i && i.spi_r == info.spi_r));
            st.push((info, Vec::new()));
            event_json("ike.up", now, v)
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
            let v = json!({"conn": info.conn, "old_spi_i": format!("{old_spi_i:016x}"), "old_spi_r": format!("{old_spi_r:016x}"),
                "spi_i": format!("{:016x}", info.spi_i), "spi_r": format!("{:016x}", info.spi_r)});
            // The children moved to the new SA.
            let children = st
                .iter()
                .position(|(i, _)| i.spi_i == old_spi_i && i.spi_r == old_spi_r)
                .map(|k| core::mem::take(&mut st[k].1))
                .unwrap_or_default();
            st.push((info, children));
            event_json("ike.rekeyed", now, v)
        }
        Event::IkeDown {
            conn,
            spi_i,
            spi_r,
            reason,
        } => {
            info!("IKE: {conn} down ({reason:?})");
            let gone = st
                .iter()
                .find(|(i, _)| i.spi_i == spi_i && i.spi_r == spi_r)
                .map(|(i, _)| i.remote.ip());
            st.retain(|(i, _)| !(i.spi_i == spi_i && i.spi_r == spi_r));
            if let Some(ip) = gone.filter(|ip| !st.iter().any(|(i, _)| i.remote.ip() == *ip)) {
                sockets.remove_peer(ip);
            }
            event_json(
                "ike.down",
                now,
                json!({"conn": conn, "spi_i": format!("{spi_i:016x}"), "spi_r": format!("{spi_r:016x}"), "why": format!("{reason:?}")}),
            )
        }
        Event::ChildUp(c) => {
            if let Some(log) = keylog {
                log.append("esp_sa", &ipsec_ike::keylog::esp_sa_lines(&c));
            }
            let v = json!({"conn": c.conn, "child": c.child, "spi_in": format!("{:08x}", c.spi_in),
                "spi_out": format!("{:08x}", c.spi_out), "local_ts": ts_json(&c.local_ts), "remote_ts": ts_json(&c.remote_ts),
                "encap": c.encap.map(|e| json!({"sport": e.local_port, "dport": e.remote_port}))});
            // Our rekey: the new pair's policies go before the old pair's (outbound traffic
            // moves at once); the peer's: after (it moves when the peer deletes the old).
            let before = c.rekeys.filter(|_| c.initiator);
            let v = match c.rekeys {
                Some(old) => {
                    let mut v = v;
                    v["rekeys"] = format!("{old:08x}").into();
                    v
                }
                None => v,
            };
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
                    if let Some((_, ch)) = st.iter_mut().find(|(i, _)| i.conn == c.conn) {
                        ch.push(ChildEntry {
                            spi_in: c.spi_in,
                            replaced: false,
                        });
                    }
                    if let Some(old) = c.rekeys {
                        for x in st
                            .iter_mut()
                            .flat_map(|(_, ch)| ch.iter_mut())
                            .filter(|x| x.spi_in == old)
                        {
                            x.replaced = true;
                        }
                    }
                }
                Err(e) => {
                    warn!("IKE: {}/{}: installing the child SA failed: {e}", c.conn, c.child);
                    failed = Some(c.spi_in);
                    let mut v = v;
                    v["error"] = e.into();
                    drop(st);
                    control.publish(&[event_json("child.failed", now, v)]);
                    return failed;
                }
            }
            event_json("child.up", now, v)
        }
        Event::ChildDown {
            conn,
            child,
            spi_in,
            spi_out,
            reason,
        } => {
            let replaced = st
                .iter()
                .flat_map(|(_, ch)| ch.iter())
                .any(|x| x.spi_in == spi_in && x.replaced);
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
            for (_, ch) in st.iter_mut() {
                ch.retain(|x| x.spi_in != spi_in);
            }
            event_json(
                "child.down",
                now,
                json!({"conn": conn, "child": child, "spi_in": format!("{spi_in:08x}"), "spi_out": format!("{spi_out:08x}"), "why": format!("{reason:?}")}),
            )
        }
        Event::AuthFailed { conn, local, reason } => {
            match (local, reason) {
                (true, Some(why)) => warn!("IKE: {conn}: authentication failed: we refused the peer: {why}"),
                (true, None) => warn!("IKE: {conn}: authentication failed: we refused the peer"),
                (false, _) => warn!("IKE: {conn}: authentication failed: the peer refused us"),
            }
            let mut f = json!({"conn": conn, "by": if local { "us" } else { "peer" }});
            if let Some(why) = reason {
                f["why"] = json!(why.to_string());
            }
            event_json("ike.auth_failed", now, f)
        }
        Event::ProposalMismatch { conn, child } => {
            warn!(
                "IKE: {conn}: no proposal in common{}",
                child.as_deref().map_or(String::new(), |c| format!(" for child {c}"))
            );
            event_json("ike.no_proposal", now, json!({"conn": conn, "child": child}))
        }
        Event::TsUnacceptable { conn, child } => {
            warn!("IKE: {conn}/{child}: traffic selectors unacceptable");
            event_json("ike.ts_unacceptable", now, json!({"conn": conn, "child": child}))
        }
        Event::PeerEndpointChanged { conn, old, new, .. } => {
            info!("IKE: {conn}: the peer moved from {old} to {new}");
            sockets.peer_moved(old, new);
            event_json(
                "ike.peer_moved",
                now,
                json!({"conn": conn, "old": old.to_string(), "new": new.to_string()}),
            )
        }
        Event::LeaseAssigned {
            conn,
            pool,
            identity,
            address,
            spi_i,
        } => {
            info!("IKE: {conn}: {identity} leased {address} from pool {pool}");
            event_json(
                "ike.lease_assigned",
                now,
                json!({"conn": conn, "pool": pool, "id": identity.to_string(), "address": address.to_string(), "spi_i": format!("{spi_i:016x}")}),
            )
        }
        Event::LeaseReleased {
            pool,
            identity,
            address,
        } => {
            info!("IKE: lease {address} of {identity} (pool {pool}) released");
            event_json(
                "ike.lease_released",
                now,
                json!({"pool": pool, "id": identity.to_string(), "address": address.to_string()}),
            )
        }
        Event::PoolExhausted { conn, identity, pools } => {
            warn!("IKE: {conn}: no address for {identity}: pools {pools:?} full (INTERNAL_ADDRESS_FAILURE)");
            event_json(
                "ike.pool_exhausted",
                now,
                json!({"conn": conn, "id": identity.to_string(), "pools": pools}),
            )
        }
        Event::VirtualIp {
            conn,
            spi_i,
            addresses,
            dns,
        } => {
            info!("IKE: {conn}: virtual addresses {addresses:?}, DNS {dns:?}");
            let s = |v: &[std::net::IpAddr]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
            event_json(
                "ike.virtual_ip",
                now,
                json!({"conn": conn, "spi_i": format!("{spi_i:016x}"), "addresses": s(&addresses), "dns": s(&dns)}),
            )
        }
        other => {
            tracing::debug!("IKE: {other:?}");
            return failed;
        }
    };
    drop(st);
    control.publish(&[out]);
    failed
}
