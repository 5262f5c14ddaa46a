//! The EAP-MSCHAPv2 authenticator (draft-kamath-pppext-eap-mschapv2-02 §2, RFC 2759 §8):
//! Challenge -> Response checked -> Success-Request "S=..." -> Success-Response ->
//! EAP-Success with the MSK; or Failure-Request "E=691 R=0 ..." -> Failure-Response ->
//! EAP-Failure.

use super::message::Message;
use crate::mppe_keys;
use crate::ms_chap::{self, NtHash};
use crate::packet::{self, Code, Repr, Type};
use crate::server::{FailureReason, Step};
use crate::Error;
use alloc::vec::Vec;
use core::fmt;
use rand_core::CryptoRngCore;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// Where the server looks up a user's NT password hash (RFC 2759 §8.3) by the identity the
/// peer gave (tunneld backs it with its secrets file).
pub trait Credentials {
    /// The NT hash of `identity`'s password, or `None` for an unknown identity.
    fn nt_hash(&self, identity: &[u8]) -> Option<NtHash>;
}

/// How many EAP Responses one exchange takes at most (a well-behaved peer needs 2).
pub const MAX_ROUNDS: u8 = 6;

/// The name the server puts in its Challenge.
pub const SERVER_NAME: &[u8] = b"tunneld";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The Challenge is out; waiting for the Response.
    Challenged,
    /// "S=..." is out; waiting for the Success-Response.
    SuccessSent,
    /// "E=691" is out; waiting for the Failure-Response.
    FailureSent(FailureReason),
    Done,
}

/// One EAP-MSCHAPv2 exchange, authenticator side.
pub struct Server {
    state: State,
    identifier: u8,
    identity: Vec<u8>,
    challenge: [u8; 16],
    hash: NtHash,
    known: bool,
    rounds: u8,
    msk: Option<crate::Msk>,
    last_request: Vec<u8>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("state", &self.state)
            .field("identifier", &self.identifier)
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts the method for `identity` (from the EAP-Identity Response): returns the server
    /// and the EAP-Request/MSCHAPv2 Challenge with `identifier`. An unknown identity is
    /// challenged like a known one (with a random hash), so the peer cannot tell the two
    /// apart; it fails at the Response with [`FailureReason::UnknownIdentity`].
    pub fn start(
        identity: &[u8],
        identifier: u8,
        creds: &dyn Credentials,
        rng: &mut dyn CryptoRngCore,
    ) -> Result<(Server, Vec<u8>), Error> {
        let mut challenge = [0u8; 16];
        rng.fill_bytes(&mut challenge);
        let (hash, known) = match creds.nt_hash(identity) {
            Some(h) => (h, true),
            None => {
                let mut h = [0u8; 16];
                rng.fill_bytes(&mut h);
                (NtHash::from_bytes(h), false)
            }
        };
        let msg = Message::Challenge {
            ms_id: identifier,
            challenge,
            name: SERVER_NAME,
        }
        .to_vec()?;
        let req = packet::build(Code::Request, identifier, Type::MsChapV2, &msg)?;
        let s = Server {
            state: State::Challenged,
            identifier,
            identity: identity.to_vec(),
            challenge,
            hash,
            known,
            rounds: 0,
            msk: None,
            last_request: req.clone(),
        };
        Ok((s, req))
    }

    /// The last request sent (to retransmit it when the transport asks).
    pub fn last_request(&self) -> &[u8] {
        &self.last_request
    }

    /// The identity being authenticated.
    pub fn identity(&self) -> &[u8] {
        &self.identity
    }

    /// Why the exchange is failing once the Failure-Request is out (a peer may end the
    /// exchange there instead of sending its Failure-Response: strongSwan's client sends
    /// IKE's AUTHENTICATION_FAILED; the caller still logs the real reason).
    pub fn pending_failure(&self) -> Option<FailureReason> {
        match self.state {
            State::FailureSent(r) => Some(r),
            _ => None,
        }
    }

