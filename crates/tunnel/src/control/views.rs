//! The control side's views of the engine's state, as the protocol's types: an SA (`sa.list`, `sa.get`), an SA
//! with its counters (`show`), a policy, an SA event. Keys appear only as their size unless
//! the request asked for them (`--keys`).

use super::event::{Cause, PolicyEvent, PolicyInfo, SaEvent};
use super::response::{Alg, Encap, IkeSaInfo, Left, Lifetime, LifetimeLeft, Limits, SaInfo, SeqState, ShowSa, Usage};
use super::{ChildSaKey, Registry};
use ipsec_config::show::SaView;
use ipsec_core::sa::Keyed;
use ipsec_engine::Limits as Limits_;
use ipsec_engine::{Action, Engine, Limit, Policy, SaConfig, SaEntry, SaId, SharedSa, State as SaState};
use std::time::Duration;
use zeroize::Zeroizing;

pub(super) fn key_word(k: &[u8], keys: bool) -> Zeroizing<String> {
    Zeroizing::new(if keys {
        format!("0x{}", hex::encode(k))
    } else {
        format!("<{}-bit key>", k.len() * 8)
    })
}

pub(super) fn keyed<A: Copy>(
    out: &mut Zeroizing<String>,
    word: &str,
    k: &Option<Keyed<A>>,
    name: fn(A) -> &'static str,
    icv: bool,
    keys: bool,
) {
    if let Some(k) = k {
        out.push_str(&format!(" {word} '{}' ", name(k.alg)));
        out.push_str(&key_word(&k.key, keys));
        if icv {
            out.push_str(&format!(" {}", k.icv_len * 8));
        }
    }
}

/// An SA in `ip xfrm state` words; keys as `0x...` only when `keys` is set, else their size.
pub fn spec_words(c: &SaConfig, keys: bool) -> Zeroizing<String> {
    let p = &c.params;
    let mut s = Zeroizing::new(format!(
        "proto {} spi {:#x} mode {}",
        p.proto.name(),
        p.spi,
        p.mode.name()
    ));
    if let Some(t) = p.tunnel {
        s.push_str(&format!(" src {} dst {}", t.src, t.dst));
    }
    keyed(&mut s, "enc", &p.enc, |a| a.name(), false, keys);
    keyed(&mut s, "auth-trunc", &p.integ, |a| a.name(), true, keys);
    keyed(&mut s, "aead", &p.aead, |a| a.name(), true, keys);
    if let Some(a) = c.comp {
        s.push_str(&format!(" comp {}", a.name()));
    } else {
        s.push_str(&format!(" replay-window {}", p.replay_window));
    }
    if p.esn {
        s.push_str(" flag esn");
    }
    if let Some(e) = c.encap {
        let none = if p.tunnel.is_some_and(|t| t.src.is_ipv6()) {
            "::"
        } else {
            "0.0.0.0"
        };
        let oa = e.oa.map_or_else(|| none.to_string(), |a| a.to_string());
        s.push_str(&format!(" encap espinudp {} {} {oa}", e.sport, e.dport));
    }
    s
}

fn limits(l: &ipsec_engine::Limits) -> Limits {
    Limits {
        bytes: l.bytes,
        packets: l.packets,
        seconds: l.seconds,
    }
}

fn alg(a: Option<ipsec_config::show::AlgView>) -> Option<Alg> {
    a.map(|a| Alg {
        alg: a.alg.to_string(),
        key_bits: a.key_bits,
        icv_bits: a.icv_bits,
    })
}

/// An engine state's word (`mature`, `dying`, `expired`, `removed`).
pub(super) fn state_word(s: SaState) -> &'static str {
    match s {
        SaState::Mature => "mature",
        SaState::Dying => "dying",
        SaState::Expired => "expired",
        SaState::Removed => "removed",
    }
}

/// A limit's word (`bytes`, `packets`, `seconds`, `sequence`).
pub(super) fn limit_word(l: Limit) -> &'static str {
    match l {
        Limit::Bytes => "bytes",
        Limit::Packets => "packets",
        Limit::Seconds => "seconds",
        Limit::Sequence => "sequence",
    }
}

pub(super) fn sa_info(id: SaId, e: &SaEntry, keys: bool) -> SaInfo {
    let v = SaView::of(&e.config, None);
    SaInfo {
        name: v.name,
        lifetime: Lifetime {
            soft: limits(&v.lifetime.soft),
            hard: limits(&v.lifetime.hard),
        },
        proto: v.proto.to_string(),
        spi: v.spi,
        mode: v.mode.to_string(),
        src: v.src,
        dst: v.dst,
        enc: alg(v.enc),
        auth: alg(v.auth),
        aead: alg(v.aead),
        comp: v.comp.map(str::to_string),
        adaptive: v.adaptive.map(str::to_string),
        link_bps: v.link_bps,
        alternative: v.alternative,
        replay_window: v.replay_window,
        esn: v.esn,
        encap: v.encap.map(|e| Encap {
            sport: e.sport,
            dport: e.dport,
            oa: e.oa,
        }),
        id: id.0,
        state: state_word(e.state()).to_string(),
        spec: spec_words(&e.config, false).to_string(),
        spec_with_keys: keys.then(|| spec_words(&e.config, true).to_string()),
    }
}

