//! What the endpoint reports to its caller ([`crate::Endpoint::poll_event`]) and what it
//! asks it to send ([`crate::Endpoint::poll_transmit`]).
use crate::alg::{ChildSuite, IkeSuite};
use crate::config::{ChildLifetimes, Mode};
use crate::id::Identity;
use crate::keys::ChildKeys;
use crate::prf::KeyBytes;
use crate::ts::TrafficSelector;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;

/// A datagram to send. On the NAT-T port the payload already starts with the 4-byte
/// non-ESP marker (RFC 3948 2.2): send `payload` as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Source address and port (bind a socket there).
    pub local: SocketAddr,
    /// Destination.
    pub remote: SocketAddr,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// Which side of an IKE SA we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We sent IKE_SA_INIT.
    Initiator,
    /// The peer did.
    Responder,
}

/// An IKE SA's identity and parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSaInfo {
    /// Connection name.
    pub conn: String,
    /// Initiator's SPI.
    pub spi_i: u64,
    /// Responder's SPI.
    pub spi_r: u64,
    /// Our role.
    pub role: Role,
    /// Our address and port now.
    pub local: SocketAddr,
    /// The peer's address and port now.
    pub remote: SocketAddr,
    /// Algorithms.
    pub suite: IkeSuite,
    /// Our identity.
    pub local_id: Identity,
    /// The peer's authenticated identity.
    pub remote_id: Identity,
    /// A NAT was detected (either side) or encapsulation is forced.
    pub nat: bool,
}

/// The IKE SA keys, for a Wireshark key log only ([`crate::Config::export_ike_keys`]).
pub struct IkeKeyLog {
    /// Initiator's SPI.
    pub spi_i: u64,
    /// Responder's SPI.
    pub spi_r: u64,
    /// Algorithms.
    pub suite: IkeSuite,
    /// SK_ei (salt included for GCM).
    pub sk_ei: KeyBytes,
    /// SK_er.
    pub sk_er: KeyBytes,
    /// SK_ai (empty for AEADs).
    pub sk_ai: KeyBytes,
    /// SK_ar.
    pub sk_ar: KeyBytes,
}

impl fmt::Debug for IkeKeyLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IkeKeyLog({:016x}_i {:016x}_r, keys redacted)",
            self.spi_i, self.spi_r
        )
    }
}

/// The UDP ports of a child SA's ESP in UDP (RFC 3948), as IKE chose them (the data plane's
/// SA property built from them is `ipsec_engine::UdpEncap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapPorts {
    /// Our port.
    pub local_port: u16,
    /// The peer's port.
    pub remote_port: u16,
}

/// A child SA pair, with its keys by direction.
#[derive(Clone)]
pub struct ChildSaInfo {
    /// Connection name.
    pub conn: String,
    /// Child name.
    pub child: String,
    /// Protocol: 50 (ESP).
    pub protocol: u8,
    /// SPI we receive on.
    pub spi_in: u32,
    /// SPI we send with.
    pub spi_out: u32,
    /// Algorithms (transform IDs: `suite.encr.id()`, `suite.integ.map(|i| i.id())`).
    pub suite: ChildSuite,
    /// Mode.
    pub mode: Mode,
    /// Our side's selectors.
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's side's selectors.
    pub remote_ts: Vec<TrafficSelector>,
    /// Lifetimes.
    pub lifetimes: ChildLifetimes,
    /// UDP encapsulation ports, if ESP goes in UDP.
    pub encap: Option<EncapPorts>,
    /// Our outer address.
    pub local: SocketAddr,
    /// The peer's outer address.
    pub remote: SocketAddr,
    /// Whether we initiated the exchange that made the child.
    pub initiator: bool,
    /// The SPI we receive on of the pair this one replaces (a rekey, RFC 7296 2.8). With
    /// `initiator` true, outbound traffic moves to the new pair at once; otherwise it stays
    /// on the old pair until the peer deletes it.
    pub rekeys: Option<u32>,
    /// Outbound encryption key (salt appended for AEADs).
    pub encr_out: KeyBytes,
    /// Outbound integrity key (empty with AEADs).
    pub integ_out: KeyBytes,
    /// Inbound encryption key.
    pub encr_in: KeyBytes,
    /// Inbound integrity key.
    pub integ_in: KeyBytes,
}

