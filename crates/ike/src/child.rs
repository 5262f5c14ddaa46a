//! A child SA's negotiation (RFC 7296 1.3, 2.9, 2.17), one for IKE_AUTH's first child and
//! every CREATE_CHILD_SA (new child or rekey): the initiator's [`Offer`] (its inbound SPI,
//! proposals, selectors, mode, and in CREATE_CHILD_SA an optional key exchange, 1.3.1), the
//! responder's [`choose`] (proposal, selectors narrowed to its policy, 2.9), the initiator's
//! check of the answer ([`Offer::accept`]) and KEYMAT ([`keymat`], 2.17).
use crate::alg::{ChildSuite, DhGroup};
use crate::config::{ChildConfig, Connection, Mode};
use crate::dh::KeyExchange;
use crate::ike_sa::IkeSa;
use crate::keys::{derive_child_keys, ChildKeys};
use crate::message::{Find, Payload};
use crate::narrowing::{answer_installable, answer_within, installable, narrow};
use crate::notify::{kind, Notify};
use crate::sa::{accept_esp_answer, choose_esp, protocol, Proposal, SaPayload};
use crate::ts::TrafficSelector;
use alloc::vec::Vec;
use core::net::IpAddr;
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

/// The transform type of key exchange methods (3.3.2).
const KE_TRANSFORM: u8 = 4;

/// What the initiator of a child asks for.
pub(crate) struct Offer {
    /// Index of the child's configuration in the connection.
    pub cfg: usize,
    /// The SPI we will receive on.
    pub spi_in: u32,
    pub ts_i: Vec<TrafficSelector>,
    pub ts_r: Vec<TrafficSelector>,
    /// Our key exchange, when the child's proposals ask for one (CREATE_CHILD_SA only).
    pub kex: Option<KeyExchange>,
}

/// A child both sides agreed on (before its keys).
pub(crate) struct Agreed {
    pub cfg: usize,
    pub spi_in: u32,
    pub spi_out: u32,
    pub suite: ChildSuite,
    pub local_ts: Vec<TrafficSelector>,
    pub remote_ts: Vec<TrafficSelector>,
    pub mode: Mode,
    /// We initiated the exchange that made it (its KEYMAT's "initiator", 2.17).
    pub initiator: bool,
    /// Additional key exchanges agreed (RFC 9370; CREATE_CHILD_SA with PFS only).
    pub addke: [Option<DhGroup>; 7],
}

/// Why a child was not agreed: the notify that says so (2.21.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    NoProposal,
    TsUnacceptable,
    /// The key exchange method the responder wants (1.3.1, 2.7).
    InvalidKe(DhGroup),
}

impl Refusal {
    pub fn notify(self) -> Notify {
        match self {
            Refusal::NoProposal => Notify::ike(kind::NO_PROPOSAL_CHOSEN, &[]),
            Refusal::TsUnacceptable => Notify::ike(kind::TS_UNACCEPTABLE, &[]),
            Refusal::InvalidKe(g) => Notify::ike(kind::INVALID_KE_PAYLOAD, &g.id().to_be_bytes()),
        }
    }
}

impl Offer {
    /// An offer for the child `cfg` of `conn` with these selectors; `pfs`: CREATE_CHILD_SA,
    /// where the child's proposals may carry a key exchange method (`aes128gcm16-x25519`).
    pub fn new(
        conn: &Connection,
        cfg: usize,
        ts_i: Vec<TrafficSelector>,
        ts_r: Vec<TrafficSelector>,
        pfs: bool,
        rng: &mut impl CryptoRngCore,
    ) -> Self {
        let child = &conn.children[cfg];
        let group = pfs
            .then(|| child.esp_proposals.first().and_then(|p| p.dh.first().copied()))
            .flatten();
        Offer {
            cfg,
            spi_in: new_spi(rng),
            ts_i,
            ts_r,
            kex: group.map(|g| KeyExchange::generate(g, rng)),
        }
    }

    /// Retries with the group the responder asked for (INVALID_KE_PAYLOAD), if we offer it.
    pub fn retry_with(&mut self, conn: &Connection, g: DhGroup, rng: &mut impl CryptoRngCore) -> bool {
        let offered = conn.children[self.cfg].esp_proposals.iter().any(|p| p.dh.contains(&g));
        if !offered || self.kex.as_ref().is_some_and(|k| k.group() == g) {
            return false;
        }
        self.kex = Some(KeyExchange::generate(g, rng));
        true
    }