pub(super) fn core_of(e: &SaEntry) -> Option<&ipsec_core::sa_core::SaCore> {
    match e.sa() {
        SharedSa::Esp(s) => Some(s.core()),
        SharedSa::Ah(s) => Some(s.core()),
        SharedSa::Comp(_) => None,
    }
}

pub(super) fn left(limits: &Limits_, e: &SaEntry, now: Duration) -> Left {
    let u = e.usage();
    let age = u.age(now).as_secs();
    Left {
        seconds: limits.seconds.map(|l| l.saturating_sub(age)),
        bytes: limits.bytes.map(|l| l.saturating_sub(u.bytes)),
        packets: limits.packets.map(|l| l.saturating_sub(u.packets)),
    }
}

/// `show`'s view of one SA: as `sa.list`, plus counters, lifetime left, replay window top
/// and next sequence number.
pub(super) fn show_sa(id: SaId, e: &SaEntry, now: Duration, retiring: bool) -> ShowSa {
    ShowSa {
        sa: sa_info(id, e, false),
        retiring,
        expired_by: e.expired_by().map(|l| limit_word(l).to_string()),
        usage: Usage {
            bytes: e.usage().bytes,
            packets: e.usage().packets,
        },
        age_seconds: e.usage().age(now).as_secs(),
        inbound: (&e.inbound()).into(),
        outbound: (&e.outbound()).into(),
        lifetime_left: LifetimeLeft {
            soft: left(&e.config.lifetime.soft, e, now),
            hard: left(&e.config.lifetime.hard, e, now),
        },
        seq: core_of(e).map(|c| SeqState {
            replay_top: c.replay().top(),
            next_seq: c.seq().peek().ok(),
        }),
    }
}

pub(super) fn policy_info(index: usize, p: &Policy, engine: &Engine) -> PolicyInfo {
    let s = &p.selector;
    let any = |x: Option<String>| x.unwrap_or_else(|| "any".into());
    let (action, bundle): (&str, Vec<String>) = match &p.action {
        Action::Bypass => ("bypass", vec![]),
        Action::Discard => ("discard", vec![]),
        Action::Protect(ids) => (
            "protect",
            ids.iter()
                .map(|&id| {
                    engine
                        .sad()
                        .get(id)
                        .map_or_else(|| format!("#{}", id.0), |e| e.config.name.clone())
                })
                .collect(),
        ),
    };
    PolicyInfo {
        index,
        dir: p.dir.to_string(),
        src: any(s.src.map(|p| p.to_string())),
        dst: any(s.dst.map(|p| p.to_string())),
        proto: any(s
            .proto
            .map(|p| ipsec_config::proto_name(p).map_or_else(|| p.to_string(), String::from))),
        src_port: s.src_ports.to_string(),
        dst_port: s.dst_ports.to_string(),
        action: action.to_string(),
        bundle,
    }
}

/// An SA event's fields at time `now` (protocol and SPI while the engine has the SA).
pub(super) fn sa_event(now: Duration, name: &str, id: SaId, e: Option<&SaEntry>, cause: Cause) -> SaEvent {
    SaEvent {
        time: now.as_secs(),
        sa: name.to_string(),
        id: id.0,
        proto: e.map(|e| e.config.params.proto.name().to_string()),
        spi: e.map(|e| format!("{:#x}", e.config.params.spi)),
        old_id: None,
        limit: None,
        why: None,
        cause,
    }
}

/// A policy event's fields.
pub(super) fn policy_event(now: Duration, policy: PolicyInfo, cause: Cause) -> PolicyEvent {
    PolicyEvent {
        time: now.as_secs(),
        policy,
        cause,
    }
}

/// `ike.list`'s (and `show`'s) child pairs with the data plane's byte counts: each child's
/// inbound and outbound SA found by its inbound SPI ([`ChildSaKey`]), the IKE thread not
/// knowing them. A pair the engine has not got (being installed, or gone) stays `null`.
pub(super) fn ike_child_bytes(sas: &mut [IkeSaInfo], engine: &Engine, st: &Registry) {
    let bytes = |key: ChildSaKey| {
        st.child(key)
            .and_then(|id| engine.sad().get(id))
            .map(|e| e.usage().bytes)
    };
    for c in sas.iter_mut().flat_map(|s| s.children.iter_mut()) {
        let Ok(spi_in) = u32::from_str_radix(&c.spi_in, 16) else {
            continue;
        };
        c.bytes_in = bytes(ChildSaKey::inb(spi_in));
        c.bytes_out = bytes(ChildSaKey::out(spi_in));
    }
}
