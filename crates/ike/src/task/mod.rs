//! The exchanges as tasks, the way strongSwan's `sa/ikev2/tasks/` are: each module holds
//! one kind of exchange, its state as the initiator (a struct in [`Task`]), how it builds
//! its request and processes the response, and how the responder answers it.
//!
//! [`TaskManager`] keeps our requests in order: one outstanding at a time (RFC 7296 2.3,
//! a window of 1) with its retransmission timer (2.1, 2.4), the rest queued until their
//! state allows them. [`IkeSa::handle_message`] checks the message-ID window, answers a
//! retransmitted request from the kept response, dispatches a response to the outstanding
//! task and a request to its responder, and answers **every** request that consumes a
//! message ID (2.1), malformed ones with INVALID_SYNTAX (2.21.3).
pub(crate) mod child_create;
pub(crate) mod child_delete;
pub(crate) mod child_rekey;
pub(crate) mod config_payload;
pub(crate) mod eap_radius;
pub(crate) mod followup_ke;
pub(crate) mod ike_auth;
pub(crate) mod ike_auth_eap;
pub(crate) mod ike_delete;
pub(crate) mod ike_dpd;
pub(crate) mod ike_init;
pub(crate) mod ike_intermediate;
pub(crate) mod ike_mobike;
pub(crate) mod ike_rekey;
pub(crate) mod lifetimes;

use crate::delete::Delete;
use crate::error::Error;
use crate::event::DownReason;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa, State};
use crate::message::{Find, Payload};
use crate::notify::{kind, Notify};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// One exchange of ours, with the state it carries between request and response.
pub(crate) enum Task {
    /// IKE_SA_INIT (1.2).
    IkeInit(ike_init::IkeInit),
    /// IKE_INTERMEDIATE with an additional key exchange (RFC 9242, RFC 9370).
    IkeIntermediate(ike_intermediate::IkeIntermediate),
    /// IKE_AUTH with the first child (1.2).
    IkeAuth(ike_auth::IkeAuth),
    /// CREATE_CHILD_SA for a further child (1.3.1).
    ChildCreate(child_create::ChildCreate),
    /// CREATE_CHILD_SA rekeying a child (1.3.3).
    ChildRekey(child_rekey::ChildRekey),
    /// CREATE_CHILD_SA rekeying the IKE SA (1.3.2).
    IkeRekey(ike_rekey::IkeRekey),
    /// IKE_FOLLOWUP_KE: an additional key exchange of CREATE_CHILD_SA (RFC 9370 2.2.4).
    FollowupKe(followup_ke::FollowupKe),
    /// INFORMATIONAL with a Delete of a child (1.4.1).
    ChildDelete(child_delete::ChildDelete),
    /// INFORMATIONAL with a Delete of the IKE SA (1.4.1).
    IkeDelete,
    /// An empty INFORMATIONAL: a liveness check (2.4).
    IkeDpd,
    /// INFORMATIONAL with UPDATE_SA_ADDRESSES (RFC 4555 3.5).
    IkeMobike(ike_mobike::IkeMobike),
    /// The responder's return-routability check of a peer's new address: INFORMATIONAL
    /// with COOKIE2, sent there (RFC 4555 3.5, 5.2.1).
    MobikeCheck(ike_mobike::MobikeCheck),
}

/// What a task asks for after its response.
pub(crate) enum Next {
    /// The exchange is over.
    Done,
    /// Send this (a retry of the same exchange, e.g. after INVALID_KE_PAYLOAD) next.
    Again(alloc::boxed::Box<Task>),
}

impl Task {
    pub fn exchange(&self) -> ExchangeType {
        match self {
            Task::IkeInit(_) => ExchangeType::IkeSaInit,
            Task::IkeAuth(_) => ExchangeType::IkeAuth,
            Task::IkeIntermediate(_) => ExchangeType::IkeIntermediate,
            Task::FollowupKe(_) => ExchangeType::IkeFollowupKe,
            Task::ChildCreate(_) | Task::ChildRekey(_) | Task::IkeRekey(_) => ExchangeType::CreateChildSa,
            Task::ChildDelete(_) | Task::IkeDelete | Task::IkeDpd | Task::IkeMobike(_) | Task::MobikeCheck(_) => {
                ExchangeType::Informational
            }
        }
    }

