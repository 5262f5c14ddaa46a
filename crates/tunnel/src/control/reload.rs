//! SIGHUP: the config file read again and the difference applied to the running daemon.
//!
//! [`diff`] compares two configs by SA name: an SA only in the new one is *added*, one only
//! in the old one *removed*, one in both whose parameters (keys included), compression or
//! lifetime differ *changed*. Policies are compared as an ordered list of (direction,
//! selector, action with SAs named): added, removed, and whether the ones in both are in a
//! different order.
//!
//! [`apply`] makes the running state (what [`running`] reads back from the engine and the
//! control [`Registry`], so changes made over the control socket count as running) into the
//! file's, through the control socket's own functions and in make-before-break order: new SAs
//! are installed, changed ones replaced as `sa.update` replaces them (the old one kept until
//! idle), then the whole policy list is swapped in one published data plane (only if it
//! differs), and only then are removed SAs retired (kept until idle, like a replaced SA, so a
//! rekey by renaming loses nothing). SAs and policies that did not change are not touched:
//! their flows, counters, sequence numbers and replay windows go on. Everything is checked
//! before anything is changed; a file that cannot be applied changes nothing. A file with
//! no SA and no policy is refused ([`EMPTY_REFUSED`]) unless it says so on purpose
//! ([`Config::empty_on_purpose`]).

use super::*;
use ipsec_config::{ActionConfig, Config, PolicyConfig};
use ipsec_engine::{Direction, Selector};

/// Why a reload to a config with no SA and no policy, not written so on purpose, changes
/// nothing: an empty or cut-short file (an editor's save in progress, a full disk) would
/// otherwise drop every tunnel.
pub const EMPTY_REFUSED: &str = "the file has no SA and no policy (empty, or cut short?): the running SAs and \
policies are kept; to remove them all on purpose write `sa = []` and `policy = []` (setkey: `flush;` and `spdflush;`), \
or delete them over the control socket";

/// What differs between two configs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// SAs only in the new config, in its order.
    pub added: Vec<String>,
    /// SAs in both whose configuration (keys included) differs, in the new config's order.
    pub changed: Vec<String>,
    /// SAs only in the old config, in its order.
    pub removed: Vec<String>,
    /// Positions (1-based) in the new config of policies the old one does not have.
    pub policies_added: Vec<usize>,
    /// Positions (1-based) in the old config of policies the new one does not have.
    pub policies_removed: Vec<usize>,
    /// The policies in both are in a different order.
    pub policies_reordered: bool,
}

impl Changes {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }

    /// The policy list differs.
    pub fn policies_changed(&self) -> bool {
        !self.policies_added.is_empty() || !self.policies_removed.is_empty() || self.policies_reordered
    }

    /// One line for the log: `2 SAs added (x, y), 1 changed (z), ...`.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "nothing changed".into();
        }
        let list = |what: &str, v: &[String]| (!v.is_empty()).then(|| format!("SAs {what}: {}", v.join(", ")));
        let mut parts: Vec<String> = [
            list("added", &self.added),
            list("changed (rekeyed, make before break)", &self.changed),
            list("removed (kept until idle)", &self.removed),
        ]
        .into_iter()
        .flatten()
        .collect();
        if self.policies_changed() {
            parts.push(format!(
                "policies: {} added, {} removed{}",
                self.policies_added.len(),
                self.policies_removed.len(),
                if self.policies_reordered { ", reordered" } else { "" }
            ));
        }
        parts.join("; ")
    }

    fn event(&self, now: Duration) -> Event {
        Event::ConfigReloaded(event::Reloaded {
            time: now.as_secs(),
            sas_added: self.added.clone(),
            sas_changed: self.changed.clone(),
            sas_removed: self.removed.clone(),
            policies_added: self.policies_added.clone(),
            policies_removed: self.policies_removed.clone(),
            policies_reordered: self.policies_reordered,
        })
    }
}

type PolicyKey<'a> = (Direction, &'a Selector, &'a ActionConfig);

fn key(p: &PolicyConfig) -> PolicyKey<'_> {
    (p.dir, &p.selector, &p.action)
}

/// The difference between `old` and `new` (see the module documentation). Policy names do
/// not count (the running state has none); SA names do.
pub fn diff(old: &Config, new: &Config) -> Changes {
    let find = |c: &Config, name: &str| c.sas.iter().position(|s| s.name == name);
    let mut ch = Changes::default();
    for sa in &new.sas {
        match find(old, &sa.name) {
            None => ch.added.push(sa.name.clone()),
            Some(i) if old.sas[i] != *sa => ch.changed.push(sa.name.clone()),
            Some(_) => {}
        }
    }
    ch.removed = old
        .sas
        .iter()
        .filter(|s| find(new, &s.name).is_none())
        .map(|s| s.name.clone())
        .collect();
    // Policies as a multiset matched in order: each new policy takes the first old one equal
    // to it not yet taken.
    let mut taken = vec![false; old.policies.len()];
    let mut matched = Vec::new();
    for (j, p) in new.policies.iter().enumerate() {
        match (0..old.policies.len()).find(|&i| !taken[i] && key(&old.policies[i]) == key(p)) {
            Some(i) => {
                taken[i] = true;
                matched.push(i);
            }
            None => ch.policies_added.push(j + 1),
        }
    }
    ch.policies_removed = (0..old.policies.len()).filter(|&i| !taken[i]).map(|i| i + 1).collect();
    ch.policies_reordered = matched.windows(2).any(|w| w[0] > w[1]);
    ch
}

