//! IKE's counters for the stats file and the metrics, kept by the IKE thread (which
//! updates them from its endpoint and events) and read by the stats file and the metrics.

use ipsec_ike::Event;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// IKE's counters for the stats file and the metrics, kept by the IKE thread.
#[derive(Debug, Default)]
pub struct IkeCounters {
    ike_sas: AtomicU64,
    child_sas: AtomicU64,
    ike_up: AtomicU64,
    ike_rekeys: AtomicU64,
    child_rekeys: AtomicU64,
    requests_sent: AtomicU64,
    requests_answered: AtomicU64,
    retransmits: AtomicU64,
    auth_failures: AtomicU64,
    invalid_syntax: AtomicU64,
    pub(crate) datagrams_dropped: AtomicU64,
    fragments_sent: AtomicU64,
    fragments_received: AtomicU64,
    fragmented_messages: AtomicU64,
    fragments_dropped: AtomicU64,
    half_open: AtomicU64,
    cookies_sent: AtomicU64,
    half_open_refused: AtomicU64,
    too_large: AtomicU64,
    /// EAP-RADIUS ([`IkeCounters::update_radius`]).
    radius_sent: AtomicU64,
    radius_retransmitted: AtomicU64,
    radius_accepted: AtomicU64,
    radius_rejected: AtomicU64,
    radius_server_down: AtomicU64,
    radius_bad_authenticator: AtomicU64,
    radius_unmatched: AtomicU64,
    radius_malformed: AtomicU64,
    radius_wrong_source: AtomicU64,
    radius_no_identifier: AtomicU64,
    radius_acct_requests: AtomicU64,
    radius_acct_responses: AtomicU64,
    radius_acct_retransmitted: AtomicU64,
    radius_acct_failovers: AtomicU64,
    radius_acct_given_up: AtomicU64,
    radius_acct_dropped: AtomicU64,
    /// The address pools' figures ([`IkeCounters::update_pools`]).
    pools: std::sync::Mutex<Vec<PoolReport>>,
    /// Each RADIUS server's figures ([`IkeCounters::update_radius`]).
    radius_servers: std::sync::Mutex<Vec<RadiusServerReport>>,
}

/// One RADIUS server's figures (EAP-RADIUS with failover, `[[radius]]`), as the stats file
/// has them and `/metrics` reads them back ([`crate::obs::metrics`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RadiusServerReport {
    /// Its address and port.
    pub server: String,
    /// Datagrams sent to it (retransmissions included).
    pub sent: u64,
    /// Retransmissions among them.
    pub retransmitted: u64,
    /// Authenticated answers from it taken.
    pub answers: u64,
    /// Requests whose every try on it timed out.
    pub timeouts: u64,
    /// Requests it took over from a server that timed out.
    pub failovers_to: u64,
    /// Times it was marked down.
    pub marked_down: u64,
    /// Marked down now (skipped until its hold-down passes).
    pub down: bool,
}

/// One address pool's figures (remote access, docs/remote-access.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolReport {
    /// Its name.
    pub name: String,
    /// Addresses it leases (saturated at 2^64 - 1 for a large IPv6 pool).
    pub size: u64,
    /// Leases held by an IKE SA.
    pub leased: u64,
    /// Leases kept for an identity whose IKE SA is gone.
    pub offline: u64,
}

