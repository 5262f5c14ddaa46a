//! The exchanges, one module per exchange type (RFC 7296 1.2-1.4): each holds the request
//! builder and the request and response handlers of its exchange, for both roles.
//! `IkeSa::handle_message` checks the message ID window (2.3) and dispatches.
pub mod create_child_sa;
pub mod ike_auth;
pub mod ike_sa_init;
pub mod informational;

use crate::endpoint::Dropped;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa, Request, State};
use crate::message::Message;
use core::net::SocketAddr;
use rand_core::CryptoRngCore;

impl IkeSa {
    /// Handles a message that belongs to this SA (by SPI), except a new IKE_SA_INIT request.
    pub(crate) fn handle_message(
        &mut self,
        cx: &mut Cx,
        raw: &[u8],
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let h = &msg.header;
        // The I flag says who sent it: it must be the other role (3.1).
        if h.initiator == self.is_initiator() {
            return Err(Dropped::WrongRole);
        }
        if h.response {
            let Some(o) = self.outstanding.as_ref() else {
                return Err(Dropped::UnexpectedResponse);
            };
            if o.id != h.message_id || o.req_exchange() != h.exchange {
                return Err(Dropped::UnexpectedResponse);
            }
            let req = o.req.clone();
            if h.exchange == ExchangeType::IkeSaInit {
                return self.on_init_response(cx, raw, msg, local, remote, rng);
            }
            let payloads = self.open(raw, msg).map_err(Dropped::Malformed)?;
            self.authenticated_from(cx, local, remote);
            match req {
                Request::Auth => self.on_auth_response(cx, &payloads, rng),
                Request::DeleteIke | Request::DeleteChild(_) | Request::Dpd => {
                    self.on_info_response(cx, &req, &payloads)
                }
                Request::Init => {}
            }
            self.complete_request(cx, rng);
            return Ok(());
        }
        // A request. The previous one again: send the kept response (2.1).
        if h.message_id.wrapping_add(1) == self.peer_next_id {
            if let Some((id, bytes)) = &self.last_response {
                if *id == h.message_id {
                    let b = bytes.clone();
                    self.send(cx, &b);
                    return Ok(());
                }
            }
            return Err(Dropped::OutOfWindow);
        }
        if h.message_id != self.peer_next_id {
            return Err(Dropped::OutOfWindow);
        }
        if h.exchange == ExchangeType::IkeSaInit {
            return Err(Dropped::WrongState);
        }
        let payloads = match self.open(raw, msg) {
            Ok(p) => p,
            Err(crate::Error::BadIntegrity)
            | Err(crate::Error::BadPadding)
            | Err(crate::Error::Truncated)
            | Err(crate::Error::BadLength)
                if self.sk_in.is_some() =>
            {
                return Err(Dropped::Malformed(crate::Error::BadIntegrity));
            }
            Err(e) => {
                // Authenticated but malformed: INVALID_SYNTAX (or the critical payload we
                // cannot handle, 2.5), then, during IKE_AUTH, the SA is gone (2.21.2).
                if self.sk_in.is_none() {
                    return Err(Dropped::Malformed(e));
                }
                self.authenticated_from(cx, local, remote);
                let n = match e {
                    crate::Error::UnsupportedCritical(t) => {
                        crate::notify::Notify::ike(crate::notify::kind::UNSUPPORTED_CRITICAL_PAYLOAD, &[t])
                    }
                    _ => crate::notify::Notify::ike(crate::notify::kind::INVALID_SYNTAX, &[]),
                };
                self.peer_next_id = h.message_id.wrapping_add(1);
                self.respond(cx, h.exchange, h.message_id, &[crate::message::Payload::Notify(n)], rng);
                if self.state == State::InitDone {
                    self.kill(
                        cx,
                        crate::event::DownReason::PeerError(crate::notify::kind::INVALID_SYNTAX),
                    );
                }
                return Err(Dropped::Malformed(e));
            }
        };
        self.authenticated_from(cx, local, remote);
        self.peer_next_id = h.message_id.wrapping_add(1);
        match h.exchange {
            ExchangeType::IkeAuth => self.on_auth_request(cx, h.message_id, &payloads, rng),
            ExchangeType::Informational => self.on_info_request(cx, h.message_id, &payloads, rng),
            ExchangeType::CreateChildSa => self.on_create_child_request(cx, h.message_id, &payloads, rng),
            ExchangeType::IkeSaInit => {}
        }
        Ok(())
    }
}

impl crate::ike_sa::Outstanding {
    fn req_exchange(&self) -> ExchangeType {
        match self.req {
            Request::Init => ExchangeType::IkeSaInit,
            Request::Auth => ExchangeType::IkeAuth,
            _ => ExchangeType::Informational,
        }
    }
}
