//! The EAP-TLS peer (RFC 5216 §2.1, RFC 9190 §2.1): answers the Start with a ClientHello,
//! carries the handshake in Responses (fragmented both ways, §2.1.5), ACKs the server's last
//! flight, and takes EAP-Success only after the handshake finished (and, with TLS 1.3,
//! after the protected success indication, RFC 9190 §2.5).

use super::config::{PeerConfig, WallClock};
use super::fragment::{Fragmenter, Reassembler};
use super::packet::{build_empty, Repr};
use super::{drain, feed, keys, MAX_ROUNDS};
use crate::packet::{self as eap, Code, Type};
use crate::{Error, Msk};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use rustls::ProtocolVersion;
use std::io::Read;

/// What the peer does next.
#[derive(Debug, PartialEq, Eq)]
pub enum PeerStep {
    /// Send this EAP Response.
    Send(Vec<u8>),
    /// EAP-Success after a finished handshake: the MSK.
    Success(Msk),
    /// EAP-Failure, or the handshake failed here (the alert, if any, was sent before).
    Failure,
}

/// One EAP-TLS exchange, peer side.
pub struct Peer {
    config: PeerConfig,
    conn: Option<rustls::ClientConnection>,
    out: Option<Fragmenter>,
    reasm: Reassembler,
    /// The Identifier of the last Request answered, and the answer (sent again for a
    /// retransmitted Request, RFC 3748 §4.1).
    last: Option<(u8, Vec<u8>)>,
    msk: Option<Msk>,
    /// TLS 1.3: the server's 0x00 application data arrived (RFC 9190 §2.5).
    success_indication: bool,
    failed: bool,
    rounds: u16,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("tls::Peer")
            .field("started", &self.conn.is_some())
            .field("finished", &self.msk.is_some())
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

impl Peer {
    /// A peer waiting for the server's Start.
    pub fn new(config: PeerConfig) -> Peer {
        Peer {
            config,
            conn: None,
            out: None,
            reasm: Reassembler::default(),
            last: None,
            msk: None,
            success_indication: false,
            failed: false,
            rounds: 0,
        }
    }

    fn clock(&self) -> &Arc<WallClock> {
        &self.config.clock
    }

    /// The TLS version negotiated (after the ServerHello).
    pub fn version(&self) -> Option<ProtocolVersion> {
        self.conn.as_ref().and_then(|c| c.protocol_version())
    }

    /// Handles an EAP Request, Success or Failure from the server. `unix`: the wall-clock
    /// time the server's certificate is checked at. An error means the packet was dropped.
    pub fn handle(&mut self, packet: &[u8], unix: Option<u64>) -> Result<PeerStep, Error> {
        let e = eap::Repr::parse_bytes(packet)?;
        match e.code {
            Code::Success => {
                let tls13 = self.version() == Some(ProtocolVersion::TLSv1_3);
                return match &self.msk {
                    Some(msk) if !self.failed && (!tls13 || self.success_indication) => {
                        Ok(PeerStep::Success(msk.clone()))
                    }
                    _ => Err(Error::Unexpected("EAP-Success before the TLS handshake finished")),
                };
            }
            Code::Failure => return Ok(PeerStep::Failure),
            Code::Response => return Err(Error::Unexpected("an EAP Response sent to the peer")),
            Code::Request => {}
        }
        if let Some((id, resp)) = &self.last {
            if *id == e.identifier {
                return Ok(PeerStep::Send(resp.clone()));
            }
        }
        let Some((Type::Tls, type_data)) = e.data else {
            return Err(Error::Unexpected("not an EAP-TLS Request"));
        };
        let r = Repr::parse(Code::Request, e.identifier, type_data)?;
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds > MAX_ROUNDS {
            return Err(Error::TooManyRounds);
        }
        if let Some(t) = unix {
            self.clock().set(t);
        }
        let id = e.identifier;
        if r.flags.start {
            if self.conn.is_some() {
                return Err(Error::Unexpected("a second EAP-TLS Start"));
            }
            let mut conn = rustls::ClientConnection::new(self.config.tls.clone(), self.config.server_name.clone())
                .map_err(|_| Error::Malformed("the TLS configuration cannot start a connection"))?;
            let hello = drain(&mut conn);
            self.conn = Some(conn);
            self.out = Some(Fragmenter::new(hello, self.config.fragment_size));
            return Ok(self.answer(id, None));
        }
        if self.conn.is_none() {
            return Err(Error::Unexpected("EAP-TLS data before the Start"));
        }
        if self.out.as_ref().is_some_and(|f| f.has_more()) {
            if !r.is_ack() {
                return Err(Error::Unexpected("TLS data where the ACK of our fragment was expected"));
            }
            return Ok(self.answer(id, None));
        }
        if r.is_ack() {
            return Err(Error::Unexpected("an ACK with no fragment of ours outstanding"));
        }
        let Some(msg) = self.reasm.push(&r)? else {
            return Ok(self.answer(id, Some(build_empty(Code::Response, id, false))));
        };
        let Some(conn) = self.conn.as_mut() else {
            return Err(Error::Unexpected("EAP-TLS data before the Start"));
        };
        let fed = feed(conn, &msg);
        if fed.is_err() {
            self.failed = true;
        }
        // RFC 9190 §2.5: the protected success indication is one octet 0x00.
        let mut app = [0u8; 2];
        if let Ok(n) = conn.reader().read(&mut app) {
            if n == 1 && app[0] == 0 && !conn.is_handshaking() {
                self.success_indication = true;
            } else if n > 0 {
                self.failed = true;
            }
        }
        if fed.is_ok() && !conn.is_handshaking() && self.msk.is_none() {
            self.msk = keys::msk(conn);
        }
        let out = drain(conn);
        let alert_received = matches!(fed, Err(rustls::Error::AlertReceived(_)));
        if out.is_empty() && self.failed && !alert_received {
            // Refused here with no alert to send: give up (the caller ends the exchange).
            return Ok(PeerStep::Failure);
        }
        if out.is_empty() {
            // Also the answer to the server's alert: the server ends with EAP-Failure
            // (RFC 5216 §2.1.3).
            return Ok(self.answer(id, Some(build_empty(Code::Response, id, false))));
        }
        self.out = Some(Fragmenter::new(out, self.config.fragment_size));
        Ok(self.answer(id, None))
    }

    /// The Response to Request `id`: `resp`, or the next fragment of ours.
    fn answer(&mut self, id: u8, resp: Option<Vec<u8>>) -> PeerStep {
        let resp = resp.or_else(|| self.out.as_mut().and_then(|f| f.next_packet(Code::Response, id)));
        match resp {
            Some(p) => {
                self.last = Some((id, p.clone()));
                PeerStep::Send(p)
            }
            None => PeerStep::Failure,
        }
    }

    /// Whether the handshake failed here (our alert, if any, went in a Response).
    pub fn failed(&self) -> bool {
        self.failed
    }
}
