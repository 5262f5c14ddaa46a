//! An IKE SA's states (RFC 7296 1.2, 2.18) with the data each needs: the handshake kept from
//! IKE_SA_INIT until IKE_AUTH is done, and the keys ([`Crypto`], 2.14). Every transition
//! between them is a method here; the tasks read the state and call these to move it.
use super::{IkeSa, PeerWindow};
use crate::alg::IkeSuite;
use crate::error::Error;
use crate::event::Role;
use crate::id::Identity;
use crate::keys::{derive_ike_keys, skeyseed, IkeKeys};
use crate::sk::SkCipher;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::time::Duration;

/// An IKE SA's keys: the SK_* (2.14) and the two ciphers of its Encrypted payloads.
pub(crate) struct Crypto {
    pub suite: IkeSuite,
    pub keys: IkeKeys,
    pub sk_in: SkCipher,
    pub sk_out: SkCipher,
}

impl Crypto {
    /// SKEYSEED from the nonces and the shared secret (2.14), or, for an IKE SA that
    /// replaces another, from the old SA's SK_d (2.18): `prf(SK_d (old), g^ir (new) | Ni | Nr)`.
    #[allow(clippy::too_many_arguments)]
    pub fn derive(
        role: Role,
        suite: IkeSuite,
        old_sk_d: Option<&[u8]>,
        shared: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Crypto, Error> {
        Self::derive_with(role, suite, old_sk_d, shared, ni, nr, &[], spi_i, spi_r)
    }

    /// [`Crypto::derive`] for a rekey with additional key exchanges (RFC 9370 2.2.4):
    /// `SKEYSEED = prf(SK_d (old), SK(0) | Ni | Nr | SK(1) | ... | SK(n))`, `add` being
    /// SK(1) | ... | SK(n) (strongSwan's order too).
    #[allow(clippy::too_many_arguments)]
    pub fn derive_with(
        role: Role,
        suite: IkeSuite,
        old_sk_d: Option<&[u8]>,
        shared: &[u8],
        ni: &[u8],
        nr: &[u8],
        add: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Crypto, Error> {
        let seed = match old_sk_d {
            None => skeyseed(suite.prf, ni, nr, shared),
            Some(d) => crate::keys::rekey_skeyseed(suite.prf, d, shared, ni, nr, add),
        };
        let keys = derive_ike_keys(&suite, &seed, ni, nr, spi_i, spi_r);
        let (out_e, out_a, in_e, in_a) = if role == Role::Initiator {
            (&keys.sk_ei, &keys.sk_ai, &keys.sk_er, &keys.sk_ar)
        } else {
            (&keys.sk_er, &keys.sk_ar, &keys.sk_ei, &keys.sk_ai)
        };
        Ok(Crypto {
            sk_out: SkCipher::new(suite.encr, suite.integ, out_e, out_a)?,
            sk_in: SkCipher::new(suite.encr, suite.integ, in_e, in_a)?,
            keys,
            suite,
        })
    }
}

/// What IKE_AUTH signs and the first child's KEYMAT needs (2.15, 2.17), kept from
/// IKE_SA_INIT until IKE_AUTH is done.
pub(crate) struct Handshake {
    pub ni: Vec<u8>,
    pub nr: Vec<u8>,
    /// IKE_SA_INIT request and response as sent/received.
    pub init_req: Vec<u8>,
    pub init_resp: Vec<u8>,
    /// The hash algorithms the peer announced for signatures (RFC 7427 4).
    pub peer_hashes: Option<Vec<u16>>,
    /// The peer sent a CERTREQ in IKE_SA_INIT (3.7).
    pub peer_certreq: bool,
    /// IKE_INTERMEDIATE (RFC 9242): the IntAuth chain, the additional key exchanges run.
    pub int: crate::task::ike_intermediate::Intermediate,
}

/// Where an IKE SA is, with the data that state needs. The handshake is boxed: about 1.1 KB
/// (IKE_INTERMEDIATE's pending keys among it) needed only until IKE_AUTH is done, which inline
/// made every established IKE SA that much larger (issue #36 item 6).
pub(crate) enum State {
    /// Initiator: IKE_SA_INIT sent (its task holds the key exchange and our nonce).
    InitSent,
    /// Responder: IKE_SA_INIT answered, waiting for IKE_AUTH (half-open).
    HalfOpen { hs: Box<Handshake>, crypto: Crypto },
    /// Initiator: IKE_AUTH sent.
    AuthSent { hs: Box<Handshake>, crypto: Crypto },
    /// Both sides authenticated.
    Established { crypto: Crypto, remote_id: Identity },
    /// Replaced by a rekeyed IKE SA (2.18): only answers the Delete of itself.
    Rekeyed { crypto: Crypto, remote_id: Identity },
    /// Gone; removed by the endpoint.
    Dead,
}

impl State {
    pub fn crypto(&self) -> Option<&Crypto> {
        match self {
            State::HalfOpen { crypto, .. }
            | State::AuthSent { crypto, .. }
            | State::Established { crypto, .. }
            | State::Rekeyed { crypto, .. } => Some(crypto),
            State::InitSent | State::Dead => None,
        }
    }
    pub fn crypto_mut(&mut self) -> Option<&mut Crypto> {
        match self {
            State::HalfOpen { crypto, .. }
            | State::AuthSent { crypto, .. }
            | State::Established { crypto, .. }
            | State::Rekeyed { crypto, .. } => Some(crypto),
            State::InitSent | State::Dead => None,
        }
    }
    pub fn is_established(&self) -> bool {
        matches!(self, State::Established { .. })
    }
    pub fn is_dead(&self) -> bool {
        matches!(self, State::Dead)
    }
    pub fn remote_id(&self) -> Option<&Identity> {
        match self {
            State::Established { remote_id, .. } | State::Rekeyed { remote_id, .. } => Some(remote_id),
            _ => None,
        }
    }
}

/// The state as the tasks and the endpoint see it: read, never assigned (the transitions
/// below are the only writers).
impl IkeSa {
    pub fn state(&self) -> &State {
        &self.state
    }
    pub fn is_established(&self) -> bool {
        self.state.is_established()
    }
    pub fn is_dead(&self) -> bool {
        self.state.is_dead()
    }
    /// Responder: IKE_SA_INIT answered, IKE_AUTH not done.
    pub fn is_half_open(&self) -> bool {
        matches!(self.state, State::HalfOpen { .. })
    }
    pub fn remote_id(&self) -> Option<&Identity> {
        self.state.remote_id()
    }
    pub fn crypto(&self) -> Option<&Crypto> {
        self.state.crypto()
    }
    /// Between IKE_SA_INIT and IKE_AUTH (either role): the handshake and the keys, which
    /// IKE_INTERMEDIATE updates (RFC 9242, RFC 9370 2.2.2).
    pub fn handshake_mut(&mut self) -> Option<(&mut Handshake, &mut Crypto)> {
        match &mut self.state {
            State::HalfOpen { hs, crypto } | State::AuthSent { hs, crypto } => Some((&mut **hs, crypto)),
            _ => None,
        }
    }
}

/// The transitions (1.2: IKE_SA_INIT, then IKE_AUTH; 2.18: rekeyed; gone).
impl IkeSa {
    /// Responder: IKE_SA_INIT answered (message 0, its response kept for a retransmission
    /// of the request, 2.1), half-open until IKE_AUTH.
    pub fn half_open(&mut self, hs: Handshake, crypto: Crypto) {
        self.window = PeerWindow {
            expected: 1,
            kept: Some((0, hs.init_resp.clone())),
            ..Default::default()
        };
        self.state = State::HalfOpen {
            hs: Box::new(hs),
            crypto,
        };
    }

    /// Initiator: IKE_SA_INIT's response taken, the keys derived: IKE_AUTH (after any
    /// IKE_INTERMEDIATE) goes out, as message 1.
    pub fn auth_sent(&mut self, hs: Handshake, crypto: Crypto) {
        self.state = State::AuthSent {
            hs: Box::new(hs),
            crypto,
        };
        self.tasks.next_id = 1;
    }

    /// Both sides authenticated (1.2): established with the keys of the handshake, which is
    /// handed back (the first child's KEYMAT takes its nonces, 2.17). None, and no change,
    /// unless the SA was in IKE_AUTH.
    pub fn establish(&mut self, remote_id: Identity) -> Option<Handshake> {
        match core::mem::replace(&mut self.state, State::Dead) {
            State::HalfOpen { hs, crypto } | State::AuthSent { hs, crypto } => {
                self.state = State::Established { crypto, remote_id };
                Some(*hs)
            }
            other => {
                self.state = other;
                None
            }
        }
    }

    /// The IKE SA a rekey of this one makes (1.3.2, 2.18), established at once with its new
    /// keys: on the same path, with the same fragmentation and virtual addresses, it takes
    /// over the children and our queued requests about them (and a liveness check); this SA
    /// keeps only its own Delete, and a queued rekey of it is dropped.
    #[allow(clippy::too_many_arguments)]
    pub fn successor(
        &mut self,
        role: Role,
        spi_i: u64,
        spi_r: u64,
        crypto: Crypto,
        remote_id: Identity,
        now: Duration,
    ) -> IkeSa {
        let mut new = IkeSa::new(
            self.conn,
            role,
            spi_i,
            spi_r,
            self.path.local,
            self.path.remote,
            State::Established { crypto, remote_id },
            now,
        );
        new.path.natt = self.path.natt;
        new.path.nat = self.path.nat;
        new.fragmentation = self.fragmentation;
        new.vips = self.vips.clone();
        new.peer_windows = self.peer_windows;
        new.eap_method = self.eap_method;
        new.mobike = self.mobike.clone();
        new.children = core::mem::take(&mut self.children);
        new.tasks = self.tasks.hand_over();
        new
    }

    /// Replaced by the IKE SA its rekey made (2.18): it keeps its keys and identity until its
    /// Delete. No change unless it was established.
    pub fn retire(&mut self) {
        if let State::Established { crypto, remote_id } = core::mem::replace(&mut self.state, State::Dead) {
            self.state = State::Rekeyed { crypto, remote_id };
        }
    }

    /// Gone: the endpoint removes it.
    pub fn die(&mut self) {
        self.state = State::Dead;
    }
}
