//! The SAs IKE negotiates, installed and removed as pairs: both SAs of a child and its
//! policies all or nothing, keyed by [`ChildSaKey`] (never by their labels), the replaced
//! pair's inbound SA retired rather than removed (make before break, RFC 7296 2.8), and the
//! key manager's events that ask IKE for a rekey.

use super::event::{Cause, Event};
use super::requests::{add_sa, install_error};
use super::views::{policy_event, policy_info, sa_event};
use super::{ChildSaKey, Control, KeyEvent, Owner, Registry};
use crate::dataplane::Tunnel;
use ipsec_engine::{Action, Engine, Policy, SaId};
use ipsec_engine::{SaConfig, Selector};
use std::time::Duration;
use tracing::info;

/// A negotiated child SA pair as the control side installs it: IKE's request to the
/// registry (made from IKE's child by `crate::ike::child_sas`, sans-IO).
#[derive(Debug)]
pub struct ChildSas {
    /// The outbound SA.
    pub out: SaConfig,
    /// The inbound SA.
    pub inb: SaConfig,
    /// (outbound, inbound) selector pairs, one policy each way.
    pub selectors: Vec<(Selector, Selector)>,
    /// The pair this one replaces (its inbound SPI), when our rekey made it: the new
    /// policies go before that pair's outbound SA's, so outbound traffic moves at once
    /// (RFC 7296 2.8).
    pub before: Option<u32>,
}

/// IKE: adds a child's two SAs and its policies (one each way per selector pair), all or
/// nothing: when a step fails the SAs already added go again and no event tells of them.
pub(super) fn install_child(
    eng: &mut Engine,
    st: &mut Registry,
    c: ChildSas,
    now: Duration,
    events: &mut Vec<Event>,
) -> Result<(), String> {
    let mut added = Vec::new();
    let r = add_child(eng, st, c, now, events, &mut added);
    if r.is_err() {
        for id in added {
            st.forget(id);
            let _ = eng.remove_sa(id);
        }
        events.clear();
    }
    r
}

/// [`install_child`]'s steps, noting in `added` each SA added.
pub(super) fn add_child(
    eng: &mut Engine,
    st: &mut Registry,
    c: ChildSas,
    now: Duration,
    events: &mut Vec<Event>,
    added: &mut Vec<SaId>,
) -> Result<(), String> {
    let spi_in = c.inb.params.spi;
    let out = add_sa(
        eng,
        st,
        c.out,
        now,
        events,
        Cause::IKE,
        Owner::Ike(ChildSaKey::out(spi_in)),
    )?;
    added.push(out);
    let inb = add_sa(
        eng,
        st,
        c.inb,
        now,
        events,
        Cause::IKE,
        Owner::Ike(ChildSaKey::inb(spi_in)),
    )?;
    added.push(inb);
    // After the config's policies; a rekey's initiator puts the new pair's before the old
    // pair's, so outbound traffic moves to it at once (RFC 7296 2.8).
    let old = c.before.and_then(|spi_in| st.child(ChildSaKey::out(spi_in)));
    let policies = eng.spd().policies();
    let len = policies.len();
    let at = old
        .and_then(|id| {
            policies
                .iter()
                .position(|p| matches!(&p.action, Action::Protect(v) if v.contains(&id)))
        })
        .unwrap_or(len);
    let mut new = Vec::with_capacity(2 * c.selectors.len());
    for (o, i) in &c.selectors {
        new.push(Policy {
            dir: ipsec_engine::Direction::Out,
            selector: *o,
            action: Action::Protect(vec![out]),
        });
        new.push(Policy {
            dir: ipsec_engine::Direction::In,
            selector: *i,
            action: Action::Protect(vec![inb]),
        });
    }
    // One change of the SPD and one data plane published for the pair's policies, wherever
    // they go: after all the others (a new child, every client of a remote-access server) or
    // before the replaced pair's (a rekey); the SPD's index takes them without a rebuild, so
    // neither costs O(policies held) in copies and rehashing. All are checked first, so none
    // is added unless all can be.
    eng.insert_policies(at, new).map_err(install_error)?;
    for k in at + 1..=at + 2 * c.selectors.len() {
        let v = policy_info(k, &eng.spd().policies()[k - 1], eng);
        events.push(Event::PolicyAdded(policy_event(now, v, Cause::IKE)));
    }
    Ok(())
}