/// The running SAs (by name, in install order) and policies (their bundles by SA name) as a
/// config. A policy naming an SA that no longer has a name (deleted over the socket) names
/// it `#ID`, which no config file can match.
///
/// The SAs IKE installed ([`Owner::Ike`]) and the policies that protect with them are not
/// the config file's: they are left out here, and a reload keeps them ([`apply`]).
pub fn running(engine: &Engine, state: &Registry) -> Config {
    let mut named: Vec<(SaId, &str)> = state.named().map(|(n, id)| (id, n)).collect();
    named.sort();
    let sas = named
        .iter()
        .filter_map(|&(id, _)| engine.sad().get(id).map(|e| e.config.clone()))
        .collect();
    let name_of = |id: SaId| {
        named
            .iter()
            .find(|(i, _)| *i == id)
            .map_or_else(|| format!("#{}", id.0), |(_, n)| (*n).to_string())
    };
    let policies = engine
        .spd()
        .policies()
        .iter()
        .filter(|p| !ike_policy(p, state))
        .map(|p| PolicyConfig {
            name: None,
            dir: p.dir,
            selector: p.selector,
            action: match &p.action {
                Action::Bypass => ActionConfig::Bypass,
                Action::Discard => ActionConfig::Discard,
                Action::Protect(ids) => ActionConfig::Protect(ids.iter().map(|&id| name_of(id)).collect()),
            },
        })
        .collect();
    Config {
        sas,
        policies,
        ..Config::default()
    }
}

/// Whether `p` protects with an SA IKE installed.
fn ike_policy(p: &ipsec_engine::Policy, state: &Registry) -> bool {
    matches!(&p.action, Action::Protect(ids) if ids.iter().any(|&id| {
        matches!(state.owner(id), Some(Owner::Ike { .. }))
    }))
}

/// What a reload did.
#[derive(Debug)]
pub struct Applied {
    /// The difference applied.
    pub changes: Changes,
    /// The events it raised, in order, ending with `config.reloaded`.
    pub events: Vec<Event>,
}

/// Applies `new` (a whole config, already read and checked as at start-up) to the running
/// `engine` and `state` at time `now`. On error nothing has changed.
pub fn apply(engine: &mut Engine, state: &mut Registry, new: &Config, now: Duration) -> Result<Applied, String> {
    // The file on its own: names, keys, lifetimes, bundles (the start-up checks and messages).
    new.build(now).map_err(|e| e.describe())?;
    let run = running(engine, state);
    if new.sas.is_empty()
        && new.policies.is_empty()
        && !new.empty_on_purpose
        && !(run.sas.is_empty() && run.policies.is_empty())
    {
        return Err(EMPTY_REFUSED.into());
    }
    let changes = diff(&run, new);
    let sa = |name: &str| new.sas.iter().find(|s| s.name == name);
    // What the running engine adds: a new or rekeyed SA must not take the SAD slot
    // (protocol, SPI, destination) of an SA still installed, since the old one stays until
    // idle; and a rekeyed SA keeps its protocol.
    for name in changes.added.iter().chain(&changes.changed) {
        let Some(c) = sa(name) else { continue };
        if let Some((_, e)) = engine
            .sad()
            .iter()
            .find(|(_, e)| e.state() != SaState::Removed && e.config.overlaps(c))
        {
            let how = if changes.changed.contains(name) && e.config.name == *name {
                "a changed SA needs a new SPI: the running one stays until idle (make before break)".to_string()
            } else {
                format!(
                    "the running SA `{}` has the same protocol, SPI and destination",
                    e.config.name
                )
            };
            return Err(format!("SA `{name}`: {how}"));
        }
        if let Some(old) = state.id(name).and_then(|id| engine.sad().get(id)) {
            if old.config.params.proto != c.params.proto {
                return Err(format!(
                    "SA `{name}`: changes protocol from {} to {}: give the new SA another name",
                    old.config.params.proto.name(),
                    c.params.proto.name()
                ));
            }
        }
    }
    let mut events = Vec::new();
    for name in &changes.added {
        let c = sa(name).ok_or("SA vanished")?.clone();
        add_sa(engine, state, c, now, &mut events, Cause::RELOAD, Owner::Config)?;
    }
    for name in &changes.changed {
        let c = sa(name).ok_or("SA vanished")?.clone();
        update_sa(engine, state, c, now, &mut events, Cause::RELOAD, Owner::Config)?;
    }
    if changes.policies_changed() {
        let old = engine.spd().policies().to_vec();
        let ps = new
            .policies
            .iter()
            .map(|p| policy_of(p, state))
            .collect::<Result<Vec<_>, String>>()?;
        for &i in &changes.policies_removed {
            let v = policy_info(i, &old[i - 1], engine);
            events.push(Event::PolicyRemoved(policy_event(now, v, Cause::RELOAD)));
        }
        // IKE's policies stay, after the file's.
        let ike: Vec<_> = old.iter().filter(|p| ike_policy(p, state)).cloned().collect();
        engine
            .set_policies(ps.into_iter().chain(ike).collect())
            .map_err(install_error)?;
        for &i in &changes.policies_added {
            let v = policy_info(i, &engine.spd().policies()[i - 1], engine);
            events.push(Event::PolicyAdded(policy_event(now, v, Cause::RELOAD)));
        }
    }
    for name in &changes.removed {
        if let Some(id) = state.remove(name) {
            state.retire(engine, id, name, now);
            let e = engine.sad().get(id);
            let cause = Cause {
                retiring: true,
                ..Cause::RELOAD
            };
            events.push(Event::SaRemoved(sa_event(now, name, id, e, cause)));
        }
    }
    events.push(changes.event(now));
    Ok(Applied { changes, events })
}

#[cfg(test)]
mod tests;
