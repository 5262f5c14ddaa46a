//! IKE_SA_INIT (RFC 7296 1.2): proposals, key exchange, nonces and NAT detection (2.23);
//! INVALID_KE_PAYLOAD (1.2, 2.7) and NO_PROPOSAL_CHOSEN; the move to the NAT-T port. The
//! initiator's side is the [`IkeInit`] task; the responder's ([`respond_init`]) makes the
//! half-open SA. Both announce IKE fragmentation (RFC 7383 2.3) when the connection
//! allows it ([`fragmentation`]).
use crate::alg::DhGroup;
use crate::config::Config;
use crate::dh::KeyExchange;
use crate::dropped::Dropped;
use crate::event::{DownReason, Event, Role, Transmit};
use crate::header::{ExchangeType, HeaderRepr};
use crate::ike_sa::{Crypto, Cx, Handshake, IkeSa, Output, State};
use crate::message::{build_plain, Find, Message, Payload};
use crate::nat::{evaluate, nat_hash};
use crate::nonce::OUR_NONCE_LEN;
use crate::notify::{kind, Notify};
use crate::sa::{accept_ike_answer, choose_ike, protocol, Proposal, SaPayload};
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;
use ipsec_core::nat_t::NON_ESP_MARKER;
use rand_core::CryptoRngCore;

