//! The control protocol's events as types: what the monitors (`ipsec monitor`), the
//! `--on-event` hook and the log get, one [`Event`] from where it is raised to the edge that
//! writes it ([`Event::to_line`]) and the client that reads it back ([`Event::parse`]). The
//! wire form is docs/control.md's, unchanged: `{"v":1,"event":KIND,"time":SECONDS,...}`, the
//! fields in the order given here (`control/golden.txt` holds every shape).

use super::VERSION;
use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// What else raised an event: a SIGHUP reload, IKE (the SAs it installs), and for a removal by
/// reload whether the SA is kept until idle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// Raised by a reload.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reload: bool,
    /// The reload's removal keeps the SA until idle.
    #[serde(default, skip_serializing_if = "is_false")]
    pub retiring: bool,
    /// Raised for an SA (or policy) IKE installed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ike: bool,
}

impl Cause {
    /// A control socket request's.
    pub const REQUEST: Cause = Cause {
        reload: false,
        retiring: false,
        ike: false,
    };
    /// A reload's.
    pub const RELOAD: Cause = Cause {
        reload: true,
        retiring: false,
        ike: false,
    };
    /// IKE's.
    pub const IKE: Cause = Cause {
        reload: false,
        retiring: false,
        ike: true,
    };
}

/// An SA event's fields: the SA (name, id, and protocol and SPI while the engine has it) and
/// what the kind adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaEvent {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The SA's name.
    pub sa: String,
    /// Its engine id.
    pub id: u32,
    /// `esp`, `ah` or `comp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    /// Its SPI, `0x...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spi: Option<String>,
    /// `sa.replaced`: the id of the SA it replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_id: Option<u32>,
    /// Expiry and sequence-number events: the limit (`bytes`, `packets`, `seconds`,
    /// `sequence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// `sa.retired`: `idle` or `expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Who raised it.
    #[serde(flatten)]
    pub cause: Cause,
}

/// A policy as the control protocol shows it (`policy.list`, `policy.del`, policy events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// 1 = matched first.
    pub index: usize,
    /// `in` or `out`.
    pub dir: String,
    /// Source prefix or `any`.
    pub src: String,
    /// Destination prefix or `any`.
    pub dst: String,
    /// Protocol name or number, or `any`.
    pub proto: String,
    /// Source ports.
    pub src_port: String,
    /// Destination ports.
    pub dst_port: String,
    /// `protect`, `bypass` or `discard`.
    pub action: String,
    /// The SAs a protect policy names, in seal order.
    pub bundle: Vec<String>,
}

/// `policy.added` / `policy.removed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyEvent {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The policy.
    pub policy: PolicyInfo,
    /// Who raised it.
    #[serde(flatten)]
    pub cause: Cause,
}

/// `config.reloaded`: what a SIGHUP reload changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// Seconds since tunneld started.
    pub time: u64,
    /// SAs added, by name.
    pub sas_added: Vec<String>,
    /// SAs changed (replaced make before break).
    pub sas_changed: Vec<String>,
    /// SAs removed (kept until idle).
    pub sas_removed: Vec<String>,
    /// Positions in the new file of the policies added.
    pub policies_added: Vec<usize>,
    /// Positions in the old file of the policies removed.
    pub policies_removed: Vec<usize>,
    /// The policies in both are in another order.
    pub policies_reordered: bool,
}

/// `config.reload_failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadFailed {
    /// Seconds since tunneld started.
    pub time: u64,
    /// Why nothing changed.
    pub error: String,
}

/// `ike.up`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IkeUp {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// Initiator's SPI, 16 hex digits.
    pub spi_i: String,
    /// Responder's SPI.
    pub spi_r: String,
    /// Our address and port.
    pub local: String,
    /// The peer's.
    pub remote: String,
    /// A NAT was found.
    pub nat: bool,
}

/// `ike.rekeyed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IkeRekeyed {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// The old SA's initiator SPI.
    pub old_spi_i: String,
    /// The old SA's responder SPI.
    pub old_spi_r: String,
    /// The new SA's initiator SPI.
    pub spi_i: String,
    /// The new SA's responder SPI.
    pub spi_r: String,
}

