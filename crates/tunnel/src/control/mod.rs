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
//! The rooms: [`protocol`] (the typed [`Request`], JSON only on the wire), `registry` (the
//! SAs by name or by IKE's [`ChildSaKey`], their owners, the retiring ones), `requests`
//! ([`apply`]: the whole request logic, a pure function of the request, the engine and the
//! [`Registry`], tested without sockets), `views` (the JSON of SAs and policies), `ike_sas`
//! (IKE's child pairs installed and removed whole), `hooks` (monitors and `--on-event`),
//! `socket` (the listener and its limits), [`reload`] (SIGHUP). [`Control`] ties them to the
//! running tunnel. The packet threads never take the control lock: every change publishes a
//! new data plane they load lock-free.

use crate::dataplane::Tunnel;
use ipsec_engine::{Action, Engine, Limit, SaId, State as SaState};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use zeroize::Zeroizing;

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

/// The result of one request.
#[derive(Debug)]
pub struct Handled {
    /// The response.
    pub response: Response,
    /// Events to send to the monitors (and the hook), in order.
    pub events: Vec<Event>,
    /// The request was `monitor`: the connection now receives events.
    pub monitor: bool,
}

/// What the data plane tells its key manager, in the manner of Linux's `xfrm_mgr`
/// (`notify` of a soft or hard expiry, a sequence number running out): typed, for whoever
/// owns the SA (IKE rekeys its children on [`KeyEvent::Soft`] and
/// [`KeyEvent::SeqRunningOut`], RFC 7296 2.8, RFC 4303 3.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEvent {
    /// A soft limit reached: time to rekey.
    Soft(SaId),
    /// A hard limit reached: the SA no longer carries packets.
    Hard(SaId),
    /// An SA without ESN past [`SEQ_WARN`] sequence numbers.
    SeqRunningOut(SaId),
}

/// What the ticker adds to the engine's events: names them, retires idle replaced SAs and
/// warns of sequence numbers running out. Returns the event lines; the key manager's
/// events are added to `keys`.
pub fn after_tick(
    engine: &mut Engine,
    state: &mut Registry,
    events: &[ipsec_engine::Event],
    now: Duration,
    keys: &mut Vec<KeyEvent>,
) -> Vec<Event> {
    let mut out = Vec::new();
    for ev in events {
        let (sa, limit) = match *ev {
            ipsec_engine::Event::SoftExpired { sa, limit } | ipsec_engine::Event::HardExpired { sa, limit } => {
                (sa, limit)
            }
        };
        let soft = matches!(ev, ipsec_engine::Event::SoftExpired { .. });
        keys.push(if soft { KeyEvent::Soft(sa) } else { KeyEvent::Hard(sa) });
        let e = engine.sad().get(sa);
        let name = e.map_or_else(|| "?".to_string(), |e| e.config.name.clone());
        let mut f = sa_event(now, &name, sa, e, Cause::REQUEST);
        f.limit = Some(limit_word(limit).to_string());
        out.push(if soft {
            Event::SaSoftExpired(f)
        } else {
            Event::SaHardExpired(f)
        });
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
            let mut ev = sa_event(now, &r.name, r.id, Some(e), Cause::REQUEST);
            ev.why = Some(why.to_string());
            if engine.remove_sa(r.id).is_ok() {
                state.seq_warned.retain(|&i| i != r.id);
                out.push(Event::SaRetired(ev));
            }
        } else {
            keep.push(r);
        }
    }
    state.retiring = keep;
    // Sequence numbers of SAs without ESN running out (RFC 4303 3.3.3).
    let running_out: Vec<(String, SaId)> = state
        .live()
        .filter(|&(_, id)| !state.seq_warned.contains(&id))
        .filter(|&(_, id)| {
            engine
                .sad()
                .get(id)
                .and_then(core_of)
                .is_some_and(|c| !c.esn() && c.seq().peek().map_or(true, |s| s >= SEQ_WARN))
        })
        .map(|(n, id)| (n.to_string(), id))
        .collect();
    for (name, id) in running_out {
        state.seq_warned.push(id);
        keys.push(KeyEvent::SeqRunningOut(id));
        let mut ev = sa_event(now, &name, id, engine.sad().get(id), Cause::REQUEST);
        ev.limit = Some(limit_word(Limit::Sequence).to_string());
        out.push(Event::SaSeqNearExhaustion(ev));
    }
    out
}

/// What the control side asks of the IKE thread: the `ipsec ike ...` requests, and the
/// rekeys the key manager's events call for ([`KeyEvent`]). The IKE thread's handle
/// (`crate::ike::IkeHandle`) implements it; the control side knows only this.
pub trait IkeService: Send + Sync {
    /// Answers an `ike.*` request (waiting a bounded time for the IKE thread).
    fn request(&self, req: IkeRequest) -> Result<Answer, String>;
    /// Asks for the rekey of the child pair received on `spi_in`; never blocks.
    fn rekey_child(&self, spi_in: u32);
}

/// The control side of a running tunneld: its [`Registry`], the monitors, the hook.
pub struct Control {
    state: Mutex<Registry>,
    /// The IKE thread, when tunneld runs IKE (`ike.*` requests, IKE SAs in `show`).
    ike: std::sync::OnceLock<Box<dyn IkeService>>,
    monitors: Mutex<Vec<UnixStream>>,
    hook: Option<String>,
    hooks_running: Arc<AtomicUsize>,
}

