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
use crate::dropped::Dropped;
use crate::error::Error;
use crate::event::DownReason;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa, State};
use crate::limits::MAX_QUEUED_REQUESTS;
use crate::message::{Find, Message, Payload};
use crate::notify::{kind, Notify};
use crate::retransmit::{Expiry, RetransmitConfig, Retransmitter};
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;
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
            Task::ChildDelete(_) | Task::IkeDelete | Task::IkeDpd | Task::IkeMobike(_) => ExchangeType::Informational,
        }
    }

    /// Whether it can be sent in `state`.
    fn ready(&self, state: &State) -> bool {
        match self {
            Task::IkeInit(_) => matches!(state, State::InitSent),
            Task::IkeAuth(_) | Task::IkeIntermediate(_) => matches!(state, State::AuthSent { .. }),
            Task::ChildCreate(_)
            | Task::ChildRekey(_)
            | Task::IkeRekey(_)
            | Task::FollowupKe(_)
            | Task::ChildDelete(_)
            | Task::IkeDpd
            | Task::IkeMobike(_) => state.is_established(),
            // The Delete of a rekeyed IKE SA is sent on it (2.18).
            Task::IkeDelete => state.is_established() || matches!(state, State::Rekeyed { .. }),
        }
    }

    /// A second request for the same thing is not queued.
    fn same(&self, other: &Task) -> bool {
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
            | (Task::IkeMobike(_), Task::IkeMobike(_)) => true,
            _ => false,
        }
    }

    fn build(&mut self, sa: &mut IkeSa, cx: &mut Cx, id: u32, rng: &mut impl CryptoRngCore) -> Result<Vec<u8>, Error> {
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
        }
    }

    /// The response to it, decrypted (IKE_SA_INIT's is handled by [`ike_init`]).
    fn process(self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
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
        }
    }
}

/// Our outstanding request.
pub(crate) struct Active {
    pub id: u32,
    pub task: Task,
    /// When it was first sent.
    pub started: Duration,
    bytes: Vec<u8>,
    timer: Retransmitter,
}

/// Our requests: the message ID of the next, the one outstanding, the ones waiting.
#[derive(Default)]
pub(crate) struct TaskManager {
    pub next_id: u32,
    pub active: Option<Active>,
    queue: VecDeque<Task>,
}

impl TaskManager {
    pub fn clear(&mut self) {
        self.active = None;
        self.queue.clear();
    }

    /// Puts a task first in the queue (a retry of the exchange that just ended).
    pub fn queue_front(&mut self, t: Task) {
        self.queue.push_front(t);
    }

    /// Takes the queued requests `pick` says, leaving the others queued in their order.
    pub fn take_queue(&mut self, pick: impl Fn(&Task) -> bool) -> VecDeque<Task> {
        let (taken, kept): (VecDeque<Task>, VecDeque<Task>) = self.queue.drain(..).partition(|t| pick(t));
        self.queue = kept;
        taken
    }

    pub fn is_idle(&self) -> bool {
        self.active.is_none() && self.queue.is_empty()
    }

    /// Our tasks, the outstanding one first.
    pub fn iter(&self) -> impl Iterator<Item = &Task> {
        self.active.iter().map(|a| &a.task).chain(self.queue.iter())
    }

    pub fn deadline(&self) -> Option<Duration> {
        self.active.as_ref().map(|a| a.timer.deadline())
    }

    /// When the outstanding liveness check is given up (`dpd_timeout`).
    pub fn dpd_deadline(&self, dpd_timeout: Option<Duration>) -> Option<Duration> {
        let a = self.active.as_ref()?;
        matches!(a.task, Task::IkeDpd).then_some(a.started + dpd_timeout?)
    }