/// `ike.down`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IkeDown {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// Initiator's SPI.
    pub spi_i: String,
    /// Responder's SPI.
    pub spi_r: String,
    /// Why (`Local`, `Peer`, `Rekeyed`, ...).
    pub why: String,
}

/// ESP in UDP's ports of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildEncap {
    /// Our port.
    pub sport: u16,
    /// The peer's.
    pub dport: u16,
}

/// `child.up` and `child.failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildUp {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// The child.
    pub child: String,
    /// Inbound SPI, 8 hex digits.
    pub spi_in: String,
    /// Outbound SPI.
    pub spi_out: String,
    /// Our traffic selectors.
    pub local_ts: Vec<String>,
    /// The peer's.
    pub remote_ts: Vec<String>,
    /// ESP in UDP's ports, if.
    pub encap: Option<ChildEncap>,
    /// The inbound SPI of the pair it replaces (a rekey).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rekeys: Option<String>,
    /// `child.failed`: why it could not be installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `child.down`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildDown {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// The child.
    pub child: String,
    /// Inbound SPI.
    pub spi_in: String,
    /// Outbound SPI.
    pub spi_out: String,
    /// Why.
    pub why: String,
}

/// `ike.auth_failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthFailed {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// `us` (we refused the peer) or `peer`.
    pub by: String,
    /// Why we refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `ike.no_proposal` (the child null for the IKE SA's) and `ike.ts_unacceptable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnChild {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection (empty when none matched).
    pub conn: String,
    /// The child.
    pub child: Option<String>,
}

/// `ike.peer_moved`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerMoved {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// Where the peer was.
    pub old: String,
    /// Where it is.
    pub new: String,
    /// Moved by the peer's UPDATE_SA_ADDRESSES (MOBIKE, RFC 4555 3.5); absent: implicitly,
    /// a NAT's new mapping (RFC 7296 2.23).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mobike: bool,
}

/// `ike.mobike_refused`: a MOBIKE request not acted on (RFC 4555 3.5, 3.7, 3.9); nothing
/// moved (docs/ike-mobike.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MobikeRefused {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// Initiator's SPI of the IKE SA.
    pub spi_i: String,
    /// Where the request came from.
    pub from: String,
    /// Why.
    pub why: String,
}

/// `ike.lease_assigned`: a pool address leased to a peer's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAssigned {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// The pool.
    pub pool: String,
    /// The peer's identity.
    pub id: String,
    /// The address.
    pub address: String,
    /// The IKE SA's initiator SPI.
    pub spi_i: String,
}

/// `ike.lease_released`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseReleased {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The pool.
    pub pool: String,
    /// The identity that held it.
    pub id: String,
    /// The address.
    pub address: String,
}

/// `ike.pool_exhausted`: no address for a peer (INTERNAL_ADDRESS_FAILURE).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolExhausted {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// The peer's identity.
    pub id: String,
    /// The connection's pools, all full.
    pub pools: Vec<String>,
}

/// `ike.virtual_ip`: the addresses (and DNS servers) the gateway assigned us.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualIp {
    /// Seconds since tunneld started.
    pub time: u64,
    /// The connection.
    pub conn: String,
    /// The IKE SA's initiator SPI.
    pub spi_i: String,
    /// Our virtual addresses.
    pub addresses: Vec<String>,
    /// DNS servers.
    pub dns: Vec<String>,
}