/// A child SA's counts as [`Control::ike_child_usage`] reads them: the inbound SA's (from the
/// peer) and the outbound SA's, each (bytes, packets); `None` for an SA the engine has not got.
pub type ChildUsage = (Option<(u64, u64)>, Option<(u64, u64)>);

impl Control {
    /// The control side of `engine` (read for the SAs' names); `hook` is `--on-event`'s
    /// command, run by `sh -c` with each event's JSON on its standard input.
    pub fn new(engine: &Engine, hook: Option<String>) -> Self {
        Control {
            state: Mutex::new(Registry::from_engine(engine)),
            ike: std::sync::OnceLock::new(),
            monitors: Mutex::new(Vec::new()),
            hook,
            hooks_running: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The control state (lock order: this, then the engine).
    pub fn state(&self) -> MutexGuard<'_, Registry> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The data plane's counts of the child SA pair with inbound SPI `spi_in`: its inbound
    /// SA's and its outbound SA's (bytes, packets); None for one the engine has not got
    /// (RADIUS accounting reads them before the pair is removed).
    pub fn ike_child_usage(&self, t: &Tunnel, spi_in: u32) -> ChildUsage {
        let st = self.state();
        let eng = t.engine();
        let usage = |key| {
            st.child(key)
                .and_then(|id| eng.sad().get(id))
                .map(|e| (e.usage().bytes, e.usage().packets))
        };
        (usage(ChildSaKey::inb(spi_in)), usage(ChildSaKey::out(spi_in)))
    }

    /// Hands `ike.*` requests (and the IKE part of `show`) to the IKE thread.
    pub fn set_ike(&self, h: impl IkeService + 'static) {
        let _ = self.ike.set(Box::new(h));
    }

    /// Handles one request line: IKE's go to the IKE thread, the others to the engine;
    /// publishes their events.
    pub fn request(&self, t: &Tunnel, line: &[u8]) -> Handled {
        let req = match Request::parse(line) {
            Ok(r) => r,
            Err(e) => {
                return Handled {
                    response: Response::Error(e),
                    events: Vec::new(),
                    monitor: false,
                }
            }
        };
        if let Request::Ike(r) = req {
            let mut response = match self.ike.get() {
                None => Response::error("this tunneld runs no IKE (no [[connection]] in its config)"),
                Some(h) => h.request(r).map_or_else(Response::Error, Response::Ok),
            };
            // The children's byte counts are the data plane's (asked with no IKE wait).
            if let Response::Ok(Answer::IkeList(list)) = &mut response {
                let st = self.state();
                views::ike_child_bytes(&mut list.ike_sas, &t.engine(), &st);
            }
            return Handled {
                response,
                events: Vec::new(),
                monitor: false,
            };
        }
        let mut h = {
            let mut st = self.state();
            let mut eng = t.engine();
            apply(&req, &mut eng, &mut st, t.now())
        };
        for ev in &h.events {
            info!("control: {ev}");
        }
        self.publish(&h.events);
        // `show` lists the IKE SAs too (asked of the IKE thread with no lock held).
        if let (Response::Ok(Answer::Show(show)), Some(ike)) = (&mut h.response, self.ike.get()) {
            if let Ok(Answer::IkeList(mut list)) = ike.request(IkeRequest::List) {
                let st = self.state();
                views::ike_child_bytes(&mut list.ike_sas, &t.engine(), &st);
                show.ike_sas = Some(list.ike_sas);
            }
        }
        h
    }

    /// After a tick: names the engine's events, retires idle SAs, and publishes; drops
    /// monitors that hung up.
    pub fn tick(&self, t: &Tunnel, events: &[ipsec_engine::Event]) {
        self.prune_monitors();
        let (out, rekeys) = {
            let mut st = self.state();
            let mut eng = t.engine();
            let mut keys = Vec::new();
            let out = after_tick(&mut eng, &mut st, events, t.now(), &mut keys);
            let rekeys = ike_rekeys(&st, &keys);
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
                self.publish(&[Event::ConfigReloadFailed(event::ReloadFailed {
                    time: now.as_secs(),
                    error: e.clone(),
                })]);
                Err(e)
            }
        }
    }
}

pub mod event;
mod hooks;
mod ike_sas;
pub mod protocol;
mod registry;
mod requests;
pub mod response;
mod socket;
mod views;
use event::{Cause, Event};
pub use hooks::run_bounded;
use ike_sas::ike_rekeys;
pub use ike_sas::ChildSas;
#[cfg(test)]
use ike_sas::{install_child, retire_ike_sa};
pub use protocol::{IkeRequest, Request, SaRequest, VERSION};
pub use registry::{ChildSaKey, Dir, Owner, Registry};
use requests::{add_sa, install_error, policy_of, update_sa};
pub use requests::{apply, handle};
use response::{Answer, Response};
pub use socket::{ControlSocket, RequestReader};
pub use views::spec_words;
use views::{core_of, limit_word, policy_event, policy_info, sa_event};

pub mod reload;

#[cfg(test)]
pub(crate) mod golden;
#[cfg(test)]
mod tests;