    /// [N(USE_TRANSPORT_MODE)], SA, [KE], TSi, TSr (the caller adds a nonce and, for a
    /// rekey, N(REKEY_SA)).
    pub fn payloads(&self, conn: &Connection) -> Vec<Payload> {
        let child = &conn.children[self.cfg];
        let mut p = Vec::new();
        if child.mode == Mode::Transport {
            p.push(Payload::Notify(Notify::ike(kind::USE_TRANSPORT_MODE, &[])));
        }
        let spi = self.spi_in.to_be_bytes();
        p.push(Payload::Sa(SaPayload {
            proposals: child
                .esp_proposals
                .iter()
                .enumerate()
                .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::ESP, &spi, s, self.kex.is_some()))
                .collect(),
        }));
        if let Some(k) = &self.kex {
            p.push(Payload::Ke(crate::ke::KePayload {
                group: k.group().id(),
                data: k.public().to_vec(),
            }));
        }
        p.push(Payload::TsI(self.ts_i.clone()));
        p.push(Payload::TsR(self.ts_r.clone()));
        p
    }

    /// Checks the responder's answer (its proposal one of ours, its selectors within ours,
    /// 2.9); returns what was agreed and the key exchange's shared secret, if any.
    pub fn accept(&self, conn: &Connection, ps: &[Payload]) -> Result<(Agreed, Option<crate::prf::KeyBytes>), Refusal> {
        let child = &conn.children[self.cfg];
        if let Some(n) = ps.error_notify() {
            return Err(match n.kind {
                kind::TS_UNACCEPTABLE => Refusal::TsUnacceptable,
                kind::INVALID_KE_PAYLOAD => <[u8; 2]>::try_from(n.data.as_slice())
                    .ok()
                    .map(u16::from_be_bytes)
                    .and_then(DhGroup::from_id)
                    .map_or(Refusal::NoProposal, Refusal::InvalidKe),
                _ => Refusal::NoProposal,
            });
        }
        let sa = ps.sa().ok_or(Refusal::NoProposal)?;
        let (spi_out, suite) = accept_esp_answer(sa, &child.esp_proposals).ok_or(Refusal::NoProposal)?;
        // ADDKE (RFC 9370 2.2.4) only with a key exchange (CREATE_CHILD_SA with PFS), and
        // then as our proposal allows; never in IKE_AUTH (1.2).
        let answered = sa.proposals.first().ok_or(Refusal::NoProposal)?;
        let addke = match &self.kex {
            Some(_) => {
                let spec = child
                    .esp_proposals
                    .get(usize::from(answered.num).wrapping_sub(1))
                    .ok_or(Refusal::NoProposal)?;
                crate::sa::accept_addke(spec, answered).ok_or(Refusal::NoProposal)?
            }
            None if answered
                .transforms
                .iter()
                .any(|t| (6..=12).contains(&t.ty) && t.id != 0) =>
            {
                return Err(Refusal::NoProposal)
            }
            None => [None; 7],
        };
        let answered_ke = sa
            .proposals
            .first()
            .and_then(|p| p.transforms.iter().find(|t| t.ty == KE_TRANSFORM && t.id != 0));
        let shared = match &self.kex {
            None if answered_ke.is_some() => return Err(Refusal::NoProposal),
            None => None,
            Some(k) => {
                let ke = ps.ke().ok_or(Refusal::NoProposal)?;
                let answered_group = sa
                    .proposals
                    .first()
                    .and_then(|p| p.transforms.iter().find(|t| t.ty == KE_TRANSFORM))
                    .map(|t| t.id);
                if ke.group != k.group().id() || answered_group != Some(ke.group) {
                    return Err(Refusal::NoProposal);
                }
                Some(k.shared_secret(&ke.data).map_err(|_| Refusal::NoProposal)?)
            }
        };
        let (Some(tsi), Some(tsr)) = (ps.ts_i(), ps.ts_r()) else {
            return Err(Refusal::TsUnacceptable);
        };
        // Within what we offered, and something our data plane installs as agreed (every
        // pair of protocols compatible, a bounded number of policies): else deleted.
        if !answer_within(tsi, &self.ts_i) || !answer_within(tsr, &self.ts_r) || !answer_installable(tsi, tsr) {
            return Err(Refusal::TsUnacceptable);
        }
        let mode = if child.mode == Mode::Transport && ps.notify(kind::USE_TRANSPORT_MODE).is_some() {
            Mode::Transport
        } else {
            Mode::Tunnel
        };
        Ok((
            Agreed {
                cfg: self.cfg,
                spi_in: self.spi_in,
                spi_out,
                suite,
                local_ts: tsi.clone(),
                remote_ts: tsr.clone(),
                mode,
                initiator: true,
                addke,
            },
            shared,
        ))
    }
}

