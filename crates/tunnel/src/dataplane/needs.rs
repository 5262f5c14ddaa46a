//! What the engine's SAs and policies ask of the devices: the IP protocols to receive on raw
//! sockets and the TUN MTU that every outbound bundle can seal into the underlay's MTU.
use ipsec_engine::overhead::{Calculator, Inner};
use ipsec_engine::{Action, Direction, Engine, SaConfig};

fn protect_bundles(engine: &Engine, dir: Direction) -> impl Iterator<Item = Vec<SaConfig>> + '_ {
    engine
        .spd()
        .policies()
        .iter()
        .filter(move |p| p.dir == dir)
        .filter_map(|p| match &p.action {
            Action::Protect(ids) => Some(
                ids.iter()
                    .filter_map(|&id| engine.sad().get(id).map(|e| e.config.clone()))
                    .collect(),
            ),
            _ => None,
        })
}

/// The IP protocols (50 ESP, 51 AH, 108 IPComp) of the SAs the inbound policies require:
/// the raw sockets to open. Sorted, without repeats.
pub fn inbound_protocols(engine: &Engine) -> Vec<u8> {
    let mut v: Vec<u8> = protect_bundles(engine, Direction::In)
        .flatten()
        .map(|c| c.params.proto.number())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The largest inner packet, IPv4 or IPv6, that every outbound bundle can seal into an
/// `underlay_mtu`-byte packet (IPComp counted as not compressing): the TUN MTU to use.
/// `None` when there is no outbound bundle.
pub fn tun_mtu_for(engine: &Engine, underlay_mtu: usize) -> Option<usize> {
    let mut best: Option<usize> = None;
    for bundle in protect_bundles(engine, Direction::Out) {
        let Ok(calc) = Calculator::from_configs(&bundle) else {
            continue;
        };
        for inner in [Inner::ipv4(), Inner::ipv6()] {
            if let Ok(m) = calc.max_inner_mtu(inner, underlay_mtu) {
                best = Some(best.map_or(m, |b| b.min(m)));
            }
        }
    }
    best
}
