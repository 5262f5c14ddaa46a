//! tunneld's control socket: SAs and policies changed while traffic flows, counters read,
//! events watched.
//!
//! The protocol is line-delimited JSON over a Unix-domain stream socket (mode 0600, root
//! peers only, checked by `SO_PEERCRED`). Each request is one line of at most
//! [`MAX_REQUEST`] bytes, `{"v":1,"op":"...",...}`; each gets exactly one response line,
//! `{"v":1,"ok":true,...}` or `{"v":1,"ok":false,"error":"..."}`. After `monitor` the
//! connection receives one event per line until it closes. The operations and their
//! fields are in docs/control.md.
//!
//! [`handle`] is the whole request logic, a pure function of the request, the engine and the
//! control [`State`] (tested without sockets); [`Control`] adds the socket, the monitors, the
//! `--on-event` hook and the retiring of SAs replaced by `sa.update`. The packet threads never
//! take the control lock: every change publishes a new data plane they load lock-free.

use crate::dataplane::Tunnel;
use ipsec_config::{from_toml, show::SaView, ActionConfig, Config, PolicyConfig};
use ipsec_core::sa::Keyed;
use ipsec_engine::{
    Action, Engine, Event, InstallError, Limit, Limits, Policy, SaConfig, SaEntry, SaId, SharedSa, State as SaState,
};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use zeroize::Zeroizing;

/// The protocol version this daemon speaks.
pub const VERSION: u64 = 1;
/// The longest request line, newline included.
pub const MAX_REQUEST: usize = 64 * 1024;
/// How long a client has to send one whole request line, counted from its connection or its
/// previous response: idle time and a request trickled in a byte at a time count alike, so no
/// client keeps its connection longer by sending slowly.
pub const CLIENT_IDLE: Duration = Duration::from_secs(2);
/// The longest one client may stay connected, however busy (checked while it sends, too).
pub const CLIENT_MAX: Duration = Duration::from_secs(10);
/// How long writing one response (or the first line to a monitor) may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_millis(500);
/// The most clients served at once, each on its own thread with its own deadlines; one more
/// is answered `busy` and closed (monitors do not count: they hold no thread).
pub const MAX_CLIENTS: usize = 32;
/// How often a client's thread, waiting for its client, looks whether tunneld is stopping.
pub const POLL: Duration = Duration::from_millis(50);
/// An SA replaced by `sa.update` is removed once it has received nothing for this long.
pub const RETIRE_IDLE: Duration = Duration::from_secs(5);
/// `sa.seq_near_exhaustion` is raised when an SA without ESN has used this many sequence
/// numbers (of 2^32 − 1).
pub const SEQ_WARN: u64 = 0xffff_0000;
/// The most monitors at once.
pub const MAX_MONITORS: usize = 16;
/// How long an `--on-event` command may run before it is killed.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// The most `--on-event` commands running at once; events beyond are logged and not run.
pub const MAX_HOOKS: usize = 8;

/// What the control side knows beside the engine: the live SAs by name, and the SAs that
/// `sa.update` replaced and that are kept until idle.
#[derive(Debug, Default)]
pub struct State {
    names: BTreeMap<String, SaId>,
    /// Who installed each named SA (a reload touches only the config file's).
    owners: BTreeMap<SaId, Owner>,
    retiring: Vec<Retiring>,
    seq_warned: Vec<SaId>,
}

/// Who installed an SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The config file (at start-up or a reload).
    Config,
    /// `sa.add` / `sa.update` over the control socket.
    Socket,
    /// IKE, for the child pair it receives on `spi_in`.
    Ike {
        /// The pair's inbound SPI (IKE's name for the pair).
        spi_in: u32,
    },
}

#[derive(Debug, Clone)]
struct Retiring {
    id: SaId,
    name: String,
    packets: u64,
    since: Duration,
}

impl State {
    /// The state of an engine built from a config: every installed, not removed SA by name.
    pub fn from_engine(engine: &Engine) -> Self {
        let names: BTreeMap<String, SaId> = engine
            .sad()
            .iter()
            .filter(|(_, e)| e.state() != SaState::Removed)
            .map(|(id, e)| (e.config.name.clone(), id))
            .collect();
        State {
            owners: names.values().map(|&id| (id, Owner::Config)).collect(),
            names,
            ..State::default()
        }
    }

    /// The id of the live SA `name`.
    pub fn id(&self, name: &str) -> Option<SaId> {
        self.names.get(name).copied()
    }