/// The responder's choice for a child request.
pub(crate) struct Choice {
    pub agreed: Agreed,
    /// The number of the proposal chosen.
    num: u8,
    /// The key exchange method chosen, if the proposal has one.
    dh: Option<DhGroup>,
}

impl Choice {
    /// The additional key exchanges agreed (RFC 9370 2.2.4), in order.
    pub fn additional(&self) -> Vec<(usize, DhGroup)> {
        crate::task::followup_ke::todo(&self.agreed.addke)
    }
}

/// The responder picks a child configuration whose selectors the request's narrow to
/// something installable (2.9; [`installable`]) and a proposal of it (`only`: the child
/// being rekeyed must stay the same configuration). `others`: the peer addresses of the
/// endpoint's other established IKE SAs (never a NATed peer's inner address). Returns the
/// choice and, on refusal, which child config it was about.
pub(crate) fn choose(
    sa: &IkeSa,
    cfg: &crate::config::Config,
    ps: &[Payload],
    only: Option<usize>,
    pfs: bool,
    others: &[IpAddr],
    rng: &mut impl CryptoRngCore,
) -> Result<Choice, (Refusal, Option<usize>)> {
    let conn = sa.conn(cfg);
    let (Some(sa_p), Some(tsi), Some(tsr)) = (ps.sa(), ps.ts_i(), ps.ts_r()) else {
        return Err((Refusal::TsUnacceptable, None));
    };
    let ke = ps.ke();
    let mut refusal = (Refusal::TsUnacceptable, conn.children.first().map(|_| 0));
    for (ci, c) in conn.children.iter().enumerate() {
        if only.is_some_and(|o| o != ci) {
            continue;
        }
        // The initiator's TSi is the peer's side; TSr is ours.
        let remote_cfg = if c.remote_ts.is_empty() && !sa.vips().is_empty() {
            // A peer with leases: its virtual addresses (RFC 7296 3.15.4).
            sa.vips().iter().map(|a| TrafficSelector::host(*a)).collect()
        } else if c.remote_ts.is_empty() && sa.path().nat.peer_behind_nat {
            nated_peer_host(sa, cfg, tsi, others)
        } else {
            dynamic(sa, &c.remote_ts, false)
        };
        let ni_ = narrow(tsi, &remote_cfg);
        let nr_ = narrow(tsr, &dynamic(sa, &c.local_ts, true));
        if ni_.is_empty() || nr_.is_empty() {
            continue;
        }
        let Some((ni_, nr_)) = installable(ni_, nr_) else {
            continue;
        };
        match choose_proposal(c, &sa_p.proposals, ke.map(|k| k.group), pfs) {
            Ok((num, spi_out, suite, dh, addke)) => {
                let transport = c.mode == Mode::Transport && ps.notify(kind::USE_TRANSPORT_MODE).is_some();
                return Ok(Choice {
                    agreed: Agreed {
                        cfg: ci,
                        spi_in: new_spi(rng),
                        spi_out,
                        suite,
                        local_ts: nr_,
                        remote_ts: ni_,
                        mode: if transport { Mode::Transport } else { Mode::Tunnel },
                        initiator: false,
                        addke,
                    },
                    num,
                    dh,
                });
            }
            Err(r) => refusal = (r, Some(ci)),
        }
    }
    Err(refusal)
}