/// [`Control::ike_retire`]'s work: `key`'s policies go, the SA leaves the registry and is
/// retired.
pub(super) fn retire_ike_sa(
    eng: &mut Engine,
    st: &mut Registry,
    key: ChildSaKey,
    now: Duration,
    events: &mut Vec<Event>,
) {
    let Some(id) = st.child(key) else { return };
    let name = st.label(id).unwrap_or_default().to_string();
    let name = name.as_str();
    eng.remove_policies_using(&[id]);
    st.forget(id);
    st.retire(eng, id, name, now);
    events.push(Event::SaRetiring(sa_event(
        now,
        name,
        id,
        eng.sad().get(id),
        Cause::IKE,
    )));
}

/// [`Control::ike_remove`]'s work: the SAs `keys` and every policy protecting with them go.
pub(super) fn remove_ike_sas(
    eng: &mut Engine,
    st: &mut Registry,
    keys: &[ChildSaKey],
    now: Duration,
    events: &mut Vec<Event>,
) {
    let ids: Vec<(String, SaId)> = keys
        .iter()
        .filter_map(|&k| st.child(k))
        .map(|id| (st.label(id).unwrap_or_default().to_string(), id))
        .collect();
    // Linear in the policies, without the SPD copied or rebuilt: one pass takes out every
    // policy protecting with an SA going.
    let gone: Vec<SaId> = ids.iter().map(|(_, id)| *id).collect();
    for (i, p) in eng.remove_policies_using(&gone) {
        // the SAs are still there, so the event names them
        let v = policy_info(i + 1, &p, eng);
        events.push(Event::PolicyRemoved(policy_event(now, v, Cause::IKE)));
    }
    for (name, id) in ids {
        let ev = sa_event(now, &name, id, eng.sad().get(id), Cause::IKE);
        if eng.remove_sa(id).is_ok() {
            st.forget(id);
            events.push(Event::SaRemoved(ev));
        }
    }
}

/// The IKE children (by inbound SPI) that the key manager's events ask to rekey: a soft
/// lifetime reached, a sequence number near its end.
pub(super) fn ike_rekeys(state: &Registry, keys: &[KeyEvent]) -> Vec<u32> {
    let mut v: Vec<u32> = keys
        .iter()
        .filter_map(|k| match *k {
            KeyEvent::Soft(id) | KeyEvent::SeqRunningOut(id) => Some(id),
            KeyEvent::Hard(_) => None,
        })
        .filter_map(|id| match state.owner(id) {
            Some(Owner::Ike(key)) => Some(key.spi_in),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

impl Control {
    /// IKE: installs a negotiated child SA pair (`crate::ike::child_sas` makes it): both SAs under
    /// their `ike:` names, then one protect policy per direction and selector pair, after the
    /// config's policies; events `sa.added` and `policy.added`. All or nothing.
    pub fn ike_install(&self, t: &Tunnel, c: ChildSas) -> Result<(), String> {
        let now = t.now();
        let mut events = Vec::new();
        let r = {
            let mut st = self.state();
            let mut eng = t.engine();
            install_child(&mut eng, &mut st, c, now, &mut events)
        };
        for ev in &events {
            info!("control: {ev}");
        }
        self.publish(&events);
        r
    }

    /// IKE: removes the SAs `keys` and every policy that protects with them; events
    /// `policy.removed` and `sa.removed`. Keys not installed are skipped.
    pub fn ike_remove(&self, t: &Tunnel, keys: &[ChildSaKey]) {
        let now = t.now();
        let mut events = Vec::new();
        {
            let mut st = self.state();
            let mut eng = t.engine();
            remove_ike_sas(&mut eng, &mut st, keys, now, &mut events);
        }
        for ev in &events {
            info!("control: {ev}");
        }
        self.publish(&events);
    }

    /// IKE: a replaced pair's inbound SA `key` (a rekey, RFC 7296 2.8) loses its name and its
    /// policies but stays for the packets still in flight on it, until it is idle for
    /// [`RETIRE_IDLE`](super::RETIRE_IDLE) or expires (as `sa.update`'s old SA): the new pair's inbound policies
    /// accept them (they match SAs by protocol, mode and endpoints). Event `sa.retiring`.
    pub fn ike_retire(&self, t: &Tunnel, key: ChildSaKey) {
        let now = t.now();
        let mut events = Vec::new();
        {
            let mut st = self.state();
            let mut eng = t.engine();
            retire_ike_sa(&mut eng, &mut st, key, now, &mut events);
        }
        for ev in &events {
            info!("control: {ev}");
        }
        self.publish(&events);
    }
}
