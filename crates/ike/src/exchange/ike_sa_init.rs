//! IKE_SA_INIT (RFC 7296 1.2): proposals, key exchange, nonces and NAT detection (2.23);
//! INVALID_KE_PAYLOAD (1.2, 2.7) and NO_PROPOSAL_CHOSEN; the move to the NAT-T port.
use crate::alg::DhGroup;
use crate::config::Config;
use crate::dh::KeyExchange;
use crate::endpoint::Dropped;
use crate::event::{DownReason, Event, Role, Transmit};
use crate::header::{ExchangeType, HeaderRepr};
use crate::ike_sa::{Cx, IkeSa, Output, Request, State, NON_ESP_MARKER};
use crate::keys::{derive_ike_keys, skeyseed};
use crate::message::{build_plain, Find, Message, Payload};
use crate::nat::{evaluate, nat_hash};
use crate::nonce::OUR_NONCE_LEN;
use crate::notify::{kind, Notify};
use crate::sa::{accept_ike_answer, choose_ike, protocol, Proposal, SaPayload};
use crate::sk::SkCipher;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;
use rand_core::CryptoRngCore;

fn random_bytes(rng: &mut impl CryptoRngCore, n: usize) -> Vec<u8> {
    let mut v = alloc::vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// NAT_DETECTION_SOURCE_IP and _DESTINATION_IP for a message from `local` to `remote`. With
/// `fake_source` (forced encapsulation) the source hash is random, so it cannot match.
fn nat_notifies(
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

fn nat_state(
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

impl IkeSa {
    /// The initiator's IKE_SA_INIT request: SA, KE, Ni, N(NAT_DETECTION_*).
    pub(crate) fn build_init_request(
        &mut self,
        cx: &mut Cx,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let conn = self.conn(cx.cfg);
        let kex = KeyExchange::generate(self.dh, rng);
        self.ni = random_bytes(rng, OUR_NONCE_LEN);
        let sa = SaPayload {
            proposals: conn
                .ike_proposals
                .iter()
                .enumerate()
                .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::IKE, &[], s, true))
                .collect(),
        };
        let mut p = alloc::vec![
            Payload::Sa(sa),
            Payload::Ke(crate::ke::KePayload {
                group: self.dh.id(),
                data: kex.public().to_vec()
            }),
            Payload::Nonce(self.ni.clone()),
        ];
        p.extend(nat_notifies(self.spi_i, 0, self.local, self.remote, conn.encap, rng));
        let bytes = build_plain(&self.header(ExchangeType::IkeSaInit, false, 0), &p)?;
        self.kex = Some(kex);
        self.init_req = bytes.clone();
        Ok(bytes)
    }

    /// The initiator handles the IKE_SA_INIT response.
    pub(crate) fn on_init_response(
        &mut self,
        cx: &mut Cx,
        raw: &[u8],
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        if self.state != State::InitSent {
            return Err(Dropped::WrongState);
        }
        let ps = &msg.chain.payloads;
        let conn_name = self.conn_name(cx.cfg);
        if let Some(n) = ps.error_notify() {
            match n.kind {
                kind::INVALID_KE_PAYLOAD => {
                    // Retry with the group asked for, if we offer it (1.2, 2.7); twice at most.
                    let g = <[u8; 2]>::try_from(n.data.as_slice())
                        .ok()
                        .map(u16::from_be_bytes)
                        .and_then(DhGroup::from_id);
                    let offered = g.filter(|g| self.conn(cx.cfg).ike_proposals.iter().any(|s| s.dh.contains(g)));
                    match offered {
                        Some(g) if self.ke_retries < 2 && g != self.dh => {
                            self.ke_retries += 1;
                            self.dh = g;
                            self.outstanding = None;
                            self.request(cx, Request::Init, rng);
                        }
                        _ => {
                            cx.out.event(Event::ProposalMismatch {
                                conn: conn_name,
                                child: None,
                            });
                            self.kill(cx, DownReason::NoProposal);
                        }
                    }
                }
                kind::NO_PROPOSAL_CHOSEN => {
                    cx.out.event(Event::ProposalMismatch {
                        conn: conn_name,
                        child: None,
                    });
                    self.kill(cx, DownReason::NoProposal);
                }
                other => self.kill(cx, DownReason::PeerError(other)),
            }
            return Ok(());
        }
        // COOKIE (2.6) is part 2: without it we would loop, so it ends the attempt.
        if ps.notify(kind::COOKIE).is_some() {
            self.kill(cx, DownReason::PeerError(kind::COOKIE));
            return Ok(());
        }
        let sa = ps.sa().ok_or(Dropped::Malformed(crate::Error::MissingPayload("SA")))?;
        let ke = ps.ke().ok_or(Dropped::Malformed(crate::Error::MissingPayload("KE")))?;
        let nr = ps
            .nonce()
            .ok_or(Dropped::Malformed(crate::Error::MissingPayload("Nonce")))?;
        let Some(suite) = accept_ike_answer(sa, &self.conn(cx.cfg).ike_proposals) else {
            cx.out.event(Event::ProposalMismatch {
                conn: conn_name,
                child: None,
            });
            self.kill(cx, DownReason::NoProposal);
            return Ok(());
        };
        if suite.dh != self.dh || ke.group != self.dh.id() || msg.header.spi_r == 0 {
            return Err(Dropped::Malformed(crate::Error::BadKeyExchange));
        }
        let Some(kex) = self.kex.as_ref() else {
            return Err(Dropped::WrongState);
        };
        let shared = kex.shared_secret(&ke.data).map_err(Dropped::Malformed)?;
        self.spi_r = msg.header.spi_r;
        self.nr = nr.clone();
        self.install_keys(suite, &shared)?;
        self.init_resp = raw.to_vec();
        self.kex = None;
        // NAT detection (2.23) from the response's view of our addresses.
        if let Some(n) = nat_state(ps, self.spi_i, self.spi_r, local, remote) {
            self.nat = n;
        }
        let conn = self.conn(cx.cfg);
        if self.nat.local_behind_nat || self.nat.peer_behind_nat || conn.encap {
            // Move to the NAT-T ports for everything after IKE_SA_INIT (2.23).
            self.natt = true;
            self.local = SocketAddr::new(self.local.ip(), cx.cfg.natt_port);
            self.remote = SocketAddr::new(self.remote.ip(), conn.remote_natt_port);
        }
        self.last_heard = cx.now;
        self.state = State::AuthSent;
        self.outstanding = None;
        self.next_id = 1;
        self.request(cx, Request::Auth, rng);
        Ok(())
    }

    /// SKEYSEED, SK_* and the two SK ciphers.
    pub(crate) fn install_keys(&mut self, suite: crate::alg::IkeSuite, shared: &[u8]) -> Result<(), Dropped> {
        let seed = skeyseed(suite.prf, &self.ni, &self.nr, shared);
        let keys = derive_ike_keys(&suite, &seed, &self.ni, &self.nr, self.spi_i, self.spi_r);
        let (out_e, out_a, in_e, in_a) = if self.is_initiator() {
            (&keys.sk_ei, &keys.sk_ai, &keys.sk_er, &keys.sk_ar)
        } else {
            (&keys.sk_er, &keys.sk_ar, &keys.sk_ei, &keys.sk_ai)
        };
        self.sk_out = Some(SkCipher::new(suite.encr, suite.integ, out_e, out_a).map_err(Dropped::Malformed)?);
        self.sk_in = Some(SkCipher::new(suite.encr, suite.integ, in_e, in_a).map_err(Dropped::Malformed)?);
        self.keys = Some(keys);
        self.suite = Some(suite);
        Ok(())
    }
}

fn stateless_reply(out: &mut Output, cfg: &Config, req: &HeaderRepr, local: SocketAddr, remote: SocketAddr, n: Notify) {
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
    let kex = KeyExchange::generate(suite.dh, rng);
    let shared = match kex.shared_secret(&ke.data) {
        Ok(s) => s,
        Err(e) => {
            stateless_reply(out, cfg, h, local, remote, Notify::ike(kind::INVALID_SYNTAX, &[]));
            return Err(Dropped::Malformed(e));
        }
    };
    let mut ike = IkeSa::new(ci, Role::Responder, h.spi_i, spi_r, local, remote, suite.dh, now);
    ike.ni = ni.clone();
    ike.nr = random_bytes(rng, OUR_NONCE_LEN);
    ike.init_req = raw.to_vec();
    ike.install_keys(suite, &shared)?;
    if let Some(n) = nat_state(ps, h.spi_i, 0, local, remote) {
        ike.nat = n;
    }
    if local.port() == cfg.natt_port {
        ike.natt = true;
    }
    let conn = &cfg.connections[ci];
    let mut p = alloc::vec![
        Payload::Sa(SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(num, &[], &suite)]
        }),
        Payload::Ke(crate::ke::KePayload {
            group: suite.dh.id(),
            data: kex.public().to_vec()
        }),
        Payload::Nonce(ike.nr.clone()),
    ];
    p.extend(nat_notifies(h.spi_i, spi_r, local, remote, conn.encap, rng));
    let bytes = build_plain(&ike.header(ExchangeType::IkeSaInit, true, 0), &p).map_err(Dropped::Malformed)?;
    let mut cx = Cx { cfg, out, now };
    ike.send(&mut cx, &bytes);
    ike.init_resp = bytes.clone();
    ike.last_response = Some((0, bytes));
    ike.peer_next_id = 1;
    Ok(ike)
}
