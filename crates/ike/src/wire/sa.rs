//! The Security Association payload (RFC 7296 section 3.3): proposals (3.3.1), transforms
//! (3.3.2) and transform attributes (3.3.5), and the choice of one proposal (2.7, 3.3.6).
use crate::alg::{transform_type as tt, ChildSuite, DhGroup, Encr, IkeSuite, Integ, Prf, ProposalSpec};
use crate::error::Error;
use crate::limits::{MAX_PROPOSALS, MAX_TRANSFORMS};
use alloc::vec::Vec;

/// Protocol IDs (3.3.1).
pub mod protocol {
    /// IKE.
    pub const IKE: u8 = 1;
    /// AH.
    pub const AH: u8 = 2;
    /// ESP.
    pub const ESP: u8 = 3;
}

/// Proposal substructure offsets (3.3.1).
pub mod proposal_field {
    /// Last Substruc: 0 for the last proposal, 2 otherwise.
    pub const LAST: usize = 0;
    /// Proposal Length.
    pub const LENGTH: core::ops::Range<usize> = 2..4;
    /// Proposal Num.
    pub const NUM: usize = 4;
    /// Protocol ID.
    pub const PROTOCOL: usize = 5;
    /// SPI Size.
    pub const SPI_SIZE: usize = 6;
    /// Num Transforms.
    pub const NUM_TRANSFORMS: usize = 7;
    /// The SPI, then the transforms.
    pub const SPI: usize = 8;
}

/// Transform substructure offsets (3.3.2).
pub mod transform_field {
    /// Last Substruc: 0 for the last transform, 3 otherwise.
    pub const LAST: usize = 0;
    /// Transform Length.
    pub const LENGTH: core::ops::Range<usize> = 2..4;
    /// Transform Type.
    pub const TYPE: usize = 4;
    /// Transform ID.
    pub const ID: core::ops::Range<usize> = 6..8;
    /// Attributes.
    pub const ATTRIBUTES: usize = 8;
}

/// Attribute type Key Length (3.3.5), always in TV format.
pub const ATTR_KEY_LENGTH: u16 = 14;

/// One transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transform {
    /// Transform Type (1 ENCR, 2 PRF, 3 INTEG, 4 KE, 5 ESN).
    pub ty: u8,
    /// Transform ID.
    pub id: u16,
    /// The Key Length attribute, if present.
    pub key_len: Option<u16>,
    /// An attribute we do not know was present: the transform cannot be chosen (3.3.6).
    pub unknown_attr: bool,
}

impl Transform {
    fn new(ty: u8, id: u16, key_len: Option<u16>) -> Self {
        Transform {
            ty,
            id,
            key_len,
            unknown_attr: false,
        }
    }
    fn parse(b: &[u8]) -> Result<Self, Error> {
        let mut key_len = None;
        let mut unknown_attr = false;
        let mut a = &b[transform_field::ATTRIBUTES..];
        let mut n = 0;
        while !a.is_empty() {
            n += 1;
            if n > 8 || a.len() < 4 {
                return Err(Error::BadProposal);
            }
            let t = u16::from_be_bytes([a[0], a[1]]);
            let v = u16::from_be_bytes([a[2], a[3]]);
            if t & 0x8000 != 0 {
                if t & 0x7fff == ATTR_KEY_LENGTH {
                    if key_len.is_some() {
                        return Err(Error::BadProposal);
                    }
                    key_len = Some(v);
                } else {
                    unknown_attr = true;
                }
                a = &a[4..];
            } else {
                // TLV: the value follows.
                let l = 4 + v as usize;
                if a.len() < l {
                    return Err(Error::BadProposal);
                }
                unknown_attr = true;
                a = &a[l..];
            }
        }
        Ok(Transform {
            ty: b[transform_field::TYPE],
            id: u16::from_be_bytes([b[6], b[7]]),
            key_len,
            unknown_attr,
        })
    }
    fn buffer_len(&self) -> usize {
        8 + if self.key_len.is_some() { 4 } else { 0 }
    }
    fn emit(&self, b: &mut [u8], last: bool) {
        let len = self.buffer_len();
        b[0] = if last { 0 } else { 3 };
        b[1] = 0;
        b[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        b[4] = self.ty;
        b[5] = 0;
        b[6..8].copy_from_slice(&self.id.to_be_bytes());
        if let Some(k) = self.key_len {
            b[8..10].copy_from_slice(&(0x8000 | ATTR_KEY_LENGTH).to_be_bytes());
            b[10..12].copy_from_slice(&k.to_be_bytes());
        }
    }
}

/// One proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Proposal Num (1 for the first, +1 each; the responder echoes the chosen one's).
    pub num: u8,
    /// Protocol ID.
    pub protocol: u8,
    /// The sender's SPI: empty in IKE_SA_INIT, 4 bytes for ESP, 8 for IKE rekeying.
    pub spi: Vec<u8>,
    /// Transforms.
    pub transforms: Vec<Transform>,
}