    /// Who installed SA `id` (None: not a named, live SA).
    pub fn owner(&self, id: SaId) -> Option<Owner> {
        self.owners.get(&id).copied()
    }

    fn insert(&mut self, name: String, id: SaId, owner: Owner) {
        self.names.insert(name, id);
        self.owners.insert(id, owner);
    }

    fn remove(&mut self, name: &str) -> Option<SaId> {
        let id = self.names.remove(name)?;
        self.owners.remove(&id);
        Some(id)
    }

    /// Keeps SA `id` (no longer named) until it is idle for [`RETIRE_IDLE`] or expires.
    fn retire(&mut self, engine: &Engine, id: SaId, name: &str, now: Duration) {
        let packets = engine.sad().get(id).map_or(0, |e| e.inbound().packets);
        self.retiring.push(Retiring {
            id,
            name: name.to_string(),
            packets,
            since: now,
        });
    }

    /// The SAs replaced by `sa.update` and not yet removed.
    pub fn retiring(&self) -> Vec<SaId> {
        self.retiring.iter().map(|r| r.id).collect()
    }
}

/// The result of one request.
#[derive(Debug)]
pub struct Handled {
    /// The response line's JSON.
    pub response: Value,
    /// Events to send to the monitors (and the hook), in order.
    pub events: Vec<Value>,
    /// The request was `monitor`: the connection now receives events.
    pub monitor: bool,
}

fn ok(v: Value) -> Value {
    let mut m = Map::new();
    m.insert("v".into(), VERSION.into());
    m.insert("ok".into(), true.into());
    if let Value::Object(o) = v {
        m.extend(o);
    }
    Value::Object(m)
}

fn error(msg: impl Into<String>) -> Value {
    json!({"v": VERSION, "ok": false, "error": msg.into()})
}

/// An event line: `{"v":1,"event":KIND,"time":SECONDS,...}`.
pub fn event(kind: &str, now: Duration, fields: Value) -> Value {
    let mut m = Map::new();
    m.insert("v".into(), VERSION.into());
    m.insert("event".into(), kind.into());
    m.insert("time".into(), now.as_secs().into());
    if let Value::Object(o) = fields {
        m.extend(o);
    }
    Value::Object(m)
}

fn str_field<'a>(req: &'a Map<String, Value>, k: &str) -> Result<&'a str, String> {
    match req.get(k) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("`{k}` must be a string")),
        None => Err(format!("missing `{k}`")),
    }
}

fn bool_field(req: &Map<String, Value>, k: &str) -> Result<bool, String> {
    match req.get(k) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("`{k}` must be true or false")),
    }
}

fn only(req: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match req
        .keys()
        .find(|k| !["v", "op"].contains(&k.as_str()) && !allowed.contains(&k.as_str()))
    {
        Some(k) => Err(format!("unknown field `{k}` for this op")),
        None => Ok(()),
    }
}

/// Parses `sa.add`/`sa.update`'s SA exactly as the config file's `[[sa]]` with `xfrm`:
/// `name`, `spec` (the `ip xfrm state` words) and an optional `lifetime` table.
fn sa_from_request(req: &Map<String, Value>) -> Result<SaConfig, String> {
    let name = str_field(req, "name")?;
    let spec = str_field(req, "spec")?;
    // A `[[sa]]` table as a config file would have it (inline tables: the loader's line
    // tracking wants them); the text holds the keys, so it is zeroed when dropped.
    let tv = |v: &Value| toml::Value::try_from(v).map_err(|e| format!("bad SA: {e}"));
    let mut text = Zeroizing::new(format!(
        "[[sa]]\nname = {}\nxfrm = {}\n",
        toml::Value::String(name.into()),
        toml::Value::String(spec.into())
    ));
    if let Some(l) = req.get("lifetime") {
        text.push_str(&format!("lifetime = {}\n", tv(l)?));
    }
    let mut c = from_toml::parse(&text).map_err(|e| e.describe())?;
    c.sas.pop().ok_or_else(|| "no SA".to_string())
}

/// Parses `policy.add`'s policy exactly as a config file's `[[policy]]` table, its bundle
/// naming installed SAs.
fn policy_from_request(req: &Map<String, Value>, state: &State) -> Result<Policy, String> {
    let p = req.get("policy").ok_or("missing `policy`")?;
    if !p.is_object() {
        return Err("`policy` must be an object (the fields of a config file's [[policy]])".into());
    }
    let doc = json!({ "policy": [p] });
    let text = toml::to_string(&doc).map_err(|e| format!("bad policy: {e}"))?;
    let known: Vec<&str> = state.names.keys().map(String::as_str).collect();
    let c: Config = from_toml::parse_known(&text, &known).map_err(|e| e.describe())?;
    let pc = c.policies.into_iter().next().ok_or("no policy")?;
    policy_of(&pc, state)
}

