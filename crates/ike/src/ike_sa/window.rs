//! The message-ID window of an IKE SA (RFC 7296 2.3), both halves: our requests (one
//! outstanding at a time with its retransmission timer, 2.1, 2.4; the rest queued until
//! their state allows them) in the [`TaskManager`], the peer's in the [`PeerWindow`].
//! [`IkeSa::handle_message`] checks the window, answers a retransmitted request from the
//! kept response, dispatches a response to the outstanding task and a request to its
//! responder ([`IkeSa::answer`]), and answers **every** request that consumes a message ID
//! (2.1), malformed ones with INVALID_SYNTAX (2.21.3).
use super::{Cx, IkeSa, State};
use crate::dropped::Dropped;
use crate::error::Error;
use crate::event::DownReason;
use crate::header::ExchangeType;
use crate::limits::MAX_QUEUED_REQUESTS;
use crate::message::{Message, Payload};
use crate::notify::{kind, Notify};
use crate::retransmit::{Expiry, RetransmitConfig, Retransmitter};
use crate::task::{ike_init, ike_intermediate, Next, Reply, Task};
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// The peer's half of the message-ID window (2.3): the ID of its next request, and our
/// response to its last one, kept for a retransmission of that request (2.1).
#[derive(Default)]
pub(crate) struct PeerWindow {
    pub(super) expected: u32,
    pub(super) kept: Option<(u32, Vec<u8>)>,
    /// The peer's request whose response waits for a RADIUS server (an EAP round of
    /// IKE_AUTH, [`crate::task::eap_radius`]): its retransmissions are absorbed (2.1).
    pub(super) deferred: Option<u32>,
}

/// Our outstanding request.
pub(crate) struct Active {
    id: u32,
    pub(super) task: Task,
    /// When it was first sent.
    pub(super) started: Duration,
    bytes: Vec<u8>,
    timer: Retransmitter,
}

/// Our requests: the message ID of the next, the one outstanding, the ones waiting.
#[derive(Default)]
pub(crate) struct TaskManager {
    pub(super) next_id: u32,
    /// Boxed: a request is outstanding only now and then (a responder's SA seldom has one),
    /// and an `Active` with its task inline is about 400 bytes (issue #36 item 6).
    pub(super) active: Option<Box<Active>>,
    queue: VecDeque<Task>,
}

impl TaskManager {
    pub fn clear(&mut self) {
        self.active = None;
        self.queue.clear();
    }

    /// The tasks of an IKE SA a rekey made (2.18): the queued requests about the children
    /// (and a liveness check) move to it, in their order; the old SA keeps its own Delete,
    /// and a queued rekey of it is dropped.
    pub(super) fn hand_over(&mut self) -> TaskManager {
        let (mut taken, kept): (VecDeque<Task>, VecDeque<Task>) =
            self.queue.drain(..).partition(|t| !matches!(t, Task::IkeDelete));
        self.queue = kept;
        taken.retain(|t| !matches!(t, Task::IkeRekey(_)));
        TaskManager {
            queue: taken,
            ..TaskManager::default()
        }
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
                // A return-routability check goes to the address it checks (RFC 4555 3.5).
                let to = task.to().unwrap_or(self.path.remote);
                self.send_to(cx, &bytes, to);
                self.tasks.active = Some(Box::new(Active {
                    id,
                    task,
                    started: cx.now,
                    bytes,
                    timer: Retransmitter::new(cx.now, &cx.cfg.retransmit),
                }));
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
            return self.handle_init_response(cx, raw, msg, local, remote, rng);
        }
        // A fragment is kept until its message is whole (RFC 7383 2.6).
        let Some(opened) = self.open(cx, raw, msg)? else {
            return Ok(());
        };
        self.authenticated_from(cx, local, remote);
        self.mobike.response_from = Some(remote);
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