impl Proposal {
    /// The ESP SPI as a number, if 4 bytes.
    pub fn spi_u32(&self) -> Option<u32> {
        <[u8; 4]>::try_from(self.spi.as_slice()).ok().map(u32::from_be_bytes)
    }
    fn buffer_len(&self) -> usize {
        8 + self.spi.len() + self.transforms.iter().map(Transform::buffer_len).sum::<usize>()
    }

    /// Builds a proposal from a configured spec. `with_dh` is false for the child SA of
    /// IKE_AUTH (RFC 7296 1.2: no KE there, so no KE transforms are offered).
    pub fn from_spec(num: u8, protocol: u8, spi: &[u8], spec: &ProposalSpec, with_dh: bool) -> Self {
        let mut t = Vec::new();
        for e in &spec.encr {
            t.push(Transform::new(tt::ENCR, e.id(), e.key_len_attr()));
        }
        for p in &spec.prf {
            t.push(Transform::new(tt::PRF, p.id(), None));
        }
        for i in &spec.integ {
            t.push(Transform::new(tt::INTEG, i.id(), None));
        }
        if with_dh {
            for d in &spec.dh {
                t.push(Transform::new(tt::KE, d.id(), None));
            }
            // RFC 9370 2.2.1: ADDKE1..7, NONE (ID 0) where the exchange may be skipped.
            for (i, choices) in spec.addke.iter().enumerate() {
                for g in choices {
                    t.push(Transform::new(tt::addke(i + 1), g.map_or(0, |g| g.id()), None));
                }
            }
        }
        if protocol != protocol::IKE {
            for e in &spec.esn {
                t.push(Transform::new(tt::ESN, *e as u16, None));
            }
        }
        Proposal {
            num,
            protocol,
            spi: spi.to_vec(),
            transforms: t,
        }
    }

    /// A single-choice proposal for an IKE suite (what a responder returns).
    pub fn from_ike_suite(num: u8, spi: &[u8], s: &IkeSuite) -> Self {
        let mut t = Vec::new();
        t.push(Transform::new(tt::ENCR, s.encr.id(), s.encr.key_len_attr()));
        t.push(Transform::new(tt::PRF, s.prf.id(), None));
        if let Some(i) = s.integ {
            t.push(Transform::new(tt::INTEG, i.id(), None));
        }
        t.push(Transform::new(tt::KE, s.dh.id(), None));
        for (n, g) in s.additional() {
            t.push(Transform::new(tt::addke(n), g.id(), None));
        }
        Proposal {
            num,
            protocol: protocol::IKE,
            spi: spi.to_vec(),
            transforms: t,
        }
    }

    /// A single-choice proposal for an ESP suite.
    pub fn from_child_suite(num: u8, spi: u32, s: &ChildSuite) -> Self {
        let mut t = Vec::new();
        t.push(Transform::new(tt::ENCR, s.encr.id(), s.encr.key_len_attr()));
        if let Some(i) = s.integ {
            t.push(Transform::new(tt::INTEG, i.id(), None));
        }
        t.push(Transform::new(tt::ESN, s.esn as u16, None));
        Proposal {
            num,
            protocol: protocol::ESP,
            spi: spi.to_be_bytes().to_vec(),
            transforms: t,
        }
    }

