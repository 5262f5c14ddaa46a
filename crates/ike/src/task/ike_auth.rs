//! IKE_AUTH (RFC 7296 1.2), carrying the first child SA ([`crate::child`]): identities,
//! certificates (3.6, 3.7), AUTH made and checked by the connection's authenticators
//! ([`crate::authenticator`]: pre-shared keys, 2.15; signatures, RFC 7427), the responder's
//! choice of connection by the identity the peer proves, INITIAL_CONTACT (2.4). The
//! initiator's side is the [`IkeAuth`] task, the responder's [`respond`].
use crate::authenticator::{self, Refusal as AuthRefusal, Signed};
use crate::child::{keymat, Agreed, Offer, Refusal};
use crate::event::{DownReason, Event, IkeKeyLog, IkeSaInfo};
use crate::header::ExchangeType;
use crate::id::Identity;
use crate::ike_sa::{Crypto, Cx, EndpointEvent, Handshake, IkeSa, State};
use crate::message::{Find, Payload};
use crate::notify::{kind, Notify};
use crate::task::{child_delete::ChildDelete, lifetimes, Next, Reply, Task};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// Our IKE_AUTH: the first child we ask for, if the connection has one.
pub(crate) struct IkeAuth {
    pub child: Option<Offer>,
    /// EAP as the client (2.16): where the conversation is, after the first response.
    pub eap: Option<alloc::boxed::Box<super::ike_auth_eap::PeerRound>>,
}

/// Chooses the connection for an initiator that claims `idi` (and asks for `idr`, if
/// it sent IDr) and authenticates with AUTH `method` (None: no AUTH, EAP, 2.16), among those that could have answered
/// its IKE_SA_INIT (same addresses, the agreed IKE proposal acceptable): strongSwan's
/// IKE_AUTH peer-config lookup. An exact remote identity beats a wildcard, a wildcard beats
/// none; the connection chosen at IKE_SA_INIT wins ties, then the configuration's order.
pub(crate) fn select_connection(
    sa: &IkeSa,
    cfg: &crate::config::Config,
    crypto: &Crypto,
    idi: &Identity,
    idr: Option<&Identity>,
    method: Option<u8>,
) -> Option<usize> {
    let agreed = [crate::sa::Proposal::from_ike_suite(1, &[], &crypto.suite)];
    let (local, remote) = (sa.path().local.ip(), sa.path().remote.ip());
    let score = |i: usize| -> Option<(u8, bool)> {
        let c = &cfg.connections[i];
        let addrs =
            (c.local_addr == local || c.local_addr.is_unspecified()) && c.remote_addr.is_none_or(|r| r == remote);
        if !addrs
            || crate::sa::choose_ike(&agreed, &c.ike_proposals).is_none()
            || !method.map_or(c.remote_auth.is_eap(), |m| c.remote_auth.accepts_method(m))
        {
            return None;
        }
        if idr.is_some_and(|r| *r != c.local_id) {
            return None;
        }
        let id = match (&c.remote_id, &c.remote_id_match) {
            (Some(r), _) if r == idi => 3,
            (Some(_), _) => return None,
            (None, Some(p)) if crate::pki::id_matches_pattern(p, idi) => 2,
            (None, Some(_)) => return None,
            (None, None) => 1,
        };
        Some((id, i == sa.conn_index()))
    };
    (0..cfg.connections.len())
        .filter_map(|i| score(i).map(|s| (s, i)))
        // max_by_key keeps the last of equals: reverse so the first in the file wins.
        .rev()
        .max_by_key(|(s, _)| *s)
        .map(|(_, i)| i)
}