    /// Handles an EAP Response. A Response with the wrong Identifier, of the wrong kind for
    /// the state, or malformed is an error and changes nothing (the caller drops it; RFC
    /// 3748 §4.1); a wrong NT-Response leads to the Failure-Request.
    pub fn handle(&mut self, eap: &[u8]) -> Result<Step, Error> {
        if self.state == State::Done {
            return Err(Error::Finished);
        }
        let repr = Repr::parse_bytes(eap)?;
        if repr.code != Code::Response {
            return Err(Error::Unexpected("not an EAP Response"));
        }
        if repr.identifier != self.identifier {
            return Err(Error::WrongIdentifier {
                expected: self.identifier,
                got: repr.identifier,
            });
        }
        if self.rounds >= MAX_ROUNDS {
            return Ok(self.finish_failure(FailureReason::TooManyRounds));
        }
        self.rounds += 1;
        let (t, data) = repr.data.ok_or(Error::Malformed("Response without a Type"))?;
        match t {
            Type::MsChapV2 => {}
            Type::Nak => {
                // RFC 3748 §5.3.1: the peer wants another method; we offer only this one.
                if data.contains(&Type::MsChapV2.to_u8()) {
                    return Err(Error::Malformed("Nak asking for the method proposed"));
                }
                return Ok(self.finish_failure(FailureReason::NoCommonMethod));
            }
            _ => return Err(Error::Unexpected("Response of another method")),
        }
        let msg = Message::parse(false, data)?;
        match (self.state, msg) {
            (
                State::Challenged,
                Message::Response {
                    ms_id,
                    peer_challenge,
                    nt_response,
                    name,
                    ..
                },
            ) => {
                if ms_id != self.identifier {
                    return Err(Error::Malformed("MS-CHAPv2-ID does not match"));
                }
                // RFC 2759 §8.2: the user name the peer put in the Response goes into the
                // hash; it must be the identity the peer gave (a peer may not switch users).
                if name != &self.identity[..] {
                    return Ok(self.send_failure(FailureReason::WrongPassword));
                }
                let expected = ms_chap::generate_nt_response(&self.challenge, &peer_challenge, name, &self.hash);
                let ok: bool = expected.ct_eq(&nt_response).into();
                if !ok || !self.known {
                    let reason = if self.known {
                        FailureReason::WrongPassword
                    } else {
                        FailureReason::UnknownIdentity
                    };
                    return Ok(self.send_failure(reason));
                }
                let auth =
                    ms_chap::authenticator_response(&self.hash, &nt_response, &peer_challenge, &self.challenge, name);
                self.msk = Some(mppe_keys::msk(&self.hash, &nt_response));
                let mut text = Zeroizing::new(Vec::with_capacity(64));
                text.extend_from_slice(&ms_chap::format_authenticator_response(&auth));
                text.extend_from_slice(b" M=Welcome");
                let body = Message::SuccessRequest {
                    ms_id: self.identifier,
                    message: &text,
                }
                .to_vec()?;
                self.state = State::SuccessSent;
                Ok(Step::Send(self.next_request(&body)?))
            }
            (State::SuccessSent, Message::SuccessResponse) => {
                self.state = State::Done;
                let msk = self.msk.take().ok_or(Error::Unexpected("no MSK"))?;
                Ok(Step::Success {
                    msk,
                    eap: packet::build_result(true, self.identifier),
                })
            }
            (State::FailureSent(reason), Message::FailureResponse) => Ok(self.finish_failure(reason)),
            _ => {
                self.rounds -= 1; // a message out of order does not use a round
                Err(Error::Unexpected("MSCHAPv2 message out of order"))
            }
        }
    }

    fn next_request(&mut self, body: &[u8]) -> Result<Vec<u8>, Error> {
        self.identifier = self.identifier.wrapping_add(1);
        let mut body = body.to_vec();
        if body.len() >= 2 {
            body[1] = self.identifier; // MS-CHAPv2-ID follows the EAP Identifier
        }
        let req = packet::build(Code::Request, self.identifier, Type::MsChapV2, &body)?;
        self.last_request = req.clone();
        Ok(req)
    }

    fn send_failure(&mut self, reason: FailureReason) -> Step {
        // RFC 2759 §6 failure packet: E=691 (authentication failure), R=0 (no retry), C=
        // the challenge, V=3, M= a message.
        let mut text = Vec::with_capacity(80);
        text.extend_from_slice(b"E=691 R=0 C=");
        for b in self.challenge {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            text.push(HEX[usize::from(b >> 4)]);
            text.push(HEX[usize::from(b & 15)]);
        }
        text.extend_from_slice(b" V=3 M=Authentication failed");
        let body = Message::FailureRequest {
            ms_id: self.identifier,
            message: &text,
        }
        .to_vec();
        match body.and_then(|b| self.next_request(&b)) {
            Ok(req) => {
                self.state = State::FailureSent(reason);
                self.msk = None;
                Step::Send(req)
            }
            Err(_) => self.finish_failure(reason),
        }
    }

    fn finish_failure(&mut self, reason: FailureReason) -> Step {
        self.state = State::Done;
        self.msk = None;
        Step::Failure {
            reason,
            eap: packet::build_result(false, self.identifier),
        }
    }
}