/// One event. Its kind is the wire's `event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum Event {
    /// An SA installed.
    #[serde(rename = "sa.added")]
    SaAdded(SaEvent),
    /// An SA replaced (`sa.update`, a reload's change), `old_id` kept until idle.
    #[serde(rename = "sa.replaced")]
    SaReplaced(SaEvent),
    /// An SA removed.
    #[serde(rename = "sa.removed")]
    SaRemoved(SaEvent),
    /// A replaced IKE pair's inbound SA, kept until idle.
    #[serde(rename = "sa.retiring")]
    SaRetiring(SaEvent),
    /// A replaced SA gone (`why`: idle or expired).
    #[serde(rename = "sa.retired")]
    SaRetired(SaEvent),
    /// A soft limit reached.
    #[serde(rename = "sa.soft_expired")]
    SaSoftExpired(SaEvent),
    /// A hard limit reached.
    #[serde(rename = "sa.hard_expired")]
    SaHardExpired(SaEvent),
    /// An SA without ESN near the end of its sequence numbers.
    #[serde(rename = "sa.seq_near_exhaustion")]
    SaSeqNearExhaustion(SaEvent),
    /// A policy added.
    #[serde(rename = "policy.added")]
    PolicyAdded(PolicyEvent),
    /// A policy removed.
    #[serde(rename = "policy.removed")]
    PolicyRemoved(PolicyEvent),
    /// A SIGHUP reload applied.
    #[serde(rename = "config.reloaded")]
    ConfigReloaded(Reloaded),
    /// A SIGHUP reload refused.
    #[serde(rename = "config.reload_failed")]
    ConfigReloadFailed(ReloadFailed),
    /// An IKE SA up.
    #[serde(rename = "ike.up")]
    IkeUp(IkeUp),
    /// An IKE SA rekeyed.
    #[serde(rename = "ike.rekeyed")]
    IkeRekeyed(IkeRekeyed),
    /// An IKE SA gone.
    #[serde(rename = "ike.down")]
    IkeDown(IkeDown),
    /// A child pair up.
    #[serde(rename = "child.up")]
    ChildUp(ChildUp),
    /// A child pair agreed but not installed (deleted again).
    #[serde(rename = "child.failed")]
    ChildFailed(ChildUp),
    /// A child pair gone.
    #[serde(rename = "child.down")]
    ChildDown(ChildDown),
    /// Authentication failed.
    #[serde(rename = "ike.auth_failed")]
    IkeAuthFailed(AuthFailed),
    /// No proposal in common.
    #[serde(rename = "ike.no_proposal")]
    IkeNoProposal(ConnChild),
    /// Traffic selectors unacceptable.
    #[serde(rename = "ike.ts_unacceptable")]
    IkeTsUnacceptable(ConnChild),
    /// The peer's endpoint moved.
    #[serde(rename = "ike.peer_moved")]
    IkePeerMoved(PeerMoved),
    /// A MOBIKE request not acted on.
    #[serde(rename = "ike.mobike_refused")]
    IkeMobikeRefused(MobikeRefused),
    /// A pool address leased.
    #[serde(rename = "ike.lease_assigned")]
    IkeLeaseAssigned(LeaseAssigned),
    /// A lease released.
    #[serde(rename = "ike.lease_released")]
    IkeLeaseReleased(LeaseReleased),
    /// No pool address left for a peer.
    #[serde(rename = "ike.pool_exhausted")]
    IkePoolExhausted(PoolExhausted),
    /// Our virtual addresses.
    #[serde(rename = "ike.virtual_ip")]
    IkeVirtualIp(VirtualIp),
}

/// The wire's envelope: the version first.
#[derive(Serialize, Deserialize)]
struct Line<E> {
    v: u64,
    #[serde(flatten)]
    event: E,
}

impl Event {
    /// The event's line (without its newline), as monitors and the hook get it.
    pub fn to_line(&self) -> String {
        serde_json::to_string(&Line {
            v: VERSION,
            event: self,
        })
        .unwrap_or_default()
    }

    /// Reads an event line back (the client's side).
    pub fn parse(line: &str) -> Result<Event, String> {
        let l: Line<Event> = serde_json::from_str(line).map_err(|e| e.to_string())?;
        Ok(l.event)
    }

    /// The line as JSON (tests).
    #[cfg(test)]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.to_line()).unwrap_or_default()
    }

    /// The SA an SA event names.
    pub fn sa(&self) -> Option<&SaEvent> {
        match self {
            Event::SaAdded(e)
            | Event::SaReplaced(e)
            | Event::SaRemoved(e)
            | Event::SaRetiring(e)
            | Event::SaRetired(e)
            | Event::SaSoftExpired(e)
            | Event::SaHardExpired(e)
            | Event::SaSeqNearExhaustion(e) => Some(e),
            _ => None,
        }
    }

    /// The policy a policy event names.
    pub fn policy(&self) -> Option<&PolicyInfo> {
        match self {
            Event::PolicyAdded(p) | Event::PolicyRemoved(p) => Some(&p.policy),
            _ => None,
        }
    }
}

impl core::fmt::Display for Event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.to_line())
    }
}