/// Both sides authenticated: the SA is established with the keys of its handshake, which is
/// handed back (None: the SA was not in IKE_AUTH).
pub(crate) fn ike_up(sa: &mut IkeSa, cx: &mut Cx, remote_id: Identity) -> Option<Handshake> {
    let hs = sa.establish(remote_id)?;
    let State::Established { crypto, remote_id } = sa.state() else {
        return None;
    };
    let conn = sa.conn(cx.cfg);
    let keys = cx.cfg.export_ike_keys.then(|| IkeKeyLog {
        spi_i: sa.spi_i(),
        spi_r: sa.spi_r(),
        suite: crypto.suite,
        sk_ei: crypto.keys.sk_ei.clone(),
        sk_er: crypto.keys.sk_er.clone(),
        sk_ai: crypto.keys.sk_ai.clone(),
        sk_ar: crypto.keys.sk_ar.clone(),
    });
    cx.out.event(Event::IkeUp {
        info: IkeSaInfo {
            conn: conn.name.clone(),
            spi_i: sa.spi_i(),
            spi_r: sa.spi_r(),
            role: sa.role(),
            local: sa.path().local,
            remote: sa.path().remote,
            suite: crypto.suite,
            local_id: conn.local_id.clone(),
            remote_id: remote_id.clone(),
            nat: sa.child_encap(cx.cfg).is_some(),
        },
        keys,
    });
    lifetimes::ike_established(sa, cx);
    Some(hs)
}

/// A child agreed in IKE_AUTH or CREATE_CHILD_SA: reported up and kept.
/// `rekeys`: the inbound SPI of the pair it replaces (2.8).
pub(crate) fn child_up(sa: &mut IkeSa, cx: &mut Cx, a: &Agreed, keys: &crate::keys::ChildKeys, rekeys: Option<u32>) {
    let mut info = sa.child_info(cx.cfg, a, keys);
    info.rekeys = rekeys;
    if rekeys.is_some() {
        sa.stats_mut().child_rekeys += 1;
    }
    cx.out.event(Event::ChildUp(info.clone()));
    let timers = lifetimes::child_timers(sa, cx, a.cfg, a.spi_in);
    sa.add_child(info, a.cfg, timers);
}

/// The event for a child that was refused.
pub(crate) fn child_refused(sa: &IkeSa, cx: &mut Cx, cfg: Option<usize>, r: Refusal) {
    let conn = sa.conn(cx.cfg);
    let child = cfg.and_then(|i| conn.children.get(i)).map(|c| c.name.clone());
    cx.out.event(match r {
        Refusal::TsUnacceptable => Event::TsUnacceptable {
            conn: conn.name.clone(),
            child: child.unwrap_or_default(),
        },
        Refusal::NoProposal | Refusal::InvalidKe(_) => Event::ProposalMismatch {
            conn: conn.name.clone(),
            child,
        },
    });
}

impl IkeAuth {
    /// The request: IDi, [IDr], AUTH, [INITIAL_CONTACT], and the first child:
    /// [USE_TRANSPORT_MODE], SA, TSi, TSr (no KE: 1.2).
    pub fn build(
        &mut self,
        sa: &mut IkeSa,
        cx: &mut Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        if let Some(round) = &self.eap {
            return super::ike_auth_eap::build_round(round, sa, id, rng);
        }
        let conn = sa.conn(cx.cfg);
        let State::AuthSent { hs, crypto } = sa.state() else {
            return Err(crate::Error::BadEncryptedPayload);
        };
        if !super::ike_intermediate::all_done(hs, crypto) {
            return Err(crate::Error::BadKeyExchange);
        }
        let idi = conn.local_id.to_body();
        // After IKE_INTERMEDIATE exchanges IKE_AUTH's message ID is 1 + their number.
        let int_auth = hs.int.octets(id);
        let signed = Signed {
            prf: crypto.suite.prf,
            message: &hs.init_req,
            nonce: &hs.nr,
            sk_p: &crypto.keys.sk_pi,
            id_body: &idi,
            int_auth: &int_auth,
        };
        // EAP: no AUTH in the first request (2.16).
        let eap = matches!(conn.local_auth, crate::config::LocalAuth::Eap { .. });
        let auth = match eap {
            true => None,
            false => Some(
                authenticator::build(&conn.local_auth, &signed, hs.peer_hashes.as_deref())
                    .map_err(|_| crate::Error::BadSyntax("our private key cannot sign for this peer"))?,
            ),
        };
        // 1.2: IDi, [CERT,] [CERTREQ,] [IDr,] AUTH.
        let mut p = alloc::vec![Payload::IdI(conn.local_id.clone(), idi)];
        p.extend(authenticator::cert_payloads(&conn.local_auth, hs.peer_certreq));
        p.extend(authenticator::certreq_payload([conn]));
        if let Some(r) = &conn.remote_id {
            p.push(Payload::IdR(r.clone(), r.to_body()));
        }
        p.extend(auth.map(Payload::Auth));
        if conn.initial_contact {
            p.push(Payload::Notify(Notify::ike(kind::INITIAL_CONTACT, &[])));
        }
        p.extend(super::ike_mobike::announce(conn));
        p.extend(super::config_payload::request(conn));
        if let Some(offer) = &self.child {
            p.extend(offer.payloads(conn));
        }
        sa.seal(ExchangeType::IkeAuth, false, id, &p, rng)
    }

