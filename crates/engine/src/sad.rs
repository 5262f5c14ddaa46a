//! Security Association Database (RFC 4301 section 4.4.2): keyed SAs with their lifetimes
//! and counters. Inbound lookup is by (protocol, SPI[, destination]) in a hash map (RFC 4301
//! 4.1: the SPI, plus the destination where SAs share an SPI); outbound SAs are reached
//! through the SPD's policies by [`SaId`].

use crate::bundle::{AnySa, PacketError};
use crate::counters::Counters;
use crate::lifetime::{Lifetime, Limit, State, Usage};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::time::Duration;
use hashbrown::HashMap;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Mode, Proto, SaParams, Tunnel};
use ipsec_ipcomp::Algorithm;

/// The handle of an SA in the [`Sad`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SaId(pub u32);

/// Everything needed to install an SA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaConfig {
    /// A name for configs, logs and snapshots.
    pub name: String,
    /// Protocol, SPI, mode, algorithms and keys, replay window, ESN.
    pub params: SaParams,
    /// The compression algorithm of an IPComp SA.
    pub comp: Option<Algorithm>,
    /// Soft and hard limits.
    pub lifetime: Lifetime,
}

impl SaConfig {
    /// An SA without lifetime limits.
    pub fn new(name: impl Into<String>, params: SaParams, comp: Option<Algorithm>) -> Self {
        SaConfig {
            name: name.into(),
            params,
            comp,
            lifetime: Lifetime::default(),
        }
    }

    /// The SAD key: (IP protocol, SPI or CPI, destination if the SA names one).
    pub fn key(&self) -> (u8, u32, Option<IpAddr>) {
        (
            self.params.proto.number(),
            self.params.spi,
            self.params.tunnel.map(|t| t.dst),
        )
    }
}

