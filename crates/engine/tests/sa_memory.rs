//! Heap bytes per installed ESP SA (issue #36 item 6: tunneld's memory per remote-access
//! client, two SAs each), counted by a global allocator charged only while the engine
//! installs: 1,000 pairs as tunneld installs an IKE child's (tunnel mode, AES-GCM-128 on ring,
//! ESP in UDP), each published, so both left-right copies of the SAD hold it. The same
//! measurement as `cargo run -p ipsec-engine --example sad-memory`, which prints the figures.
//! The bound fails with any one of: the RustCrypto GCMs inline in every `Aead`, the CBC keys
//! inline in every `Esp`, a `Vec` per (protocol, SPI) in the SAD's index.

use core::time::Duration;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::AeadAlg;
use ipsec_engine::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
thread_local! { static CHARGE: Cell<bool> = const { Cell::new(false) }; }

// SAFETY: delegates to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if CHARGE.with(Cell::get) {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout, as System requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if CHARGE.with(Cell::get) {
            LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: p came from alloc with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if CHARGE.with(Cell::get) {
            LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}
#[global_allocator]
static A: Counting = Counting;

fn charged<T>(f: impl FnOnce() -> T) -> T {
    CHARGE.with(|c| c.set(true));
    let r = f();
    CHARGE.with(|c| c.set(false));
    r
}

fn sa(i: u32, out: bool) -> SaConfig {
    let server = IpAddr::V4(Ipv4Addr::new(10, 98, 0, 1));
    let client = IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 98, 16, 1)) + i));
    let spi = 0x1000_0000 + 2 * i + u32::from(out);
    let mut p = SaParams::new(Proto::Esp, spi);
    p.mode = Mode::Tunnel;
    let (src, dst) = if out { (server, client) } else { (client, server) };
    p.tunnel = Some(Tunnel { src, dst });
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[i as u8; 20], 16));
    let dir = if out { "out" } else { "in" };
    let mut c = SaConfig::new(format!("ike:rw/net/{dir}-{spi:08x}"), p, None);
    c.encap = Some(UdpEncap {
        sport: 4500,
        dport: 4500 + (i as u16 % 1000),
        oa: None,
    });
    c
}

#[test]
fn an_esp_sa_costs_under_1950_bytes_of_heap() {
    const PAIRS: u32 = 1000;
    let mut e = charged(Engine::new);
    let configs: Vec<SaConfig> = (0..PAIRS).flat_map(|i| [sa(i, true), sa(i, false)]).collect();
    let base = LIVE.load(Ordering::Relaxed);
    let mut ids = Vec::new();
    for c in configs {
        ids.push(charged(|| e.add_sa(c, Duration::from_secs(1)).expect("install")));
    }
    let per_sa = (LIVE.load(Ordering::Relaxed) - base) / (2 * PAIRS as isize);
    // Still found inbound, by SPI and destination, after the flat index.
    let server = IpAddr::V4(Ipv4Addr::new(10, 98, 0, 1));
    assert_eq!(e.sad().lookup(50, 0x1000_0000, server), Some(ids[1]));
    assert_eq!(e.sad().lookup(50, 0x1000_0000, "10.9.9.9".parse().unwrap()), None);
    // 2,853 before the cuts of issue #36 item 6, 1,877 after (x86_64, ring).
    assert!(per_sa <= 1950, "{per_sa} bytes of heap per ESP SA");
    charged(|| drop(e));
}