    /// Adds one transform (a responder's chosen key exchange method in CREATE_CHILD_SA).
    pub fn add_transform(&mut self, ty: u8, id: u16) {
        self.transforms.push(Transform::new(ty, id, None));
    }

    fn of_type(&self, ty: u8) -> impl Iterator<Item = &Transform> {
        self.transforms.iter().filter(move |t| t.ty == ty && !t.unknown_attr)
    }
    fn has_unknown_type(&self, allowed: &[u8]) -> bool {
        self.transforms.iter().any(|t| !allowed.contains(&t.ty))
    }
}

/// The SA payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaPayload {
    /// Proposals in order.
    pub proposals: Vec<Proposal>,
}

impl SaPayload {
    /// Parses the body of an SA payload. Checks every length, the Last Substruc values,
    /// Num Transforms against the transforms present, SPI sizes, and the limits.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        let mut proposals = Vec::new();
        let mut rest = body;
        loop {
            if proposals.len() >= MAX_PROPOSALS {
                return Err(Error::TooManyProposals);
            }
            if rest.len() < 8 {
                return Err(Error::Truncated);
            }
            let len = u16::from_be_bytes([rest[2], rest[3]]) as usize;
            if len < 8 || len > rest.len() {
                return Err(Error::BadProposal);
            }
            let last = rest[proposal_field::LAST];
            let p = &rest[..len];
            let spi_size = p[proposal_field::SPI_SIZE] as usize;
            if !matches!(spi_size, 0 | 4 | 8) || 8 + spi_size > len {
                return Err(Error::BadProposal);
            }
            let n = p[proposal_field::NUM_TRANSFORMS] as usize;
            if n > MAX_TRANSFORMS {
                return Err(Error::TooManyTransforms);
            }
            let spi = p[8..8 + spi_size].to_vec();
            let mut t = &p[8 + spi_size..];
            let mut transforms = Vec::with_capacity(n);
            for i in 0..n {
                if t.len() < 8 {
                    return Err(Error::BadProposal);
                }
                let tl = u16::from_be_bytes([t[2], t[3]]) as usize;
                if tl < 8 || tl > t.len() {
                    return Err(Error::BadProposal);
                }
                let tlast = t[transform_field::LAST];
                if (i + 1 == n) != (tlast == 0) || (tlast != 0 && tlast != 3) {
                    return Err(Error::BadProposal);
                }
                transforms.push(Transform::parse(&t[..tl])?);
                t = &t[tl..];
            }
            if !t.is_empty() {
                return Err(Error::BadProposal);
            }
            proposals.push(Proposal {
                num: p[proposal_field::NUM],
                protocol: p[proposal_field::PROTOCOL],
                spi,
                transforms,
            });
            rest = &rest[len..];
            match last {
                0 if rest.is_empty() => break,
                2 if !rest.is_empty() => continue,
                _ => return Err(Error::BadProposal),
            }
        }
        Ok(SaPayload { proposals })
    }

    /// Length of the body.
    pub fn buffer_len(&self) -> usize {
        self.proposals.iter().map(Proposal::buffer_len).sum()
    }

    /// Writes the body into `buf` (at least [`SaPayload::buffer_len`] bytes).
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        if buf.len() < self.buffer_len() || self.proposals.is_empty() {
            return Err(Error::BufferTooSmall);
        }
        let mut off = 0;
        for (i, p) in self.proposals.iter().enumerate() {
            let len = p.buffer_len();
            let b = &mut buf[off..off + len];
            b[0] = if i + 1 == self.proposals.len() { 0 } else { 2 };
            b[1] = 0;
            b[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            b[4] = p.num;
            b[5] = p.protocol;
            b[6] = p.spi.len() as u8;
            b[7] = p.transforms.len() as u8;
            b[8..8 + p.spi.len()].copy_from_slice(&p.spi);
            let mut t_off = 8 + p.spi.len();
            for (j, t) in p.transforms.iter().enumerate() {
                let tl = t.buffer_len();
                t.emit(&mut b[t_off..t_off + tl], j + 1 == p.transforms.len());
                t_off += tl;
            }
            off += len;
        }
        Ok(())
    }
}