    /// The response.
    pub fn process(self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        if matches!(sa.conn(cx.cfg).local_auth, crate::config::LocalAuth::Eap { .. }) {
            return super::ike_auth_eap::process_response(self, sa, cx, ps, rng);
        }
        let name = sa.conn_name(cx.cfg);
        if ps.notify(kind::AUTHENTICATION_FAILED).is_some() {
            cx.out.event(Event::AuthFailed {
                conn: name,
                local: false,
                reason: None,
            });
            sa.kill(cx, DownReason::AuthFailed);
            return Next::Done;
        }
        let (Some((idr, idr_body)), Some(auth)) = (ps.id_r(), ps.auth()) else {
            let err = ps.error_notify().map_or(kind::INVALID_SYNTAX, |n| n.kind);
            sa.kill(cx, DownReason::PeerError(err));
            return Next::Done;
        };
        let State::AuthSent { hs, crypto } = sa.state() else {
            return Next::Done;
        };
        let checked = check_responder_auth(sa, cx, hs, crypto, (idr, idr_body), auth, ps);
        if let Err(why) = checked {
            cx.out.event(Event::AuthFailed {
                conn: name,
                local: true,
                reason: Some(why),
            });
            sa.kill(cx, DownReason::AuthFailed);
            return Next::Done;
        }
        let (prf, sk_d) = (crypto.suite.prf, crypto.keys.sk_d.clone());
        let Some(hs) = ike_up(sa, cx, idr.clone()) else {
            return Next::Done;
        };
        super::ike_mobike::initiator_established(sa, cx, ps);
        if !super::config_payload::process_reply(sa, cx, ps) {
            // Virtual addresses asked for and none given: no use to us (strongSwan deletes it).
            sa.queue_task(cx, Task::IkeDelete, rng);
            return Next::Done;
        }
        let Some(offer) = self.child else { return Next::Done };
        let conn = sa.conn(cx.cfg);
        match offer.accept(conn, ps) {
            Ok((a, _)) => {
                let keys = keymat(prf, &sk_d, None, &hs.ni, &hs.nr, &a.suite);
                child_up(sa, cx, &a, &keys, None);
            }
            Err(r) => {
                child_refused(sa, cx, Some(offer.cfg), r);
                // A child the responder agreed to that we cannot take is deleted (2.9).
                if ps.sa().is_some() && ps.error_notify().is_none() {
                    sa.queue_task(cx, Task::ChildDelete(ChildDelete { spi_in: offer.spi_in }), rng);
                }
            }
        }
        Next::Done
    }
}

/// The initiator checks the responder's AUTH: its IDr acceptable to the connection, and
/// its IKE_SA_INIT message and our nonce signed with SK_pr (1.2, 2.15), the proof as
/// the connection's remote auth asks. The IKE_AUTH request's message ID (the response to
/// it is being processed) gives the IntAuth.
pub(crate) fn check_responder_auth(
    sa: &IkeSa,
    cx: &Cx,
    hs: &Handshake,
    crypto: &Crypto,
    (idr, idr_body): (&Identity, &[u8]),
    auth: &crate::auth::AuthPayload,
    ps: &[Payload],
) -> Result<(), AuthRefusal> {
    let conn = sa.conn(cx.cfg);
    let int_auth = hs.int.octets(sa.last_request_id());
    let signed = Signed {
        prf: crypto.suite.prf,
        message: &hs.init_resp,
        nonce: &hs.ni,
        sk_p: &crypto.keys.sk_pr,
        id_body: idr_body,
        int_auth: &int_auth,
    };
    if !conn.accepts_remote_id(idr) {
        return Err(AuthRefusal::NoConnection);
    }
    authenticator::verify(&conn.remote_auth, &signed, idr, auth, &ps.certs(), cx.unix).map(|_| ())
}

