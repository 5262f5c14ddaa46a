//! IKE_AUTH (RFC 7296 1.2) with pre-shared keys (2.15), carrying the first child SA:
//! identities, AUTH computed and verified in constant time, ESP proposal choice, traffic
//! selector narrowing (2.9) with TS_UNACCEPTABLE, transport mode (1.3.1), INITIAL_CONTACT.
use crate::alg::Prf;
use crate::auth::{method, psk_auth, verify, AuthPayload};
use crate::config::Mode;
use crate::event::{DownReason, Event, IkeKeyLog, IkeSaInfo};
use crate::header::ExchangeType;
use crate::id::Identity;
use crate::ike_sa::{Child, Cx, IkeSa, Request, State};
use crate::keys::{derive_child_keys, IkeKeys};
use crate::message::{Find, Payload};
use crate::narrowing::{answer_within, narrow};
use crate::notify::{kind, Notify};
use crate::sa::{accept_esp_answer, choose_esp, protocol, Proposal, SaPayload};
use crate::ts::TrafficSelector;
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// A random ESP SPI outside the reserved 1..=255 (RFC 4303 2.1).
pub(crate) fn new_spi(rng: &mut impl CryptoRngCore) -> u32 {
    loop {
        let s = rng.next_u32();
        if s > 255 {
            return s;
        }
    }
}

impl IkeSa {
    /// RFC 7296 2.15: whether the peer proved the identity the connection requires (if it
    /// requires one) and the pre-shared key: its AUTH must be
    /// `prf(prf(PSK, "Key Pad for IKEv2"), message | nonce | prf(SK_p, IDx'))`, compared in
    /// constant time, where `message` is the peer's IKE_SA_INIT message, `nonce` ours and
    /// `sk_p` picks the peer's SK_p.
    #[allow(clippy::too_many_arguments)]
    fn peer_proved(
        &self,
        cx: &Cx,
        peer_id: &Identity,
        id_body: &[u8],
        auth: &AuthPayload,
        prf: Prf,
        message: &[u8],
        nonce: &[u8],
        sk_p: fn(&IkeKeys) -> &[u8],
    ) -> bool {
        let conn = self.conn(cx.cfg);
        let ok_id = conn.remote_id.as_ref().is_none_or(|r| r == peer_id);
        let ok_auth = auth.method == method::SHARED_KEY
            && self.keys.as_ref().is_some_and(|k| {
                let expected = psk_auth(prf, conn.psk.expose(), message, nonce, sk_p(k), id_body);
                verify(&expected, &auth.data)
            });
        ok_id && ok_auth
    }

    fn ike_up(&mut self, cx: &mut Cx) {
        self.state = State::Established;
        let (Some(suite), Some(remote_id)) = (self.suite, self.remote_id.clone()) else {
            return;
        };
        let conn = self.conn(cx.cfg);
        let keys = if cx.cfg.export_ike_keys {
            self.keys.as_ref().map(|k| IkeKeyLog {
                spi_i: self.spi_i,
                spi_r: self.spi_r,
                suite,
                sk_ei: k.sk_ei.clone(),
                sk_er: k.sk_er.clone(),
                sk_ai: k.sk_ai.clone(),
                sk_ar: k.sk_ar.clone(),
            })
        } else {
            None
        };
        cx.out.event(Event::IkeUp {
            info: IkeSaInfo {
                conn: conn.name.clone(),
                spi_i: self.spi_i,
                spi_r: self.spi_r,
                role: self.role,
                local: self.local,
                remote: self.remote,
                suite,
                local_id: conn.local_id.clone(),
                remote_id,
                nat: self.child_encap(cx.cfg).is_some(),
            },
            keys,
        });
    }

    fn dynamic(&self, ts: &[TrafficSelector], local: bool) -> Vec<TrafficSelector> {
        if ts.is_empty() {
            alloc::vec![TrafficSelector::host(if local {
                self.local.ip()
            } else {
                self.remote.ip()
            })]
        } else {
            ts.to_vec()
        }
    }

