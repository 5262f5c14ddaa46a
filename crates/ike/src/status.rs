//! What [`crate::Endpoint::status`] reports of each IKE SA, for `ipsec ike list`, `show`, the
//! stats file and the metrics: its state, algorithms in strongSwan's proposal words, SPIs,
//! message IDs, when it and its children are rekeyed and expire, and its counters. No key.
use crate::alg::{ChildSuite, IkeSuite};
use crate::event::Role;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;

/// Counters of one IKE SA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IkeSaStats {
    /// Exchanges we started (requests sent, retransmissions not counted).
    pub requests_sent: u64,
    /// Requests of the peer answered (retransmitted ones not counted).
    pub requests_answered: u64,
    /// Retransmissions of our requests (2.1).
    pub retransmits: u64,
    /// Child SA rekeys completed (either side).
    pub child_rekeys: u64,
    /// Authenticated requests answered with INVALID_SYNTAX.
    pub invalid_syntax: u64,
    /// IKE fragments we built and sent (RFC 7383; their retransmissions not counted).
    pub fragments_sent: u64,
    /// The peer's fragments authenticated and kept for reassembly.
    pub fragments_received: u64,
    /// The peer's messages reassembled from fragments.
    pub fragmented_messages: u64,
    /// The peer's fragments not used: failed ICV, duplicate, out of bounds, not negotiated
    /// ([`crate::fragment::FragmentError`]).
    pub fragments_dropped: u64,
    /// Additional key exchanges (RFC 9370) refused or given up: an IKE_FOLLOWUP_KE with an
    /// unknown link or a bad KE, a follow-up that never came, one the peer refused.
    pub additional_ke_refused: u64,
    /// EAP conversations (RFC 7296 2.16) that ended in failure: wrong password, unknown
    /// user, too many rounds, a bad AUTH with the MSK.
    pub eap_failures: u64,
    /// EAP messages out of order or malformed (the outstanding EAP Request sent again).
    pub eap_out_of_order: u64,
    /// First IKE_AUTH responses sent EAP-only (RFC 5998 3: no CERT, no AUTH; the MSK's AUTH
    /// proves us at the end).
    pub eap_only: u64,
    /// MOBIKE address updates (RFC 4555 3.5): the peer's UPDATE_SA_ADDRESSES acted on, or
    /// ours answered.
    pub mobike_updates: u64,
    /// Return-routability checks of a peer's new address answered from there (RFC 4555 3.5):
    /// each one moved the SA.
    pub mobike_checks: u64,
    /// MOBIKE requests not acted on ([`crate::Event::MobikeRefused`]).
    pub mobike_refused: u64,
    /// Retransmissions of a request whose response waits for the RADIUS server (absorbed).
    pub deferred_retransmits: u64,
}

impl IkeSaStats {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &IkeSaStats) {
        self.requests_sent += o.requests_sent;
        self.requests_answered += o.requests_answered;
        self.retransmits += o.retransmits;
        self.child_rekeys += o.child_rekeys;
        self.invalid_syntax += o.invalid_syntax;
        self.fragments_sent += o.fragments_sent;
        self.fragments_received += o.fragments_received;
        self.fragmented_messages += o.fragmented_messages;
        self.fragments_dropped += o.fragments_dropped;
        self.additional_ke_refused += o.additional_ke_refused;
        self.eap_failures += o.eap_failures;
        self.eap_out_of_order += o.eap_out_of_order;
        self.eap_only += o.eap_only;
        self.mobike_updates += o.mobike_updates;
        self.mobike_checks += o.mobike_checks;
        self.mobike_refused += o.mobike_refused;
        self.deferred_retransmits += o.deferred_retransmits;
    }
}

/// One IKE SA as [`crate::Endpoint::status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSaStatus {
    /// The connection.
    pub conn: String,
    /// `connecting`, `half-open`, `established`, `rekeyed` (waiting for its Delete).
    pub state: &'static str,
    /// Our role.
    pub role: Role,
    /// Initiator's SPI.
    pub spi_i: u64,
    /// Responder's SPI.
    pub spi_r: u64,
    /// Our address and port.
    pub local: SocketAddr,
    /// The peer's.
    pub remote: SocketAddr,
    /// The peer's identity, once authenticated.
    pub remote_id: Option<String>,
    /// Algorithms in strongSwan's words (`aes128gcm16-prfsha256-x25519`).
    pub proposal: Option<String>,
    /// UDP encapsulation (NAT or forced).
    pub nat: bool,
    /// The message ID of our next request.
    pub next_request_id: u32,
    /// The message ID expected of the peer's next request.
    pub expected_peer_id: u32,
    /// Time since it was created.
    pub age: Duration,
    /// Time until our rekey of it, if one is planned.
    pub rekey_in: Option<Duration>,
    /// Counters.
    pub stats: IkeSaStats,
    /// Its child SA pairs.
    pub children: Vec<ChildSaStatus>,
    /// Virtual addresses: the peer's leases (responder), ours (initiator).
    pub virtual_ips: Vec<core::net::IpAddr>,
    /// MOBIKE is in use (RFC 4555 3.2: both sides announced it).
    pub mobike: bool,
    /// The peer's additional addresses (ADDITIONAL_IP4/6_ADDRESS, RFC 4555 3.4).
    pub peer_addresses: Vec<core::net::IpAddr>,
    /// Responder: the EAP method that authenticated the peer (`eap-mschapv2`,
    /// `eap-radius`); `remote_id` is then its EAP identity.
    pub eap_method: Option<&'static str>,
}

/// One child SA pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSaStatus {
    /// The child's name.
    pub child: String,
    /// `installed`, `rekeying`, `rekeyed` (replaced, waiting for its Delete), `deleting`.
    pub state: &'static str,
    /// SPI we receive on.
    pub spi_in: u32,
    /// SPI we send with.
    pub spi_out: u32,
    /// Algorithms in strongSwan's words (`aes128gcm16-esn`).
    pub proposal: String,
    /// The pair it replaced, if a rekey made it.
    pub rekeys: Option<u32>,
    /// Time until our rekey of it.
    pub rekey_in: Option<Duration>,
    /// Time until it is deleted if not rekeyed (hard lifetime).
    pub expires_in: Option<Duration>,
}

impl IkeSuite {
    /// strongSwan's proposal words: `aes128gcm16-prfsha256-x25519`, `aes256-sha256-prfsha256-ecp256`.
    pub fn proposal_string(&self) -> String {
        let mut s = String::from(self.encr.name());
        if let Some(i) = self.integ {
            s.push('-');
            s.push_str(i.name());
        }
        s.push('-');
        s.push_str(self.prf.name());
        s.push('-');
        s.push_str(self.dh.name());
        for (n, g) in self.additional() {
            s.push_str(&alloc::format!("-ke{n}_{}", g.name()));
        }
        s
    }
}

impl ChildSuite {
    /// strongSwan's proposal words: `aes128gcm16-esn`, `aes128-sha256-noesn`.
    pub fn proposal_string(&self) -> String {
        let mut s = String::from(self.encr.name());
        if let Some(i) = self.integ {
            s.push('-');
            s.push_str(i.name());
        }
        s.push_str(if self.esn { "-esn" } else { "-noesn" });
        s
    }
}