fn random_bytes(rng: &mut impl CryptoRngCore, n: usize) -> Vec<u8> {
    let mut v = alloc::vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// NAT_DETECTION_SOURCE_IP and _DESTINATION_IP for a message from `local` to `remote`. With
/// `fake_source` (forced encapsulation) the source hash is random, so it cannot match.
pub(crate) fn nat_notifies(
    spi_i: u64,
    spi_r: u64,
    local: SocketAddr,
    remote: SocketAddr,
    fake_source: bool,
    rng: &mut impl CryptoRngCore,
) -> [Payload; 2] {
    let src = if fake_source {
        random_bytes(rng, 20)
    } else {
        nat_hash(spi_i, spi_r, local).to_vec()
    };
    [
        Payload::Notify(Notify::ike(kind::NAT_DETECTION_SOURCE_IP, &src)),
        Payload::Notify(Notify::ike(
            kind::NAT_DETECTION_DESTINATION_IP,
            &nat_hash(spi_i, spi_r, remote),
        )),
    ]
}

pub(crate) fn nat_state(
    payloads: &[Payload],
    spi_i: u64,
    spi_r: u64,
    local: SocketAddr,
    remote: SocketAddr,
) -> Option<crate::nat::NatState> {
    let srcs = payloads.notifies(kind::NAT_DETECTION_SOURCE_IP);
    let srcs: Vec<&[u8]> = srcs.iter().map(|n| n.data.as_slice()).collect();
    let dst = payloads
        .notify(kind::NAT_DETECTION_DESTINATION_IP)
        .map(|n| n.data.as_slice());
    evaluate(spi_i, spi_r, &srcs, dst, local, remote)
}

/// IKEV2_FRAGMENTATION_SUPPORTED (RFC 7383 2.3): in our IKE_SA_INIT request when the
/// connection allows fragmentation; in our response when it does and the request had it.
/// `peer`: the peer's message, when there is one; returns the notify to send (if any) and
/// the IKE SA's [`IkeSa::fragmentation`].
fn fragmentation(conn: &crate::config::Connection, peer: Option<&[Payload]>) -> (Option<Payload>, Option<u16>) {
    let peer_has = peer.map(|ps| ps.notify(kind::IKEV2_FRAGMENTATION_SUPPORTED).is_some());
    if !conn.fragmentation || peer_has == Some(false) {
        return (None, None);
    }
    let n = Payload::Notify(Notify::ike(kind::IKEV2_FRAGMENTATION_SUPPORTED, &[]));
    (Some(n), peer_has.and(Some(conn.fragment_size)))
}
/// COOKIEs (2.6) the initiator sends back before it gives up (a responder that asks again
/// and again, or forged answers, cannot keep it going).
const MAX_COOKIE_RETRIES: u8 = 3;

/// Our IKE_SA_INIT (the initiator's task): the group we send a KE of (changed by
/// INVALID_KE_PAYLOAD), our key exchange and nonce (kept across retries), the responder's
/// COOKIE to send first (2.6), the request as sent.
pub(crate) struct IkeInit {
    dh: DhGroup,
    retries: u8,
    kex: Option<KeyExchange>,
    ni: Vec<u8>,
    cookie: Option<Vec<u8>>,
    cookie_retries: u8,
    init_req: Vec<u8>,
}

impl IkeInit {
    /// For a connection whose first proposal's first group we send a KE of.
    pub fn new(dh: DhGroup) -> Self {
        IkeInit {
            dh,
            retries: 0,
            kex: None,
            ni: Vec::new(),
            cookie: None,
            cookie_retries: 0,
            init_req: Vec::new(),
        }
    }

    /// The request: [N(COOKIE)], SA, KE, Ni, N(NAT_DETECTION_*). A retry (COOKIE, or
    /// INVALID_KE_PAYLOAD with a new KE) keeps the nonce and the cookie (2.6: the cookie
    /// first, the same Ni, so the responder's cookie over Ni still verifies).
    pub fn build(
        &mut self,
        sa: &mut IkeSa,
        cx: &mut Cx,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let conn = sa.conn(cx.cfg);
        let kex = match self.kex.take() {
            Some(k) if k.group() == self.dh => k,
            _ => KeyExchange::generate(self.dh, rng),
        };
        if self.ni.is_empty() {
            self.ni = random_bytes(rng, OUR_NONCE_LEN);
        }
        let proposals = SaPayload {
            proposals: conn
                .ike_proposals
                .iter()
                .enumerate()
                .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::IKE, &[], s, true))
                .collect(),
        };
        let mut p = alloc::vec![
            Payload::Sa(proposals),
            Payload::Ke(crate::ke::KePayload {
                group: self.dh.id(),
                data: kex.public().to_vec()
            }),
            Payload::Nonce(self.ni.clone()),
        ];
        p.extend(nat_notifies(
            sa.spi_i(),
            0,
            sa.path().local,
            sa.path().remote,
            conn.encap,
            rng,
        ));
        if conn.uses_signatures() {
            p.push(crate::authenticator::hash_algs_notify());
        }
        p.extend(fragmentation(conn, None).0);
        // RFC 9242 3.1 / RFC 9370 2.2.1: we can run IKE_INTERMEDIATE, which additional key
        // exchanges need.
        if conn.ike_proposals.iter().any(|s| s.has_addke()) {
            p.push(Payload::Notify(Notify::ike(kind::INTERMEDIATE_EXCHANGE_SUPPORTED, &[])));
        }
        p.extend(conn.vendor_ids.iter().map(|v| Payload::Vendor(v.clone())));
        if let Some(c) = &self.cookie {
            p.insert(0, Payload::Notify(Notify::ike(kind::COOKIE, c)));
        }
        sa.set_spi_r(0);
        let bytes = build_plain(&sa.header(ExchangeType::IkeSaInit, false, 0), &p)?;
        self.kex = Some(kex);
        self.init_req = bytes.clone();
        Ok(bytes)
    }
}

