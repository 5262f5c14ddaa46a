//! The control side's JSON views of the engine's state: an SA (`sa.list`, `sa.get`), an SA
//! with its counters (`show`), a policy, an SA event. Keys appear only as their size unless
//! the request asked for them (`--keys`).

use super::event;
use ipsec_config::show::SaView;
use ipsec_core::sa::Keyed;
use ipsec_engine::{Action, Engine, Limits, Policy, SaConfig, SaEntry, SaId, SharedSa};
use serde_json::{json, Value};
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

pub(super) fn sa_json(id: SaId, e: &SaEntry, keys: bool) -> Value {
    let mut v = serde_json::to_value(SaView::of(&e.config, None)).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("line");
        m.insert("id".into(), id.0.into());
        m.insert("state".into(), json!(e.state()));
        m.insert("spec".into(), spec_words(&e.config, false).as_str().into());
        if keys {
            m.insert("spec_with_keys".into(), spec_words(&e.config, true).as_str().into());
        }
    }
    v
}

pub(super) fn core_of(e: &SaEntry) -> Option<&ipsec_core::sa_core::SaCore> {
    match e.sa() {
        SharedSa::Esp(s) => Some(s.core()),
        SharedSa::Ah(s) => Some(s.core()),
        SharedSa::Comp(_) => None,
    }
}

pub(super) fn left(limits: &Limits, e: &SaEntry, now: Duration) -> Value {
    let u = e.usage();
    let age = u.age(now).as_secs();
    json!({
        "seconds": limits.seconds.map(|l| l.saturating_sub(age)),
        "bytes": limits.bytes.map(|l| l.saturating_sub(u.bytes)),
        "packets": limits.packets.map(|l| l.saturating_sub(u.packets)),
    })
}

/// `show`'s view of one SA: as `sa.list`, plus counters, lifetime left, replay window top
/// and next sequence number.
pub(super) fn show_json(id: SaId, e: &SaEntry, now: Duration, retiring: bool) -> Value {
    let mut v = sa_json(id, e, false);
    if let Value::Object(m) = &mut v {
        m.insert("retiring".into(), retiring.into());
        m.insert("expired_by".into(), json!(e.expired_by()));
        m.insert(
            "usage".into(),
            json!({"bytes": e.usage().bytes, "packets": e.usage().packets}),
        );
        m.insert("age_seconds".into(), e.usage().age(now).as_secs().into());
        m.insert("inbound".into(), json!(e.inbound()));
        m.insert("outbound".into(), json!(e.outbound()));
        m.insert(
            "lifetime_left".into(),
            json!({"soft": left(&e.config.lifetime.soft, e, now), "hard": left(&e.config.lifetime.hard, e, now)}),
        );
        if let Some(c) = core_of(e) {
            m.insert("replay_top".into(), c.replay().top().into());
            m.insert("next_seq".into(), c.seq().peek().ok().into());
        }
    }
    v
}

pub(super) fn policy_json(index: usize, p: &Policy, engine: &Engine) -> Value {
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
    json!({
        "index": index,
        "dir": p.dir.to_string(),
        "src": any(s.src.map(|p| p.to_string())),
        "dst": any(s.dst.map(|p| p.to_string())),
        "proto": any(s.proto.map(|p| ipsec_config::proto_name(p).map_or_else(|| p.to_string(), String::from))),
        "src_port": s.src_ports.to_string(),
        "dst_port": s.dst_ports.to_string(),
        "action": action,
        "bundle": bundle,
    })
}

pub(super) fn sa_event(kind: &str, now: Duration, name: &str, id: SaId, e: Option<&SaEntry>, extra: Value) -> Value {
    let mut f = json!({"sa": name, "id": id.0});
    if let (Some(e), Value::Object(m)) = (e, &mut f) {
        m.insert("proto".into(), e.config.params.proto.name().into());
        m.insert("spi".into(), format!("{:#x}", e.config.params.spi).into());
    }
    if let (Value::Object(m), Value::Object(x)) = (&mut f, extra) {
        m.extend(x);
    }
    event(kind, now, f)
}