    /// Whether it can be sent in `state`.
    pub(crate) fn ready(&self, state: &State) -> bool {
        match self {
            Task::IkeInit(_) => matches!(state, State::InitSent),
            Task::IkeAuth(_) | Task::IkeIntermediate(_) => matches!(state, State::AuthSent { .. }),
            Task::ChildCreate(_)
            | Task::ChildRekey(_)
            | Task::IkeRekey(_)
            | Task::FollowupKe(_)
            | Task::ChildDelete(_)
            | Task::IkeDpd
            | Task::IkeMobike(_)
            | Task::MobikeCheck(_) => state.is_established(),
            // The Delete of a rekeyed IKE SA is sent on it (2.18).
            Task::IkeDelete => state.is_established() || matches!(state, State::Rekeyed { .. }),
        }
    }

    /// A second request for the same thing is not queued.
    pub(crate) fn same(&self, other: &Task) -> bool {
        match (self, other) {
            (Task::ChildDelete(a), Task::ChildDelete(b)) => a.spi_in == b.spi_in,
            (Task::ChildRekey(a), Task::ChildRekey(b)) => a.old_spi_in == b.old_spi_in,
            (Task::ChildCreate(a), Task::ChildCreate(b)) => a.offer.cfg == b.offer.cfg,
            (Task::IkeRekey(_), Task::IkeRekey(_)) => true,
            (Task::IkeIntermediate(a), Task::IkeIntermediate(b)) => a.n == b.n,
            (Task::IkeInit(_), Task::IkeInit(_))
            | (Task::IkeAuth(_), Task::IkeAuth(_))
            | (Task::IkeDelete, Task::IkeDelete)
            | (Task::IkeDpd, Task::IkeDpd)
            | (Task::IkeMobike(_), Task::IkeMobike(_))
            | (Task::MobikeCheck(_), Task::MobikeCheck(_)) => true,
            _ => false,
        }
    }

