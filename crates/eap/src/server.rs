//! What the IKE responder drives (RFC 7296 §2.16): an EAP authenticator that asks the
//! peer's identity (RFC 3748 §5.1), then runs EAP-MSCHAPv2 itself or passes the
//! conversation to a RADIUS server (RFC 3579, [`crate::radius::client`]).
//!
//! Every call answers with a [`Step`]: bytes for the next IKE_AUTH response's EAP payload,
//! `Pending` (wait for the RADIUS server: feed its datagrams, poll its timeout), or the end,
//! Success with the MSK for the AUTH payload or Failure with a reason, each with the
//! EAP-Success/Failure packet to send.

use crate::mschapv2::{self, Credentials};
use crate::packet::{self as eap_packet, Code, Repr, Type};
use crate::radius::client::{self as radius, Answer};
use crate::Error;
use crate::Msk;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// Why an exchange failed (for the caller's log and counters; the peer only sees
/// EAP-Failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// The NT-Response did not match the stored password.
    WrongPassword,
    /// No credentials for the identity.
    UnknownIdentity,
    /// The peer Nak'ed the method and offered nothing the server has.
    NoCommonMethod,
    /// The RADIUS server answered Access-Reject.
    RadiusReject,
    /// The RADIUS server did not answer (after every retransmission), or every answer
    /// failed its authenticator check.
    RadiusServerDown,
    /// The RADIUS server's (authenticated) Access-Challenge carried no usable EAP Request.
    RadiusBadEap,
    /// More rounds than allowed.
    TooManyRounds,
    /// The RADIUS server accepted but sent no MS-MPPE keys, so there is no MSK to bind
    /// the IKE SA with.
    NoMsk,
    /// EAP-TLS: the client's certificate was refused (it does not chain to the configured
    /// CAs, is expired or revoked, or none was sent; RFC 5216 §5.3).
    CertificateRefused,
    /// EAP-TLS: the TLS handshake failed otherwise (no common version or cipher suite, a
    /// bad signature or Finished, an alert from the peer).
    TlsHandshake,
}

impl core::fmt::Display for FailureReason {
    /// A phrase for log lines and events (no secret in it).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FailureReason::WrongPassword => "wrong password",
            FailureReason::UnknownIdentity => "unknown user",
            FailureReason::NoCommonMethod => "no EAP method in common",
            FailureReason::RadiusReject => "the RADIUS server refused",
            FailureReason::RadiusServerDown => "the RADIUS server did not answer",
            FailureReason::RadiusBadEap => "the RADIUS server sent no usable EAP Request",
            FailureReason::TooManyRounds => "too many EAP rounds",
            FailureReason::NoMsk => "no MSK from the EAP method",
            FailureReason::CertificateRefused => "the client certificate was refused",
            FailureReason::TlsHandshake => "the TLS handshake failed",
        })
    }
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this EAP packet to the peer (an EAP payload of the next IKE_AUTH response).
    Send(Vec<u8>),
    /// Waiting for the RADIUS server; nothing for the peer yet.
    Pending,
    /// Authenticated: the MSK for the AUTH payload, and the EAP-Success to send.
    Success { msk: Msk, eap: Vec<u8> },
    /// Not authenticated: why, and the EAP-Failure to send.
    Failure { reason: FailureReason, eap: Vec<u8> },
}

/// Where the method runs.
#[derive(Debug, Clone)]
pub enum Backend {
    /// EAP-MSCHAPv2 here, the NT hash from the caller's [`Credentials`].
    Local,
    /// Passed through to a RADIUS server (RFC 3579).
    Radius(radius::Config),
    /// EAP-TLS here (RFC 5216, RFC 9190): the client's certificate verified against the
    /// configuration's CAs.
    #[cfg(feature = "tls")]
    Tls(crate::tls::ServerConfig),
}

