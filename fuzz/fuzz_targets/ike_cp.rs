//! The Configuration payload (crates/ike src/cp.rs, RFC 7296 3.15) and the address pools'
//! lease allocator (src/pool.rs). The first byte chooses: even, the rest is a CP payload body
//! (parsed; what parses is emitted and parses back to the same attributes); odd, the rest
//! drives a small pool (a /29 or a v6 /125, chosen by the second byte) with acquire, release
//! and rekey operations of 8 identities on 16 IKE SAs. Checked: every leased address is in the
//! pool, no two IKE SAs hold one address, the online and offline counts never pass the size.
#![no_main]
use ipsec_fuzz::MAX_INPUT;
use ipsec_ike::cp::CpRepr;
use ipsec_ike::pool::{Leases, PoolConfig};
use ipsec_ike::Identity;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let Some((&sel, rest)) = data.split_first() else { return };
    if sel % 2 == 0 {
        if let Ok(r) = CpRepr::parse_body(rest) {
            let b = r.to_body();
            assert_eq!(b.len(), r.buffer_len());
            assert_eq!(CpRepr::parse_body(&b).as_ref(), Ok(&r));
            let _ = (r.addresses(), r.dns(), r.wants(false), r.wants(true));
        }
        return;
    }
    let Some((&kind, ops)) = rest.split_first() else { return };
    let cfg = if kind % 2 == 0 {
        PoolConfig::new("p", "10.3.0.0/29").unwrap()
    } else {
        PoolConfig::new("p", "fd00::/125").unwrap()
    };
    let mut l = Leases::new(std::slice::from_ref(&cfg));
    let ids: Vec<Identity> = (0..8)
        .map(|i| Identity::from_str_config(&format!("u{i}@x")).unwrap())
        .collect();
    // Our model of who holds what: IKE SA -> address.
    let mut held: BTreeMap<u64, IpAddr> = BTreeMap::new();
    for op in ops.chunks(3) {
        let [a, b, c] = [op[0], *op.get(1).unwrap_or(&0), *op.get(2).unwrap_or(&0)];
        let sa = u64::from(b % 16);
        match a % 4 {
            0 | 1 => {
                let req = (c & 0x80 != 0).then(|| match cfg.first {
                    IpAddr::V4(_) => IpAddr::from([10, 3, 0, c & 15]),
                    IpAddr::V6(_) => IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, u16::from(c & 15)]),
                });
                if let Ok(addr) = l.acquire("p", &ids[usize::from(c % 8)], sa, req, a % 4 == 1) {
                    assert!(cfg.contains(addr), "{addr} outside the pool");
                    // A take-over moves the address from another SA.
                    held.retain(|_, x| *x != addr);
                    if let Some(old) = held.insert(sa, addr) {
                        assert_eq!(old, addr, "an SA asking again gets its own address");
                    }
                }
            }
            2 => {
                let r = l.release(sa);
                assert_eq!(r.len(), usize::from(held.remove(&sa).is_some()));
            }
            _ => {
                let to = u64::from(c % 16);
                if !held.contains_key(&to) {
                    l.rekeyed(sa, to);
                    if let Some(x) = held.remove(&sa) {
                        held.insert(to, x);
                    }
                }
            }
        }
        let s = &l.stats()[0];
        assert_eq!(s.online, held.len());
        assert!((s.online + s.offline) as u128 <= s.size);
    }
});
