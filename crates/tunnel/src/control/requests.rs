//! Requests applied: a typed [`Request`] against the engine and the [`Registry`], with the
//! response and the events it caused. Pure (no socket, no lock): `control/tests.rs` drives
//! it directly.

use super::event::{Cause, Event};
use super::response::{
    Answer, Drops, Empty, IdAnswer, OnePolicy, OneSa, PolicyIndex, PolicyList, Replaced, Response, SaList, Show,
};
use super::views::{policy_event, policy_info, sa_event, sa_info, show_sa};
use super::{Handled, Owner, Registry, Request, SaRequest};
use ipsec_config::{from_toml, ActionConfig, Config, PolicyConfig};
use ipsec_engine::{Action, Engine, InstallError, Policy, SaConfig, SaId};
use serde_json::{json, Map, Value};
use std::time::Duration;
use zeroize::Zeroizing;

/// Reads `sa.add`/`sa.update`'s SA exactly as the config file's `[[sa]]` with `xfrm`:
/// `name`, `spec` (the `ip xfrm state` words) and an optional `lifetime` table.
pub(super) fn sa_config(r: &SaRequest) -> Result<SaConfig, String> {
    // A `[[sa]]` table as a config file would have it (inline tables: the loader's line
    // tracking wants them); the text holds the keys, so it is zeroed when dropped.
    let tv = |v: &Value| toml::Value::try_from(v).map_err(|e| format!("bad SA: {e}"));
    let mut text = Zeroizing::new(format!(
        "[[sa]]\nname = {}\nxfrm = {}\n",
        toml::Value::String(r.name.clone()),
        toml::Value::String(r.spec.as_str().into())
    ));
    if let Some(l) = &r.lifetime {
        text.push_str(&format!("lifetime = {}\n", tv(l)?));
    }
    let mut c = from_toml::parse(&text).map_err(|e| e.describe())?;
    c.sas.pop().ok_or_else(|| "no SA".to_string())
}

/// Parses `policy.add`'s policy exactly as a config file's `[[policy]]` table, its bundle
/// naming installed SAs.
pub(super) fn policy_from_request(p: &Map<String, Value>, state: &Registry) -> Result<Policy, String> {
    let doc = json!({ "policy": [p] });
    let text = toml::to_string(&doc).map_err(|e| format!("bad policy: {e}"))?;
    let known: Vec<&str> = state.names().collect();
    let c: Config = from_toml::parse_known(&text, &known).map_err(|e| e.describe())?;
    let pc = c.policies.into_iter().next().ok_or("no policy")?;
    policy_of(&pc, state)
}

/// A config file's policy with its bundle's SA names resolved to the running SAs: the one
/// conversion `policy.add` and a reload share.
pub(super) fn policy_of(p: &PolicyConfig, state: &Registry) -> Result<Policy, String> {
    let action = match &p.action {
        ActionConfig::Bypass => Action::Bypass,
        ActionConfig::Discard => Action::Discard,
        ActionConfig::Protect(names) => Action::Protect(
            names
                .iter()
                .map(|n| state.id(n).ok_or_else(|| format!("no SA named `{n}`")))
                .collect::<Result<_, _>>()?,
        ),
    };
    Ok(Policy {
        dir: p.dir,
        selector: p.selector,
        action,
    })
}

pub(super) fn install_error(e: InstallError) -> String {
    e.to_string()
}

/// `sa.add`: installs `c` under its name (which must be free); raises `sa.added` (its
/// `cause`).
pub(super) fn add_sa(
    engine: &mut Engine,
    state: &mut Registry,
    c: SaConfig,
    now: Duration,
    events: &mut Vec<Event>,
    cause: Cause,
    owner: Owner,
) -> Result<SaId, String> {
    if state.taken(&c.name, owner) {
        return Err(match owner {
            Owner::Ike(k) => format!(
                "SA `{}`: IKE's {} SA of the pair {:08x} is installed already",
                c.name,
                k.dir.word(),
                k.spi_in
            ),
            Owner::Config | Owner::Socket => format!("SA `{}`: another SA is already named `{}`", c.name, c.name),
        });
    }
    let name = c.name.clone();
    let id = engine
        .add_sa(c, now)
        .map_err(|e| format!("SA `{name}`: {}", install_error(e)))?;
    state.insert(name.clone(), id, owner);
    events.push(Event::SaAdded(sa_event(now, &name, id, engine.sad().get(id), cause)));
    Ok(id)
}

/// `sa.update`: make before break. The new SA is installed and the policies that named the
/// old one now name it (one published data plane); the old one stays for packets still in
/// flight on it until it is idle for [`RETIRE_IDLE`](super::RETIRE_IDLE) or expires. Raises `sa.replaced` (its
/// `cause`); returns the new id and the old.
pub(super) fn update_sa(
    engine: &mut Engine,
    state: &mut Registry,
    c: SaConfig,
    now: Duration,
    events: &mut Vec<Event>,
    cause: Cause,
    owner: Owner,
) -> Result<(SaId, SaId), String> {
    let name = c.name.clone();
    let old = state.id(&name).ok_or_else(|| format!("no SA named `{name}`"))?;
    let new = engine
        .replace_sa(old, c, now)
        .map_err(|e| format!("SA `{name}`: {}", install_error(e)))?;
    state.remove(&name);
    state.insert(name.clone(), new, owner);
    state.retire(engine, old, &name, now);
    let mut ev = sa_event(now, &name, new, engine.sad().get(new), cause);
    ev.old_id = Some(old.0);
    events.push(Event::SaReplaced(ev));
    Ok((new, old))
}

