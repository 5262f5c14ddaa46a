//! The EAP-TLS authenticator (RFC 5216 §2.1, RFC 9190 §2.1): Start, the TLS handshake
//! carried in EAP-TLS Requests and Responses (fragmented both ways, §2.1.5), then
//! EAP-Success with the MSK or EAP-Failure.
//!
//! ```text
//! TLS 1.2 (RFC 5216 §2.1.1)                 TLS 1.3 (RFC 9190 §2.1.1)
//! -> EAP-TLS Start                          -> EAP-TLS Start
//! <- ClientHello                            <- ClientHello
//! -> ServerHello .. ServerHelloDone         -> ServerHello .. Finished
//! <- Certificate .. Finished                <- Certificate, CertificateVerify, Finished
//! -> ChangeCipherSpec, Finished             -> 0x00 (protected success indication, §2.5)
//! <- (empty: ACK)                           <- (empty: ACK)
//! -> EAP-Success                            -> EAP-Success
//! ```
//!
//! A flight longer than the fragment size goes in several Requests, each ACKed by an empty
//! Response; a fragmented Response is ACKed by an empty Request. A TLS error (a client
//! certificate that does not chain to the configured CAs, none at all, a bad signature)
//! sends rustls's alert in a Request and, after the peer's answer, EAP-Failure (§2.1.3).
//!
//! Every call with outside bytes answers a typed [`Error`] (the packet dropped, nothing
//! changed) or a [`Step`]; the rounds are bounded ([`MAX_ROUNDS`]), the reassembly too
//! ([`super::fragment::MAX_TLS_MESSAGE_LEN`]).

use super::config::{ServerConfig, WallClock};
use super::fragment::{Fragmenter, Reassembler};
use super::packet::{build_empty, Repr};
use super::{drain, feed, keys};
use crate::packet::{self as eap, Code, Type};
use crate::server::{FailureReason, Step};
use crate::{Error, Msk};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use rustls::ProtocolVersion;
use std::io::Write;

/// How many EAP-TLS Responses one exchange takes at most (a full handshake with 1 KiB
/// fragments takes under 20).
pub const MAX_ROUNDS: u16 = 512;

enum State {
    /// The handshake runs.
    Handshake,
    /// Our last flight is out (TLS 1.2: ChangeCipherSpec and Finished; TLS 1.3: the success
    /// indication); waiting for the peer's ACK to send EAP-Success.
    Finishing(Msk),
    /// A TLS alert is out; whatever answers it ends in EAP-Failure.
    Failing(FailureReason),
    Done,
}