    /// The initiator's IKE_SA_INIT response to its outstanding [`ike_init::IkeInit`].
    fn handle_init_response(
        &mut self,
        cx: &mut Cx,
        raw: &[u8],
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        if !matches!(self.state, State::InitSent) {
            return Err(Dropped::WrongState);
        }
        let Some(mut active) = self.tasks.active.take() else {
            return Err(Dropped::UnexpectedResponse);
        };
        let Task::IkeInit(task) = &mut active.task else {
            self.tasks.active = Some(active);
            return Err(Dropped::UnexpectedResponse);
        };
        match ike_init::process(self, cx, task, raw, msg, local, remote) {
            // Not a usable response: the request stays outstanding (and is retransmitted).
            Err(e) => {
                self.tasks.active = Some(active);
                Err(e)
            }
            Ok(again) => {
                if again {
                    // IKE_SA_INIT again, message ID 0 again (2.7).
                    self.tasks.queue.push_front(active.task);
                }
                self.start_next(cx, rng);
                Ok(())
            }
        }
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

    /// Sends a response to the peer's request `id` and keeps it for a retransmission of
    /// that request (2.1).
    pub fn respond(
        &mut self,
        cx: &mut Cx,
        exchange: ExchangeType,
        id: u32,
        payloads: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) {
        match self.seal(exchange, true, id, payloads, rng) {
            Ok(bytes) => {
                // To where the request came from (RFC 7296 2.11; with MOBIKE that need not
                // be the peer's address, RFC 4555 3.5).
                let to = self.mobike.request.take().map_or(self.path.remote, |(_, r)| r);
                self.send_to(cx, &bytes, to);
                self.window.kept = Some((id, bytes));
            }
            Err(_) => self.window.kept = None,
        }
    }

    /// The peer's request being answered waits for a RADIUS server
    /// ([`crate::task::eap_radius`]): no response now; its retransmissions are absorbed and
    /// the next request waits (2.1, 2.3) until [`IkeSa::take_deferred`].
    pub fn defer_response(&mut self) {
        self.window.deferred = Some(self.window.expected.wrapping_sub(1));
    }

    /// The message ID of the request whose response was deferred, which is now due.
    pub fn take_deferred(&mut self) -> Option<u32> {
        self.window.deferred.take()
    }

    /// Our outstanding request's task.
    pub fn active_task(&self) -> Option<&Task> {
        self.tasks.active.as_ref().map(|a| &a.task)
    }

    /// Our outstanding request's task and when it was first sent.
    pub fn active_task_mut(&mut self) -> Option<(&mut Task, Duration)> {
        self.tasks.active.as_mut().map(|a| (&mut a.task, a.started))
    }

    /// Whether one of our tasks, outstanding or queued, is `pick`.
    pub fn has_task(&self, pick: impl Fn(&Task) -> bool) -> bool {
        self.tasks.iter().any(pick)
    }

    /// No request of ours outstanding or queued.
    pub fn is_idle(&self) -> bool {
        self.tasks.is_idle()
    }

    /// Puts a task first in the queue, sent when the window and the state allow (an
    /// IKE_INTERMEDIATE ahead of IKE_AUTH).
    pub fn queue_first(&mut self, t: Task) {
        self.tasks.queue.push_front(t);
    }

    /// The message ID a request of ours sent outside the queue takes: the next one, after
    /// the request still outstanding if there is one.
    pub fn spare_request_id(&self) -> u32 {
        self.tasks
            .active
            .as_ref()
            .map_or(self.tasks.next_id, |a| a.id.wrapping_add(1))
    }

    /// Tests: the next message ID of ours taken for a request sealed by hand (one our
    /// initiator would never send), so that our own requests follow it.
    #[cfg(test)]
    pub fn take_request_id(&mut self) -> u32 {
        let id = self.tasks.next_id;
        self.tasks.next_id = id.wrapping_add(1);
        id
    }

    /// The message ID of our last request (the one whose response is being processed).
    pub fn last_request_id(&self) -> u32 {
        self.tasks.next_id.wrapping_sub(1)
    }

    /// The message ID of the peer's last request (the one being answered).
    pub fn last_peer_request_id(&self) -> u32 {
        self.window.expected.wrapping_sub(1)
    }

    /// Our kept response to the peer's request `id`, if that was its last.
    pub fn kept_response(&self, id: u32) -> Option<&[u8]> {
        match &self.window.kept {
            Some((i, b)) if *i == id => Some(b),
            _ => None,
        }
    }
}