fn encr_of(t: &Transform) -> Option<Encr> {
    Encr::from_id(t.id, t.key_len)
}

/// Picks the first algorithm of `ours` (our preference) that `offered` carries.
fn pick<A: Copy + PartialEq>(ours: &[A], offered: impl Iterator<Item = Option<A>>) -> Option<A> {
    let offered: Vec<Option<A>> = offered.collect();
    ours.iter().copied().find(|a| offered.contains(&Some(*a)))
}

/// Transform types of an IKE proposal (RFC 7296 3.3.2, RFC 9370 2.2.1).
const IKE_TYPES: [u8; 11] = [tt::ENCR, tt::PRF, tt::INTEG, tt::KE, 6, 7, 8, 9, 10, 11, 12];
/// Transform types of an ESP proposal; the ADDKE ones are checked by the caller
/// (CREATE_CHILD_SA, RFC 9370 2.2.4).
const ESP_TYPES: [u8; 11] = [tt::ENCR, tt::INTEG, tt::KE, tt::ESN, 6, 7, 8, 9, 10, 11, 12];

/// The additional key exchanges for `spec` from proposal `p` (RFC 9370 2.2.1): for each
/// ADDKE type, our first choice the proposal carries; NONE (not run) when we ask for
/// nothing there and the proposal has nothing or NONE there. `None`: not acceptable.
pub(crate) fn choose_addke(spec: &ProposalSpec, p: &Proposal) -> Option<[Option<DhGroup>; tt::ADDKE_COUNT]> {
    let mut out = [None; tt::ADDKE_COUNT];
    for (i, ours) in spec.addke.iter().enumerate() {
        let ids: Vec<u16> = p.of_type(tt::addke(i + 1)).map(|t| t.id).collect();
        let offered = |g: &Option<DhGroup>| match g {
            Some(g) => ids.contains(&g.id()),
            None => ids.is_empty() || ids.contains(&0),
        };
        if ours.is_empty() {
            if !offered(&None) {
                return None;
            }
            continue;
        }
        out[i] = *ours.iter().find(|g| offered(g))?;
    }
    Some(out)
}

/// Chooses an IKE suite from the initiator's proposals, our configured proposals first
/// (strongSwan's default preference). Returns the chosen proposal's number and suite.
/// A proposal with a transform type IKE does not use is unacceptable (3.3.6).
pub fn choose_ike(offered: &[Proposal], ours: &[ProposalSpec]) -> Option<(u8, IkeSuite)> {
    for spec in ours {
        for p in offered.iter().filter(|p| p.protocol == protocol::IKE) {
            if p.has_unknown_type(&IKE_TYPES) {
                continue;
            }
            let Some(encr) = pick(&spec.encr, p.of_type(tt::ENCR).map(encr_of)) else {
                continue;
            };
            let Some(prf) = pick(&spec.prf, p.of_type(tt::PRF).map(|t| Prf::from_id(t.id))) else {
                continue;
            };
            let Some(dh) = pick(&spec.dh, p.of_type(tt::KE).map(|t| DhGroup::from_id(t.id))) else {
                continue;
            };
            let Some(addke) = choose_addke(spec, p) else {
                continue;
            };
            let integ = if encr.is_aead() {
                // An AEAD proposal has no integrity transform, or only NONE (3.3).
                if p.of_type(tt::INTEG).any(|t| t.id != 0) {
                    continue;
                }
                None
            } else {
                match pick(&spec.integ, p.of_type(tt::INTEG).map(|t| Integ::from_id(t.id))) {
                    Some(i) => Some(i),
                    None => continue,
                }
            };
            return Some((
                p.num,
                IkeSuite {
                    encr,
                    integ,
                    prf,
                    dh,
                    addke,
                },
            ));
        }
    }
    None
}