    /// The outstanding request to send again when its timer is due; `Err` when the
    /// retransmissions are exhausted (2.4: the peer is gone).
    #[allow(clippy::result_unit_err)]
    pub fn handle_timeout(&mut self, now: Duration, cfg: &RetransmitConfig) -> Result<Option<Vec<u8>>, ()> {
        let Some(a) = self.active.as_mut() else { return Ok(None) };
        if now < a.timer.deadline() {
            return Ok(None);
        }
        match a.timer.expire(now, cfg) {
            Expiry::Resend => Ok(Some(a.bytes.clone())),
            Expiry::GiveUp => Err(()),
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
    /// Queues one of our exchanges and sends it if the window is free.
    pub fn queue_task(&mut self, cx: &mut Cx, task: Task, rng: &mut impl CryptoRngCore) {
        if self.state.is_dead() || self.tasks.iter().any(|t| t.same(&task)) {
            return;
        }
        if self.tasks.queue.len() >= MAX_QUEUED_REQUESTS {
            return;
        }
        self.tasks.queue.push_back(task);
        self.start_next(cx, rng);
    }

    /// Sends the next queued request if the window is free and its state allows it.
    pub fn start_next(&mut self, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
        while self.tasks.active.is_none() && !self.state.is_dead() {
            match self.tasks.queue.front() {
                Some(t) if t.ready(&self.state) => {}
                _ => return,
            }
            let Some(mut task) = self.tasks.queue.pop_front() else {
                return;
            };
            let id = self.tasks.next_id;
            if let Ok(bytes) = task.build(self, cx, id, rng) {
                self.stats.requests_sent += 1;
                self.send(cx, &bytes);
                self.tasks.active = Some(Active {
                    id,
                    task,
                    started: cx.now,
                    bytes,
                    timer: Retransmitter::new(cx.now, &cx.cfg.retransmit),
                });
            }
        }
    }

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
        // The I flag says who sent it: it must be the other role (3.1).
        if msg.header.initiator == self.is_initiator() {
            return Err(Dropped::WrongRole);
        }
        let r = if msg.header.response {
            self.handle_response(cx, raw, msg, local, remote, rng)
        } else {
            self.handle_request(cx, raw, msg, local, remote, rng)
        };
        self.start_next(cx, rng);
        r
    }

    fn handle_response(
        &mut self,
        cx: &mut Cx,
        raw: &[u8],
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let h = &msg.header;
        match &self.tasks.active {
            Some(a) if a.id == h.message_id && a.task.exchange() == h.exchange => {}
            _ => return Err(Dropped::UnexpectedResponse),
        }
        if h.exchange == ExchangeType::IkeSaInit {
            return ike_init::on_response(self, cx, raw, msg, local, remote, rng);
        }
        // A fragment is kept until its message is whole (RFC 7383 2.6).
        let Some(opened) = self.open(cx, raw, msg)? else {
            return Ok(());
        };
        self.authenticated_from(cx, local, remote);
        if h.exchange == ExchangeType::IkeIntermediate {
            // Into the responder's IntAuth chain with the keys it came under (RFC 9242 3.3.2).
            ike_intermediate::collect_received(self, h, &opened);
        }
        let Some(active) = self.tasks.active.take() else {
            return Err(Dropped::UnexpectedResponse);
        };
        self.tasks.next_id = active.id.wrapping_add(1);
        let ps = match opened.payloads() {
            Ok(ps) => ps,
            Err(e) => {
                // An authenticated but malformed response: the exchange failed (2.21.3).
                if matches!(active.task, Task::IkeAuth(_)) {
                    self.kill(cx, DownReason::PeerError(kind::INVALID_SYNTAX));
                }
                return Err(Dropped::InvalidSyntax(e));
            }
        };
        if let Next::Again(t) = active.task.process(self, cx, &ps, rng) {
            self.tasks.queue.push_front(*t);
        }
        Ok(())
    }

    fn handle_request(
        &mut self,
        cx: &mut Cx,
        raw: &[u8],
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let h = &msg.header;
        // The previous one again: send the kept response (2.1).
        if h.message_id.wrapping_add(1) == self.window.expected {
            // Of a fragmented request only fragment 1 does (RFC 7383 2.6.1).
            if h.next_payload == crate::payload::kind::SKF
                && crate::fragment::FragmentRepr::parse(raw, h).map(|f| f.number) != Ok(1)
            {
                return Err(Dropped::Fragment(crate::fragment::FragmentError::NotFirst));
            }
            if self.window.deferred == Some(h.message_id) {
                // Its response waits for the RADIUS server: absorbed, not processed again.
                self.stats.deferred_retransmits += 1;
                return Ok(());
            }
            return match &self.window.kept {
                Some((id, bytes)) if *id == h.message_id => {
                    let b = bytes.clone();
                    self.send(cx, &b);
                    Ok(())
                }
                _ => Err(Dropped::OutOfWindow),
            };
        }
        if h.message_id != self.window.expected || self.window.deferred.is_some() {
            return Err(Dropped::OutOfWindow);
        }
        if h.exchange == ExchangeType::IkeSaInit {
            return Err(Dropped::WrongState);
        }
        // Integrity first: anything that fails it is not from the peer and gets no answer.
        // A fragment is kept until its message is whole (RFC 7383 2.6).
        let Some(opened) = self.open(cx, raw, msg)? else {
            return Ok(());
        };
        self.authenticated_from(cx, local, remote);
        self.mobike.request = Some((local, remote));
        self.window.expected = h.message_id.wrapping_add(1);
        self.stats.requests_answered += 1;
        let intermediate = h.exchange == ExchangeType::IkeIntermediate;
        if intermediate {
            ike_intermediate::collect_received(self, h, &opened);
        }
        let (reply, dropped) = match opened.payloads() {
            Ok(ps) => (self.answer(cx, h.exchange, &ps, rng), None),
            Err(e) => {
                // Authenticated but malformed: INVALID_SYNTAX, or the critical payload we
                // cannot handle (2.5); during IKE_AUTH the SA is gone with it (2.21.2).
                let mut r = match e {
                    Error::UnsupportedCritical(t) => Reply::with(alloc::vec![Payload::Notify(Notify::ike(
                        kind::UNSUPPORTED_CRITICAL_PAYLOAD,
                        &[t]
                    ))]),
                    _ => Reply::notify(kind::INVALID_SYNTAX),
                };
                if matches!(self.state, State::HalfOpen { .. }) {
                    r.then = Some(DownReason::PeerError(kind::INVALID_SYNTAX));
                }
                self.stats.invalid_syntax += 1;
                (r, Some(Dropped::InvalidSyntax(e)))
            }
        };
        if intermediate {
            // Our response joins our IntAuth chain; it is sealed with the keys of this
            // exchange, and the exchange's new keys take over after it (RFC 9370 2.2.2).
            let _ = ike_intermediate::collect_sent(self, true, h.message_id, &reply.payloads);
        }
        if self.window.deferred == Some(h.message_id) {
            // Answered later, when the RADIUS server has (ike_auth_eap::radius_answered).
            self.window.kept = None;
            return dropped.map_or(Ok(()), Err);
        }
        self.respond(cx, h.exchange, h.message_id, &reply.payloads, rng);
        if intermediate {
            ike_intermediate::after_response(self);
        }
        if let Some(reason) = reply.then {
            self.kill(cx, reason);
        }
        dropped.map_or(Ok(()), Err)
    }

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
                if self.state.is_established() {
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
        if !matches!(self.state, State::Established { .. }) {
            // A rekeyed IKE SA makes nothing new (2.18); one not yet up cannot (1.3).
            return Reply::notify(if matches!(self.state, State::Rekeyed { .. }) {
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
        if !ike_rekey
            && self
                .tasks
                .active
                .as_ref()
                .is_some_and(|a| matches!(a.task, Task::IkeRekey(_)))
        {
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
