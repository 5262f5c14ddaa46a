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
use ipsec_engine::{Engine, SaConfig, SaEntry, SharedSa};
use std::time::Duration;

#[path = "common/child_sa.rs"]
mod child_sa;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use child_sa::sa;
use counting_alloc::{charged, live};

fn run(n: u32) -> isize {
    let mut e = charged(Engine::new);
    let configs: Vec<SaConfig> = (0..n).flat_map(|i| [sa(i, true), sa(i, false)]).collect();
    let base = live();
    for c in configs {
        charged(|| e.add_sa(c, Duration::from_secs(1)).expect("install"));
    }
    let bytes = live() - base;
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
