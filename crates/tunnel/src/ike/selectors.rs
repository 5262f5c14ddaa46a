//! A negotiated child SA pair as the engine's SAs and policies (sans-IO): the keys per
//! direction, the UDP encapsulation ports, and traffic-selector ranges (RFC 7296 3.13.1) as
//! the SPD's prefixes.
use super::IKE_PREFIX;
pub use crate::control::ChildSas;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel as Endpoints};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg};
use ipsec_engine::{Limits, PortRange, Prefix, SaConfig, Selector};
use ipsec_ike::alg::{Encr, Integ};
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::ChildSaInfo;
use std::net::IpAddr;

/// The engine's algorithms and keys for one direction of a child SA.
fn keyed(params: &mut SaParams, encr: Encr, integ: Option<Integ>, ek: &[u8], ik: &[u8]) -> Result<(), String> {
    match encr {
        Encr::AesGcm16_128 | Encr::AesGcm16_256 => params.aead = Some(Keyed::new(AeadAlg::AesGcm, ek, 16)),
        Encr::ChaCha20Poly1305 => params.aead = Some(Keyed::new(AeadAlg::ChaCha20Poly1305, ek, 16)),
        Encr::AesCbc128 | Encr::AesCbc256 | Encr::AesCbc192 | Encr::TripleDes => {
            let enc = if encr == Encr::TripleDes {
                EncAlg::Des3Cbc
            } else {
                EncAlg::AesCbc
            };
            params.enc = Some(Keyed::new(enc, ek, 0));
            let (alg, icv) = match integ.ok_or("a CBC cipher without an integrity algorithm")? {
                Integ::HmacSha1_96 => (IntegAlg::HmacSha1, 12),
                Integ::HmacSha256_128 => (IntegAlg::HmacSha256, 16),
                Integ::HmacSha384_192 => (IntegAlg::HmacSha384, 24),
                Integ::HmacSha512_256 => (IntegAlg::HmacSha512, 32),
            };
            params.integ = Some(Keyed::new(alg, ik, icv));
        }
    }
    Ok(())
}

/// The prefixes that cover the address range `start..=end` exactly (RFC 7296 traffic
/// selectors are ranges; the SPD takes prefixes). At most 256 (a pathological range is cut
/// there, and said so by `Err`).
pub fn range_prefixes(start: IpAddr, end: IpAddr) -> Result<Vec<Prefix>, String> {
    let (bits, lo, hi) = match (start, end) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (32u32, u32::from(a) as u128, u32::from(b) as u128),
        (IpAddr::V6(a), IpAddr::V6(b)) => (128u32, u128::from(a), u128::from(b)),
        _ => return Err("a traffic selector mixes IPv4 and IPv6".into()),
    };
    if lo > hi {
        return Err("a traffic selector's range is empty".into());
    }
    let addr = |v: u128| -> IpAddr {
        if bits == 32 {
            IpAddr::from((v as u32).to_be_bytes())
        } else {
            IpAddr::from(v.to_be_bytes())
        }
    };
    let mut out = Vec::new();
    let mut cur = lo;
    loop {
        // The largest block aligned at `cur` that stays within `hi`.
        let mut size = if cur == 0 { bits } else { cur.trailing_zeros().min(bits) };
        while size > 0 && (size >= 128 || cur + ((1u128 << size) - 1) > hi) {
            if size >= 128 && cur == 0 && hi == u128::MAX {
                break;
            }
            size -= 1;
        }
        out.push(Prefix::new(addr(cur), (bits - size) as u8).ok_or("bad prefix")?);
        if out.len() > 256 {
            return Err("a traffic selector needs more than 256 prefixes".into());
        }
        let last = if size >= 128 {
            u128::MAX
        } else {
            cur + ((1u128 << size) - 1)
        };
        if last >= hi {
            break;
        }
        cur = last + 1;
    }
    Ok(out)
}