/// The responder handles the IKE_AUTH request.
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Reply {
    super::ike_mobike::peer_auth_message(sa, ps);
    // EAP (2.16): a first request without AUTH, or a later round of the conversation.
    if let Some(r) = super::ike_auth_eap::respond(sa, cx, ps, rng) {
        return r;
    }
    let State::HalfOpen { hs, crypto } = sa.state() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let (Some((idi, idi_body)), Some(auth)) = (ps.id_i(), ps.auth()) else {
        let mut r = Reply::notify(kind::INVALID_SYNTAX);
        r.then = Some(DownReason::PeerError(kind::INVALID_SYNTAX));
        return r;
    };
    if !super::ike_intermediate::all_done(hs, crypto) {
        // IKE_AUTH before every additional key exchange ran (RFC 9370 2.2.2).
        sa.stats_mut().invalid_syntax += 1;
        let mut r = Reply::notify(kind::INVALID_SYNTAX);
        r.then = Some(DownReason::PeerError(kind::INVALID_SYNTAX));
        return r;
    }
    // This IKE_AUTH request's message ID (the window moved past it).
    let int_auth = hs.int.octets(sa.last_peer_request_id());
    // The connection for the identity the initiator claims (and the one it asks us to be).
    let checked = match select_connection(sa, cx.cfg, crypto, idi, ps.id_r().map(|(i, _)| i), Some(auth.method)) {
        None => Err(AuthRefusal::NoConnection),
        Some(ci) => {
            sa.switch_conn(ci);
            let State::HalfOpen { hs, crypto } = sa.state() else {
                return Reply::notify(kind::INVALID_SYNTAX);
            };
            // The initiator signed its IKE_SA_INIT message and our nonce with SK_pi.
            let signed = Signed {
                prf: crypto.suite.prf,
                message: &hs.init_req,
                nonce: &hs.nr,
                sk_p: &crypto.keys.sk_pi,
                id_body: idi_body,
                int_auth: &int_auth,
            };
            let conn = sa.conn(cx.cfg);
            authenticator::verify(&conn.remote_auth, &signed, idi, auth, &ps.certs(), cx.unix).map(|_| ())
        }
    };
    if let Err(why) = checked {
        cx.out.event(Event::AuthFailed {
            // The connection chosen for the identity, if one was.
            conn: sa.conn_name(cx.cfg),
            local: true,
            reason: Some(why),
        });
        let mut r = Reply::notify(kind::AUTHENTICATION_FAILED);
        r.then = Some(DownReason::AuthFailed);
        return r;
    }
    // The uniqueness policy (swanctl `unique`), then the cap of IKE SAs per identity, which
    // counts new ones too unless the old ones are being replaced (INITIAL_CONTACT, 2.4, or
    // `unique = replace`): else one identity's handshakes could fill MAX_IKE_SAS and lock
    // every other peer out (issue #39). AUTHENTICATION_FAILED, as strongSwan answers when
    // its uniqueness policy keeps the old SA.
    let peers = cx.peers_of.map_or(0, |n| n(idi));
    let replacing = match super::config_payload::unique(sa.conn(cx.cfg), ps, peers) {
        Ok(r) => r,
        Err(why) => {
            cx.out.event(Event::AuthFailed {
                conn: sa.conn_name(cx.cfg),
                local: true,
                reason: Some(why),
            });
            let mut r = Reply::notify(kind::AUTHENTICATION_FAILED);
            r.then = Some(DownReason::AuthFailed);
            return r;
        }
    };
    // (The connection may have changed: the handshake borrowed again.)
    let State::HalfOpen { hs, crypto } = sa.state() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let conn = sa.conn(cx.cfg);
    let idr = conn.local_id.to_body();
    let signed = Signed {
        prf: crypto.suite.prf,
        message: &hs.init_resp,
        nonce: &hs.ni,
        sk_p: &crypto.keys.sk_pr,
        id_body: &idr,
        int_auth: &int_auth,
    };
    let peer_asked = hs.peer_certreq || ps.iter().any(|p| matches!(p, Payload::CertReq(_)));
    let our_auth = match authenticator::build(&conn.local_auth, &signed, hs.peer_hashes.as_deref()) {
        Ok(a) => a,
        Err(_) => {
            // Our key cannot make a signature this peer verifies (no common hash): refuse
            // rather than send an AUTH it must reject.
            let mut r = Reply::notify(kind::AUTHENTICATION_FAILED);
            r.then = Some(DownReason::AuthFailed);
            return r;
        }
    };
    // 1.2: IDr, [CERT,] AUTH.
    let mut resp = alloc::vec![Payload::IdR(conn.local_id.clone(), idr)];
    resp.extend(authenticator::cert_payloads(&conn.local_auth, peer_asked));
    resp.push(Payload::Auth(our_auth));
    let (prf, sk_d) = (crypto.suite.prf, crypto.keys.sk_d.clone());
    // A CFG_REQUEST answered from the connection's pools (3.15.4): before the child, whose
    // `dynamic` remote selectors become the lease.
    let cp = super::config_payload::respond(sa, cx, idi, ps, replacing);
    if replacing {
        let delete = super::config_payload::replace_tells_the_old(sa.conn(cx.cfg));
        sa.effect(EndpointEvent::InitialContact { delete });
    }
    establish_with_child(sa, cx, ps, cp, resp, idi.clone(), (prf, &sk_d), rng)
}

