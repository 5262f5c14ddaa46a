//! Heap bytes the engine keeps per installed ESP SA (issue #36 item 6: memory per remote-access
//! client, two SAs each), measured without sockets: N SA pairs as tunneld installs an IKE
//! child's (tunnel mode, AES-GCM-128, ESP in UDP, a name of tunneld's form, published one SA at
//! a time so both left-right copies of the SAD hold each), counted by an allocator charged
//! with every allocation and free made while the engine's methods run. Prints the bytes live
//! after the installs, per SA, for a tenth of N and for N (so fixed costs show), and the sizes
//! of the types that make an SA's entry.
//!
//! ```text
//! cargo run --release -p ipsec-engine --example sad-memory -- [N]    # default 1000 pairs
//! ```
use ipsec_core::alg::AeadAlg;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_engine::{Engine, SaConfig, SaEntry, SharedSa, UdpEncap};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

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

/// One direction of client `i`'s child, as `crates/tunnel/src/ike/selectors.rs` makes it.
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

fn run(n: u32) -> isize {
    let mut e = charged(Engine::new);
    let configs: Vec<SaConfig> = (0..n).flat_map(|i| [sa(i, true), sa(i, false)]).collect();
    let base = LIVE.load(Ordering::Relaxed);
    for c in configs {
        charged(|| e.add_sa(c, Duration::from_secs(1)).expect("install"));
    }
    let bytes = LIVE.load(Ordering::Relaxed) - base;
    charged(|| drop(e));
    bytes
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .map_or(1000, |v| v.parse().expect("N: a number"));
    println!(
        "{{\"size_of\":{{\"SaEntry\":{},\"SharedSa\":{},\"Esp\":{},\"Aead\":{},\"SaCore\":{},\"SaConfig\":{}}}}}",
        size_of::<SaEntry>(),
        size_of::<SharedSa>(),
        size_of::<ipsec_esp::Esp>(),
        size_of::<ipsec_core::aead::Aead>(),
        size_of::<ipsec_core::sa_core::SaCore>(),
        size_of::<SaConfig>(),
    );
    for k in [n / 10, n] {
        let bytes = run(k);
        println!(
            "{{\"sas\":{},\"engine_heap_bytes\":{bytes},\"per_sa\":{:.0}}}",
            2 * k,
            bytes as f64 / (2 * k.max(1)) as f64
        );
    }
}