/// The SPD selectors of one (local, remote) pair of traffic selectors: outbound (local →
/// remote) and inbound (remote → local).
pub(crate) fn selectors(l: &TrafficSelector, r: &TrafficSelector) -> Result<Vec<(Selector, Selector)>, String> {
    let ports = |t: &TrafficSelector| PortRange {
        lo: t.start_port,
        hi: t.end_port,
    };
    // No packet matches a pair of two protocols or two families: nothing to install.
    if !ipsec_ike::narrowing::pair_installable(l, r) || l.start.is_ipv4() != r.start.is_ipv4() {
        return Ok(Vec::new());
    }
    let proto = [l.protocol, r.protocol].into_iter().find(|&p| p != 0);
    let mut v = Vec::new();
    for lp in range_prefixes(l.start, l.end)? {
        for rp in range_prefixes(r.start, r.end)? {
            let out = Selector {
                src: Some(lp),
                dst: Some(rp),
                proto,
                src_ports: ports(l),
                dst_ports: ports(r),
            };
            let inb = Selector {
                src: Some(rp),
                dst: Some(lp),
                proto,
                src_ports: ports(r),
                dst_ports: ports(l),
            };
            v.push((out, inb));
        }
    }
    Ok(v)
}

/// The name of a child's SA in `dir` (`out` or `in`).
pub fn sa_name(conn: &str, child: &str, dir: &str, spi: u32) -> String {
    format!("{IKE_PREFIX}{conn}/{child}/{dir}-{spi:08x}")
}