/// A config file's policy with its bundle's SA names resolved to the running SAs: the one
/// conversion `policy.add` and a reload share.
fn policy_of(p: &PolicyConfig, state: &State) -> Result<Policy, String> {
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

fn key_word(k: &[u8], keys: bool) -> Zeroizing<String> {
    Zeroizing::new(if keys {
        format!("0x{}", hex::encode(k))
    } else {
        format!("<{}-bit key>", k.len() * 8)
    })
}

fn keyed<A: Copy>(
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

fn sa_json(id: SaId, e: &SaEntry, keys: bool) -> Value {
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

fn core_of(e: &SaEntry) -> Option<&ipsec_core::sa_core::SaCore> {
    match e.sa() {
        SharedSa::Esp(s) => Some(s.core()),
        SharedSa::Ah(s) => Some(s.core()),
        SharedSa::Comp(_) => None,
    }
}

fn left(limits: &Limits, e: &SaEntry, now: Duration) -> Value {
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
fn show_json(id: SaId, e: &SaEntry, now: Duration, retiring: bool) -> Value {
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

fn policy_json(index: usize, p: &Policy, engine: &Engine) -> Value {
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

fn sa_event(kind: &str, now: Duration, name: &str, id: SaId, e: Option<&SaEntry>, extra: Value) -> Value {
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

fn install_error(e: InstallError) -> String {
    e.to_string()
}

/// IKE: adds a child's two SAs and its policies (one each way per selector pair), all or
/// nothing: when a step fails the SAs already added go again and no event tells of them.
fn install_child(
    eng: &mut Engine,
    st: &mut State,
    c: crate::ike::ChildSas,
    now: Duration,
    events: &mut Vec<Value>,
) -> Result<(), String> {
    let mut added = Vec::new();
    let r = add_child(eng, st, c, now, events, &mut added);
    if r.is_err() {
        for id in added {
            st.names.retain(|_, &mut x| x != id);
            st.owners.remove(&id);
            let _ = eng.remove_sa(id);
        }
        events.clear();
    }
    r
}

/// [`install_child`]'s steps, noting in `added` each SA added.
fn add_child(
    eng: &mut Engine,
    st: &mut State,
    c: crate::ike::ChildSas,
    now: Duration,
    events: &mut Vec<Value>,
    added: &mut Vec<SaId>,
) -> Result<(), String> {
    let tag = || json!({"ike": true});
    let owner = Owner::Ike {
        spi_in: c.inb.params.spi,
    };
    let out = add_sa(eng, st, c.out, now, events, tag(), owner)?;
    added.push(out);
    let inb = add_sa(eng, st, c.inb, now, events, tag(), owner)?;
    added.push(inb);
    let mut ps = eng.spd().policies().to_vec();
    // After the config's policies; a rekey's initiator puts the new pair's before the old
    // pair's, so outbound traffic moves to it at once (RFC 7296 2.8).
    let old = c.before.as_deref().and_then(|n| st.id(n));
    let at = old
        .and_then(|id| {
            ps.iter()
                .position(|p| matches!(&p.action, Action::Protect(v) if v.contains(&id)))
        })
        .unwrap_or(ps.len());
    let mut new = Vec::with_capacity(2 * c.selectors.len());
    for (o, i) in &c.selectors {
        new.push(Policy {
            dir: ipsec_engine::Direction::Out,
            selector: *o,
            action: Action::Protect(vec![out]),
        });
        new.push(Policy {
            dir: ipsec_engine::Direction::In,
            selector: *i,
            action: Action::Protect(vec![inb]),
        });
    }
    ps.splice(at..at, new);
    eng.set_policies(ps).map_err(install_error)?;
    for k in at + 1..=at + 2 * c.selectors.len() {
        let v = policy_json(k, &eng.spd().policies()[k - 1], eng);
        events.push(event("policy.added", now, json!({"policy": v, "ike": true})));
    }
    Ok(())
}

/// `sa.add`: installs `c` under its name (which must be free); raises `sa.added` (with the
/// fields of `extra`).
fn add_sa(
    engine: &mut Engine,
    state: &mut State,
    c: SaConfig,
    now: Duration,
    events: &mut Vec<Value>,
    extra: Value,
    owner: Owner,
) -> Result<SaId, String> {
    if state.names.contains_key(&c.name) {
        return Err(format!("SA `{}`: another SA is already named `{}`", c.name, c.name));
    }
    let name = c.name.clone();
    let id = engine
        .add_sa(c, now)
        .map_err(|e| format!("SA `{name}`: {}", install_error(e)))?;
    state.insert(name.clone(), id, owner);
    events.push(sa_event("sa.added", now, &name, id, engine.sad().get(id), extra));
    Ok(id)
}

/// `sa.update`: make before break. The new SA is installed and the policies that named the
/// old one now name it (one published data plane); the old one stays for packets still in
/// flight on it until it is idle for [`RETIRE_IDLE`] or expires. Raises `sa.replaced` (with
/// the fields of `extra`); returns the new id and the old.
fn update_sa(
    engine: &mut Engine,
    state: &mut State,
    c: SaConfig,
    now: Duration,
    events: &mut Vec<Value>,
    extra: Value,
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
    let mut f = json!({"old_id": old.0});
    if let (Value::Object(m), Value::Object(x)) = (&mut f, extra) {
        m.extend(x);
    }
    events.push(sa_event("sa.replaced", now, &name, new, engine.sad().get(new), f));
    Ok((new, old))
}

/// Handles one request line: parses, validates, applies it to `engine` and `state` at time
/// `now`, and says what to answer and which events it caused. Never panics on any input.
pub fn handle(line: &[u8], engine: &mut Engine, state: &mut State, now: Duration) -> Handled {
    let mut events = Vec::new();
    let mut monitor = false;
    let response = match request(line, engine, state, now, &mut events, &mut monitor) {
        Ok(v) => ok(v),
        Err(e) => error(e),
    };
    Handled {
        response,
        events,
        monitor,
    }
}

fn request(
    line: &[u8],
    engine: &mut Engine,
    state: &mut State,
    now: Duration,
    events: &mut Vec<Value>,
    monitor: &mut bool,
) -> Result<Value, String> {
    let req: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(req) = req else {
        return Err("a request is a JSON object".into());
    };
    match req.get("v") {
        Some(v) if v.as_u64() == Some(VERSION) => {}
        Some(v) => {
            return Err(format!(
                "unsupported protocol version {v}: this tunneld speaks v {VERSION}"
            ))
        }
        None => return Err("missing `v` (the protocol version, 1)".into()),
    }
    let op = str_field(&req, "op")?;
    match op {
        "sa.add" => {
            only(&req, &["name", "spec", "lifetime"])?;
            let c = sa_from_request(&req)?;
            let id = add_sa(engine, state, c, now, events, json!({}), Owner::Socket)?;
            Ok(json!({"id": id.0}))
        }
        "sa.update" => {
            only(&req, &["name", "spec", "lifetime"])?;
            let c = sa_from_request(&req)?;
            let (new, old) = update_sa(engine, state, c, now, events, json!({}), Owner::Socket)?;
            Ok(json!({"id": new.0, "old_id": old.0}))
        }
        "sa.del" => {
            only(&req, &["name"])?;
            let name = str_field(&req, "name")?;
            let id = state.id(name).ok_or_else(|| format!("no SA named `{name}`"))?;
            let ev = sa_event("sa.removed", now, name, id, engine.sad().get(id), json!({}));
            engine.remove_sa(id).map_err(install_error)?;
            state.remove(name);
            state.seq_warned.retain(|&i| i != id);
            events.push(ev);
            Ok(json!({"id": id.0}))
        }
        "sa.list" => {
            only(&req, &["keys"])?;
            let keys = bool_field(&req, "keys")?;
            let sas: Vec<Value> = state
                .names
                .values()
                .filter_map(|&id| engine.sad().get(id).map(|e| sa_json(id, e, keys)))
                .collect();
            Ok(json!({ "sas": sas }))
        }
        "sa.get" => {
            only(&req, &["name", "keys"])?;
            let name = str_field(&req, "name")?;
            let keys = bool_field(&req, "keys")?;
            let id = state.id(name).ok_or_else(|| format!("no SA named `{name}`"))?;
            let e = engine.sad().get(id).ok_or_else(|| format!("no SA named `{name}`"))?;
            Ok(json!({ "sa": sa_json(id, e, keys) }))
        }
        "policy.add" => {
            only(&req, &["policy"])?;
            let p = policy_from_request(&req, state)?;
            engine.add_policy(p.clone()).map_err(install_error)?;
            let index = engine.spd().policies().len();
            let v = policy_json(index, &p, engine);
            events.push(event("policy.added", now, json!({ "policy": v })));
            Ok(json!({ "index": index }))
        }
        "policy.del" => {
            only(&req, &["index"])?;
            let index = req
                .get("index")
                .and_then(Value::as_u64)
                .filter(|&i| i >= 1)
                .ok_or("`index` must be a policy's index (1 = first, as policy.list gives it)")?;
            let i = usize::try_from(index - 1).map_err(|_| "index too large".to_string())?;
            let p = engine.remove_policy(i).map_err(|_| format!("no policy at index {index}"))?;
            let v = policy_json(index as usize, &p, engine);
            events.push(event("policy.removed", now, json!({ "policy": v })));
            Ok(json!({ "policy": v }))
        }
        "policy.list" => {
            only(&req, &[])?;
            let ps: Vec<Value> = engine
                .spd()
                .policies()
                .iter()
                .enumerate()
                .map(|(i, p)| policy_json(i + 1, p, engine))
                .collect();
            Ok(json!({ "policies": ps }))
        }
        "show" => {
            only(&req, &[])?;
            let retiring = state.retiring();
            let mut sas: Vec<Value> = state
                .names
                .values()
                .chain(retiring.iter())
                .filter_map(|&id| engine.sad().get(id).map(|e| show_json(id, e, now, retiring.contains(&id))))
                .collect();
            sas.sort_by_key(|v| v["id"].as_u64());
            let snap = engine.snapshot(now);
            Ok(json!({
                "uptime_seconds": now.as_secs(),
                "sas": sas,
                "inbound_drops": snap.inbound_drops,
                "outbound_drops": snap.outbound_drops,
            }))
        }
        "monitor" => {
            only(&req, &[])?;
            *monitor = true;
            Ok(json!({}))
        }
        other => Err(format!(
            "unknown op `{}`: use sa.add, sa.update, sa.del, sa.list, sa.get, policy.add, policy.del, policy.list, show or monitor",
            other.chars().take(40).collect::<String>()
        )),
    }
}

/// What the ticker adds to the engine's events: names them, retires idle replaced SAs and
/// warns of sequence numbers running out. Returns the event lines.
pub fn after_tick(engine: &mut Engine, state: &mut State, events: &[Event], now: Duration) -> Vec<Value> {
    let mut out = Vec::new();
    for ev in events {
        let (kind, sa, limit) = match *ev {
            Event::SoftExpired { sa, limit } => ("sa.soft_expired", sa, limit),
            Event::HardExpired { sa, limit } => ("sa.hard_expired", sa, limit),
        };
        let e = engine.sad().get(sa);
        let name = e.map_or_else(|| "?".to_string(), |e| e.config.name.clone());
        out.push(sa_event(kind, now, &name, sa, e, json!({ "limit": limit })));
    }
    // Replaced SAs: removed once idle for RETIRE_IDLE, or when expired.
    let mut keep = Vec::new();
    for mut r in std::mem::take(&mut state.retiring) {
        let Some(e) = engine.sad().get(r.id) else { continue };
        let packets = e.inbound().packets;
        let expired = e.state() == SaState::Expired;
        if packets != r.packets {
            r.packets = packets;
            r.since = now;
        }
        if expired || now.saturating_sub(r.since) >= RETIRE_IDLE {
            let why = if expired { "expired" } else { "idle" };
            let ev = sa_event("sa.retired", now, &r.name, r.id, Some(e), json!({ "why": why }));
            if engine.remove_sa(r.id).is_ok() {
                state.seq_warned.retain(|&i| i != r.id);
                out.push(ev);
            }
        } else {
            keep.push(r);
        }
    }
    state.retiring = keep;
    // Sequence numbers of SAs without ESN running out (RFC 4303 3.3.3).
    for (name, &id) in &state.names {
        let Some(e) = engine.sad().get(id) else { continue };
        let Some(c) = core_of(e) else { continue };
        if c.esn() || state.seq_warned.contains(&id) {
            continue;
        }
        if c.seq().peek().map_or(true, |s| s >= SEQ_WARN) {
            state.seq_warned.push(id);
            out.push(sa_event(
                "sa.seq_near_exhaustion",
                now,
                name,
                id,
                Some(e),
                json!({ "limit": Limit::Sequence }),
            ));
        }
    }
    out
}

/// [`Control::ike_retire`]'s work: `name`'s policies go, the SA is un-named and retired.
fn retire_ike_sa(eng: &mut Engine, st: &mut State, name: &str, now: Duration, events: &mut Vec<Value>) {
    let Some(id) = st.id(name) else { return };
    let ps = eng.spd().policies().to_vec();
    let n = ps.len();
    let keep: Vec<Policy> = ps
        .into_iter()
        .filter(|p| !matches!(&p.action, Action::Protect(v) if v.contains(&id)))
        .collect();
    if keep.len() != n {
        if let Err(e) = eng.set_policies(keep) {
            warn!("IKE: removing policies: {}", install_error(e));
        }
    }
    st.remove(name);
    st.retire(eng, id, name, now);
    events.push(sa_event(
        "sa.retiring",
        now,
        name,
        id,
        eng.sad().get(id),
        json!({"ike": true}),
    ));
}

/// The IKE children (by inbound SPI) that the tick's events ask to rekey: a soft
/// lifetime reached, a sequence number near its end.
fn ike_rekeys(state: &State, events: &[Value]) -> Vec<u32> {
    let mut v: Vec<u32> = events
        .iter()
        .filter(|e| e["event"] == "sa.soft_expired" || e["event"] == "sa.seq_near_exhaustion")
        .filter_map(|e| e["id"].as_u64())
        .filter_map(|id| match state.owner(SaId(id as u32)) {
            Some(Owner::Ike { spi_in }) => Some(spi_in),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The control side of a running tunneld: its [`State`], the monitors, the hook.
pub struct Control {
    state: Mutex<State>,
    /// The IKE thread, when tunneld runs IKE (`ike.*` requests, IKE SAs in `show`).
    ike: std::sync::OnceLock<crate::ike::IkeHandle>,
    monitors: Mutex<Vec<UnixStream>>,
    hook: Option<String>,
    hooks_running: Arc<AtomicUsize>,
}

impl Control {
    /// The control side of `engine` (read for the SAs' names); `hook` is `--on-event`'s
    /// command, run by `sh -c` with each event's JSON on its standard input.
    pub fn new(engine: &Engine, hook: Option<String>) -> Self {
        Control {
            state: Mutex::new(State::from_engine(engine)),
            ike: std::sync::OnceLock::new(),
            monitors: Mutex::new(Vec::new()),
            hook,
            hooks_running: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The control state (lock order: this, then the engine).
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `ike.*` requests (and the IKE part of `show`) to the IKE thread.
    pub fn set_ike(&self, h: crate::ike::IkeHandle) {
        let _ = self.ike.set(h);
    }

    /// `ike.initiate`, `ike.terminate` (`{"v":1,"op":"ike.initiate","name":"CONN"}`) and
    /// `ike.list`: answered by the IKE thread; `None` for any other request.
    fn ike_request(&self, line: &[u8]) -> Option<Handled> {
        let req: Value = serde_json::from_slice(line).ok()?;
        let op = req.get("op")?.as_str()?;
        if !op.starts_with("ike.") {
            return None;
        }
        let r = match self.ike.get() {
            None => Err("this tunneld runs no IKE (no [[connection]] in its config)".to_string()),
            Some(_) if req.get("v").and_then(Value::as_u64) != Some(VERSION) => {
                Err(format!("missing or unsupported `v`: this tunneld speaks v {VERSION}"))
            }
            Some(h) => h.request(op, req.get("name").and_then(Value::as_str)),
        };
        Some(Handled {
            response: match r {
                Ok(v) => ok(v),
                Err(e) => error(e),
            },
            events: Vec::new(),
            monitor: false,
        })
    }

    /// Handles one request against the tunnel's engine and publishes its events.
    pub fn request(&self, t: &Tunnel, line: &[u8]) -> Handled {
        if let Some(h) = self.ike_request(line) {
            return h;
        }
        let mut h = {
            let mut st = self.state();
            let mut eng = t.engine();
            handle(line, &mut eng, &mut st, t.now())
        };
        for ev in &h.events {
            info!("control: {ev}");
        }
        self.publish(&h.events);
        // `show` lists the IKE SAs too (asked of the IKE thread with no lock held).
        if let Some(ike) = self.ike.get() {
            let is_show = serde_json::from_slice::<Value>(line).is_ok_and(|r| r["op"] == "show");
            if is_show && h.response["ok"] == true {
                if let Ok(list) = ike.request("ike.list", None) {
                    h.response["ike_sas"] = list["ike_sas"].clone();
                }
            }
        }
        h
    }

    /// After a tick: names the engine's events, retires idle SAs, and publishes; drops
    /// monitors that hung up.
    pub fn tick(&self, t: &Tunnel, events: &[Event]) {
        self.prune_monitors();
        let (out, rekeys) = {
            let mut st = self.state();
            let mut eng = t.engine();
            let out = after_tick(&mut eng, &mut st, events, t.now());
            let rekeys = ike_rekeys(&st, &out);
            (out, rekeys)
        };
        // An IKE child that reached its byte or packet limit, or whose sequence numbers run
        // out, is rekeyed by IKE (RFC 7296 2.8, RFC 4303 3.3.3).
        if let Some(ike) = self.ike.get() {
            for spi_in in rekeys {
                ike.rekey_child(spi_in);
            }
        }
        for ev in &out {
            info!("event: {ev}");
        }
        self.publish(&out);
    }

    /// SIGHUP: reads the config file `path` as at start-up (TOML or setkey, checked for
    /// tunneld with the running `peers`) and applies its difference to the running SAs and
    /// policies ([`reload::apply`]); logs and publishes what changed (the events, then
    /// `config.reloaded`), or why nothing did (`config.reload_failed`). The `[tunnel]` table
    /// is read at start-up only.
    pub fn reload(&self, t: &Tunnel, path: &Path, peers: &[std::net::IpAddr]) -> Result<reload::Changes, String> {
        let file = path.display().to_string();
        let loaded = ipsec_config::load(path, None)
            .and_then(|l| l.config.check_for_tunneld(peers).map(|()| l))
            .map_err(|e| e.in_file(&file));
        let now = t.now();
        let result = loaded.and_then(|l| {
            for w in &l.warnings {
                warn!("reload: {file}:{}: warning: {}", w.line, w.message);
            }
            let mut st = self.state();
            let mut eng = t.engine();
            reload::apply(&mut eng, &mut st, &l.config, now)
        });
        match result {
            Ok(a) => {
                info!("reload of {file}: {}", a.changes.summary());
                for ev in &a.events {
                    info!("control: {ev}");
                }
                self.publish(&a.events);
                Ok(a.changes)
            }
            Err(e) => {
                warn!("reload of {file} failed, nothing changed: {e}");
                self.publish(&[event("config.reload_failed", now, json!({ "error": e }))]);
                Err(e)
            }
        }
    }

    /// IKE: installs a negotiated child SA pair ([`crate::ike::child_sas`]): both SAs under
    /// their `ike:` names, then one protect policy per direction and selector pair, after the
    /// config's policies; events `sa.added` and `policy.added`. All or nothing.
    pub fn ike_install(&self, t: &Tunnel, c: crate::ike::ChildSas) -> Result<(), String> {
        let now = t.now();
        let mut events = Vec::new();
        let r = {
            let mut st = self.state();
            let mut eng = t.engine();
            install_child(&mut eng, &mut st, c, now, &mut events)
        };
        for ev in &events {
            info!("control: {ev}");
        }
        self.publish(&events);
        r
    }

    /// IKE: removes the SAs named `names` and every policy that protects with them; events
    /// `policy.removed` and `sa.removed`. Names not installed are skipped.
    pub fn ike_remove(&self, t: &Tunnel, names: &[String]) {
        let now = t.now();
        let mut events = Vec::new();
        {
            let mut st = self.state();
            let mut eng = t.engine();
            let ids: Vec<(String, SaId)> = names
                .iter()
                .filter_map(|n| st.id(n).map(|id| (n.clone(), id)))
                .collect();
            // Linear in the policies: one look-up per policy in the set of the SAs going.
            let gone: std::collections::HashSet<SaId> = ids.iter().map(|(_, id)| *id).collect();
            let ps = eng.spd().policies().to_vec();
            let uses_gone = |p: &Policy| matches!(&p.action, Action::Protect(v) if v.iter().any(|x| gone.contains(x)));
            let keep: Vec<Policy> = ps.iter().filter(|p| !uses_gone(p)).cloned().collect();
            if keep.len() != ps.len() {
                for (i, p) in ps.iter().enumerate() {
                    if uses_gone(p) {
                        let v = policy_json(i + 1, p, &eng);
                        events.push(event("policy.removed", now, json!({"policy": v, "ike": true})));
                    }
                }
                if let Err(e) = eng.set_policies(keep) {
                    warn!("IKE: removing policies: {}", install_error(e));
                }
            }
            for (name, id) in ids {
                let ev = sa_event("sa.removed", now, &name, id, eng.sad().get(id), json!({"ike": true}));
                if eng.remove_sa(id).is_ok() {
                    st.remove(&name);
                    st.seq_warned.retain(|&i| i != id);
                    events.push(ev);
                }
            }
        }
        for ev in &events {
            info!("control: {ev}");
        }
        self.publish(&events);
    }

    /// IKE: a replaced pair's inbound SA `name` (a rekey, RFC 7296 2.8) loses its name and its
    /// policies but stays for the packets still in flight on it, until it is idle for
    /// [`RETIRE_IDLE`] or expires (as `sa.update`'s old SA): the new pair's inbound policies
    /// accept them (they match SAs by protocol, mode and endpoints). Event `sa.retiring`.
    pub fn ike_retire(&self, t: &Tunnel, name: &str) {
        let now = t.now();
        let mut events = Vec::new();
        {
            let mut st = self.state();
            let mut eng = t.engine();
            retire_ike_sa(&mut eng, &mut st, name, now, &mut events);
        }
        for ev in &events {
            info!("control: {ev}");
        }
        self.publish(&events);
    }

    /// Sends events to every monitor and to the hook. Monitor sockets do not block: one
    /// whose buffer is full (it does not read) or that is gone is dropped, so no monitor
    /// delays the request that raised the events.
    pub fn publish(&self, events: &[Value]) {
        if events.is_empty() {
            return;
        }
        let mut ms = self.monitors();
        for ev in events {
            let mut line = ev.to_string();
            line.push('\n');
            ms.retain_mut(|s| s.write_all(line.as_bytes()).is_ok());
            self.run_hook(ev);
        }
    }

    fn monitors(&self) -> MutexGuard<'_, Vec<UnixStream>> {
        self.monitors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many monitors are connected (those that hung up counted until the next prune).
    pub fn monitor_count(&self) -> usize {
        self.monitors().len()
    }

    /// Drops the monitors whose client hung up: a closed connection reads as end of file
    /// (what a monitor sends is ignored). Run before a monitor is added and every tick, so
    /// clients that come and go with no event between do not use up the slots.
    pub fn prune_monitors(&self) {
        prune(&mut self.monitors());
    }

    /// Makes `s` a monitor if a slot is free (after pruning): the response line `ok` is
    /// written first, under the monitors' lock, so no event comes before it. Otherwise
    /// answers `too many monitors`. Whether it was added.
    fn add_monitor(&self, mut s: UnixStream, ok: &Value, stop: &AtomicBool) -> io::Result<bool> {
        let mut ms = self.monitors();
        prune(&mut ms);
        if ms.len() >= MAX_MONITORS {
            let e = error(format!("too many monitors ({MAX_MONITORS}): try again later"));
            write_line(&mut s, &e, Instant::now() + WRITE_TIMEOUT, stop)?;
            return Ok(false);
        }
        write_line(&mut s, ok, Instant::now() + WRITE_TIMEOUT, stop)?;
        s.set_nonblocking(true)?;
        ms.push(s);
        Ok(true)
    }

    /// Runs the hook on a thread of its own, killed after [`HOOK_TIMEOUT`].
    fn run_hook(&self, ev: &Value) {
        let Some(cmd) = self.hook.clone() else { return };
        let running = Arc::clone(&self.hooks_running);
        if running.fetch_add(1, Ordering::AcqRel) >= MAX_HOOKS {
            running.fetch_sub(1, Ordering::AcqRel);
            warn!("--on-event: {MAX_HOOKS} commands still running; not run for {ev}");
            return;
        }
        let input = ev.to_string();
        let spawned = thread::Builder::new().name("on-event".into()).spawn(move || {
            run_bounded(&cmd, input.as_bytes(), HOOK_TIMEOUT);
            running.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            self.hooks_running.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Drops the monitors (non-blocking sockets) whose client hung up or whose socket failed.
fn prune(ms: &mut Vec<UnixStream>) {
    let mut scratch = [0u8; 256];
    ms.retain_mut(|s| loop {
        match s.read(&mut scratch) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    });
}

/// Runs `sh -c cmd` with `input` on its standard input; kills it after `limit`.
pub fn run_bounded(cmd: &str, input: &[u8], limit: Duration) -> Option<std::process::ExitStatus> {
    let mut child = match Command::new("/bin/sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            warn!("--on-event: starting the command: {e}");
            return None;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                if !st.success() {
                    warn!("--on-event: the command ended with {st}");
                }
                return Some(st);
            }
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                warn!("--on-event: the command ran longer than {limit:?}: killed");
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

mod socket;
use socket::write_line;
pub use socket::{ControlSocket, RequestReader};

pub mod reload;

#[cfg(test)]
mod tests;
