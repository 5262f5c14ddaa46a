//! A sans-IO RADIUS client for EAP pass-through (RFC 3579 §2): each EAP Response goes to
//! the server in an Access-Request (EAP-Message fragments of 253 octets, the State of the
//! last Access-Challenge echoed, a Message-Authenticator), each answer is checked (Response
//! Authenticator and Message-Authenticator, RFC 2865 §3 and RFC 3579 §3.2; a wrong one is
//! counted and dropped), and a request without a valid answer is retransmitted unchanged
//! (RFC 2865 §2.5) at the polled deadline, a bounded number of times, then
//! [`Answer::ServerDown`].
//!
//! Several servers (failover, as strongSwan's eap-radius `servers`): [`Config::fallback_secrets`]
//! names servers 1.. after server 0's [`Config::secret`]. A request whose tries on its server
//! are exhausted can be sent again to another ([`Session::resend`], chosen by the caller, who
//! knows which servers are up) with a new Identifier and a new Request Authenticator, signed
//! with that server's secret (RFC 2865 §2.5: a retransmission to another server is a new
//! request; RFC 3579 §2.6.1); answers are then taken from that server only.
//!
//! The caller owns the socket: it sends what [`Session::poll_transmit`] gives, feeds what
//! arrives to [`Session::handle_datagram`], and calls [`Session::handle_timeout`] when
//! [`Session::poll_timeout`] has passed. Time is a [`Duration`] since any fixed epoch.

use super::auth;
use super::mppe;
use super::packet::{attr, code, Builder, Packet, MAX_VALUE_LEN};
use crate::{Error, Msk};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use rand_core::CryptoRngCore;
use zeroize::Zeroizing;

/// The client's settings. The secret never shows in Debug.
#[derive(Clone)]
pub struct Config {
    /// The shared secret (RFC 2865 §3).
    pub secret: Zeroizing<Vec<u8>>,
    /// NAS-Identifier (RFC 2865 §5.32; a request needs it or NAS-IP-Address).
    pub nas_identifier: Vec<u8>,
    /// How long to wait for an answer before sending the request again.
    pub retransmit_after: Duration,
    /// How many times a request is sent at most (the first send included), per server.
    pub max_tries: u8,
    /// The shared secrets of servers 1, 2, ... (server 0's is `secret`), in failover order.
    pub fallback_secrets: Vec<Zeroizing<Vec<u8>>>,
    /// How long a server whose tries all timed out is skipped before it is tried again
    /// (for the caller that keeps the servers' health; default 60 s).
    pub retry_down_after: Duration,
}

impl Config {
    /// Defaults: 3 sends, 2 s apart (strongSwan's eap-radius tries 4 times from 2 s with a
    /// backoff of 1.4; here the interval is fixed and both are fields).
    pub fn new(secret: &[u8], nas_identifier: &[u8]) -> Config {
        Config {
            secret: Zeroizing::new(secret.to_vec()),
            nas_identifier: nas_identifier.to_vec(),
            retransmit_after: Duration::from_secs(2),
            max_tries: 3,
            fallback_secrets: Vec::new(),
            retry_down_after: Duration::from_secs(60),
        }
    }

    /// How many servers there are (1 + the fallbacks).
    pub fn servers(&self) -> usize {
        1 + self.fallback_secrets.len()
    }

    /// Server `server`'s secret.
    pub fn secret_of(&self, server: usize) -> Option<&[u8]> {
        match server {
            0 => Some(&self.secret),
            n => self.fallback_secrets.get(n - 1).map(|s| &s[..]),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("nas_identifier", &self.nas_identifier)
            .field("retransmit_after", &self.retransmit_after)
            .field("max_tries", &self.max_tries)
            .field("servers", &self.servers())
            .finish_non_exhaustive()
    }
}

/// What an answer (or its absence) means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Access-Challenge: the EAP Request to relay to the peer.
    Challenge(Vec<u8>),
    /// Access-Accept: its EAP packet (normally EAP-Success) and the MSK made from
    /// MS-MPPE-Recv-Key | MS-MPPE-Send-Key (None when the server sent no keys).
    Accept { eap: Option<Vec<u8>>, msk: Option<Msk> },
    /// Access-Reject and its EAP packet (normally EAP-Failure).
    Reject { eap: Option<Vec<u8>> },
    /// No valid answer after every try.
    ServerDown,
}