/// Chooses an ESP suite. KE transforms (PFS) are ignored: the child SA of IKE_AUTH has
/// no key exchange (1.2); `child::choose` honours them in CREATE_CHILD_SA. A missing ESN
/// transform is taken as "no ESN", as strongSwan does. A proposal with ESP SPI 0 (RFC 4303
/// 2.1: reserved, never sent) is not chosen. Returns (proposal num, the initiator's SPI,
/// suite).
pub fn choose_esp(offered: &[Proposal], ours: &[ProposalSpec]) -> Option<(u8, u32, ChildSuite)> {
    for spec in ours {
        for p in offered.iter().filter(|p| p.protocol == protocol::ESP) {
            // RFC 4303 2.1: SPI 0 is reserved for local use and MUST NOT be sent; a proposal
            // with it is not one we can agree to.
            let Some(spi) = p.spi_u32().filter(|&s| s != 0) else {
                continue;
            };
            if p.has_unknown_type(&ESP_TYPES) {
                continue;
            }
            let Some(encr) = pick(&spec.encr, p.of_type(tt::ENCR).map(encr_of)) else {
                continue;
            };
            let integ = if encr.is_aead() {
                if p.of_type(tt::INTEG).any(|t| t.id != 0) {
                    continue;
                }
                None
            } else {
                match pick(&spec.integ, p.of_type(tt::INTEG).map(|t| Integ::from_id(t.id))) {
                    Some(i) => Some(i),
                    None => continue,
                }
            };
            let offered_esn: Vec<bool> = p.of_type(tt::ESN).filter(|t| t.id <= 1).map(|t| t.id == 1).collect();
            let offered_esn = if p.of_type(tt::ESN).next().is_none() {
                alloc::vec![false]
            } else {
                offered_esn
            };
            let Some(esn) = spec.esn.iter().copied().find(|e| offered_esn.contains(e)) else {
                continue;
            };
            return Some((p.num, spi, ChildSuite { encr, integ, esn }));
        }
    }
    None
}

/// The ADDKE transforms of a responder's answer `p` against our proposal `spec` (RFC 9370
/// 2.2.1): for each type at most one, one of ours for it; nothing or NONE only where we
/// allow NONE or ask nothing.
pub(crate) fn accept_addke(spec: &ProposalSpec, p: &Proposal) -> Option<[Option<DhGroup>; tt::ADDKE_COUNT]> {
    let mut addke = [None; tt::ADDKE_COUNT];
    for (i, ours) in spec.addke.iter().enumerate() {
        let mut it = p.transforms.iter().filter(|t| t.ty == tt::addke(i + 1));
        let first = it.next();
        if it.next().is_some() {
            return None;
        }
        match first {
            Some(t) if t.id != 0 => {
                let g = DhGroup::from_id(t.id).filter(|g| ours.contains(&Some(*g)))?;
                addke[i] = Some(g);
            }
            _ if ours.is_empty() || ours.contains(&None) => {}
            _ => return None,
        }
    }
    Some(addke)
}