impl Backend {
    /// The method's name for logs and `ipsec ike list` (swanctl's words).
    pub fn method_name(&self) -> &'static str {
        match self {
            Backend::Local => "eap-mschapv2",
            Backend::Radius(_) => "eap-radius",
            #[cfg(feature = "tls")]
            Backend::Tls(_) => "eap-tls",
        }
    }
}

/// The longest identity taken (it becomes a RADIUS User-Name, RFC 2865 §5.1).
pub const MAX_IDENTITY_LEN: usize = 253;

/// How many EAP Responses a RADIUS pass-through relays at most.
pub const MAX_RADIUS_ROUNDS: u8 = 16;

enum Inner {
    /// The Identity Request is out.
    Identity {
        identifier: u8,
        backend: Option<Backend>,
    },
    Local(mschapv2::Server),
    #[cfg(feature = "tls")]
    Tls(alloc::boxed::Box<crate::tls::Server>),
    Radius {
        /// Boxed: the largest variant by far, and one IKE SA in many has it.
        session: alloc::boxed::Box<radius::Session>,
        /// The Identifier of the EAP Request last relayed to the peer (None while waiting).
        relayed: Option<u8>,
        /// The Identifier of the peer's last Response (for a built EAP-Failure).
        last_response: u8,
        radius_id: u8,
        rounds: u8,
    },
    /// Finished; the RADIUS counters kept.
    Done(Option<radius::Stats>),
}

/// The EAP authenticator of one IKE SA.
pub struct Authenticator {
    inner: Inner,
    identity: Option<alloc::vec::Vec<u8>>,
    method: &'static str,
    /// The wall-clock time (seconds since 1970) certificates are checked at (EAP-TLS).
    unix: Option<u64>,
    /// EAP-TLS: the client's certificate (DER), verified.
    peer_cert: Option<Vec<u8>>,
    /// The RADIUS Identifier the next Access-Request takes, if the caller chose it
    /// ([`Authenticator::use_radius_identifier`]).
    next_radius_id: Option<u8>,
    /// The RADIUS server the conversation starts on, if the caller chose it
    /// ([`Authenticator::use_radius_server`]).
    next_radius_server: Option<usize>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.inner {
            Inner::Identity { .. } => "identity",
            Inner::Local(_) => "mschapv2",
            #[cfg(feature = "tls")]
            Inner::Tls(_) => "tls",
            Inner::Radius { .. } => "radius",
            Inner::Done(_) => "done",
        };
        f.debug_struct("Authenticator")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Starts an exchange: the authenticator and the EAP-Request/Identity to send (RFC 3748
    /// §5.1), with a random first Identifier.
    pub fn start(backend: Backend, rng: &mut dyn CryptoRngCore) -> (Authenticator, Vec<u8>) {
        let mut id = [0u8; 1];
        rng.fill_bytes(&mut id);
        let req = alloc::vec![Code::Request.to_u8(), id[0], 0, 5, Type::Identity.to_u8()];
        let method = backend.method_name();
        (
            Authenticator {
                inner: Inner::Identity {
                    identifier: id[0],
                    backend: Some(backend),
                },
                identity: None,
                method,
                unix: None,
                peer_cert: None,
                next_radius_id: None,
                next_radius_server: None,
            },
            req,
        )
    }

    /// Why the local method is failing once its Failure-Request is out
    /// ([`mschapv2::Server::pending_failure`]), for a peer that gives up there.
    pub fn pending_failure(&self) -> Option<FailureReason> {
        match &self.inner {
            Inner::Local(server) => server.pending_failure(),
            #[cfg(feature = "tls")]
            Inner::Tls(server) => server.pending_failure(),
            _ => None,
        }
    }

    /// The method's name (`eap-mschapv2`, `eap-tls`, `eap-radius`).
    pub fn method_name(&self) -> &'static str {
        self.method
    }