/// One EAP-TLS exchange, authenticator side.
pub struct Server {
    conn: rustls::ServerConnection,
    clock: Arc<WallClock>,
    fragment_size: usize,
    state: State,
    /// The Identifier of the outstanding Request.
    identifier: u8,
    out: Option<Fragmenter>,
    reasm: Reassembler,
    rounds: u16,
    peer_cert: Option<Vec<u8>>,
    version: Option<ProtocolVersion>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Handshake => "handshake",
            State::Finishing(_) => "finishing",
            State::Failing(_) => "failing",
            State::Done => "done",
        };
        f.debug_struct("tls::Server")
            .field("state", &state)
            .field("identifier", &self.identifier)
            .field("rounds", &self.rounds)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts an exchange: the server and the EAP-TLS Start (RFC 5216 §3.1, S flag) with
    /// `identifier`.
    pub fn start(config: &ServerConfig, identifier: u8) -> Result<(Server, Vec<u8>), Error> {
        let conn = rustls::ServerConnection::new(config.tls.clone())
            .map_err(|_| Error::Malformed("the TLS configuration cannot start a connection"))?;
        let start = build_empty(Code::Request, identifier, true);
        Ok((
            Server {
                conn,
                clock: config.clock.clone(),
                fragment_size: config.fragment_size,
                state: State::Handshake,
                identifier,
                out: None,
                reasm: Reassembler::default(),
                rounds: 0,
                peer_cert: None,
                version: None,
            },
            start,
        ))
    }

    /// The client's certificate (DER) once the handshake verified it.
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        self.peer_cert.as_deref()
    }

    /// The TLS version negotiated (after the ServerHello).
    pub fn version(&self) -> Option<ProtocolVersion> {
        self.version.or_else(|| self.conn.protocol_version())
    }

    /// Why the exchange is failing once the alert is out (for a peer that gives up there).
    pub fn pending_failure(&self) -> Option<FailureReason> {
        match self.state {
            State::Failing(r) => Some(r),
            _ => None,
        }
    }

    /// Handles the peer's EAP Response. `unix`: the wall-clock time (seconds since 1970) the
    /// client's certificate is checked at; without one the certificate is refused. An error
    /// means the packet was dropped and nothing changed; [`Error::Finished`] once the
    /// exchange ended.
    pub fn handle(&mut self, packet: &[u8], unix: Option<u64>) -> Result<Step, Error> {
        if matches!(self.state, State::Done) {
            return Err(Error::Finished);
        }
        let e = eap::Repr::parse_bytes(packet)?;
        if e.code != Code::Response {
            return Err(Error::Unexpected("not an EAP Response"));
        }
        if e.identifier != self.identifier {
            return Err(Error::WrongIdentifier {
                expected: self.identifier,
                got: e.identifier,
            });
        }
        let type_data = match e.data {
            // RFC 3748 §5.3.1: the peer refuses EAP-TLS.
            Some((Type::Nak, _)) => return Ok(self.fail(FailureReason::NoCommonMethod)),
            Some((Type::Tls, d)) => d,
            _ => return Err(Error::Unexpected("not an EAP-TLS Response")),
        };
        let r = Repr::parse(Code::Response, e.identifier, type_data)?;
        if r.flags.start {
            return Err(Error::Malformed("the S flag in a Response"));
        }
        // Fragments of ours are outstanding: only an ACK moves them on (§2.1.5).
        if self.out.as_ref().is_some_and(|f| f.has_more()) {
            if !r.is_ack() {
                return Err(Error::Unexpected("TLS data where the ACK of our fragment was expected"));
            }
            return Ok(self.next_round(|s| s.send_next()));
        }
        match &self.state {
            State::Finishing(_) if r.is_ack() => {
                let State::Finishing(msk) = core::mem::replace(&mut self.state, State::Done) else {
                    return Err(Error::Finished);
                };
                return Ok(Step::Success {
                    msk,
                    eap: eap::build_result(true, self.identifier),
                });
            }
            State::Failing(reason) => {
                let reason = *reason;
                return Ok(self.fail(reason));
            }
            State::Handshake | State::Finishing(_) | State::Done => {}
        }
        if r.is_ack() {
            return Err(Error::Unexpected("an ACK with no fragment of ours outstanding"));
        }
        let Some(msg) = self.reasm.push(&r)? else {
            // More fragments to come: ACK this one with an empty Request.
            return Ok(self.next_round(|s| {
                s.identifier = s.identifier.wrapping_add(1);
                Step::Send(build_empty(Code::Request, s.identifier, false))
            }));
        };
        if matches!(self.state, State::Finishing(_)) {
            // TLS data instead of the ACK of our last flight: the peer's alert, it refused
            // that flight (RFC 5216 §2.1.3). rustls reads it for its log; the exchange fails.
            let _ = feed(&mut self.conn, &msg);
            return Ok(self.fail(FailureReason::TlsHandshake));
        }
        if let Some(t) = unix {
            self.clock.set(t);
        }
        Ok(self.next_round(|s| s.process(&msg)))
    }

    /// Counts a round and does `f`, or fails once there were too many.
    fn next_round(&mut self, f: impl FnOnce(&mut Server) -> Step) -> Step {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds > MAX_ROUNDS {
            return self.fail(FailureReason::TooManyRounds);
        }
        f(self)
    }

    /// A whole TLS message from the peer: into rustls, and its answer out.
    fn process(&mut self, msg: &[u8]) -> Step {
        if let Err(e) = feed(&mut self.conn, msg) {
            let reason = failure_reason(&e);
            // rustls queued an alert: it goes to the peer first (RFC 5216 §2.1.3).
            let alert = drain(&mut self.conn);
            if alert.is_empty() {
                return self.fail(reason);
            }
            self.state = State::Failing(reason);
            self.out = Some(Fragmenter::new(alert, self.fragment_size));
            return self.send_next();
        }
        self.version = self.conn.protocol_version();
        if !self.conn.is_handshaking() {
            self.peer_cert = self
                .conn
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.as_ref().to_vec());
            let Some(msk) = keys::msk(&self.conn) else {
                return self.fail(FailureReason::NoMsk);
            };
            if self.peer_cert.is_none() {
                // The verifier requires one; never accept a handshake without it.
                return self.fail(FailureReason::CertificateRefused);
            }
            if self.version == Some(ProtocolVersion::TLSv1_3) {
                // RFC 9190 §2.5: one octet 0x00 of application data, the protected success
                // indication, after the server's last handshake message.
                if self.conn.writer().write_all(&[0x00]).is_err() {
                    return self.fail(FailureReason::TlsHandshake);
                }
            }
            self.state = State::Finishing(msk);
        }
        let out = drain(&mut self.conn);
        if out.is_empty() {
            // The peer's flight left rustls with nothing to say: it cannot go on.
            return self.fail(FailureReason::TlsHandshake);
        }
        self.out = Some(Fragmenter::new(out, self.fragment_size));
        self.send_next()
    }

    /// The next fragment of ours in a new Request.
    fn send_next(&mut self) -> Step {
        self.identifier = self.identifier.wrapping_add(1);
        match self
            .out
            .as_mut()
            .and_then(|f| f.next_packet(Code::Request, self.identifier))
        {
            Some(p) => Step::Send(p),
            None => self.fail(FailureReason::TlsHandshake),
        }
    }

    fn fail(&mut self, reason: FailureReason) -> Step {
        self.state = State::Done;
        Step::Failure {
            reason,
            eap: eap::build_result(false, self.identifier),
        }
    }
}

/// What a rustls error means for the log: the client's certificate refused, or the
/// handshake failing otherwise.
fn failure_reason(e: &rustls::Error) -> FailureReason {
    match e {
        rustls::Error::InvalidCertificate(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::InvalidCertRevocationList(_)
        | rustls::Error::FailedToGetCurrentTime => FailureReason::CertificateRefused,
        _ => FailureReason::TlsHandshake,
    }
}