/// A chosen ESP proposal: its number, the initiator's SPI, the suite, the key exchange
/// method and the additional ones (RFC 9370).
type Chosen = (u8, u32, ChildSuite, Option<DhGroup>, [Option<DhGroup>; 7]);

/// Our proposals against the offered ones, the key exchange method included (1.3.1): a
/// proposal with KE transforms needs one of our groups (and the KE payload of that group,
/// else INVALID_KE_PAYLOAD); ours with a group need the offer to have it. Without `pfs`
/// (IKE_AUTH's child, 1.2) key exchange methods are left out on both sides.
fn choose_proposal(c: &ChildConfig, offered: &[Proposal], ke_group: Option<u16>, pfs: bool) -> Result<Chosen, Refusal> {
    let mut want_ke = None;
    for spec in &c.esp_proposals {
        for p in offered.iter().filter(|p| p.protocol == protocol::ESP) {
            let groups: Vec<u16> = p
                .transforms
                .iter()
                .filter(|t| t.ty == KE_TRANSFORM)
                .map(|t| t.id)
                .collect();
            let Some((num, spi, suite)) = choose_esp(core::slice::from_ref(p), core::slice::from_ref(spec)) else {
                continue;
            };
            let none_ok = groups.is_empty() || groups.contains(&0);
            if !pfs {
                return Ok((num, spi, suite, None, [None; 7]));
            }
            // RFC 9370 2.2.4: the additional exchanges this proposal and ours agree on.
            let Some(addke) = crate::sa::choose_addke(spec, p) else {
                continue;
            };
            if spec.dh.is_empty() {
                if none_ok && ke_group.is_none() {
                    return Ok((num, spi, suite, None, [None; 7]));
                }
                continue;
            }
            let Some(g) = spec.dh.iter().copied().find(|g| groups.contains(&g.id())) else {
                continue;
            };
            if ke_group == Some(g.id()) {
                return Ok((num, spi, suite, Some(g), addke));
            }
            want_ke.get_or_insert(g);
        }
    }
    Err(want_ke.map_or(Refusal::NoProposal, Refusal::InvalidKe))
}

impl Choice {
    /// The responder's answer: [N(USE_TRANSPORT_MODE)], SA, [KE], TSi, TSr (the caller adds
    /// the nonce), and the key exchange's shared secret.
    pub fn answer(
        &self,
        ps: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<Payload>, Option<crate::prf::KeyBytes>), Refusal> {
        let a = &self.agreed;
        let mut out = Vec::new();
        if a.mode == Mode::Transport {
            out.push(Payload::Notify(Notify::ike(kind::USE_TRANSPORT_MODE, &[])));
        }
        let mut prop = Proposal::from_child_suite(self.num, a.spi_in, &a.suite);
        let mut shared = None;
        let mut ke_payload = None;
        if let Some(g) = self.dh {
            let ke = ps.ke().ok_or(Refusal::InvalidKe(g))?;
            let (our_ke, s) = KeyExchange::respond(g, &ke.data, rng).map_err(|_| Refusal::NoProposal)?;
            shared = Some(s);
            prop.add_transform(KE_TRANSFORM, g.id());
            for (n, g) in self.additional() {
                prop.add_transform(crate::alg::transform_type::addke(n), g.id());
            }
            ke_payload = Some(Payload::Ke(crate::ke::KePayload {
                group: g.id(),
                data: our_ke,
            }));
        }
        out.push(Payload::Sa(SaPayload {
            proposals: alloc::vec![prop],
        }));
        out.extend(ke_payload);
        // Our answer's TSi is the initiator's side: the peer's (remote) selectors.
        out.push(Payload::TsI(a.remote_ts.clone()));
        out.push(Payload::TsR(a.local_ts.clone()));
        Ok((out, shared))
    }
}