    /// Sets the wall-clock time (seconds since 1970) that certificates are checked at
    /// (EAP-TLS); None: unknown, and a certificate is then refused.
    pub fn set_unix_time(&mut self, unix: Option<u64>) {
        self.unix = unix;
    }

    /// EAP-TLS: the client's certificate (DER), after the handshake verified it; the peer's
    /// identity comes from it, not from its EAP-Identity.
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        self.peer_cert.as_deref()
    }

    /// The identity the peer gave (after its Identity Response).
    pub fn identity(&self) -> Option<&[u8]> {
        self.identity.as_deref()
    }

    /// Handles the peer's EAP Response (an IKE_AUTH request's EAP payload). An error means
    /// the packet was dropped and nothing changed (wrong Identifier, out of order,
    /// malformed); [`Error::Finished`] once the exchange ended.
    pub fn handle_response(
        &mut self,
        eap: &[u8],
        creds: &dyn Credentials,
        now: Duration,
        rng: &mut dyn CryptoRngCore,
    ) -> Result<Step, Error> {
        match &mut self.inner {
            Inner::Done(_) => Err(Error::Finished),
            Inner::Identity { identifier, backend } => {
                let repr = Repr::parse_bytes(eap)?;
                if repr.code != Code::Response {
                    return Err(Error::Unexpected("not an EAP Response"));
                }
                if repr.identifier != *identifier {
                    return Err(Error::WrongIdentifier {
                        expected: *identifier,
                        got: repr.identifier,
                    });
                }
                let Some((Type::Identity, ident)) = repr.data else {
                    return Err(Error::Unexpected("not an Identity Response"));
                };
                if ident.is_empty() || ident.len() > MAX_IDENTITY_LEN {
                    return Err(Error::Malformed("identity empty or too long"));
                }
                self.identity = Some(ident.to_vec());
                let next_id = identifier.wrapping_add(1);
                match backend.take() {
                    None | Some(Backend::Local) => {
                        let (server, req) = mschapv2::Server::start(ident, next_id, creds, rng)?;
                        self.inner = Inner::Local(server);
                        Ok(Step::Send(req))
                    }
                    #[cfg(feature = "tls")]
                    Some(Backend::Tls(cfg)) => {
                        let (server, start) = crate::tls::Server::start(&cfg, next_id)?;
                        self.inner = Inner::Tls(alloc::boxed::Box::new(server));
                        Ok(Step::Send(start))
                    }
                    Some(Backend::Radius(cfg)) => {
                        let mut session = radius::Session::new(cfg, ident)?;
                        if let Some(server) = self.next_radius_server.take() {
                            session.use_server(server);
                        }
                        let mut rid = [0u8; 1];
                        rng.fill_bytes(&mut rid);
                        let rid = [self.next_radius_id.take().unwrap_or(rid[0])];
                        session.send_eap(eap_body(eap)?, rid[0], now, rng)?;
                        self.inner = Inner::Radius {
                            session: alloc::boxed::Box::new(session),
                            relayed: None,
                            last_response: repr.identifier,
                            radius_id: rid[0],
                            rounds: 1,
                        };
                        Ok(Step::Pending)
                    }
                }
            }
            Inner::Local(server) => {
                let step = server.handle(eap)?;
                if matches!(step, Step::Success { .. } | Step::Failure { .. }) {
                    self.inner = Inner::Done(None);
                }
                Ok(step)
            }
            #[cfg(feature = "tls")]
            Inner::Tls(server) => {
                let step = server.handle(eap, self.unix)?;
                if matches!(step, Step::Success { .. }) {
                    self.peer_cert = server.peer_certificate().map(<[u8]>::to_vec);
                }
                if matches!(step, Step::Success { .. } | Step::Failure { .. }) {
                    self.inner = Inner::Done(None);
                }
                Ok(step)
            }
            Inner::Radius {
                session,
                relayed,
                last_response,
                radius_id,
                rounds,
            } => {
                let repr = Repr::parse_bytes(eap)?;
                if repr.code != Code::Response {
                    return Err(Error::Unexpected("not an EAP Response"));
                }
                let Some(expected) = *relayed else {
                    return Err(Error::Unexpected("a Response while waiting for the RADIUS server"));
                };
                if repr.identifier != expected {
                    return Err(Error::WrongIdentifier {
                        expected,
                        got: repr.identifier,
                    });
                }
                if *rounds >= MAX_RADIUS_ROUNDS {
                    let step = Step::Failure {
                        reason: FailureReason::TooManyRounds,
                        eap: eap_packet::build_result(false, repr.identifier),
                    };
                    self.inner = Inner::Done(Some(session.stats()));
                    return Ok(step);
                }
                *rounds += 1;
                *radius_id = self.next_radius_id.take().unwrap_or(radius_id.wrapping_add(1));
                session.send_eap(eap_body(eap)?, *radius_id, now, rng)?;
                *relayed = None;
                *last_response = repr.identifier;
                Ok(Step::Pending)
            }
        }
    }

    /// Has the next Access-Request (made by the next [`Authenticator::handle_response`])
    /// take RADIUS Identifier `id`: a caller that shares one socket among many
    /// authenticators keeps the Identifiers outstanding on it distinct (RFC 2865 3: the
    /// server takes a request with the Identifier of one it is working on from the same
    /// client for a duplicate). Without it: random, then consecutive.
    pub fn use_radius_identifier(&mut self, id: u8) {
        self.next_radius_id = Some(id);
    }

    /// Has the conversation start on RADIUS server `server` (an index into the backend's
    /// servers: the caller keeps which are up); later rounds stay on the server the
    /// conversation is on (its State is that server's).
    pub fn use_radius_server(&mut self, server: usize) {
        self.next_radius_server = Some(server);
    }

    /// The RADIUS server the conversation is on (RADIUS backend).
    pub fn radius_server(&self) -> Option<usize> {
        match &self.inner {
            Inner::Radius { session, .. } => Some(session.server()),
            _ => None,
        }
    }

    /// The next RADIUS datagram to send (RADIUS backend).
    pub fn poll_radius_transmit(&mut self) -> Option<Vec<u8>> {
        match &mut self.inner {
            Inner::Radius { session, .. } => session.poll_transmit(),
            _ => None,
        }
    }

    /// When [`Authenticator::handle_timeout`] must be called (RADIUS retransmissions).
    pub fn poll_timeout(&self) -> Option<Duration> {
        match &self.inner {
            Inner::Radius { session, .. } => session.poll_timeout(),
            _ => None,
        }
    }

    /// The RADIUS client's counters (RADIUS backend).
    pub fn radius_stats(&self) -> Option<radius::Stats> {
        match &self.inner {
            Inner::Radius { session, .. } => Some(session.stats()),
            Inner::Done(stats) => *stats,
            _ => None,
        }
    }

    /// The RADIUS Identifier awaited (for demultiplexing answers on a shared socket).
    pub fn radius_identifier(&self) -> Option<u8> {
        match &self.inner {
            Inner::Radius { session, .. } => session.outstanding_identifier(),
            _ => None,
        }
    }

    /// Retransmits to the RADIUS server, or ends with [`FailureReason::RadiusServerDown`].
    pub fn handle_timeout(&mut self, now: Duration) -> Option<Step> {
        self.timeout(now, None)
    }

    /// [`Authenticator::handle_timeout`] with failover: when every try on the request's
    /// server timed out, `next(failed, tried)` (the failed server, the servers this request
    /// went to as a bit set) names another server and a free RADIUS Identifier, and the
    /// request goes there (new Identifier and Request Authenticator, that server's secret);
    /// None: the conversation ends with [`FailureReason::RadiusServerDown`].
    pub fn handle_timeout_failover(
        &mut self,
        now: Duration,
        rng: &mut dyn CryptoRngCore,
        next: &mut dyn FnMut(usize, u32) -> Option<(usize, u8)>,
    ) -> Option<Step> {
        self.timeout(now, Some((rng, next)))
    }

    #[allow(clippy::type_complexity)]
    fn timeout(
        &mut self,
        now: Duration,
        failover: Option<(
            &mut dyn CryptoRngCore,
            &mut dyn FnMut(usize, u32) -> Option<(usize, u8)>,
        )>,
    ) -> Option<Step> {
        let Inner::Radius {
            session,
            last_response,
            radius_id,
            ..
        } = &mut self.inner
        else {
            return None;
        };
        match session.handle_timeout(now)? {
            Answer::ServerDown => {
                if let Some((rng, next)) = failover {
                    if let Some((server, id)) = next(session.server(), session.tried()) {
                        if session.resend(server, id, now, rng).is_ok() {
                            *radius_id = id;
                            return None;
                        }
                    }
                }
                let step = Step::Failure {
                    reason: FailureReason::RadiusServerDown,
                    eap: eap_packet::build_result(false, *last_response),
                };
                self.inner = Inner::Done(Some(session.stats()));
                Some(step)
            }
            _ => None,
        }
    }

    /// Handles a datagram from the RADIUS server. An error means it was dropped (and
    /// counted in [`Authenticator::radius_stats`]).
    pub fn handle_radius(&mut self, datagram: &[u8]) -> Result<Step, Error> {
        let server = self.radius_server().unwrap_or(0);
        self.handle_radius_from(server, datagram)
    }

    /// [`Authenticator::handle_radius`] for a datagram from RADIUS server `server`.
    pub fn handle_radius_from(&mut self, server: usize, datagram: &[u8]) -> Result<Step, Error> {
        let Inner::Radius {
            session,
            relayed,
            last_response,
            ..
        } = &mut self.inner
        else {
            return Err(Error::Unexpected("no RADIUS exchange"));
        };
        let answer = session.handle_datagram_from(server, datagram)?;
        let last = *last_response;
        let step = match answer {
            Answer::Challenge(eap) => {
                // An authenticated answer was consumed: what it carries must be usable, or
                // the exchange ends (nothing is outstanding any more to wait for).
                match Repr::parse_bytes(&eap) {
                    Ok(repr) if repr.code == Code::Request => {
                        *relayed = Some(repr.identifier);
                        return Ok(Step::Send(eap));
                    }
                    _ => Step::Failure {
                        reason: FailureReason::RadiusBadEap,
                        eap: eap_packet::build_result(false, last),
                    },
                }
            }
            Answer::Accept { eap, msk } => match msk {
                Some(msk) => Step::Success {
                    msk,
                    eap: eap
                        .filter(|e| Repr::parse_bytes(e).map(|r| r.code == Code::Success).unwrap_or(false))
                        .unwrap_or_else(|| eap_packet::build_result(true, last)),
                },
                // A key-generating method must give keys to bind the IKE SA (RFC 7296 §2.16).
                None => Step::Failure {
                    reason: FailureReason::NoMsk,
                    eap: eap_packet::build_result(false, last),
                },
            },
            Answer::Reject { .. } => Step::Failure {
                reason: FailureReason::RadiusReject,
                eap: eap_packet::build_result(false, last),
            },
            Answer::ServerDown => Step::Failure {
                reason: FailureReason::RadiusServerDown,
                eap: eap_packet::build_result(false, last),
            },
        };
        let stats = session.stats();
        self.inner = Inner::Done(Some(stats));
        Ok(step)
    }
}

/// The EAP packet up to its Length (padding dropped before it is relayed).
fn eap_body(eap: &[u8]) -> Result<&[u8], Error> {
    let b = eap.get(..4).ok_or(Error::Truncated)?;
    let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
    eap.get(..len).ok_or(Error::Truncated)
}