/// Why an SA or policy could not be installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallError {
    /// The SA's parameters or keys are invalid.
    Sa(PacketError),
    /// The lifetime is inconsistent.
    Lifetime(&'static str),
    /// Another SA has the same protocol, SPI and destination.
    Duplicate {
        /// The SA already installed.
        existing: String,
    },
    /// A policy names an SA id that is not installed.
    UnknownSa(SaId),
    /// A policy's bundle is not IPComp → ESP → AH (a subset, each at most once).
    BundleOrder,
    /// A replacement SA must be of the same protocol as the SA it replaces.
    ReplaceProtocol,
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::Sa(e) => write!(f, "{e}"),
            InstallError::Lifetime(why) => write!(f, "lifetime: {why}"),
            InstallError::Duplicate { existing } => {
                write!(f, "same protocol, SPI and destination as SA `{existing}`")
            }
            InstallError::UnknownSa(id) => write!(f, "no SA with id {}", id.0),
            InstallError::ReplaceProtocol => {
                f.write_str("a replacement SA must have the protocol of the SA it replaces")
            }
            InstallError::BundleOrder => {
                f.write_str("a bundle applies IPComp, then ESP, then AH (any subset, each at most once) on output")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InstallError {}

/// An installed SA.
#[derive(Debug)]
pub struct SaEntry {
    /// How it was configured.
    pub config: SaConfig,
    pub(crate) sa: AnySa,
    pub(crate) state: State,
    pub(crate) usage: Usage,
    pub(crate) expired_by: Option<Limit>,
    pub(crate) inbound: Counters,
    pub(crate) outbound: Counters,
}

impl SaEntry {
    /// Whether `other` can stand in for this SA in a policy: the same protocol, mode and
    /// endpoints (a rekeyed SA; RFC 4301 4.4.1.2 matches SAs to a policy by template).
    pub fn same_template(&self, other: &SaEntry) -> bool {
        let (a, b) = (&self.config.params, &other.config.params);
        a.proto == b.proto && a.mode == b.mode && a.tunnel == b.tunnel
    }

    /// The keyed transform.
    pub fn sa(&self) -> &AnySa {
        &self.sa
    }

    /// Mature, dying (soft limit reached) or expired.
    pub fn state(&self) -> State {
        self.state
    }

    /// Bytes and packets so far.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// The hard limit that stopped the SA, if one did.
    pub fn expired_by(&self) -> Option<Limit> {
        self.expired_by
    }

    /// Inbound counters.
    pub fn inbound(&self) -> &Counters {
        &self.inbound
    }

    /// Outbound counters.
    pub fn outbound(&self) -> &Counters {
        &self.outbound
    }
}

/// One SA of a (protocol, SPI) pair: its destination (if it names one) and id.
type DstEntry = (Option<IpAddr>, SaId);

/// The installed SAs.
#[derive(Debug, Default)]
pub struct Sad {
    entries: Vec<SaEntry>,
    /// (protocol, SPI) → the SAs with that pair, each with its destination (if any).
    by_spi: HashMap<(u8, u32), Vec<DstEntry>>,
    /// The tunnel-mode IPComp SAs (few; searched by endpoints).
    ipcomp_tunnels: Vec<SaId>,
}

impl Sad {
    /// An empty SAD.
    pub fn new() -> Self {
        Sad::default()
    }

    /// Keys and installs an SA at time `now`, with ESP IVs from the operating system's CSPRNG.
    #[cfg(feature = "std")]
    pub fn install(&mut self, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        let rng = IvRng::from_os().map_err(|e| InstallError::Sa(e.into()))?;
        self.install_with_rng(config, rng, now)
    }

    /// Keys and installs an SA at time `now` with a caller-seeded IV generator.
    pub fn install_with_rng(&mut self, config: SaConfig, rng: IvRng, now: Duration) -> Result<SaId, InstallError> {
        config.lifetime.validate().map_err(InstallError::Lifetime)?;
        let (p, spi, dst) = config.key();
        if let Some(list) = self.by_spi.get(&(p, spi)) {
            if let Some((_, id)) = list.iter().find(|(d, _)| *d == dst) {
                let existing = self.entries[id.0 as usize].config.name.clone();
                return Err(InstallError::Duplicate { existing });
            }
        }
        let sa = AnySa::with_rng(&config.params, config.comp, rng).map_err(InstallError::Sa)?;
        let id = SaId(self.entries.len() as u32);
        self.entries.push(SaEntry {
            config,
            sa,
            state: State::Mature,
            usage: Usage::new(now),
            expired_by: None,
            inbound: Counters::default(),
            outbound: Counters::default(),
        });
        self.by_spi.entry((p, spi)).or_default().push((dst, id));
        let e = &self.entries[id.0 as usize].config.params;
        if e.proto == Proto::Comp && e.mode == Mode::Tunnel {
            self.ipcomp_tunnels.push(id);
        }
        Ok(id)
    }

    /// The SA for an inbound header: the one whose destination is `dst`, else one installed
    /// without a destination.
    pub fn lookup(&self, proto: u8, spi: u32, dst: IpAddr) -> Option<SaId> {
        let list = self.by_spi.get(&(proto, spi))?;
        list.iter()
            .find(|(d, _)| *d == Some(dst))
            .or_else(|| list.iter().find(|(d, _)| d.is_none()))
            .map(|&(_, id)| id)
    }

    /// Takes an SA out of the inbound index; its entry (and counters) stay, marked removed.
    pub(crate) fn unindex(&mut self, id: SaId) {
        let Some(e) = self.entries.get_mut(id.0 as usize) else {
            return;
        };
        e.state = State::Removed;
        let (p, spi, _) = e.config.key();
        if let Some(list) = self.by_spi.get_mut(&(p, spi)) {
            list.retain(|&(_, i)| i != id);
            if list.is_empty() {
                self.by_spi.remove(&(p, spi));
            }
        }
    }

    /// The tunnel-mode IPComp SA between `src` and `dst` (which receives IP-in-IP packets its
    /// peer did not compress), if one is installed.
    pub fn lookup_ipcomp_tunnel(&self, src: IpAddr, dst: IpAddr) -> Option<SaId> {
        let want = Some(Tunnel { src, dst });
        self.ipcomp_tunnels.iter().copied().find(|&id| {
            self.get(id)
                .is_some_and(|e| e.state != State::Removed && e.config.params.tunnel == want)
        })
    }

    /// An SA by id.
    pub fn get(&self, id: SaId) -> Option<&SaEntry> {
        self.entries.get(id.0 as usize)
    }

    pub(crate) fn get_mut(&mut self, id: SaId) -> Option<&mut SaEntry> {
        self.entries.get_mut(id.0 as usize)
    }

    /// Every SA with its id, in install order.
    pub fn iter(&self) -> impl Iterator<Item = (SaId, &SaEntry)> {
        self.entries.iter().enumerate().map(|(i, e)| (SaId(i as u32), e))
    }

    /// Number of SAs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
