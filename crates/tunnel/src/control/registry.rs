//! The SA registry: which SAs the control side knows, by what key, and who installed them.
//!
//! The engine names every SA by its [`SaId`]; the registry says how the rest of tunneld
//! finds one:
//! - the config file's and the control socket's SAs by their **name** (unique: it is what
//!   `ipsec sa del NAME` and a policy's bundle say);
//! - IKE's by a typed [`ChildSaKey`]: the pair's inbound SPI, which this host chose and
//!   which no two of its children share, and the direction. An IKE SA's name
//!   (`ike:CONN/CHILD/out-SPI`) is a label for people: two road warriors may pick the same
//!   outbound SPI (each receiver picks its own, RFC 4301 4.1), so two IKE SAs may carry the
//!   same label, and nothing joins on it.
//!
//! It also keeps the SAs that an update or a rekey replaced until they are idle
//! ([`Registry::retiring`]) and the SAs already warned of running out of sequence numbers.

use ipsec_engine::{Engine, SaId, State as SaState};
use std::collections::BTreeMap;
use std::time::Duration;

/// The direction of one SA of an IKE child pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// Sealed toward the peer (the peer chose its SPI).
    Out,
    /// Opened from the peer (we chose its SPI).
    In,
}

impl Dir {
    /// `out` or `in`, as SA labels and events say.
    pub fn word(self) -> &'static str {
        match self {
            Dir::Out => "out",
            Dir::In => "in",
        }
    }
}

/// One SA of an IKE child pair: the pair's inbound SPI (ours, unique among our children)
/// and the direction. The registry's key for IKE's SAs, never a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChildSaKey {
    /// The inbound SPI of the pair (the SPI this host chose, RFC 4301 4.1).
    pub spi_in: u32,
    /// Which SA of the pair.
    pub dir: Dir,
}

impl ChildSaKey {
    /// The outbound SA of the pair received on `spi_in`.
    pub fn out(spi_in: u32) -> Self {
        ChildSaKey { spi_in, dir: Dir::Out }
    }

    /// The inbound SA of the pair received on `spi_in`.
    pub fn inb(spi_in: u32) -> Self {
        ChildSaKey { spi_in, dir: Dir::In }
    }
}

/// Who installed an SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The config file (at start-up or a reload).
    Config,
    /// `sa.add` / `sa.update` over the control socket.
    Socket,
    /// IKE, as one SA of a child pair.
    Ike(ChildSaKey),
}

#[derive(Debug, Clone)]
pub(super) struct Retiring {
    pub(super) id: SaId,
    pub(super) name: String,
    pub(super) packets: u64,
    pub(super) since: Duration,
}

/// What the control side knows beside the engine: the live SAs by name (config, socket) or
/// by [`ChildSaKey`] (IKE), who installed each, and the SAs replaced and kept until idle.
#[derive(Debug, Default)]
pub struct Registry {
    names: BTreeMap<String, SaId>,
    ike: BTreeMap<ChildSaKey, (SaId, String)>,
    owners: BTreeMap<SaId, Owner>,
    pub(super) retiring: Vec<Retiring>,
    pub(super) seq_warned: Vec<SaId>,
}

impl Registry {
    /// The registry of an engine built from a config: every installed, not removed SA by
    /// name, owned by the config.
    pub fn from_engine(engine: &Engine) -> Self {
        let names: BTreeMap<String, SaId> = engine
            .sad()
            .iter()
            .filter(|(_, e)| e.state() != SaState::Removed)
            .map(|(id, e)| (e.config.name.clone(), id))
            .collect();
        Registry {
            owners: names.values().map(|&id| (id, Owner::Config)).collect(),
            names,
            ..Registry::default()
        }
    }

    /// The id of the live SA `name`: a config or socket SA of that name, else the one IKE SA
    /// labelled so (None when no SA or several IKE SAs carry the label).
    pub fn id(&self, name: &str) -> Option<SaId> {
        if let Some(&id) = self.names.get(name) {
            return Some(id);
        }
        let mut it = self.ike.values().filter(|(_, l)| l == name);
        match (it.next(), it.next()) {
            (Some(&(id, _)), None) => Some(id),
            _ => None,
        }
    }

    /// The id of IKE's SA `key`.
    pub fn child(&self, key: ChildSaKey) -> Option<SaId> {
        self.ike.get(&key).map(|&(id, _)| id)
    }

    /// Who installed SA `id` (None: not a live SA the registry knows).
    pub fn owner(&self, id: SaId) -> Option<Owner> {
        self.owners.get(&id).copied()
    }

    /// Whether a config or socket SA is named `name`.
    pub fn has_name(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// The config and socket SAs' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    /// The config and socket SAs (name, id), in name order (what a reload compares).
    pub fn named(&self) -> impl Iterator<Item = (&str, SaId)> {
        self.names.iter().map(|(n, &id)| (n.as_str(), id))
    }

    /// Every live SA (its name or label, its id): the named ones in name order, then IKE's
    /// by key.
    pub fn live(&self) -> impl Iterator<Item = (&str, SaId)> {
        self.named().chain(self.ike.values().map(|(id, l)| (l.as_str(), *id)))
    }

    /// Registers `id` under `name` (config or socket SAs) or under its IKE key, with the
    /// label `name`.
    pub(super) fn insert(&mut self, name: String, id: SaId, owner: Owner) {
        match owner {
            Owner::Ike(key) => {
                self.ike.insert(key, (id, name));
            }
            Owner::Config | Owner::Socket => {
                self.names.insert(name, id);
            }
        }
        self.owners.insert(id, owner);
    }

    /// Whether `owner`'s key for an SA called `name` is taken.
    pub(super) fn taken(&self, name: &str, owner: Owner) -> bool {
        match owner {
            Owner::Ike(key) => self.ike.contains_key(&key),
            Owner::Config | Owner::Socket => self.names.contains_key(name),
        }
    }

    /// Forgets the SA `name` (config or socket, or the one IKE SA so labelled); its id.
    pub(super) fn remove(&mut self, name: &str) -> Option<SaId> {
        let id = self.id(name)?;
        self.forget(id);
        Some(id)
    }

    /// Forgets SA `id` whatever its key; whether it was known.
    pub(super) fn forget(&mut self, id: SaId) -> bool {
        match self.owners.remove(&id) {
            Some(Owner::Ike(key)) => {
                self.ike.remove(&key);
            }
            Some(Owner::Config | Owner::Socket) => self.names.retain(|_, x| *x != id),
            None => return false,
        }
        self.seq_warned.retain(|&i| i != id);
        true
    }

    /// The label of SA `id`, if live.
    pub fn label(&self, id: SaId) -> Option<&str> {
        match self.owners.get(&id)? {
            Owner::Ike(key) => self.ike.get(key).map(|(_, l)| l.as_str()),
            Owner::Config | Owner::Socket => self.names.iter().find(|(_, &x)| x == id).map(|(n, _)| n.as_str()),
        }
    }

    /// Keeps SA `id` (no longer registered) until it is idle for
    /// [`RETIRE_IDLE`](super::RETIRE_IDLE) or expires.
    pub(super) fn retire(&mut self, engine: &Engine, id: SaId, name: &str, now: Duration) {
        let packets = engine.sad().get(id).map_or(0, |e| e.inbound().packets);
        self.retiring.push(Retiring {
            id,
            name: name.to_string(),
            packets,
            since: now,
        });
    }

    /// The SAs replaced (by `sa.update`, a reload or a rekey) and not yet removed.
    pub fn retiring(&self) -> Vec<SaId> {
        self.retiring.iter().map(|r| r.id).collect()
    }
}