impl ChildSaInfo {
    pub(crate) fn new_keys(initiator: bool, k: &ChildKeys) -> (KeyBytes, KeyBytes, KeyBytes, KeyBytes) {
        if initiator {
            (k.encr_i.clone(), k.integ_i.clone(), k.encr_r.clone(), k.integ_r.clone())
        } else {
            (k.encr_r.clone(), k.integ_r.clone(), k.encr_i.clone(), k.integ_i.clone())
        }
    }
}

impl fmt::Debug for ChildSaInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildSaInfo")
            .field("conn", &self.conn)
            .field("child", &self.child)
            .field("spi_in", &format_args!("{:08x}", self.spi_in))
            .field("spi_out", &format_args!("{:08x}", self.spi_out))
            .field("suite", &self.suite)
            .field("mode", &self.mode)
            .field("local_ts", &self.local_ts)
            .field("remote_ts", &self.remote_ts)
            .field("encap", &self.encap)
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("rekeys", &self.rekeys.map(|s| alloc::format!("{s:08x}")))
            .field("keys", &"<redacted>")
            .finish()
    }
}

/// Why an SA went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownReason {
    /// We deleted it (a command).
    Local,
    /// The peer deleted it.
    Peer,
    /// The peer stopped answering (retransmissions exhausted, 2.4).
    Timeout,
    /// Authentication failed (either side).
    AuthFailed,
    /// No proposal was acceptable.
    NoProposal,
    /// The peer sent an error notify (its type).
    PeerError(u16),
    /// A half-open SA got no IKE_AUTH in time.
    HalfOpenTimeout,
    /// The peer sent INITIAL_CONTACT on a new IKE SA: the old ones are gone (2.4).
    Replaced,
    /// The IKE SA the child belonged to went down.
    IkeSaDown,
    /// Replaced by a rekeyed IKE SA (2.18); its children moved there.
    Rekeyed,
    /// A child pair the peer's rekey replaced reached its hard lifetime before the peer's
    /// Delete came: gone here without a Delete of ours, which could cross the peer's rekey
    /// still in flight (2.8, 2.25.1); the peer's Delete is answered without one.
    Expired,
}

