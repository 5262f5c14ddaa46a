//! What an IKE SA's handlers talk to besides the SA: the task context [`Cx`] (the
//! configuration, the output queues, the time), and what the SA asks of the endpoint
//! ([`EndpointEvent`], quinn's endpoint events) or is told of it ([`Census`]).
use super::IkeSa;
use crate::config::Config;
use crate::event::{DownReason, Event, Transmit};
use crate::id::Identity;
use crate::limits::MAX_QUEUED_OUTPUT;
use alloc::collections::VecDeque;
use core::time::Duration;

/// Effects an IKE SA has on the endpoint beyond itself, drained after every call (quinn's
/// `EndpointEvent`).
pub(crate) enum EndpointEvent {
    /// The peer sent INITIAL_CONTACT (2.4), or `unique = replace` takes this identity's
    /// other IKE SAs over: they are gone. `delete`: each is told first with an
    /// INFORMATIONAL Delete (1.4.1; `unique = replace`, whose old SA may be another device
    /// still running), sent once and not waited for.
    InitialContact { delete: bool },
    /// This SA was rekeyed (2.18): the new one takes over the children.
    Rekeyed(alloc::boxed::Box<IkeSa>),
    /// This SA is gone, for this reason (the connection's dpd_action or close_action).
    Down(DownReason),
}

/// The endpoint's IKE SAs as a request that can make one sees them (the caps of
/// [`crate::limits`] that an IKE SA rekey must not bypass), counted by the endpoint before
/// it hands the SA an IKE_AUTH or CREATE_CHILD_SA request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Census {
    /// IKE SAs of the endpoint, this one and half-open ones included.
    pub ike_sas: usize,
    /// The other live IKE SAs whose peer proved this SA's identity (replaced ones waiting
    /// for their Delete included).
    pub same_identity: usize,
}

/// What the exchange handlers need besides the SA.
pub(crate) struct Cx<'a> {
    pub cfg: &'a Config,
    pub out: &'a mut Output,
    pub now: Duration,
    /// The peer addresses of the endpoint's other established IKE SAs, for a request that
    /// can make a child ([`crate::child::choose`]); empty elsewhere.
    pub others: &'a [core::net::IpAddr],
    /// Wall-clock time (seconds since 1970) if the caller gave it, for certificate validity.
    pub unix: Option<u64>,
    /// For a received request: how many of the endpoint's other live IKE SAs have a peer
    /// that proved this identity (the cap per identity at IKE_AUTH); None elsewhere.
    pub peers_of: Option<&'a dyn Fn(&Identity) -> usize>,
}

impl<'a> Cx<'a> {
    /// The context at `now` for all but a received request (no other SAs' peers, no count
    /// per identity): `unix` is the wall clock if the caller gave it.
    pub fn new(cfg: &'a Config, out: &'a mut Output, now: Duration, unix: Option<u64>) -> Self {
        Cx {
            cfg,
            out,
            now,
            others: &[],
            unix,
            peers_of: None,
        }
    }
}

/// Transmits and events waiting for the caller.
#[derive(Default)]
pub(crate) struct Output {
    pub transmits: VecDeque<Transmit>,
    pub events: VecDeque<Event>,
    pub dropped_output: u64,
    /// The pools' leases: endpoint state kept here so every task context reaches it
    /// ([`crate::task::config_payload`]).
    pub leases: crate::pool::Leases,
    /// The RADIUS socket's outstanding Identifiers and datagrams ([`crate::endpoint`]'s
    /// radius module).
    pub radius: crate::radius_table::RadiusTable,
}

impl Output {
    pub fn event(&mut self, e: Event) {
        if self.events.len() >= MAX_QUEUED_OUTPUT {
            self.events.pop_front();
            self.dropped_output += 1;
        }
        self.events.push_back(e);
    }
    /// The IKE SA filed under `spi` is gone: its leases go offline, reported.
    pub fn release_leases(&mut self, spi: u64) {
        for r in self.leases.release(spi) {
            self.event(Event::LeaseReleased {
                pool: r.pool,
                identity: r.identity,
                address: r.address,
            });
        }
    }
    pub fn transmit(&mut self, t: Transmit) {
        if self.transmits.len() >= MAX_QUEUED_OUTPUT {
            self.transmits.pop_front();
            self.dropped_output += 1;
        }
        self.transmits.push_back(t);
    }
}