/// The responder's last IKE_AUTH step, with or without EAP (2.16): the CFG reply (or its
/// refusal) added to `resp`, the first child chosen from the request `ps` that carried it
/// (before the state changes: its selectors use the addresses), the IKE SA established for
/// `remote_id`, then the child installed or refused.
#[allow(clippy::too_many_arguments)]
pub(crate) fn establish_with_child(
    sa: &mut IkeSa,
    cx: &mut Cx,
    ps: &[Payload],
    cp: Result<Option<Payload>, Notify>,
    mut resp: Vec<Payload>,
    remote_id: Identity,
    (prf, sk_d): (crate::alg::Prf, &[u8]),
    rng: &mut impl CryptoRngCore,
) -> Reply {
    let wants_child = ps.sa().is_some() && ps.ts_i().is_some() && ps.ts_r().is_some() && cp.is_ok();
    match cp {
        Ok(reply) => resp.extend(reply),
        // No address: no child SA (3.10.1).
        Err(n) => resp.push(Payload::Notify(n)),
    }
    let choice = wants_child.then(|| crate::child::choose(sa, cx.cfg, ps, None, false, cx.others, rng));
    let Some(hs) = ike_up(sa, cx, remote_id) else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    super::ike_mobike::responder_established(sa, cx, &mut resp);
    match choice {
        None => {}
        Some(Ok(choice)) => match choice.answer(ps, rng) {
            Ok((payloads, _)) => {
                resp.extend(payloads);
                let keys = keymat(prf, sk_d, None, &hs.ni, &hs.nr, &choice.agreed.suite);
                child_up(sa, cx, &choice.agreed, &keys, None);
            }
            Err(r) => {
                resp.push(Payload::Notify(r.notify()));
                child_refused(sa, cx, Some(choice.agreed.cfg), r);
            }
        },
        Some(Err((r, cfg))) => {
            // IKE_AUTH's child has no KE (1.2): a refusal is NO_PROPOSAL_CHOSEN or
            // TS_UNACCEPTABLE, never INVALID_KE_PAYLOAD.
            let r = if let Refusal::InvalidKe(_) = r {
                Refusal::NoProposal
            } else {
                r
            };
            resp.push(Payload::Notify(r.notify()));
            child_refused(sa, cx, cfg, r);
        }
    }
    Reply::with(resp)
}