    /// The initiator's IKE_AUTH request: IDi, [IDr], AUTH, [INITIAL_CONTACT], and the first
    /// child: [USE_TRANSPORT_MODE], SA, TSi, TSr (no KE: 1.2).
    pub(crate) fn build_auth_request(
        &mut self,
        cx: &mut Cx,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let conn = self.conn(cx.cfg);
        let (Some(keys), Some(suite)) = (self.keys.as_ref(), self.suite) else {
            return Err(crate::Error::BadEncryptedPayload);
        };
        let idi = conn.local_id.to_body();
        let auth = psk_auth(
            suite.prf,
            conn.psk.expose(),
            &self.init_req,
            &self.nr,
            &keys.sk_pi,
            &idi,
        );
        let mut p = alloc::vec![Payload::IdI(conn.local_id.clone(), idi)];
        if let Some(r) = &conn.remote_id {
            p.push(Payload::IdR(r.clone(), r.to_body()));
        }
        p.push(Payload::Auth(AuthPayload {
            method: method::SHARED_KEY,
            data: auth.to_vec(),
        }));
        if conn.initial_contact {
            p.push(Payload::Notify(Notify::ike(kind::INITIAL_CONTACT, &[])));
        }
        if let Some(pc) = &self.pending {
            let child = &conn.children[pc.cfg];
            if child.mode == Mode::Transport {
                p.push(Payload::Notify(Notify::ike(kind::USE_TRANSPORT_MODE, &[])));
            }
            let spi = pc.spi_in.to_be_bytes();
            p.push(Payload::Sa(SaPayload {
                proposals: child
                    .esp_proposals
                    .iter()
                    .enumerate()
                    .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::ESP, &spi, s, false))
                    .collect(),
            }));
            p.push(Payload::TsI(pc.ts_i.clone()));
            p.push(Payload::TsR(pc.ts_r.clone()));
        }
        self.seal(ExchangeType::IkeAuth, false, 1, &p, rng)
    }

    /// The initiator handles the IKE_AUTH response.
    pub(crate) fn on_auth_response(&mut self, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) {
        let name = self.conn_name(cx.cfg);
        if ps.notify(kind::AUTHENTICATION_FAILED).is_some() {
            cx.out.event(Event::AuthFailed {
                conn: name,
                local: false,
            });
            self.kill(cx, DownReason::AuthFailed);
            return;
        }
        let idr = ps.id_r();
        let auth = ps.auth();
        let (Some((idr, idr_body)), Some(auth), Some(suite)) = (idr, auth, self.suite) else {
            let err = ps.error_notify().map_or(kind::INVALID_SYNTAX, |n| n.kind);
            self.kill(cx, DownReason::PeerError(err));
            return;
        };
        // The responder signed its IKE_SA_INIT message and our nonce with SK_pr.
        if !self.peer_proved(cx, idr, idr_body, auth, suite.prf, &self.init_resp, &self.ni, |k| {
            &k.sk_pr
        }) {
            cx.out.event(Event::AuthFailed {
                conn: name,
                local: true,
            });
            self.kill(cx, DownReason::AuthFailed);
            return;
        }
        let conn = self.conn(cx.cfg);
        self.remote_id = Some(idr.clone());
        self.ike_up(cx);
        let Some(pc) = self.pending.take() else { return };
        let child_name = conn.children[pc.cfg].name.clone();
        if let Some(n) = ps.error_notify() {
            let e = if n.kind == kind::TS_UNACCEPTABLE {
                Event::TsUnacceptable {
                    conn: name,
                    child: child_name,
                }
            } else {
                Event::ProposalMismatch {
                    conn: name,
                    child: Some(child_name),
                }
            };
            cx.out.event(e);
            return;
        }
        let sa = ps.sa();
        let tsi = ps.ts_i();
        let tsr = ps.ts_r();
        let child = &conn.children[pc.cfg];
        let chosen = sa.and_then(|sa| accept_esp_answer(sa, &child.esp_proposals));
        let Some((spi_out, csuite)) = chosen else {
            cx.out.event(Event::ProposalMismatch {
                conn: name,
                child: Some(child_name),
            });
            self.request(cx, Request::DeleteChild(pc.spi_in), rng);
            return;
        };
        let (Some(tsi), Some(tsr)) = (tsi, tsr) else {
            cx.out.event(Event::TsUnacceptable {
                conn: name,
                child: child_name,
            });
            self.request(cx, Request::DeleteChild(pc.spi_in), rng);
            return;
        };
        if !answer_within(tsi, &pc.ts_i) || !answer_within(tsr, &pc.ts_r) {
            cx.out.event(Event::TsUnacceptable {
                conn: name,
                child: child_name,
            });
            self.request(cx, Request::DeleteChild(pc.spi_in), rng);
            return;
        }
        let mode = if child.mode == Mode::Transport && ps.notify(kind::USE_TRANSPORT_MODE).is_some() {
            Mode::Transport
        } else {
            Mode::Tunnel
        };
        let Some(keys) = self.keys.as_ref() else { return };
        let ck = derive_child_keys(suite.prf, &keys.sk_d, &self.ni, &self.nr, &csuite);
        let info = self.child_info(
            cx.cfg,
            pc.cfg,
            pc.spi_in,
            spi_out,
            csuite,
            &ck,
            tsi.clone(),
            tsr.clone(),
            mode,
        );
        cx.out.event(Event::ChildUp(info.clone()));
        self.children.push(Child { info });
    }

    /// The responder handles the IKE_AUTH request.
    pub(crate) fn on_auth_request(&mut self, cx: &mut Cx, id: u32, ps: &[Payload], rng: &mut impl CryptoRngCore) {
        let name = self.conn_name(cx.cfg);
        if self.state != State::InitDone {
            self.respond(
                cx,
                ExchangeType::IkeAuth,
                id,
                &[Payload::Notify(Notify::ike(kind::INVALID_SYNTAX, &[]))],
                rng,
            );
            return;
        }
        let idi = ps.id_i();
        let auth = ps.auth();
        let (Some((idi, idi_body)), Some(auth), Some(suite)) = (idi, auth, self.suite) else {
            self.respond(
                cx,
                ExchangeType::IkeAuth,
                id,
                &[Payload::Notify(Notify::ike(kind::INVALID_SYNTAX, &[]))],
                rng,
            );
            self.kill(cx, DownReason::PeerError(kind::INVALID_SYNTAX));
            return;
        };
        // The initiator signed its IKE_SA_INIT message and our nonce with SK_pi.
        if !self.peer_proved(cx, idi, idi_body, auth, suite.prf, &self.init_req, &self.nr, |k| {
            &k.sk_pi
        }) {
            self.respond(
                cx,
                ExchangeType::IkeAuth,
                id,
                &[Payload::Notify(Notify::ike(kind::AUTHENTICATION_FAILED, &[]))],
                rng,
            );
            cx.out.event(Event::AuthFailed {
                conn: name,
                local: true,
            });
            self.kill(cx, DownReason::AuthFailed);
            return;
        }
        let conn = self.conn(cx.cfg);
        let Some(keys) = self.keys.as_ref() else { return };
        let idr = conn.local_id.to_body();
        let our_auth = psk_auth(
            suite.prf,
            conn.psk.expose(),
            &self.init_resp,
            &self.ni,
            &keys.sk_pr,
            &idr,
        );
        let mut resp = alloc::vec![
            Payload::IdR(conn.local_id.clone(), idr),
            Payload::Auth(AuthPayload {
                method: method::SHARED_KEY,
                data: our_auth.to_vec()
            }),
        ];
        self.remote_id = Some(idi.clone());
        self.initial_contact = ps.notify(kind::INITIAL_CONTACT).is_some();
        // The first child.
        let sa = ps.sa();
        let tsi = ps.ts_i();
        let tsr = ps.ts_r();
        let mut child_up = None;
        let mut child_event = None;
        if let (Some(sa), Some(tsi), Some(tsr)) = (sa, tsi, tsr) {
            let mut ts_ok_somewhere = false;
            for (ci, c) in conn.children.iter().enumerate() {
                // Initiator's TSi is the peer's side; TSr is ours.
                let remote_cfg = if c.remote_ts.is_empty() && self.child_encap(cx.cfg).is_some() {
                    // `dynamic` behind a NAT: the peer's inner address is its own business.
                    tsi.iter().filter(|t| t.start == t.end).copied().collect()
                } else {
                    self.dynamic(&c.remote_ts, false)
                };
                let ni_ = narrow(tsi, &remote_cfg);
                let nr_ = narrow(tsr, &self.dynamic(&c.local_ts, true));
                if ni_.is_empty() || nr_.is_empty() {
                    continue;
                }
                ts_ok_somewhere = true;
                let Some((num, spi_out, csuite)) = choose_esp(&sa.proposals, &c.esp_proposals) else {
                    continue;
                };
                child_up = Some((ci, num, spi_out, csuite, ni_, nr_));
                break;
            }
            if child_up.is_none() {
                let (k, ev) = if ts_ok_somewhere {
                    (
                        kind::NO_PROPOSAL_CHOSEN,
                        Event::ProposalMismatch {
                            conn: name.clone(),
                            child: conn.children.first().map(|c| c.name.clone()),
                        },
                    )
                } else {
                    (
                        kind::TS_UNACCEPTABLE,
                        Event::TsUnacceptable {
                            conn: name.clone(),
                            child: conn.children.first().map(|c| c.name.clone()).unwrap_or_default(),
                        },
                    )
                };
                resp.push(Payload::Notify(Notify::ike(k, &[])));
                child_event = Some(ev);
            }
        }
        let mut info = None;
        if let Some((ci, num, spi_out, csuite, ts_i, ts_r)) = child_up {
            let spi_in = new_spi(rng);
            let c = &conn.children[ci];
            let transport = c.mode == Mode::Transport && ps.notify(kind::USE_TRANSPORT_MODE).is_some();
            if transport {
                resp.push(Payload::Notify(Notify::ike(kind::USE_TRANSPORT_MODE, &[])));
            }
            resp.push(Payload::Sa(SaPayload {
                proposals: alloc::vec![Proposal::from_child_suite(num, spi_in, &csuite)],
            }));
            resp.push(Payload::TsI(ts_i.clone()));
            resp.push(Payload::TsR(ts_r.clone()));
            let ck = derive_child_keys(suite.prf, &keys.sk_d, &self.ni, &self.nr, &csuite);
            let mode = if transport { Mode::Transport } else { Mode::Tunnel };
            info = Some(self.child_info(cx.cfg, ci, spi_in, spi_out, csuite, &ck, ts_r, ts_i, mode));
        }
        self.respond(cx, ExchangeType::IkeAuth, id, &resp, rng);
        self.ike_up(cx);
        if let Some(e) = child_event {
            cx.out.event(e);
        }
        if let Some(info) = info {
            cx.out.event(Event::ChildUp(info.clone()));
            self.children.push(Child { info });
        }
    }
}