/// [`IkeCounters`] as the stats file and `/metrics` show them: `ike_sas` and `child_sas`
/// are gauges, the rest totals since start.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct IkeReport {
    /// IKE SAs now (half-open ones included).
    pub ike_sas: u64,
    /// Child SA pairs now.
    pub child_sas: u64,
    /// IKE SAs established.
    pub ike_up: u64,
    /// IKE SA rekeys.
    pub ike_rekeys: u64,
    /// Child SA rekeys.
    pub child_rekeys: u64,
    /// Requests we sent (first transmissions).
    pub requests_sent: u64,
    /// The peers' requests answered.
    pub requests_answered: u64,
    /// Retransmissions of our requests.
    pub retransmits: u64,
    /// Authentications that failed (either side).
    pub auth_failures: u64,
    /// Authenticated requests answered with INVALID_SYNTAX.
    pub invalid_syntax: u64,
    /// Datagrams not used (malformed, unknown SPI, out of window, queue full, answered with
    /// a cookie ...).
    pub datagrams_dropped: u64,
    /// IKE fragments sent (RFC 7383; retransmissions not counted).
    pub fragments_sent: u64,
    /// The peers' IKE fragments authenticated and kept.
    pub fragments_received: u64,
    /// The peers' messages reassembled from fragments.
    pub fragmented_messages: u64,
    /// The peers' IKE fragments not used (bad ICV, duplicate, over the bounds).
    pub fragments_dropped: u64,
    /// Half-open responder IKE SAs now (a gauge; RFC 8019).
    pub half_open: u64,
    /// IKE_SA_INIT requests answered with a COOKIE and no state (RFC 7296 2.6).
    pub cookies_sent: u64,
    /// IKE_SA_INIT requests refused: their source's or the total half-open cap was reached.
    pub half_open_refused: u64,
    /// IKE_SA_INIT requests refused for their size (`ipsec_ike::limits::MAX_INIT_LEN`).
    pub too_large: u64,
    /// EAP-RADIUS: datagrams sent to the RADIUS server (retransmissions included).
    pub radius_sent: u64,
    /// EAP-RADIUS: retransmitted Access-Requests.
    pub radius_retransmitted: u64,
    /// EAP-RADIUS: conversations the server accepted.
    pub radius_accepted: u64,
    /// EAP-RADIUS: conversations the server rejected (or ended with an unusable answer).
    pub radius_rejected: u64,
    /// EAP-RADIUS: conversations ended because the server did not answer.
    pub radius_server_down: u64,
    /// EAP-RADIUS: answers dropped for a wrong Response Authenticator or Message-Authenticator.
    pub radius_bad_authenticator: u64,
    /// EAP-RADIUS: answers dropped: to no outstanding request.
    pub radius_unmatched: u64,
    /// EAP-RADIUS: answers dropped: not a RADIUS packet.
    pub radius_malformed: u64,
    /// EAP-RADIUS: datagrams on the RADIUS socket from another address or port than the server's.
    pub radius_wrong_source: u64,
    /// EAP-RADIUS: conversations refused with 256 requests outstanding.
    pub radius_no_identifier: u64,
    /// RADIUS accounting: Accounting-Requests made (Start, Stop).
    pub radius_acct_requests: u64,
    /// RADIUS accounting: Accounting-Responses taken (their authenticator checked).
    pub radius_acct_responses: u64,
    /// RADIUS accounting: retransmitted Accounting-Requests.
    pub radius_acct_retransmitted: u64,
    /// RADIUS accounting: requests moved to the next server.
    pub radius_acct_failovers: u64,
    /// RADIUS accounting: requests dropped after every server timed out (or not made).
    pub radius_acct_given_up: u64,
    /// RADIUS accounting: answers dropped (wrong authenticator, unmatched, malformed).
    pub radius_acct_dropped: u64,
    /// The address pools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolReport>,
    /// The RADIUS servers, in the order of preference.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub radius_servers: Vec<RadiusServerReport>,
}