    pub(crate) fn build(
        &mut self,
        sa: &mut IkeSa,
        cx: &mut Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, Error> {
        match self {
            Task::IkeInit(t) => t.build(sa, cx, rng),
            Task::IkeAuth(t) => t.build(sa, cx, id, rng),
            Task::IkeIntermediate(t) => t.build(sa, cx, id, rng),
            Task::FollowupKe(t) => t.build(sa, cx, id, rng),
            Task::ChildCreate(t) => t.build(sa, cx, id, rng),
            Task::ChildRekey(t) => t.build(sa, cx, id, rng),
            Task::IkeRekey(t) => t.build(sa, cx, id, rng),
            Task::ChildDelete(t) => t.build(sa, id, rng),
            Task::IkeDelete => ike_delete::build(sa, id, rng),
            Task::IkeDpd => ike_mobike::dpd_build(sa, cx, id, rng),
            Task::IkeMobike(t) => t.build(sa, cx, id, rng),
            Task::MobikeCheck(t) => t.build(sa, id, rng),
        }
    }

    /// The response to it, decrypted (IKE_SA_INIT's is handled by [`ike_init`]).
    pub(crate) fn process(self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        match self {
            Task::IkeInit(_) => Next::Done,
            Task::IkeAuth(t) => t.process(sa, cx, ps, rng),
            Task::IkeIntermediate(t) => t.process(sa, cx, ps),
            Task::FollowupKe(t) => t.process(sa, cx, ps, rng),
            Task::ChildCreate(t) => t.process(sa, cx, ps, rng),
            Task::ChildRekey(t) => t.process(sa, cx, ps, rng),
            Task::IkeRekey(t) => t.process(sa, cx, ps, rng),
            Task::ChildDelete(t) => t.process(sa, cx),
            Task::IkeDelete => ike_delete::process(sa, cx),
            Task::IkeDpd => {
                ike_mobike::dpd_response(sa, cx, ps, rng);
                ike_dpd::process(sa, cx)
            }
            Task::IkeMobike(t) => t.process(sa, cx, ps),
            Task::MobikeCheck(t) => t.process(sa, cx, ps, rng),
        }
    }

    /// Where the request goes when not on the IKE SA's path: a return-routability check
    /// to the address it checks (RFC 4555 3.5).
    pub(crate) fn to(&self) -> Option<core::net::SocketAddr> {
        match self {
            Task::MobikeCheck(c) => c.to(),
            _ => None,
        }
    }
}

/// The responder's answer to a request, and what happens to the SA after it is sent.
pub(crate) struct Reply {
    pub payloads: Vec<Payload>,
    pub then: Option<DownReason>,
}

impl Reply {
    pub fn with(payloads: Vec<Payload>) -> Self {
        Reply { payloads, then: None }
    }
    pub fn notify(kind: u16) -> Self {
        Reply::with(alloc::vec![Payload::Notify(Notify::ike(kind, &[]))])
    }
}

impl IkeSa {
    /// The responder's side of each exchange: the task that answers the request, chosen by
    /// its exchange and payloads (strongSwan's `process_request`).
    pub(crate) fn answer(
        &mut self,
        cx: &mut Cx,
        exchange: ExchangeType,
        ps: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) -> Reply {
        match exchange {
            ExchangeType::IkeAuth => ike_auth::respond(self, cx, ps, rng),
            ExchangeType::CreateChildSa => self.answer_create_child_sa(cx, ps, rng),
            // INFORMATIONAL (1.4): a Delete of the IKE SA, else Deletes of children, else
            // a liveness check (or nothing we act on).
            ExchangeType::Informational => {
                if let Some(r) = ike_auth_eap::informational(self, cx, ps) {
                    // The client gave up its EAP conversation (2.21.2).
                    r
                } else if ps.iter().any(|p| matches!(p, Payload::Delete(Delete::Ike))) {
                    ike_delete::respond(self)
                } else if ps.iter().any(|p| matches!(p, Payload::Delete(Delete::Esp(_)))) {
                    child_delete::respond(self, cx, ps)
                } else if let Some(r) = ike_mobike::informational(self, cx, ps, rng) {
                    r
                } else {
                    ike_dpd::respond()
                }
            }
            ExchangeType::IkeIntermediate => ike_intermediate::respond(self, cx, ps, rng),
            ExchangeType::IkeFollowupKe => {
                if self.is_established() {
                    followup_ke::respond(self, cx, ps, rng)
                } else {
                    Reply::notify(kind::INVALID_SYNTAX)
                }
            }
            // Never here: a new IKE_SA_INIT goes to the endpoint, a late one is dropped above.
            ExchangeType::IkeSaInit => Reply::notify(kind::INVALID_SYNTAX),
        }
    }

    /// CREATE_CHILD_SA (1.3), by its payloads: a child rekey (N(REKEY_SA), [`child_rekey`]),
    /// an IKE SA rekey (an SA payload for protocol IKE, [`ike_rekey`]) or a new child
    /// ([`child_create`]).
    fn answer_create_child_sa(&mut self, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Reply {
        if !matches!(self.state(), State::Established { .. }) {
            // A rekeyed IKE SA makes nothing new (2.18); one not yet up cannot (1.3).
            return Reply::notify(if matches!(self.state(), State::Rekeyed { .. }) {
                kind::TEMPORARY_FAILURE
            } else {
                kind::INVALID_SYNTAX
            });
        }
        let Some(ni) = ps.nonce() else {
            return Reply::notify(kind::INVALID_SYNTAX);
        };
        let ike_rekey = ps.sa().is_some_and(|s| {
            s.proposals
                .first()
                .is_some_and(|p| p.protocol == crate::sa::protocol::IKE)
        });
        // Our rekey of this IKE SA is outstanding: a new or rekeyed child made now would be on
        // an SA about to be replaced (2.25: TEMPORARY_FAILURE, the peer tries again).
        if !ike_rekey && self.active_task().is_some_and(|t| matches!(t, Task::IkeRekey(_))) {
            return Reply::notify(kind::TEMPORARY_FAILURE);
        }
        if ps.notify(kind::REKEY_SA).is_some() {
            return child_rekey::respond(self, cx, ps, ni, rng);
        }
        if ike_rekey {
            return ike_rekey::respond(self, cx, ps, ni, rng);
        }
        child_create::respond(self, cx, ps, ni, rng)
    }
}