/// Counters (what was dropped and why).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub requests: u64,
    pub retransmissions: u64,
    /// Answers whose Response Authenticator or Message-Authenticator was wrong or missing.
    pub bad_authenticator: u64,
    /// Answers to no outstanding request (late duplicates, another identifier).
    pub unexpected: u64,
    /// Answers that did not parse.
    pub malformed: u64,
    /// Requests sent again to another server after every try on theirs timed out.
    pub failovers: u64,
}

#[derive(Clone)]
struct Outstanding {
    identifier: u8,
    /// The server it went to (index into the config's servers).
    server: usize,
    request_auth: [u8; 16],
    datagram: Vec<u8>,
    tries: u8,
    deadline: Duration,
}

/// One EAP conversation relayed through a RADIUS server.
pub struct Session {
    config: Config,
    user_name: Vec<u8>,
    state: Option<Vec<u8>>,
    outstanding: Option<Outstanding>,
    transmit: Option<Vec<u8>>,
    stats: Stats,
    /// The server requests go to (the caller's choice, [`Session::use_server`]).
    server: usize,
    /// The EAP packet of the last request, until it is answered (for [`Session::resend`]).
    last_eap: Option<Vec<u8>>,
    /// Servers the last request went to (bit n: server n).
    tried: u32,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field(
                "outstanding",
                &self.outstanding.as_ref().map(|o| (o.identifier, o.tries)),
            )
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A session for `user_name` (the EAP-Identity, copied to User-Name, RFC 3579 §2.1).
    pub fn new(config: Config, user_name: &[u8]) -> Result<Session, Error> {
        if user_name.len() > MAX_VALUE_LEN {
            return Err(Error::Malformed("identity longer than a User-Name"));
        }
        Ok(Session {
            config,
            user_name: user_name.to_vec(),
            state: None,
            outstanding: None,
            transmit: None,
            stats: Stats::default(),
            server: 0,
            last_eap: None,
            tried: 0,
        })
    }

    /// Sends the following requests to server `server` (an index into the config's
    /// servers; out of range: ignored).
    pub fn use_server(&mut self, server: usize) {
        if server < self.config.servers() {
            self.server = server;
        }
    }

    /// The server requests go to, and the outstanding one went to.
    pub fn server(&self) -> usize {
        self.server
    }

    /// The servers the last request was sent to (bit n: server n).
    pub fn tried(&self) -> u32 {
        self.tried
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Queues an Access-Request carrying `eap`, with RADIUS `identifier` (the caller keeps
    /// identifiers of requests outstanding on one socket distinct). One request at a time.
    pub fn send_eap(
        &mut self,
        eap: &[u8],
        identifier: u8,
        now: Duration,
        rng: &mut dyn CryptoRngCore,
    ) -> Result<(), Error> {
        if self.outstanding.is_some() {
            return Err(Error::Unexpected("a RADIUS request is already outstanding"));
        }
        self.tried = 0;
        self.last_eap = Some(eap.to_vec());
        self.stats.requests += 1;
        self.send_to(identifier, now, rng)
    }

    /// Sends the last request again to `server`, with `identifier` and a new Request
    /// Authenticator, after [`Session::handle_timeout`] gave up on its server (failover):
    /// an error when there is no such request, it is still outstanding, or no such server.
    pub fn resend(
        &mut self,
        server: usize,
        identifier: u8,
        now: Duration,
        rng: &mut dyn CryptoRngCore,
    ) -> Result<(), Error> {
        if self.outstanding.is_some() || self.last_eap.is_none() {
            return Err(Error::Unexpected("no timed-out RADIUS request to send again"));
        }
        if server >= self.config.servers() {
            return Err(Error::Unexpected("no such RADIUS server"));
        }
        self.server = server;
        self.stats.failovers += 1;
        self.send_to(identifier, now, rng)
    }

    fn send_to(&mut self, identifier: u8, now: Duration, rng: &mut dyn CryptoRngCore) -> Result<(), Error> {
        let eap = self.last_eap.clone().unwrap_or_default();
        let secret = self.config.secret_of(self.server).unwrap_or(&self.config.secret);
        let mut request_auth = [0u8; 16];
        rng.fill_bytes(&mut request_auth);
        let mut b = Builder::new(code::ACCESS_REQUEST, identifier, &request_auth);
        b.attr(attr::USER_NAME, &self.user_name)?;
        b.attr(attr::NAS_IDENTIFIER, &self.config.nas_identifier)?;
        b.attr(attr::SERVICE_TYPE, &2u32.to_be_bytes())?; // Framed
        b.attr(attr::NAS_PORT_TYPE, &5u32.to_be_bytes())?; // Virtual
                                                           // RFC 3579 §2.4: a Framed-MTU keeps the server's EAP packets within the IKE path.
        b.attr(attr::FRAMED_MTU, &1400u32.to_be_bytes())?;
        if let Some(s) = &self.state {
            b.attr(attr::STATE, s)?;
        }
        b.fragmented(attr::EAP_MESSAGE, &eap)?;
        b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder())?;
        let mut datagram = b.finish();
        auth::sign_request(secret, &mut datagram)?;
        self.tried |= 1u32.checked_shl(self.server as u32).unwrap_or(0);
        self.transmit = Some(datagram.clone());
        self.outstanding = Some(Outstanding {
            identifier,
            server: self.server,
            request_auth,
            datagram,
            tries: 1,
            deadline: now + self.config.retransmit_after,
        });
        Ok(())
    }

    /// The next datagram to send to the server.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.take()
    }