/// Handles one request line: parses, validates, applies it to `engine` and `state` at time
/// `now`, and says what to answer and which events it caused. Never panics on any input.
pub fn handle(line: &[u8], engine: &mut Engine, state: &mut Registry, now: Duration) -> Handled {
    match Request::parse(line) {
        Ok(req) => apply(&req, engine, state, now),
        Err(e) => Handled {
            response: Response::Error(e),
            events: Vec::new(),
            monitor: false,
        },
    }
}

/// Applies one request to `engine` and `state` at time `now`: what to answer and which
/// events it caused. IKE requests are the IKE thread's: here they are an error.
pub fn apply(req: &Request, engine: &mut Engine, state: &mut Registry, now: Duration) -> Handled {
    let mut events = Vec::new();
    let mut monitor = false;
    let response = match request(req, engine, state, now, &mut events, &mut monitor) {
        Ok(a) => Response::Ok(a),
        Err(e) => Response::Error(e),
    };
    Handled {
        response,
        events,
        monitor,
    }
}

pub(super) fn request(
    req: &Request,
    engine: &mut Engine,
    state: &mut Registry,
    now: Duration,
    events: &mut Vec<Event>,
    monitor: &mut bool,
) -> Result<Answer, String> {
    match req {
        Request::SaAdd(r) => {
            let c = sa_config(r)?;
            let id = add_sa(engine, state, c, now, events, Cause::REQUEST, Owner::Socket)?;
            Ok(Answer::Id(IdAnswer { id: id.0 }))
        }
        Request::SaUpdate(r) => {
            let c = sa_config(r)?;
            let (new, old) = update_sa(engine, state, c, now, events, Cause::REQUEST, Owner::Socket)?;
            Ok(Answer::Replaced(Replaced {
                id: new.0,
                old_id: old.0,
            }))
        }
        Request::SaDel { name } => {
            let id = state.id(name).ok_or_else(|| format!("no SA named `{name}`"))?;
            let ev = sa_event(now, name, id, engine.sad().get(id), Cause::REQUEST);
            engine.remove_sa(id).map_err(install_error)?;
            state.forget(id);
            events.push(Event::SaRemoved(ev));
            Ok(Answer::Id(IdAnswer { id: id.0 }))
        }
        Request::SaList { keys } => {
            let mut live: Vec<(&str, SaId)> = state.live().collect();
            live.sort_unstable();
            let sas = live
                .into_iter()
                .filter_map(|(_, id)| engine.sad().get(id).map(|e| sa_info(id, e, *keys)))
                .collect();
            Ok(Answer::Sas(SaList { sas }))
        }
        Request::SaGet { name, keys } => {
            let id = state.id(name).ok_or_else(|| format!("no SA named `{name}`"))?;
            let e = engine.sad().get(id).ok_or_else(|| format!("no SA named `{name}`"))?;
            Ok(Answer::Sa(Box::new(OneSa {
                sa: sa_info(id, e, *keys),
            })))
        }
        Request::PolicyAdd { policy } => {
            let p = policy_from_request(policy, state)?;
            engine.add_policy(p.clone()).map_err(install_error)?;
            let index = engine.spd().policies().len();
            let v = policy_info(index, &p, engine);
            events.push(Event::PolicyAdded(policy_event(now, v, Cause::REQUEST)));
            Ok(Answer::Index(PolicyIndex { index }))
        }
        &Request::PolicyDel { index } => {
            let i = usize::try_from(index - 1).map_err(|_| "index too large".to_string())?;
            let p = engine
                .remove_policy(i)
                .map_err(|_| format!("no policy at index {index}"))?;
            let v = policy_info(index as usize, &p, engine);
            events.push(Event::PolicyRemoved(policy_event(now, v.clone(), Cause::REQUEST)));
            Ok(Answer::Policy(OnePolicy { policy: v }))
        }
        Request::PolicyList => {
            let policies = engine
                .spd()
                .policies()
                .iter()
                .enumerate()
                .map(|(i, p)| policy_info(i + 1, p, engine))
                .collect();
            Ok(Answer::Policies(PolicyList { policies }))
        }
        Request::Show => {
            let retiring = state.retiring();
            let mut sas: Vec<_> = state
                .live()
                .map(|(_, id)| id)
                .chain(retiring.iter().copied())
                .filter_map(|id| {
                    engine
                        .sad()
                        .get(id)
                        .map(|e| show_sa(id, e, now, retiring.contains(&id)))
                })
                .collect();
            sas.sort_by_key(|v| v.sa.id);
            let snap = engine.snapshot(now);
            Ok(Answer::Show(Box::new(Show {
                uptime_seconds: now.as_secs(),
                sas,
                inbound_drops: Drops::from(&snap.inbound_drops),
                outbound_drops: Drops::from(&snap.outbound_drops),
                ike_sas: None,
            })))
        }
        Request::Monitor => {
            *monitor = true;
            Ok(Answer::Empty(Empty {}))
        }
        Request::Ike(_) => Err("this tunneld runs no IKE (no [[connection]] in its config)".into()),
    }
}
