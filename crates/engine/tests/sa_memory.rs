//! Heap bytes per installed ESP SA (issue #36 item 6: tunneld's memory per remote-access
//! client, two SAs each), counted by a global allocator charged only while the engine
//! installs: 1,000 pairs as tunneld installs an IKE child's (tunnel mode, AES-GCM-128 on ring,
//! ESP in UDP), each published, so both left-right copies of the SAD hold it. The same
//! measurement as `cargo run -p ipsec-engine --example sad-memory`, which prints the figures.
//! The bound fails with any one of: the RustCrypto GCMs inline in every `Aead`, the CBC keys
//! inline in every `Esp`, a `Vec` per (protocol, SPI) in the SAD's index.

use core::time::Duration;
use ipsec_engine::*;
use std::net::IpAddr;

#[path = "../examples/common/child_sa.rs"]
mod child_sa;
#[path = "../examples/common/counting_alloc.rs"]
mod counting_alloc;
use child_sa::{sa, SERVER};
use counting_alloc::{charged, live};

#[test]
fn an_esp_sa_costs_under_1950_bytes_of_heap() {
    const PAIRS: u32 = 1000;
    let mut e = charged(Engine::new);
    let configs: Vec<SaConfig> = (0..PAIRS).flat_map(|i| [sa(i, true), sa(i, false)]).collect();
    let base = live();
    let mut ids = Vec::new();
    for c in configs {
        ids.push(charged(|| e.add_sa(c, Duration::from_secs(1)).expect("install")));
    }
    let per_sa = (live() - base) / (2 * PAIRS as isize);
    // Still found inbound, by SPI and destination, after the flat index.
    let server = IpAddr::V4(SERVER);
    assert_eq!(e.sad().lookup(50, 0x1000_0000, server), Some(ids[1]));
    assert_eq!(e.sad().lookup(50, 0x1000_0000, "10.9.9.9".parse().unwrap()), None);
    // 2,853 before the cuts of issue #36 item 6, 1,877 after (x86_64, ring).
    assert!(per_sa <= 1950, "{per_sa} bytes of heap per ESP SA");
    charged(|| drop(e));
}