/// An event for the caller.
#[derive(Debug)]
pub enum Event {
    /// An IKE SA is established (both sides authenticated).
    IkeUp {
        /// The SA.
        info: IkeSaInfo,
        /// Its keys, if [`crate::Config::export_ike_keys`].
        keys: Option<IkeKeyLog>,
    },
    /// An IKE SA was rekeyed (RFC 7296 2.18): `info` is the new SA, which took over the
    /// children of the old one (`old_spi_i`, `old_spi_r`); the old one goes down with
    /// [`DownReason::Rekeyed`] once deleted.
    IkeRekeyed {
        /// The old SA's initiator SPI.
        old_spi_i: u64,
        /// The old SA's responder SPI.
        old_spi_r: u64,
        /// The new SA.
        info: IkeSaInfo,
        /// Its keys, if [`crate::Config::export_ike_keys`].
        keys: Option<IkeKeyLog>,
    },
    /// An IKE SA is gone (its child SAs are reported down first).
    IkeDown {
        /// Connection.
        conn: String,
        /// Initiator's SPI.
        spi_i: u64,
        /// Responder's SPI (0 if never known).
        spi_r: u64,
        /// The peer's endpoint it last used (its data-plane state can go with it).
        remote: SocketAddr,
        /// Why.
        reason: DownReason,
    },
    /// A child SA pair is established: install it.
    ChildUp(ChildSaInfo),
    /// A child SA pair is gone: remove it.
    ChildDown {
        /// Connection.
        conn: String,
        /// Child name.
        child: String,
        /// SPI we received on.
        spi_in: u32,
        /// SPI we sent with.
        spi_out: u32,
        /// Why.
        reason: DownReason,
    },
    /// Authentication failed: `local` is true when we refused the peer, false when the
    /// peer refused us.
    AuthFailed {
        /// Connection.
        conn: String,
        /// Who refused.
        local: bool,
        /// Why we refused (None when the peer refused us: it does not say why).
        reason: Option<crate::authenticator::Refusal>,
    },
    /// No proposal in common, for the IKE SA (`child` None) or a child.
    ProposalMismatch {
        /// Connection (empty when no connection matched at all).
        conn: String,
        /// Child, if the mismatch was a child's.
        child: Option<String>,
    },
    /// A child's selectors could not be agreed (TS_UNACCEPTABLE, 2.9).
    TsUnacceptable {
        /// Connection.
        conn: String,
        /// Child.
        child: String,
    },
    /// The peer's address or port changed (NAT mapping, 2.23); authenticated messages only.
    PeerEndpointChanged {
        /// Connection.
        conn: String,
        /// Initiator's SPI.
        spi_i: u64,
        /// Old endpoint.
        old: SocketAddr,
        /// New endpoint.
        new: SocketAddr,
        /// Moved by the peer's UPDATE_SA_ADDRESSES (MOBIKE, RFC 4555 3.5), not implicitly.
        mobike: bool,
    },
    /// A MOBIKE request not acted on (RFC 4555 3.5, 3.7, 3.9): nothing moved.
    MobikeRefused {
        /// Connection.
        conn: String,
        /// Initiator's SPI.
        spi_i: u64,
        /// Where the request came from.
        from: SocketAddr,
        /// Why.
        reason: MobikeRefusal,
    },
    /// A peer was leased a virtual address from a pool (CFG_REPLY, RFC 7296 3.15.4).
    LeaseAssigned {
        /// Connection.
        conn: String,
        /// Pool.
        pool: String,
        /// The peer's authenticated identity.
        identity: Identity,
        /// The address.
        address: IpAddr,
        /// Initiator's SPI of the IKE SA holding it.
        spi_i: u64,
    },
    /// A lease's IKE SA is gone (deleted, expired, found dead, replaced): the address is
    /// free, kept for the same identity while the pool has others ([`crate::pool`]).
    LeaseReleased {
        /// Pool.
        pool: String,
        /// Whose it was.
        identity: Identity,
        /// The address.
        address: IpAddr,
    },
    /// A peer asked for a virtual address and no pool of its connection had one: answered
    /// INTERNAL_ADDRESS_FAILURE, no child SA (3.10.1).
    PoolExhausted {
        /// Connection.
        conn: String,
        /// The peer's identity.
        identity: Identity,
        /// The connection's pools of the family asked for.
        pools: Vec<String>,
    },
    /// The responder gave us virtual addresses (our CFG_REQUEST, connection `vips`).
    VirtualIp {
        /// Connection.
        conn: String,
        /// Initiator's SPI.
        spi_i: u64,
        /// Our addresses.
        addresses: Vec<IpAddr>,
        /// The DNS servers it named.
        dns: Vec<IpAddr>,
    },
    /// A liveness check (DPD) was answered.
    Alive {
        /// Connection.
        conn: String,
        /// When.
        at: Duration,
    },
}

/// Why a MOBIKE request was not acted on ([`Event::MobikeRefused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MobikeRefusal {
    /// UPDATE_SA_ADDRESSES on an IKE SA without MOBIKE (RFC 4555 3.2: not both announced it).
    NotNegotiated,
    /// COOKIE2 malformed (not 8 to 64 bytes, 4.2) or, in a response, not ours (3.7).
    BadCookie2,
    /// NO_NATS_ALLOWED and a NAT found (3.9): answered UNEXPECTED_NAT_DETECTED.
    UnexpectedNat,
    /// Our return-routability check of the new address (3.5, 5.2.1) was not answered from
    /// there within `ike_mobike::CHECK_WINDOW`, or was answered from elsewhere.
    CheckFailed,
}

impl core::fmt::Display for MobikeRefusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            MobikeRefusal::NotNegotiated => "UPDATE_SA_ADDRESSES without MOBIKE negotiated",
            MobikeRefusal::BadCookie2 => "COOKIE2 malformed or not ours",
            MobikeRefusal::UnexpectedNat => "NO_NATS_ALLOWED and a NAT found",
            MobikeRefusal::CheckFailed => "the new address did not answer the return-routability check",
        })
    }
}