/// The initiator handles the IKE_SA_INIT response to its outstanding [`IkeInit`] (the SA's
/// window hands it over): `Ok(true)`: send IKE_SA_INIT again (with another group).
pub(crate) fn process(
    sa: &mut IkeSa,
    cx: &mut Cx,
    task: &mut IkeInit,
    raw: &[u8],
    msg: &Message,
    local: SocketAddr,
    remote: SocketAddr,
) -> Result<bool, Dropped> {
    let ps = &msg.chain.payloads;
    let conn_name = sa.conn_name(cx.cfg);
    if let Some(n) = ps.error_notify() {
        match n.kind {
            kind::INVALID_KE_PAYLOAD => {
                // Retry with the group asked for, if we offer it (1.2, 2.7); twice at most.
                let g = <[u8; 2]>::try_from(n.data.as_slice())
                    .ok()
                    .map(u16::from_be_bytes)
                    .and_then(DhGroup::from_id);
                let offered = g.filter(|g| sa.conn(cx.cfg).ike_proposals.iter().any(|s| s.dh.contains(g)));
                match offered {
                    Some(g) if task.retries < 2 && g != task.dh => {
                        task.retries += 1;
                        task.dh = g;
                        return Ok(true);
                    }
                    _ => {
                        cx.out.event(Event::ProposalMismatch {
                            conn: conn_name,
                            child: None,
                        });
                        sa.kill(cx, DownReason::NoProposal);
                    }
                }
            }
            kind::NO_PROPOSAL_CHOSEN => {
                cx.out.event(Event::ProposalMismatch {
                    conn: conn_name,
                    child: None,
                });
                sa.kill(cx, DownReason::NoProposal);
            }
            other => sa.kill(cx, DownReason::PeerError(other)),
        }
        return Ok(false);
    }
    // COOKIE (2.6): the same request again (same SPIi, nonce and KE) with it first; a few
    // times at most.
    if let Some(n) = ps.notify(kind::COOKIE) {
        if msg.header.spi_r != 0 || !(1..=64).contains(&n.data.len()) {
            return Err(Dropped::Malformed(crate::Error::BadNotify));
        }
        if task.cookie_retries >= MAX_COOKIE_RETRIES {
            sa.kill(cx, DownReason::PeerError(kind::COOKIE));
            return Ok(false);
        }
        task.cookie_retries += 1;
        task.cookie = Some(n.data.clone());
        return Ok(true);
    }
    let proposal = ps.sa().ok_or(Dropped::Malformed(crate::Error::MissingPayload("SA")))?;
    let ke = ps.ke().ok_or(Dropped::Malformed(crate::Error::MissingPayload("KE")))?;
    let nr = ps
        .nonce()
        .ok_or(Dropped::Malformed(crate::Error::MissingPayload("Nonce")))?;
    let Some(suite) = accept_ike_answer(proposal, &sa.conn(cx.cfg).ike_proposals) else {
        cx.out.event(Event::ProposalMismatch {
            conn: conn_name,
            child: None,
        });
        sa.kill(cx, DownReason::NoProposal);
        return Ok(false);
    };
    if suite.dh != task.dh || ke.group != task.dh.id() || msg.header.spi_r == 0 {
        return Err(Dropped::Malformed(crate::Error::BadKeyExchange));
    }
    // Additional key exchanges need IKE_INTERMEDIATE, which the responder must announce
    // (RFC 9370 2.2.1, RFC 9242 3.1).
    if suite.additional().next().is_some() && !super::ike_intermediate::peer_supports(ps) {
        cx.out.event(Event::ProposalMismatch {
            conn: conn_name,
            child: None,
        });
        sa.kill(cx, DownReason::NoProposal);
        return Ok(false);
    }
    let Some(kex) = task.kex.as_ref() else {
        return Err(Dropped::WrongState);
    };
    let shared = kex.shared_secret(&ke.data).map_err(Dropped::Malformed)?;
    let crypto = Crypto::derive(
        Role::Initiator,
        suite,
        None,
        &shared,
        &task.ni,
        nr,
        sa.spi_i(),
        msg.header.spi_r,
    )
    .map_err(Dropped::Malformed)?;
    let hs = Handshake {
        ni: core::mem::take(&mut task.ni),
        nr: nr.clone(),
        init_req: core::mem::take(&mut task.init_req),
        init_resp: raw.to_vec(),
        peer_hashes: crate::authenticator::peer_hash_algs(ps),
        peer_certreq: ps.iter().any(|p| matches!(p, Payload::CertReq(_))),
        int: Default::default(),
    };
    sa.set_spi_r(msg.header.spi_r);
    // NAT detection (2.23) from the response's view of our addresses.
    if let Some(n) = nat_state(ps, sa.spi_i(), sa.spi_r(), local, remote) {
        sa.set_nat(n);
    }
    let conn = sa.conn(cx.cfg);
    if sa.path().nat.local_behind_nat || sa.path().nat.peer_behind_nat || conn.encap {
        // Move to the NAT-T ports for everything after IKE_SA_INIT (2.23).
        sa.float_to_natt(cx.cfg.natt_port, conn.remote_natt_port);
    }
    sa.set_fragmentation(fragmentation(conn, Some(ps)).1);
    sa.heard(cx.now);
    sa.auth_sent(hs, crypto);
    // One IKE_INTERMEDIATE per additional key exchange, before IKE_AUTH (RFC 9370 2.2.2).
    super::ike_intermediate::queue(sa, &suite);
    Ok(false)
}

