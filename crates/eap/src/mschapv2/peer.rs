//! The EAP-MSCHAPv2 peer (the client): answers EAP-Identity, the Challenge, checks the
//! server's "S=" authenticator response (RFC 2759 §8.8) before it acknowledges, and takes
//! EAP-Success only after that. Used by the project's tests and load generator.

use super::message::Message;
use crate::mppe_keys;
use crate::ms_chap::{self, NtHash};
use crate::packet::{self, Code, Repr, Type};
use crate::{Error, Msk};
use alloc::vec::Vec;
use core::fmt;
use rand_core::CryptoRngCore;
use subtle::ConstantTimeEq;

/// How many EAP Requests one exchange answers at most (a normal one takes 3).
pub const MAX_ROUNDS: u8 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    IdentitySent,
    ResponseSent,
    SuccessAckSent,
    FailureAckSent,
    Done,
}

/// What the peer does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerStep {
    /// Send this EAP Response.
    Send(Vec<u8>),
    /// EAP-Success after a verified server: the MSK.
    Success(Msk),
    /// EAP-Failure.
    Failure,
}

/// One EAP-MSCHAPv2 exchange, peer side.
pub struct Peer {
    identity: Vec<u8>,
    hash: NtHash,
    state: State,
    rounds: u8,
    last: Option<(u8, Vec<u8>)>,
    expected_auth: [u8; 20],
    msk: Option<Msk>,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("state", &self.state)
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

impl Peer {
    /// A peer with its identity (`DOMAIN\user` or `user`) and password.
    pub fn new(identity: &[u8], password: &str) -> Result<Peer, Error> {
        Ok(Peer::with_hash(identity, NtHash::from_password(password)?))
    }

    /// A peer with its identity and NT hash.
    pub fn with_hash(identity: &[u8], hash: NtHash) -> Peer {
        Peer {
            identity: identity.to_vec(),
            hash,
            state: State::Start,
            rounds: 0,
            last: None,
            expected_auth: [0; 20],
            msk: None,
        }
    }

    /// Handles an EAP Request, Success or Failure from the authenticator.
    pub fn handle(&mut self, eap: &[u8], rng: &mut dyn CryptoRngCore) -> Result<PeerStep, Error> {
        if self.state == State::Done {
            return Err(Error::Finished);
        }
        let repr = Repr::parse_bytes(eap)?;
        match repr.code {
            Code::Response => return Err(Error::Unexpected("an EAP Response sent to the peer")),
            Code::Failure => {
                self.state = State::Done;
                self.msk = None;
                return Ok(PeerStep::Failure);
            }
            Code::Success => {
                // RFC 3748 §4.2: the Identifier is the one of the last Response; and only
                // after the server proved itself (the Success-Response went out).
                let last_id = self.last.as_ref().map(|l| l.0);
                if self.state != State::SuccessAckSent {
                    return Err(Error::Unexpected("EAP-Success before the server authenticated"));
                }
                if last_id != Some(repr.identifier) {
                    return Err(Error::WrongIdentifier {
                        expected: last_id.unwrap_or(0),
                        got: repr.identifier,
                    });
                }
                self.state = State::Done;
                return self
                    .msk
                    .take()
                    .map(PeerStep::Success)
                    .ok_or(Error::Unexpected("no MSK"));
            }
            Code::Request => {}
        }
        // RFC 3748 §4.1: a retransmitted Request (same Identifier) gets the same Response.
        if let Some((id, resp)) = &self.last {
            if *id == repr.identifier {
                return Ok(PeerStep::Send(resp.clone()));
            }
        }
        if self.rounds >= MAX_ROUNDS {
            self.state = State::Done;
            return Err(Error::TooManyRounds);
        }
        let (t, data) = repr.data.ok_or(Error::Malformed("Request without a Type"))?;
        let id = repr.identifier;
        let (next, resp) = match (t, self.state) {
            (Type::Identity, State::Start | State::IdentitySent) => (
                State::IdentitySent,
                packet::build(Code::Response, id, Type::Identity, &self.identity)?,
            ),
            (Type::Notification, _) => {
                // RFC 3748 §5.2: acknowledged with an empty Notification Response.
                (self.state, packet::build(Code::Response, id, Type::Notification, &[])?)
            }
            (Type::MsChapV2, _) => {
                let msg = Message::parse(true, data)?;
                self.mschapv2(id, msg, rng)?
            }
            (Type::Identity, _) => return Err(Error::Unexpected("Identity Request mid-method")),
            (_, State::Start | State::IdentitySent) => {
                // RFC 3748 §5.3.1: Nak the method, proposing MSCHAPv2.
                (
                    self.state,
                    packet::build(Code::Response, id, Type::Nak, &[Type::MsChapV2.to_u8()])?,
                )
            }
            _ => return Err(Error::Unexpected("Request of another method mid-method")),
        };
        self.rounds += 1;
        self.state = next;
        self.last = Some((id, resp.clone()));
        Ok(PeerStep::Send(resp))
    }

    fn mschapv2(&mut self, id: u8, msg: Message<'_>, rng: &mut dyn CryptoRngCore) -> Result<(State, Vec<u8>), Error> {
        match (self.state, msg) {
            (State::Start | State::IdentitySent, Message::Challenge { ms_id, challenge, .. }) => {
                let mut pc = [0u8; 16];
                rng.fill_bytes(&mut pc);
                let nt = ms_chap::generate_nt_response(&challenge, &pc, &self.identity, &self.hash);
                self.expected_auth = ms_chap::authenticator_response(&self.hash, &nt, &pc, &challenge, &self.identity);
                self.msk = Some(mppe_keys::msk(&self.hash, &nt));
                let body = Message::Response {
                    ms_id,
                    peer_challenge: pc,
                    nt_response: nt,
                    flags: 0,
                    name: &self.identity,
                }
                .to_vec()?;
                Ok((
                    State::ResponseSent,
                    packet::build(Code::Response, id, Type::MsChapV2, &body)?,
                ))
            }
            (State::ResponseSent, Message::SuccessRequest { message, .. }) => {
                let got = ms_chap::parse_authenticator_response(message)?;
                if !bool::from(got.ct_eq(&self.expected_auth)) {
                    self.state = State::Done;
                    self.msk = None;
                    return Err(Error::BadAuthenticatorResponse);
                }
                let body = Message::SuccessResponse.to_vec()?;
                Ok((
                    State::SuccessAckSent,
                    packet::build(Code::Response, id, Type::MsChapV2, &body)?,
                ))
            }
            (State::ResponseSent, Message::FailureRequest { .. }) => {
                self.msk = None;
                let body = Message::FailureResponse.to_vec()?;
                Ok((
                    State::FailureAckSent,
                    packet::build(Code::Response, id, Type::MsChapV2, &body)?,
                ))
            }
            _ => Err(Error::Unexpected("MSCHAPv2 Request out of order")),
        }
    }
}