impl IkeCounters {
    /// A snapshot.
    pub fn report(&self) -> IkeReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IkeReport {
            ike_sas: g(&self.ike_sas),
            child_sas: g(&self.child_sas),
            ike_up: g(&self.ike_up),
            ike_rekeys: g(&self.ike_rekeys),
            child_rekeys: g(&self.child_rekeys),
            requests_sent: g(&self.requests_sent),
            requests_answered: g(&self.requests_answered),
            retransmits: g(&self.retransmits),
            auth_failures: g(&self.auth_failures),
            invalid_syntax: g(&self.invalid_syntax),
            datagrams_dropped: g(&self.datagrams_dropped),
            fragments_sent: g(&self.fragments_sent),
            fragments_received: g(&self.fragments_received),
            fragmented_messages: g(&self.fragmented_messages),
            fragments_dropped: g(&self.fragments_dropped),
            half_open: g(&self.half_open),
            cookies_sent: g(&self.cookies_sent),
            half_open_refused: g(&self.half_open_refused),
            too_large: g(&self.too_large),
            radius_sent: g(&self.radius_sent),
            radius_retransmitted: g(&self.radius_retransmitted),
            radius_accepted: g(&self.radius_accepted),
            radius_rejected: g(&self.radius_rejected),
            radius_server_down: g(&self.radius_server_down),
            radius_bad_authenticator: g(&self.radius_bad_authenticator),
            radius_unmatched: g(&self.radius_unmatched),
            radius_malformed: g(&self.radius_malformed),
            radius_wrong_source: g(&self.radius_wrong_source),
            radius_no_identifier: g(&self.radius_no_identifier),
            radius_acct_requests: g(&self.radius_acct_requests),
            radius_acct_responses: g(&self.radius_acct_responses),
            radius_acct_retransmitted: g(&self.radius_acct_retransmitted),
            radius_acct_failovers: g(&self.radius_acct_failovers),
            radius_acct_given_up: g(&self.radius_acct_given_up),
            radius_acct_dropped: g(&self.radius_acct_dropped),
            pools: self.pools.lock().map(|p| p.clone()).unwrap_or_default(),
            radius_servers: self.radius_servers.lock().map(|p| p.clone()).unwrap_or_default(),
        }
    }

    /// The address pools' sizes and leases, from the endpoint.
    pub(crate) fn update_pools(&self, endpoint: &ipsec_ike::Endpoint) {
        let v: Vec<PoolReport> = endpoint
            .pool_stats()
            .into_iter()
            .map(|p| PoolReport {
                name: p.name,
                size: u64::try_from(p.size).unwrap_or(u64::MAX),
                leased: p.online as u64,
                offline: p.offline as u64,
            })
            .collect();
        if let Ok(mut g) = self.pools.lock() {
            *g = v;
        }
    }

    /// The endpoint's own figures.
    pub(crate) fn update(&self, endpoint: &ipsec_ike::Endpoint, now: Duration) {
        let s = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        let st = endpoint.status(now);
        s(&self.ike_sas, st.len() as u64);
        s(&self.child_sas, st.iter().map(|x| x.children.len() as u64).sum());
        let t = endpoint.totals();
        s(&self.requests_sent, t.requests_sent);
        s(&self.requests_answered, t.requests_answered);
        s(&self.retransmits, t.retransmits);
        s(&self.child_rekeys, t.child_rekeys);
        s(&self.invalid_syntax, t.invalid_syntax);
        s(&self.fragments_sent, t.fragments_sent);
        s(&self.fragments_received, t.fragments_received);
        s(&self.fragmented_messages, t.fragmented_messages);
        s(&self.fragments_dropped, t.fragments_dropped);
        self.update_dos(endpoint);
        self.update_pools(endpoint);
    }

    /// The flood defences' figures (cheap: no pass over the SAs).
    pub(crate) fn update_dos(&self, endpoint: &ipsec_ike::Endpoint) {
        let s = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        let d = endpoint.dos_stats();
        s(&self.half_open, endpoint.half_open_count() as u64);
        s(&self.cookies_sent, d.cookies_sent);
        s(&self.half_open_refused, d.half_open_refused);
        s(&self.too_large, d.too_large);
    }

    /// EAP-RADIUS's figures: the endpoint's, and what tunneld's socket dropped itself
    /// (cheap: no pass over the SAs).
    pub(crate) fn update_radius(
        &self,
        endpoint: &ipsec_ike::Endpoint,
        wrong_source: u64,
        servers: &[std::net::SocketAddr],
        acct: Option<ipsec_ike::ipsec_eap::radius::accounting::Stats>,
    ) {
        if let Some(a) = acct {
            let s = |x: &AtomicU64, v: u64| x.store(v, Ordering::Relaxed);
            s(&self.radius_acct_requests, a.requests);
            s(&self.radius_acct_responses, a.responses);
            s(&self.radius_acct_retransmitted, a.retransmitted);
            s(&self.radius_acct_failovers, a.failovers);
            s(&self.radius_acct_given_up, a.given_up + a.overflow);
            s(
                &self.radius_acct_dropped,
                a.bad_authenticator + a.unmatched + a.malformed,
            );
        }
        let stats = endpoint.radius_server_stats();
        let per: Vec<RadiusServerReport> = servers
            .iter()
            .enumerate()
            .map(|(n, a)| {
                let x = stats.get(n).copied().unwrap_or_default();
                RadiusServerReport {
                    server: a.to_string(),
                    sent: x.sent,
                    retransmitted: x.retransmitted,
                    answers: x.answers,
                    timeouts: x.timeouts,
                    failovers_to: x.failovers_to,
                    marked_down: x.marked_down,
                    down: x.down,
                }
            })
            .collect();
        if let Ok(mut g) = self.radius_servers.lock() {
            *g = per;
        }
        let s = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        let r = endpoint.radius_stats();
        s(&self.radius_sent, r.sent);
        s(&self.radius_retransmitted, r.retransmitted);
        s(&self.radius_accepted, r.accepted);
        s(&self.radius_rejected, r.rejected);
        s(&self.radius_server_down, r.server_down);
        s(&self.radius_bad_authenticator, r.bad_authenticator);
        s(&self.radius_unmatched, r.unmatched);
        s(&self.radius_malformed, r.malformed);
        s(&self.radius_no_identifier, r.no_identifier);
        s(&self.radius_wrong_source, wrong_source);
    }

    /// Counts what an event tells.
    pub(crate) fn count(&self, ev: &Event) {
        let inc = |a: &AtomicU64| a.fetch_add(1, Ordering::Relaxed);
        match ev {
            Event::IkeUp { .. } => inc(&self.ike_up),
            Event::IkeRekeyed { .. } => inc(&self.ike_rekeys),
            Event::AuthFailed { .. } => inc(&self.auth_failures),
            _ => 0,
        };
    }
}