impl Event {
    /// The wire's `event`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SaAdded(_) => "sa.added",
            Event::SaReplaced(_) => "sa.replaced",
            Event::SaRemoved(_) => "sa.removed",
            Event::SaRetiring(_) => "sa.retiring",
            Event::SaRetired(_) => "sa.retired",
            Event::SaSoftExpired(_) => "sa.soft_expired",
            Event::SaHardExpired(_) => "sa.hard_expired",
            Event::SaSeqNearExhaustion(_) => "sa.seq_near_exhaustion",
            Event::PolicyAdded(_) => "policy.added",
            Event::PolicyRemoved(_) => "policy.removed",
            Event::ConfigReloaded(_) => "config.reloaded",
            Event::ConfigReloadFailed(_) => "config.reload_failed",
            Event::IkeUp(_) => "ike.up",
            Event::IkeRekeyed(_) => "ike.rekeyed",
            Event::IkeDown(_) => "ike.down",
            Event::ChildUp(_) => "child.up",
            Event::ChildFailed(_) => "child.failed",
            Event::ChildDown(_) => "child.down",
            Event::IkeAuthFailed(_) => "ike.auth_failed",
            Event::IkeNoProposal(_) => "ike.no_proposal",
            Event::IkeTsUnacceptable(_) => "ike.ts_unacceptable",
            Event::IkePeerMoved(_) => "ike.peer_moved",
            Event::IkeMobikeRefused(_) => "ike.mobike_refused",
            Event::IkeLeaseAssigned(_) => "ike.lease_assigned",
            Event::IkeLeaseReleased(_) => "ike.lease_released",
            Event::IkePoolExhausted(_) => "ike.pool_exhausted",
            Event::IkeVirtualIp(_) => "ike.virtual_ip",
        }
    }

    /// Seconds since tunneld started, when it was raised.
    pub fn time(&self) -> u64 {
        match self {
            Event::SaAdded(e)
            | Event::SaReplaced(e)
            | Event::SaRemoved(e)
            | Event::SaRetiring(e)
            | Event::SaRetired(e)
            | Event::SaSoftExpired(e)
            | Event::SaHardExpired(e)
            | Event::SaSeqNearExhaustion(e) => e.time,
            Event::PolicyAdded(e) | Event::PolicyRemoved(e) => e.time,
            Event::ConfigReloaded(e) => e.time,
            Event::ConfigReloadFailed(e) => e.time,
            Event::IkeUp(e) => e.time,
            Event::IkeRekeyed(e) => e.time,
            Event::IkeDown(e) => e.time,
            Event::ChildUp(e) | Event::ChildFailed(e) => e.time,
            Event::ChildDown(e) => e.time,
            Event::IkeAuthFailed(e) => e.time,
            Event::IkeNoProposal(e) | Event::IkeTsUnacceptable(e) => e.time,
            Event::IkePeerMoved(e) => e.time,
            Event::IkeMobikeRefused(e) => e.time,
            Event::IkeLeaseAssigned(e) => e.time,
            Event::IkeLeaseReleased(e) => e.time,
            Event::IkePoolExhausted(e) => e.time,
            Event::IkeVirtualIp(e) => e.time,
        }
    }

    /// Why, for the events that say (an SA retired, an IKE SA or child down, a refusal).
    pub fn why(&self) -> Option<&str> {
        match self {
            Event::IkeDown(e) => Some(&e.why),
            Event::ChildDown(e) => Some(&e.why),
            Event::IkeAuthFailed(e) => e.why.as_deref(),
            other => other.sa().and_then(|s| s.why.as_deref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event line of the golden transcripts reads back as an [`Event`] that writes the
    /// same line again.
    #[test]
    fn every_golden_event_reads_back_as_itself() {
        let control = include_str!("golden.txt");
        let ike = include_str!("../ike/golden.txt");
        let lines = control
            .lines()
            .filter_map(|l| l.strip_prefix("! "))
            .chain(ike.lines().filter(|l| l.contains(r#""event":"#)));
        let mut n = 0;
        for line in lines {
            let e = Event::parse(line).unwrap_or_else(|err| panic!("{line}: {err}"));
            assert_eq!(e.to_line(), line);
            assert!(line.contains(&format!(r#""event":"{}","time":{},"#, e.kind(), e.time())));
            n += 1;
        }
        assert!(n > 30, "{n} events");
    }
}