/// Checks a responder's IKE answer: exactly one proposal, one transform of each type, all
/// from the proposal of ours with that number (2.7: the responder MUST NOT change it).
pub fn accept_ike_answer(answer: &SaPayload, ours: &[ProposalSpec]) -> Option<IkeSuite> {
    let [p] = answer.proposals.as_slice() else { return None };
    let spec = ours.get((p.num as usize).checked_sub(1)?)?;
    let one = |ty| {
        let mut it = p.transforms.iter().filter(move |t| t.ty == ty);
        let first = it.next().copied();
        if it.next().is_some() {
            None
        } else {
            Some(first)
        }
    };
    if p.protocol != protocol::IKE || p.has_unknown_type(&IKE_TYPES) {
        return None;
    }
    let addke = accept_addke(spec, p)?;
    let encr = one(tt::ENCR)?
        .and_then(|t| encr_of(&t))
        .filter(|e| spec.encr.contains(e))?;
    let prf = one(tt::PRF)?
        .and_then(|t| Prf::from_id(t.id))
        .filter(|x| spec.prf.contains(x))?;
    let dh = one(tt::KE)?
        .and_then(|t| DhGroup::from_id(t.id))
        .filter(|x| spec.dh.contains(x))?;
    let integ = match one(tt::INTEG)? {
        None if encr.is_aead() => None,
        Some(t) if encr.is_aead() && t.id == 0 => None,
        Some(t) if !encr.is_aead() => Some(Integ::from_id(t.id).filter(|x| spec.integ.contains(x))?),
        _ => return None,
    };
    Some(IkeSuite {
        encr,
        integ,
        prf,
        dh,
        addke,
    })
}