    /// When [`Session::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.outstanding.as_ref().map(|o| o.deadline)
    }

    /// The RADIUS Identifier of the outstanding request (for the caller's demultiplexing).
    pub fn outstanding_identifier(&self) -> Option<u8> {
        self.outstanding.as_ref().map(|o| o.identifier)
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Retransmits a request whose deadline passed, or gives up after the last try.
    pub fn handle_timeout(&mut self, now: Duration) -> Option<Answer> {
        let o = self.outstanding.as_mut()?;
        if now < o.deadline {
            return None;
        }
        if o.tries >= self.config.max_tries {
            self.outstanding = None;
            self.transmit = None;
            return Some(Answer::ServerDown);
        }
        o.tries += 1;
        o.deadline = now + self.config.retransmit_after;
        self.stats.retransmissions += 1;
        self.transmit = Some(o.datagram.clone());
        None
    }

    /// Handles a datagram from the server. An error means it was dropped (and counted);
    /// the request stays outstanding.
    pub fn handle_datagram(&mut self, bytes: &[u8]) -> Result<Answer, Error> {
        let server = self.outstanding.as_ref().map_or(self.server, |o| o.server);
        self.handle_datagram_from(server, bytes)
    }

    /// [`Session::handle_datagram`] for a datagram that came from server `server`: one from
    /// another server than the outstanding request's is unexpected (dropped, counted).
    pub fn handle_datagram_from(&mut self, server: usize, bytes: &[u8]) -> Result<Answer, Error> {
        let p = match Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        let Some(o) = self
            .outstanding
            .as_ref()
            .filter(|o| o.identifier == p.identifier() && o.server == server)
        else {
            self.stats.unexpected += 1;
            return Err(Error::Unexpected("RADIUS answer to no outstanding request"));
        };
        let request_auth = o.request_auth;
        let secret = Zeroizing::new(self.config.secret_of(o.server).unwrap_or(&self.config.secret).to_vec());
        let repr = match auth::verify_response(&secret, &request_auth, bytes) {
            Ok(r) => r,
            Err(Error::BadAuthenticator) => {
                self.stats.bad_authenticator += 1;
                return Err(Error::BadAuthenticator);
            }
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        let eap = repr.eap_message();
        let answer = match repr.code {
            code::ACCESS_CHALLENGE => {
                let Some(eap) = eap else {
                    self.stats.malformed += 1;
                    return Err(Error::Malformed("Access-Challenge without EAP-Message"));
                };
                self.state = repr.get(attr::STATE).map(|s| s.to_vec());
                Answer::Challenge(eap)
            }
            code::ACCESS_ACCEPT => {
                let (recv, send) = match mppe::keys(&repr, &secret, &request_auth) {
                    Ok(k) => k,
                    Err(e) => {
                        self.stats.malformed += 1;
                        return Err(e);
                    }
                };
                let msk = match (recv, send) {
                    (Some(r), Some(s)) => Some(Msk::from_recv_send(&r, &s)),
                    _ => None,
                };
                Answer::Accept { eap, msk }
            }
            code::ACCESS_REJECT => Answer::Reject { eap },
            _ => {
                self.stats.unexpected += 1;
                return Err(Error::Unexpected("RADIUS code that is no answer"));
            }
        };
        self.outstanding = None;
        self.transmit = None;
        self.last_eap = None;
        Ok(answer)
    }
}