/// `dynamic` remote selectors of a peer behind a NAT (2.23.1): its own inner host address,
/// one address, the first the initiator's TSi names as a host; never one of ours (an IKE
/// address of any connection), another connection's configured peer or another established
/// IKE SA's peer (a policy for those would take their traffic into this child). Empty:
/// nothing acceptable (TS_UNACCEPTABLE).
fn nated_peer_host(
    sa: &IkeSa,
    cfg: &crate::config::Config,
    tsi: &[TrafficSelector],
    others: &[IpAddr],
) -> Vec<TrafficSelector> {
    let forbidden = |a: IpAddr| {
        a == sa.path().local.ip()
            || others.contains(&a)
            || cfg
                .connections
                .iter()
                .enumerate()
                .any(|(i, c)| c.local_addr == a || (i != sa.conn_index() && c.remote_addr == Some(a)))
            || a.is_unspecified()
    };
    tsi.iter()
        .find(|t| t.is_valid() && t.start == t.end)
        .filter(|t| !forbidden(t.start))
        .map(|t| alloc::vec![TrafficSelector::host(t.start)])
        .unwrap_or_default()
}

fn dynamic(sa: &IkeSa, ts: &[TrafficSelector], local: bool) -> Vec<TrafficSelector> {
    if ts.is_empty() {
        alloc::vec![TrafficSelector::host(if local {
            sa.path().local.ip()
        } else {
            sa.path().remote.ip()
        })]
    } else {
        ts.to_vec()
    }
}

/// KEYMAT (2.17): `prf+(SK_d, [g^ir (new) |] Ni | Nr)`, `ni`/`nr` the nonces of the exchange
/// that made the child.
pub(crate) fn keymat(
    prf: crate::alg::Prf,
    sk_d: &[u8],
    shared: Option<&[u8]>,
    ni: &[u8],
    nr: &[u8],
    suite: &ChildSuite,
) -> ChildKeys {
    derive_child_keys(prf, sk_d, shared, ni, nr, suite)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alg::{ChildSuite, Encr};
    use crate::config::{ChildConfig, Psk};

    fn t(s: &str) -> TrafficSelector {
        TrafficSelector::from_str_config(s).unwrap()
    }

    /// The initiator takes an answer only if its data plane can install it as agreed (#31
    /// defects 2 and 4): a pair of two protocols, or more than 256 policies each way, within
    /// what it offered or not, is TS_UNACCEPTABLE (and the child then deleted).
    #[test]
    fn the_initiator_refuses_an_answer_it_cannot_install() {
        let mut conn = Connection::new(
            "c",
            "10.0.0.1".parse().unwrap(),
            Some("10.0.0.2".parse().unwrap()),
            crate::Identity::from_str_config("10.0.0.1").unwrap(),
            None,
            Psk::new(b"k"),
            "aes128gcm16-prfsha256-x25519",
        )
        .unwrap();
        conn.children
            .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes128gcm16").unwrap());
        let offer = Offer {
            cfg: 0,
            spi_in: 0x1234,
            ts_i: alloc::vec![t("10.1.0.0/16")],
            ts_r: alloc::vec![t("10.2.0.0/16")],
            kex: None,
        };
        let suite = ChildSuite {
            encr: Encr::AesGcm16_128,
            integ: None,
            esn: false,
        };
        let answer = |tsi: Vec<TrafficSelector>, tsr: Vec<TrafficSelector>| {
            alloc::vec![
                Payload::Sa(SaPayload {
                    proposals: alloc::vec![Proposal::from_child_suite(1, 0x5678, &suite)],
                }),
                Payload::TsI(tsi),
                Payload::TsR(tsr),
            ]
        };
        let ok = answer(alloc::vec![t("10.1.0.0/16")], alloc::vec![t("10.2.3.0/24")]);
        assert!(offer.accept(&conn, &ok).is_ok());
        let protocols = answer(alloc::vec![t("10.1.0.0/16[tcp]")], alloc::vec![t("10.2.0.0/16[udp]")]);
        assert_eq!(offer.accept(&conn, &protocols).err(), Some(Refusal::TsUnacceptable));
        let range = |a: alloc::string::String, b: alloc::string::String| {
            let mut x = TrafficSelector::host(a.parse().unwrap());
            x.end = b.parse().unwrap();
            x
        };
        let many = |n: u8| -> Vec<TrafficSelector> {
            (0..8)
                .map(|k| range(alloc::format!("10.{n}.{k}.1"), alloc::format!("10.{n}.{k}.254")))
                .collect()
        };
        assert_eq!(
            offer.accept(&conn, &answer(many(1), many(2))).err(),
            Some(Refusal::TsUnacceptable)
        );
    }
}