/// Checks a responder's ESP answer the same way; returns the responder's SPI and suite.
pub fn accept_esp_answer(answer: &SaPayload, ours: &[ProposalSpec]) -> Option<(u32, ChildSuite)> {
    let [p] = answer.proposals.as_slice() else { return None };
    let spec = ours.get((p.num as usize).checked_sub(1)?)?;
    // A KE transform is the caller's to check (CREATE_CHILD_SA with PFS); one at most.
    if p.protocol != protocol::ESP || p.has_unknown_type(&ESP_TYPES) {
        return None;
    }
    let kes: Vec<_> = p.transforms.iter().filter(|t| t.ty == tt::KE).collect();
    if kes.len() > 1
        || kes
            .first()
            .is_some_and(|t| t.id != 0 && !spec.dh.iter().any(|g| g.id() == t.id))
    {
        return None;
    }
    // RFC 4303 2.1: SPI 0 is never sent; an answer with it agrees nothing.
    let spi = p.spi_u32().filter(|&s| s != 0)?;
    let encrs: Vec<_> = p.transforms.iter().filter(|t| t.ty == tt::ENCR).collect();
    let [e] = encrs.as_slice() else { return None };
    let encr = encr_of(e).filter(|x| spec.encr.contains(x))?;
    let integs: Vec<_> = p.transforms.iter().filter(|t| t.ty == tt::INTEG && t.id != 0).collect();
    let integ = match (integs.as_slice(), encr.is_aead()) {
        ([], true) => None,
        ([i], false) => Some(Integ::from_id(i.id).filter(|x| spec.integ.contains(x))?),
        _ => return None,
    };
    let esns: Vec<_> = p.transforms.iter().filter(|t| t.ty == tt::ESN).collect();
    let esn = match esns.as_slice() {
        [] => false,
        [t] if t.id <= 1 => t.id == 1,
        _ => return None,
    };
    if !spec.esn.contains(&esn) {
        return None;
    }
    Some((spi, ChildSuite { encr, integ, esn }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alg::{parse_proposal, parse_proposals, ProposalKind};

    #[test]
    fn emit_parse_round_trip() {
        let specs = parse_proposals(
            "aes128gcm16-aes256gcm16-prfsha256-x25519-ecp256, aes256-sha256-modp2048",
            ProposalKind::Ike,
        )
        .unwrap();
        let sa = SaPayload {
            proposals: specs
                .iter()
                .enumerate()
                .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::IKE, &[], s, true))
                .collect(),
        };
        let mut b = alloc::vec![0u8; sa.buffer_len()];
        sa.emit(&mut b).unwrap();
        assert_eq!(SaPayload::parse(&b).unwrap(), sa);
        // The GCM transform: type 1, ID 20, key length attribute 0x800e 0x0080.
        assert_eq!(&b[8..20], &[3, 0, 0, 12, 1, 0, 0, 20, 0x80, 0x0e, 0, 128]);
        // Every truncation fails cleanly.
        for n in 0..b.len() {
            assert!(SaPayload::parse(&b[..n]).is_err());
        }
    }

    #[test]
    fn choice_follows_our_preference_and_answers_verify() {
        let theirs = parse_proposals(
            "aes256-sha256-modp2048, aes128gcm16-prfsha256-x25519",
            ProposalKind::Ike,
        )
        .unwrap();
        let offered: Vec<_> = theirs
            .iter()
            .enumerate()
            .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::IKE, &[], s, true))
            .collect();
        let ours = parse_proposals("aes128gcm16-prfsha256-x25519-ecp384", ProposalKind::Ike).unwrap();
        let (num, suite) = choose_ike(&offered, &ours).unwrap();
        assert_eq!(num, 2);
        assert_eq!(
            suite,
            IkeSuite {
                encr: Encr::AesGcm16_128,
                integ: None,
                prf: Prf::HmacSha256,
                dh: DhGroup::Curve25519,
                addke: [None; 7],
            }
        );
        let answer = SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(num, &[], &suite)],
        };
        assert_eq!(accept_ike_answer(&answer, &theirs), Some(suite));
        // An answer naming a transform we did not offer in that proposal is refused.
        let wrong = SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(1, &[], &suite)],
        };
        assert_eq!(accept_ike_answer(&wrong, &theirs), None);
        let none = parse_proposals("aes256-sha512-ecp256", ProposalKind::Ike).unwrap();
        assert_eq!(choose_ike(&offered, &none), None);
    }

    #[test]
    fn esp_choice() {
        let theirs = parse_proposals("aes128gcm16-esn-noesn", ProposalKind::Esp).unwrap();
        let offered = [Proposal::from_spec(
            1,
            protocol::ESP,
            &0x1234u32.to_be_bytes(),
            &theirs[0],
            false,
        )];
        let ours = parse_proposals("aes128gcm16-esn", ProposalKind::Esp).unwrap();
        let (num, spi, s) = choose_esp(&offered, &ours).unwrap();
        assert_eq!((num, spi, s.esn, s.integ), (1, 0x1234, true, None));
        let answer = SaPayload {
            proposals: alloc::vec![Proposal::from_child_suite(1, 0x5678, &s)],
        };
        assert_eq!(accept_esp_answer(&answer, &theirs), Some((0x5678, s)));
    }

    /// RFC 9370 2.2.1: ADDKE transforms in proposals, NONE, and an answer's checks.
    #[test]
    fn additional_key_exchanges() {
        let theirs = parse_proposals(
            "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024-ke2_none, aes256gcm16-prfsha384-x25519",
            ProposalKind::Ike,
        )
        .unwrap();
        assert_eq!(theirs[0].addke[0], [Some(DhGroup::MlKem768)]);
        assert_eq!(theirs[0].addke[1], [Some(DhGroup::MlKem1024), None]);
        let offered: Vec<_> = theirs
            .iter()
            .enumerate()
            .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::IKE, &[], s, true))
            .collect();
        // On the wire: type 6 ID 36, type 7 IDs 37 and 0.
        let t: Vec<(u8, u16)> = offered[0].transforms.iter().map(|t| (t.ty, t.id)).collect();
        assert!(t.ends_with(&[(4, 31), (6, 36), (7, 37), (7, 0)]), "{t:?}");
        // A responder asking for ke1 only takes ke2 as NONE.
        let ours = parse_proposals("aes256gcm16-prfsha384-x25519-ke1_mlkem768", ProposalKind::Ike).unwrap();
        let (num, suite) = choose_ike(&offered, &ours).unwrap();
        assert_eq!(num, 1);
        assert_eq!(suite.addke[..2], [Some(DhGroup::MlKem768), None]);
        assert_eq!(suite.proposal_string(), "aes256gcm16-prfsha384-x25519-ke1_mlkem768");
        // One asking for both gets both.
        let both = parse_proposals(
            "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024",
            ProposalKind::Ike,
        )
        .unwrap();
        let (_, s2) = choose_ike(&offered, &both).unwrap();
        assert_eq!(
            s2.additional().collect::<Vec<_>>(),
            [(1, DhGroup::MlKem768), (2, DhGroup::MlKem1024)]
        );
        let answer = SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(1, &[], &s2)],
        };
        assert_eq!(accept_ike_answer(&answer, &theirs), Some(s2));
        // One without RFC 9370 configured cannot take proposal 1 (it must run ke1), so
        // the initiator's second proposal (the fallback) is chosen.
        let plain = parse_proposals("aes256gcm16-prfsha384-x25519", ProposalKind::Ike).unwrap();
        let (num, s3) = choose_ike(&offered, &plain).unwrap();
        assert_eq!((num, s3.addke), (2, [None; 7]));
        // A responder that picks an ADDKE method we did not propose is refused, and so is
        // one that drops an ADDKE we require.
        let mut bad = s2;
        bad.addke[0] = Some(DhGroup::MlKem512);
        let answer = SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(1, &[], &bad)],
        };
        assert_eq!(accept_ike_answer(&answer, &theirs), None);
        let mut dropped = s2;
        dropped.addke[0] = None;
        let answer = SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(1, &[], &dropped)],
        };
        assert_eq!(accept_ike_answer(&answer, &theirs), None);
        // ML-KEM alone as the KE of IKE_SA_INIT.
        let alone = parse_proposals("aes256gcm16-prfsha384-mlkem1024", ProposalKind::Ike).unwrap();
        assert_eq!(alone[0].dh, [DhGroup::MlKem1024]);
        assert!(alone[0].is_post_quantum() && theirs[0].is_post_quantum());
        assert!(!plain[0].is_post_quantum());
        // ke2 may be NONE, ke1 may not: still post-quantum.  A NONE-able one alone is not.
        let maybe = parse_proposals("aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none", ProposalKind::Ike).unwrap();
        assert!(!maybe[0].is_post_quantum());
        for bad in [
            "aes256gcm16-prfsha384-x25519-ke8_mlkem768",
            "aes256gcm16-prfsha384-x25519-ke1_kyber",
        ] {
            assert_eq!(
                parse_proposal(bad, ProposalKind::Ike).err(),
                Some(Error::UnknownAlgorithm),
                "{bad}"
            );
        }
    }

    /// RFC 4303 2.1: ESP SPI 0 is reserved and never sent. Offered (IKE_AUTH's child or
    /// CREATE_CHILD_SA: both choose here) it is not chosen, so the answer is
    /// NO_PROPOSAL_CHOSEN; in an answer it agrees nothing (issue #39 item 11).
    #[test]
    fn esp_spi_zero_is_never_agreed() {
        let theirs = parse_proposals("aes128gcm16, aes256gcm16", ProposalKind::Esp).unwrap();
        let ours = parse_proposals("aes128gcm16, aes256gcm16", ProposalKind::Esp).unwrap();
        let with = |spi: u32| {
            theirs
                .iter()
                .enumerate()
                .map(|(i, t)| Proposal::from_spec(i as u8 + 1, protocol::ESP, &spi.to_be_bytes(), t, false))
                .collect::<Vec<_>>()
        };
        assert_eq!(choose_esp(&with(0), &ours), None);
        assert_eq!(
            choose_esp(&with(0x100), &ours).map(|(n, spi, _)| (n, spi)),
            Some((1, 0x100))
        );
        // One proposal with SPI 0 among others: the others can still be chosen.
        let mut mixed = with(0);
        mixed[1].spi = 0x200u32.to_be_bytes().to_vec();
        assert_eq!(choose_esp(&mixed, &ours).map(|(n, spi, _)| (n, spi)), Some((2, 0x200)));
        let s = choose_esp(&with(0x100), &ours).unwrap().2;
        let answer = |spi| SaPayload {
            proposals: alloc::vec![Proposal::from_child_suite(1, spi, &s)],
        };
        assert_eq!(accept_esp_answer(&answer(0), &theirs), None);
        assert_eq!(accept_esp_answer(&answer(0x300), &theirs), Some((0x300, s)));
    }
}