/// The SAs and policy selectors of a negotiated child SA pair (sans-IO).
pub fn child_sas(c: &ChildSaInfo) -> Result<ChildSas, String> {
    if c.protocol != 50 {
        return Err(format!("protocol {} (only ESP)", c.protocol));
    }
    let name = |dir: &str, spi: u32| sa_name(&c.conn, &c.child, dir, spi);
    let (l, r) = (c.local.ip(), c.remote.ip());
    let sa = |dir: &str, spi: u32, src: IpAddr, dst: IpAddr, ek: &[u8], ik: &[u8]| -> Result<SaConfig, String> {
        let mut p = SaParams::new(Proto::Esp, spi);
        p.mode = match c.mode {
            ipsec_ike::Mode::Tunnel => Mode::Tunnel,
            ipsec_ike::Mode::Transport => Mode::Transport,
        };
        p.tunnel = Some(Endpoints { src, dst });
        p.esn = c.suite.esn;
        keyed(&mut p, c.suite.encr, c.suite.integ, ek, ik)?;
        let mut cfg = SaConfig::new(name(dir, spi), p, None);
        // IKE rekeys the pair at its rekey_time and deletes it at its life_time; the byte and
        // packet limits are counted here: the soft one asks IKE for the rekey (the control
        // side's tick), the hard one stops the SA. The inbound SA's soft limit is 5 % later
        // than the outbound one's: the side that sends the bytes rekeys, and the other end,
        // whose inbound SA counts the same bytes, does not start a second rekey of the same
        // pair at the same moment (a collision, 2.8.1) unless the sender does not rekey.
        let l = &c.lifetimes;
        let later = |x: u64| if dir == "in" { x.saturating_add(x / 20) } else { x };
        let n = |x: u64, hard: u64| {
            let x = later(x);
            (x > 0).then_some(if hard > 0 { x.min(hard) } else { x })
        };
        cfg.lifetime.soft = Limits {
            seconds: None,
            bytes: n(l.rekey_bytes, l.life_bytes),
            packets: n(l.rekey_packets, l.life_packets),
        };
        let h = |x: u64| (x > 0).then_some(x);
        cfg.lifetime.hard = Limits {
            seconds: None,
            bytes: h(l.life_bytes),
            packets: h(l.life_packets),
        };
        cfg.encap = c.encap.map(|e| {
            let (sport, dport) = if dir == "out" {
                (e.local_port, e.remote_port)
            } else {
                (e.remote_port, e.local_port)
            };
            ipsec_engine::UdpEncap { sport, dport, oa: None }
        });
        Ok(cfg)
    };
    let out = sa("out", c.spi_out, l, r, &c.encr_out, &c.integ_out)?;
    let inb = sa("in", c.spi_in, r, l, &c.encr_in, &c.integ_in)?;
    let mut sel = Vec::new();
    for lt in &c.local_ts {
        for rt in &c.remote_ts {
            sel.extend(selectors(lt, rt)?);
            // IKE refuses more (TS_UNACCEPTABLE); a child that needs more is not installed.
            if sel.len() > ipsec_ike::limits::MAX_CHILD_POLICIES {
                return Err(format!(
                    "the traffic selectors need more than {} policies each way",
                    ipsec_ike::limits::MAX_CHILD_POLICIES
                ));
            }
        }
    }
    if sel.is_empty() {
        return Err("the traffic selectors leave nothing to protect".into());
    }
    Ok(ChildSas {
        out,
        inb,
        selectors: sel,
        before: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_become_the_prefixes_that_cover_them_exactly() {
        let p = |a: &str, b: &str| -> Vec<String> {
            range_prefixes(ip(a), ip(b))
                .unwrap()
                .iter()
                .map(|p| format!("{}/{}", p.addr(), p.len()))
                .collect()
        };
        assert_eq!(p("10.1.0.0", "10.1.255.255"), ["10.1.0.0/16"]);
        assert_eq!(p("10.0.0.1", "10.0.0.1"), ["10.0.0.1/32"]);
        assert_eq!(p("0.0.0.0", "255.255.255.255"), ["0.0.0.0/0"]);
        assert_eq!(
            p("10.0.0.1", "10.0.0.6"),
            ["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"]
        );
        assert_eq!(p("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), ["::/0"]);
        assert_eq!(p("fd00::", "fd00::ffff:ffff:ffff:ffff"), ["fd00::/64"]);
        assert!(range_prefixes(ip("10.0.0.2"), ip("10.0.0.1")).is_err());
        assert!(range_prefixes(ip("10.0.0.1"), ip("fd00::1")).is_err());
        // Every address of an odd range is covered once, and nothing else.
        let v = range_prefixes(ip("10.0.0.3"), ip("10.0.1.17")).unwrap();
        for x in 0u32..1024 {
            let a = IpAddr::from((u32::from_be_bytes([10, 0, 0, 0]) + x).to_be_bytes());
            let n = v.iter().filter(|p| p.contains(a)).count();
            assert_eq!(n, usize::from((3..=256 + 17).contains(&x)), "{a}");
        }
    }
}

#[cfg(test)]
mod child_tests {
    use super::*;
    use ipsec_ike::alg::ChildSuite;
    use std::time::Duration;

    fn ts(s: &str) -> TrafficSelector {
        TrafficSelector::from_str_config(s).unwrap()
    }

    fn info(encr: Encr, integ: Option<Integ>, ek: usize, ik: usize) -> ChildSaInfo {
        ChildSaInfo {
            conn: "gw".into(),
            child: "net".into(),
            protocol: 50,
            spi_in: 0xc000_0001,
            spi_out: 0xc000_0002,
            suite: ChildSuite { encr, integ, esn: true },
            mode: ipsec_ike::Mode::Tunnel,
            local_ts: vec![ts("10.1.0.0/16")],
            remote_ts: vec![ts("10.2.0.0/24"), ts("10.3.0.1")],
            lifetimes: Default::default(),
            encap: Some(ipsec_ike::UdpEncap {
                local_port: 4500,
                remote_port: 31000,
            }),
            local: "192.0.2.1:4500".parse().unwrap(),
            remote: "198.51.100.2:31000".parse().unwrap(),
            initiator: true,
            rekeys: None,
            encr_out: zeroize::Zeroizing::new(vec![1; ek]),
            integ_out: zeroize::Zeroizing::new(vec![2; ik]),
            encr_in: zeroize::Zeroizing::new(vec![3; ek]),
            integ_in: zeroize::Zeroizing::new(vec![4; ik]),
        }
    }

    /// A negotiated child becomes two ESP SAs with the right keys per direction, ports
    /// mirrored, ESN kept, and one policy per selector pair each way.
    #[test]
    fn a_child_becomes_two_sas_and_a_policy_per_selector_pair() {
        let c = child_sas(&info(Encr::AesGcm16_128, None, 20, 0)).unwrap();
        assert_eq!(c.out.name, "ike:gw/net/out-c0000002");
        assert_eq!(c.inb.name, "ike:gw/net/in-c0000001");
        let (o, i) = (&c.out.params, &c.inb.params);
        assert_eq!((o.spi, i.spi), (0xc000_0002, 0xc000_0001));
        assert_eq!(
            o.aead.as_ref().map(|k| (k.alg, &k.key[..], k.icv_len)),
            Some((AeadAlg::AesGcm, &[1u8; 20][..], 16))
        );
        assert_eq!(i.aead.as_ref().map(|k| &k.key[..]), Some(&[3u8; 20][..]));
        assert!(o.esn && i.esn);
        let t = o.tunnel.unwrap();
        assert_eq!((t.src, t.dst), (ip("192.0.2.1"), ip("198.51.100.2")));
        assert_eq!(i.tunnel.unwrap().src, ip("198.51.100.2"));
        let (eo, ei) = (c.out.encap.unwrap(), c.inb.encap.unwrap());
        assert_eq!((eo.sport, eo.dport, ei.sport, ei.dport), (4500, 31000, 31000, 4500));
        assert_eq!(c.selectors.len(), 2);
        let (out, inb) = &c.selectors[1];
        assert_eq!(out.src.unwrap().to_string(), "10.1.0.0/16");
        assert_eq!(out.dst.unwrap().to_string(), "10.3.0.1/32");
        assert_eq!((inb.src, inb.dst), (out.dst, out.src));
        assert_eq!(
            c.out.lifetime.soft,
            Limits::default(),
            "IKE keeps the time; no byte limit"
        );
        let mut i = info(Encr::AesGcm16_128, None, 20, 0);
        i.lifetimes.rekey_bytes = 10_000_000;
        i.lifetimes.life_bytes = 11_000_000;
        let c2 = child_sas(&i).unwrap();
        assert_eq!(
            (c2.out.lifetime.soft.bytes, c2.out.lifetime.hard.bytes),
            (Some(10_000_000), Some(11_000_000))
        );
        assert_eq!(
            c2.inb.lifetime.soft.bytes,
            Some(10_500_000),
            "the receiving side waits for the sender's rekey"
        );
        // The engine accepts them.
        let mut e = ipsec_engine::Engine::new();
        e.add_sa(c.out, Duration::ZERO).unwrap();
        e.add_sa(c.inb, Duration::ZERO).unwrap();
    }

    /// What IKE agrees to is what is installed: the policy count IKE bounds a child by
    /// (`narrowing::policy_count`, from `TrafficSelector::prefix_count`) is the number of
    /// selector pairs installed here; a child of conflicting protocols, or over the bound,
    /// is refused (and then deleted by the IKE thread).
    #[test]
    fn installs_what_ike_counts_and_no_more() {
        let range = |a: &str, b: &str| {
            let mut t = TrafficSelector::host(ip(a));
            t.end = ip(b);
            t
        };
        let mut i = info(Encr::AesGcm16_128, None, 20, 0);
        for (l, r) in [
            (
                vec![range("10.1.0.1", "10.1.0.254")],
                vec![range("10.2.3.3", "10.2.9.17")],
            ),
            (
                vec![ts("10.1.0.0/16"), ts("fd00::/64")],
                vec![ts("10.2.0.0/16"), range("fd01::1", "fd01::9")],
            ),
            (vec![range("::1", "::ffff")], vec![range("::", "::2")]),
        ] {
            i.local_ts = l;
            i.remote_ts = r;
            let c = child_sas(&i).unwrap();
            assert_eq!(
                c.selectors.len(),
                ipsec_ike::narrowing::policy_count(&i.local_ts, &i.remote_ts)
            );
            for t in i.local_ts.iter().chain(&i.remote_ts) {
                assert_eq!(range_prefixes(t.start, t.end).unwrap().len(), t.prefix_count());
            }
        }
        i.local_ts = vec![ts("10.1.0.0/16[tcp]")];
        i.remote_ts = vec![ts("10.2.0.0/16[udp]")];
        assert!(child_sas(&i).is_err(), "tcp with udp protects nothing");
        i.local_ts = (0..8)
            .map(|k| range(&format!("10.1.{k}.1"), &format!("10.1.{k}.254")))
            .collect();
        i.remote_ts = i.local_ts.clone();
        assert!(child_sas(&i).is_err(), "12544 policies");
    }

    /// Removing one child among many removes exactly its policies and keeps the others in
    /// order: 64 children of 196 policies each way (#31 defect 4; its cost, quadratic before
    /// with `keep.contains`, is a matter for a benchmark, not this test).
    #[test]
    fn removing_a_child_among_many_is_exact() {
        let t = crate::dataplane::Tunnel::new(ipsec_engine::Engine::new(), vec![ip("198.51.100.2")]);
        let control = crate::control::Control::new(&t.engine(), None);
        let range = |a: String, b: String| {
            let mut x = TrafficSelector::host(ip(&a));
            x.end = ip(&b);
            x
        };
        let mut names = Vec::new();
        for k in 0..64u32 {
            let mut i = info(Encr::AesGcm16_128, None, 20, 0);
            i.spi_in = 0x1000 + 2 * k;
            i.spi_out = 0x1001 + 2 * k;
            i.local_ts = vec![range(format!("10.1.{k}.1"), format!("10.1.{k}.254"))];
            i.remote_ts = vec![range(format!("10.2.{k}.1"), format!("10.2.{k}.254"))];
            let c = child_sas(&i).unwrap();
            assert_eq!(c.selectors.len(), 196);
            names.push([
                crate::control::ChildSaKey::out(i.spi_in),
                crate::control::ChildSaKey::inb(i.spi_in),
            ]);
            control.ike_install(&t, c).unwrap();
        }
        let before = t.engine().spd().policies().to_vec();
        assert_eq!(before.len(), 64 * 196 * 2);
        control.ike_remove(&t, &names[10]);
        let after = t.engine().spd().policies().to_vec();
        assert_eq!(after.len(), 63 * 196 * 2);
        let kept: std::collections::HashSet<String> = after.iter().map(|p| format!("{p:?}")).collect();
        let gone = before.iter().filter(|p| !kept.contains(&format!("{p:?}"))).count();
        assert_eq!(gone, 196 * 2);
        let order: Vec<String> = before
            .iter()
            .map(|p| format!("{p:?}"))
            .filter(|p| kept.contains(p))
            .collect();
        assert_eq!(order, after.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>());
    }

    #[test]
    fn cbc_children_get_their_hmac_truncation() {
        for (integ, alg, icv, ik) in [
            (Integ::HmacSha256_128, IntegAlg::HmacSha256, 16, 32),
            (Integ::HmacSha384_192, IntegAlg::HmacSha384, 24, 48),
            (Integ::HmacSha512_256, IntegAlg::HmacSha512, 32, 64),
        ] {
            let c = child_sas(&info(Encr::AesCbc256, Some(integ), 32, ik)).unwrap();
            let p = &c.out.params;
            assert_eq!(p.enc.as_ref().map(|k| (k.alg, k.key.len())), Some((EncAlg::AesCbc, 32)));
            assert_eq!(
                p.integ.as_ref().map(|k| (k.alg, k.icv_len, k.key.len())),
                Some((alg, icv, ik))
            );
            let mut e = ipsec_engine::Engine::new();
            e.add_sa(c.out, Duration::ZERO).unwrap();
        }
        // The Windows client's ESP (`aes256-sha1`, `3des-sha1`): HMAC-SHA1-96 (RFC 2404), and
        // 3DES-CBC with its 24-byte key (RFC 2451); AES-192 too.
        for (encr, enc, ek) in [
            (Encr::AesCbc256, EncAlg::AesCbc, 32),
            (Encr::TripleDes, EncAlg::Des3Cbc, 24),
            (Encr::AesCbc192, EncAlg::AesCbc, 24),
        ] {
            let c = child_sas(&info(encr, Some(Integ::HmacSha1_96), ek, 20)).unwrap();
            let p = &c.out.params;
            assert_eq!(p.enc.as_ref().map(|k| (k.alg, k.key.len())), Some((enc, ek)));
            assert_eq!(
                p.integ.as_ref().map(|k| (k.alg, k.icv_len, k.key.len())),
                Some((IntegAlg::HmacSha1, 12, 20))
            );
            let mut e = ipsec_engine::Engine::new();
            e.add_sa(c.out, Duration::ZERO).unwrap();
        }
        let c = child_sas(&info(Encr::ChaCha20Poly1305, None, 36, 0)).unwrap();
        assert_eq!(
            c.out.params.aead.as_ref().map(|k| k.alg),
            Some(AeadAlg::ChaCha20Poly1305)
        );
        assert!(
            child_sas(&info(Encr::AesCbc128, None, 16, 0)).is_err(),
            "CBC needs integrity"
        );
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
}
