//! What tunneld makes of its SAs' `encap espinudp` (RFC 3948): one ESP-in-UDP setting for the
//! whole daemon, since it carries every ESP packet over one underlay.

use super::{ActionConfig, Config, ConfigError, ErrorKind, Item};
use ipsec_core::sa::Proto;
use ipsec_engine::{Direction, UdpEncap};

impl Config {
    /// The ESP-in-UDP ports tunneld uses, `(local port, peer port)`, from the SAs' `encap
    /// espinudp` and the `[tunnel]` table's `encap`: `None` for raw ESP.
    ///
    /// An SA's ports are those of the datagrams that carry its packets (as `ip xfrm state`
    /// has them), so an SA of an outbound policy gives (local, peer) and one of an inbound
    /// policy (peer, local); an SA in no policy may match either way. When any ESP SA has
    /// `encap`, every ESP SA must have it and all must agree, and `[tunnel] encap`, if given,
    /// must say the same; otherwise it is a config error naming the SAs (or the table) at
    /// fault. Without any SA `encap`, `[tunnel] encap` decides alone.
    pub fn udp_encap_for_tunneld(&self) -> Result<Option<(u16, u16)>, ConfigError> {
        let err = |i: usize, m: String| ConfigError {
            line: self.sa_line(i),
            item: Some(Item::Sa(self.sas[i].name.clone())),
            kind: ErrorKind::Invalid(m),
        };
        let at = |i: usize| self.sa_line(i).map_or_else(String::new, |l| format!(" (line {l})"));
        let esp: Vec<usize> = (0..self.sas.len())
            .filter(|&i| self.sas[i].params.proto == Proto::Esp)
            .collect();
        let Some(&first) = esp.iter().find(|&&i| self.sas[i].encap.is_some()) else {
            return Ok(self.tunnel.as_ref().and_then(|t| t.udp_encap));
        };
        if let Some(&plain) = esp.iter().find(|&&i| self.sas[i].encap.is_none()) {
            return Err(err(
                plain,
                format!(
                    "no `encap`, but SA `{}`{} has `encap espinudp`: tunneld carries all its ESP SAs the \
                     same way, so give every ESP SA the same encap, or none",
                    self.sas[first].name,
                    at(first)
                ),
            ));
        }
        let used = |dir: Direction, name: &str| {
            self.policies
                .iter()
                .any(|p| p.dir == dir && matches!(&p.action, ActionConfig::Protect(b) if b.iter().any(|n| n == name)))
        };
        // (local, peer) as each SA sees it, with the first SA that fixed it.
        let mut found: Option<((u16, u16), usize)> = None;
        let mut undirected = Vec::new();
        for &i in &esp {
            let Some(UdpEncap { sport, dport, .. }) = self.sas[i].encap else {
                continue;
            };
            let name = &self.sas[i].name;
            let (out, inb) = (used(Direction::Out, name), used(Direction::In, name));
            let pair = match (out, inb) {
                (true, true) if sport != dport => {
                    return Err(err(
                        i,
                        format!(
                            "used by outbound and inbound policies, its `encap espinudp {sport} {dport}` \
                             would be both (local {sport}, peer {dport}) and (local {dport}, peer {sport})"
                        ),
                    ))
                }
                (true, _) => (sport, dport),
                (false, true) => (dport, sport),
                (false, false) => {
                    undirected.push(i);
                    continue;
                }
            };
            match found {
                None => found = Some((pair, i)),
                Some((want, j)) if want != pair => {
                    return Err(err(
                        i,
                        format!(
                            "its `encap espinudp {sport} {dport}` means UDP port {} here and {} at the peer, \
                             but SA `{}`{} means port {} here and {} at the peer: tunneld has one ESP-in-UDP \
                             socket, so all ESP SAs must agree (an inbound SA's ports are the peer's, then ours)",
                            pair.0,
                            pair.1,
                            self.sas[j].name,
                            at(j),
                            want.0,
                            want.1
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        let pair = match found {
            Some((p, _)) => p,
            None => {
                let e = self.sas[first].encap.unwrap_or(UdpEncap::NAT_T);
                (e.sport, e.dport)
            }
        };
        for &i in &undirected {
            let Some(e) = self.sas[i].encap else { continue };
            if (e.sport, e.dport) != pair && (e.dport, e.sport) != pair {
                return Err(err(
                    i,
                    format!(
                        "its `encap espinudp {} {}` matches neither way the ports the other ESP SAs give \
                         (local {}, peer {})",
                        e.sport, e.dport, pair.0, pair.1
                    ),
                ));
            }
        }
        if let Some(t) = &self.tunnel {
            let conflict = match t.udp_encap {
                Some(p) if p != pair => Some(format!(
                    "[tunnel] encap = \"espinudp\" with encap_sport {} and encap_dport {}, but the SAs' \
                     `encap espinudp` gives local port {} and peer port {} (SA `{}`{}): make them agree, or \
                     leave ESP in UDP to the SAs",
                    p.0,
                    p.1,
                    pair.0,
                    pair.1,
                    self.sas[first].name,
                    at(first)
                )),
                None if t.encap_line.is_some() => Some(format!(
                    "[tunnel] encap = \"none\", but SA `{}`{} has `encap espinudp`: tunneld would not know \
                     which to use",
                    self.sas[first].name,
                    at(first)
                )),
                _ => None,
            };
            if let Some(m) = conflict {
                return Err(ConfigError {
                    line: t.encap_line.or(t.line),
                    item: None,
                    kind: ErrorKind::Invalid(m),
                });
            }
        }
        Ok(Some(pair))
    }
}

#[cfg(test)]
mod tests {
    use crate::from_toml;

    const GCM: &str =
        "aead = { alg = \"rfc4106(gcm(aes))\", key = \"0x505152535455565758595a5b5c5d5e5f0a0b0c0d\", icv = 128 }";

    /// Two tunnel SAs (out: 0x10 a->b, in: 0x11 b->a) with the given `encap` lines, the
    /// policies, and an optional `[tunnel]` body.
    fn config(out_encap: &str, in_encap: &str, tunnel: Option<&str>) -> String {
        let mut s = format!(
            "[[sa]]\nname = \"out\"\nproto = \"esp\"\nspi = 0x10\nmode = \"tunnel\"\nsrc = \"10.9.0.1\"\ndst = \"10.9.0.2\"\n{GCM}\n{out_encap}\n\
             [[sa]]\nname = \"in\"\nproto = \"esp\"\nspi = 0x11\nmode = \"tunnel\"\nsrc = \"10.9.0.2\"\ndst = \"10.9.0.1\"\n{GCM}\n{in_encap}\n\
             [[policy]]\ndir = \"out\"\naction = \"protect\"\nbundle = [\"out\"]\n\
             [[policy]]\ndir = \"in\"\naction = \"protect\"\nbundle = [\"in\"]\n"
        );
        if let Some(t) = tunnel {
            s.push_str(&format!("[tunnel]\nlocal = \"10.9.0.1\"\npeer = \"10.9.0.2\"\n{t}\n"));
        }
        s
    }

    fn encap(sport: u16, dport: u16) -> String {
        format!("encap = {{ type = \"espinudp\", sport = {sport}, dport = {dport} }}")
    }

    fn result(text: &str) -> Result<Option<(u16, u16)>, String> {
        from_toml::parse(text)
            .map_err(|e| e.to_string())?
            .udp_encap_for_tunneld()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn sas_decide_and_inbound_ports_are_the_peers_first() {
        assert_eq!(
            result(&config(&encap(4500, 4500), &encap(4500, 4500), None)),
            Ok(Some((4500, 4500)))
        );
        // Out: local 4501 -> peer 4502; in: peer 4502 -> local 4501.
        assert_eq!(
            result(&config(&encap(4501, 4502), &encap(4502, 4501), None)),
            Ok(Some((4501, 4502)))
        );
        // No SA encap: [tunnel] alone, as before.
        assert_eq!(result(&config("", "", None)), Ok(None));
        assert_eq!(
            result(&config("", "", Some("encap = \"espinudp\"\nencap_sport = 4600"))),
            Ok(Some((4600, 4500)))
        );
        // [tunnel] saying the same is fine.
        let t = "encap = \"espinudp\"\nencap_sport = 4501\nencap_dport = 4502";
        assert_eq!(
            result(&config(&encap(4501, 4502), &encap(4502, 4501), Some(t))),
            Ok(Some((4501, 4502)))
        );
    }

    #[test]
    fn a_mix_disagreeing_ports_or_a_conflicting_tunnel_table_is_an_error() {
        let e = result(&config(&encap(4500, 4500), "", None)).unwrap_err();
        assert!(
            e.contains("SA `in`") && e.contains("no `encap`") && e.contains("SA `out` (line 1)"),
            "{e}"
        );
        // The inbound SA read as if it were outbound: ports the wrong way round.
        let e = result(&config(&encap(4501, 4502), &encap(4501, 4502), None)).unwrap_err();
        assert!(e.contains("SA `in`") && e.contains("must agree"), "{e}");
        let t = "encap = \"espinudp\"\nencap_sport = 4600";
        let e = result(&config(&encap(4500, 4500), &encap(4500, 4500), Some(t))).unwrap_err();
        assert!(e.contains("[tunnel] encap") && e.contains("encap_sport 4600"), "{e}");
        assert!(e.starts_with("line 30:"), "the [tunnel] encap line: {e}");
        let e = result(&config(
            &encap(4500, 4500),
            &encap(4500, 4500),
            Some("encap = \"none\""),
        ))
        .unwrap_err();
        assert!(e.contains("encap = \"none\""), "{e}");
    }
}