pub(crate) fn stateless_reply(
    out: &mut Output,
    cfg: &Config,
    req: &HeaderRepr,
    local: SocketAddr,
    remote: SocketAddr,
    n: Notify,
) {
    let h = HeaderRepr {
        spi_i: req.spi_i,
        spi_r: 0,
        next_payload: 0,
        exchange: ExchangeType::IkeSaInit,
        initiator: false,
        response: true,
        message_id: req.message_id,
        length: 0,
    };
    if let Ok(b) = build_plain(&h, &[Payload::Notify(n)]) {
        let mut payload = Vec::new();
        if local.port() == cfg.natt_port {
            payload.extend_from_slice(&NON_ESP_MARKER);
        }
        payload.extend_from_slice(&b);
        out.transmit(Transmit { local, remote, payload });
    }
}

/// The responder's side of a new IKE_SA_INIT request: picks a connection and a proposal,
/// answers errors statelessly, or creates the half-open SA and answers.
#[allow(clippy::too_many_arguments)]
pub(crate) fn respond_init(
    cfg: &Config,
    out: &mut Output,
    now: Duration,
    raw: &[u8],
    msg: &Message,
    local: SocketAddr,
    remote: SocketAddr,
    spi_r: u64,
    rng: &mut impl CryptoRngCore,
) -> Result<IkeSa, Dropped> {
    let h = &msg.header;
    if h.message_id != 0 || !h.initiator {
        return Err(Dropped::WrongState);
    }
    let ps = &msg.chain.payloads;
    let (Some(sa), Some(ke), Some(ni)) = (ps.sa(), ps.ke(), ps.nonce()) else {
        stateless_reply(out, cfg, h, local, remote, Notify::ike(kind::INVALID_SYNTAX, &[]));
        return Err(Dropped::Malformed(crate::Error::MissingPayload("SA, KE or Nonce")));
    };
    let candidates: Vec<usize> = cfg
        .connections
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            (c.local_addr == local.ip() || c.local_addr.is_unspecified())
                && c.remote_addr.is_none_or(|r| r == remote.ip())
        })
        .map(|(i, _)| i)
        .collect();
    // Prefer a choice whose group is the KE the initiator sent (saves a round trip).
    let mut chosen = None;
    for &ci in &candidates {
        let c = &cfg.connections[ci];
        let with_ke: Vec<_> = c
            .ike_proposals
            .iter()
            .filter(|s| s.dh.iter().any(|g| g.id() == ke.group))
            .map(|s| {
                let mut s = s.clone();
                s.dh.retain(|g| g.id() == ke.group);
                s
            })
            .collect();
        if let Some(x) = choose_ike(&sa.proposals, &with_ke) {
            chosen = Some((ci, x));
            break;
        }
        if let Some(x) = choose_ike(&sa.proposals, &c.ike_proposals) {
            chosen = Some((ci, x));
            break;
        }
    }
    let Some((ci, (num, suite))) = chosen else {
        out.event(Event::ProposalMismatch {
            conn: candidates
                .first()
                .map(|&i| cfg.connections[i].name.clone())
                .unwrap_or_default(),
            child: None,
        });
        stateless_reply(out, cfg, h, local, remote, Notify::ike(kind::NO_PROPOSAL_CHOSEN, &[]));
        return Err(Dropped::NoProposal);
    };
    let ies = super::ike_intermediate::peer_supports(ps);
    if suite.additional().next().is_some() && !ies {
        // An initiator proposing ADDKE must support IKE_INTERMEDIATE (RFC 9370 2.2.1).
        stateless_reply(out, cfg, h, local, remote, Notify::ike(kind::NO_PROPOSAL_CHOSEN, &[]));
        return Err(Dropped::NoProposal);
    }
    if ke.group != suite.dh.id() {
        stateless_reply(
            out,
            cfg,
            h,
            local,
            remote,
            Notify::ike(kind::INVALID_KE_PAYLOAD, &suite.dh.id().to_be_bytes()),
        );
        return Err(Dropped::InvalidKe);
    }
    // Diffie-Hellman: our public value; ML-KEM: the ciphertext to the initiator's key,
    // whose FIPS 203 7.2 checks failing is INVALID_SYNTAX (draft-ietf-ipsecme-ikev2-mlkem 2.2).
    let (our_ke, shared) = match KeyExchange::respond(suite.dh, &ke.data, rng) {
        Ok(s) => s,
        Err(e) => {
            stateless_reply(out, cfg, h, local, remote, Notify::ike(kind::INVALID_SYNTAX, &[]));
            return Err(Dropped::Malformed(e));
        }
    };
    let nr = random_bytes(rng, OUR_NONCE_LEN);
    let crypto =
        Crypto::derive(Role::Responder, suite, None, &shared, ni, &nr, h.spi_i, spi_r).map_err(Dropped::Malformed)?;
    let mut ike = IkeSa::new(ci, Role::Responder, h.spi_i, spi_r, local, remote, State::InitSent, now);
    if let Some(n) = nat_state(ps, h.spi_i, 0, local, remote) {
        ike.set_nat(n);
    }
    if local.port() == cfg.natt_port {
        // It came on the NAT-T ports: IKE stays there.
        ike.float_to_natt(local.port(), remote.port());
    }
    ike.set_peer_windows(crate::vendor::from_windows(ps));
    let conn = &cfg.connections[ci];
    let mut p = alloc::vec![
        Payload::Sa(SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(num, &[], &suite)]
        }),
        Payload::Ke(crate::ke::KePayload {
            group: suite.dh.id(),
            data: our_ke
        }),
        Payload::Nonce(nr.clone()),
    ];
    p.extend(nat_notifies(h.spi_i, spi_r, local, remote, conn.encap, rng));
    // Any connection that may take this peer at IKE_AUTH (identity-based selection) counts.
    let may_answer = || candidates.iter().map(|&i| &cfg.connections[i]);
    if may_answer().any(|c| c.uses_signatures()) {
        p.push(crate::authenticator::hash_algs_notify());
    }
    p.extend(crate::authenticator::certreq_payload(may_answer()));
    let (frag_notify, frag) = fragmentation(conn, Some(ps));
    p.extend(frag_notify);
    if ies {
        p.push(Payload::Notify(Notify::ike(kind::INTERMEDIATE_EXCHANGE_SUPPORTED, &[])));
    }
    ike.set_fragmentation(frag);
    let bytes = build_plain(&ike.header(ExchangeType::IkeSaInit, true, 0), &p).map_err(Dropped::Malformed)?;
    let mut cx = Cx::new(cfg, out, now, None);
    ike.send(&mut cx, &bytes);
    ike.half_open(
        Handshake {
            ni: ni.clone(),
            nr,
            init_req: raw.to_vec(),
            init_resp: bytes,
            peer_hashes: crate::authenticator::peer_hash_algs(ps),
            peer_certreq: ps.iter().any(|p| matches!(p, Payload::CertReq(_))),
            int: Default::default(),
        },
        crypto,
    );
    Ok(ike)
}
