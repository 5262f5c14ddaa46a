//! The protection of an IKE SA's messages: the Encrypted payload sealed and opened (RFC 7296
//! 3.14), fragmented and reassembled when fragmentation was negotiated (RFC 7383 2.5, 2.6).
use super::{Cx, IkeSa, State};
use crate::dropped::Dropped;
use crate::error::Error;
use crate::header::ExchangeType;
use crate::message::{emit_chain, parse_chain, Message, Payload};
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRngCore;

impl IkeSa {
    /// Builds an encrypted message; when fragmentation was negotiated and the message
    /// would not fit the fragment size, its fragments (RFC 7383 2.5.3) as a train. (A
    /// message that would need more than [`crate::limits::MAX_FRAGMENTS`] goes whole.)
    pub fn seal(
        &mut self,
        exchange: ExchangeType,
        response: bool,
        id: u32,
        payloads: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, Error> {
        let h = self.header(exchange, response, id);
        let (first, inner) = emit_chain(payloads)?;
        let budget = self
            .fragmentation
            .map(|size| crate::fragment::message_budget(size, self.path.remote, self.path.natt));
        let c = self.state.crypto_mut().ok_or(Error::BadEncryptedPayload)?;
        if let Some(budget) = budget.filter(|&b| c.sk_out.sealed_len(inner.len()) > b) {
            if let Ok(train) = crate::fragment::seal_fragments(&mut c.sk_out, &h, first, &inner, budget, rng) {
                self.stats.fragments_sent += crate::fragment::datagrams(&train).count() as u64;
                return Ok(train);
            }
        }
        c.sk_out.seal(&h, first, &inner, rng)
    }

    /// Authenticates and decrypts a received encrypted message (3.14), or, for an
    /// Encrypted Fragment payload (RFC 7383 2.6), authenticates the fragment, keeps it and
    /// returns the message once its last fragment came (`Ok(None)` until then). `Err` here
    /// means the datagram is not used and gets no answer.
    pub fn open(&mut self, cx: &mut Cx, raw: &[u8], msg: &Message) -> Result<Option<Opened>, Dropped> {
        if msg.header.next_payload != crate::payload::kind::SKF {
            return self.decrypt(raw, msg).map(Some).map_err(Dropped::Malformed);
        }
        let r = self.open_fragment(cx.now, raw, msg);
        match &r {
            Ok(Some(_)) => self.stats.fragmented_messages += 1,
            Ok(None) => {}
            Err(_) => self.stats.fragments_dropped += 1,
        }
        r.map_err(Dropped::Fragment)
    }

    fn open_fragment(
        &mut self,
        now: Duration,
        raw: &[u8],
        msg: &Message,
    ) -> Result<Option<Opened>, crate::fragment::FragmentError> {
        use crate::fragment::{FragmentError, FragmentRepr};
        let h = &msg.header;
        if self.fragmentation.is_none() {
            return Err(FragmentError::NotNegotiated);
        }
        if h.exchange == ExchangeType::IkeSaInit {
            return Err(FragmentError::InitExchange);
        }
        let f = FragmentRepr::parse(raw, h)?;
        let exchange = h.exchange.to_u8();
        let buf = &mut self.reassembly[usize::from(h.response)];
        buf.expire(now);
        buf.check(h.message_id, exchange, &f)?;
        // Before the peer is authenticated the keys of an IKE_SA_INIT anyone can make are
        // enough to send fragments: a half-open SA holds at most MAX_PREAUTH_MESSAGE_LEN
        // (issue #39: 65,000 octets held 30 s by each of 1,024 half-open SAs).
        let limit = if self.state.is_established() || matches!(self.state, State::Rekeyed { .. }) {
            crate::limits::MAX_MESSAGE_LEN
        } else {
            crate::limits::MAX_PREAUTH_MESSAGE_LEN
        };
        // A fragment whose ciphertext alone (less the most an IV, padding and ICV take) is
        // over the bound is refused before it is decrypted.
        const MOST_OVERHEAD: usize = 16 + 256 + 32;
        if raw.len().saturating_sub(f.iv_at) > limit + MOST_OVERHEAD {
            return Err(FragmentError::TooLong);
        }
        let c = self.state.crypto().ok_or(FragmentError::NotNegotiated)?;
        let plain = c.sk_in.open_at(raw, f.iv_at).map_err(|e| match e {
            Error::BadIntegrity => FragmentError::BadIntegrity,
            e => FragmentError::Malformed(e),
        })?;
        self.stats.fragments_received += 1;
        let done =
            self.reassembly[usize::from(h.response)].add_within(now, h.message_id, exchange, &f, plain, limit)?;
        Ok(done.map(|(first, inner)| Opened {
            inner,
            first,
            bad: None,
        }))
    }

    /// Checks an encrypted message's integrity and decrypts it (3.14): `Err` here means it
    /// is not from the peer, and is dropped without an answer. Bad padding after a valid
    /// ICV is the peer's malformed message: [`Opened::payloads`] says so.
    pub fn decrypt(&self, raw: &[u8], msg: &Message) -> Result<Opened, Error> {
        let (off, first) = msg.chain.sk.ok_or(Error::MissingPayload("Encrypted"))?;
        if !msg.chain.payloads.is_empty() {
            return Err(Error::BadEncryptedPayload);
        }
        let c = self.state.crypto().ok_or(Error::BadEncryptedPayload)?;
        match c.sk_in.open(raw, off) {
            Ok(inner) => Ok(Opened {
                inner,
                first,
                bad: None,
            }),
            // The padding is read only after the ICV (or the AEAD tag) verified: the message
            // is the peer's, malformed, and a request gets INVALID_SYNTAX (2.21.3, 3.10.1).
            Err(Error::BadPadding) => Ok(Opened {
                inner: Default::default(),
                first,
                bad: Some(Error::BadPadding),
            }),
            Err(e) => Err(e),
        }
    }
}

/// The decrypted inner payload chain of an authenticated message.
pub(crate) struct Opened {
    inner: zeroize::Zeroizing<Vec<u8>>,
    first: u8,
    /// Authenticated, but its plaintext is malformed (bad padding): no payloads.
    bad: Option<Error>,
}

impl Opened {
    /// The type of the first inner payload.
    pub fn first(&self) -> u8 {
        self.first
    }
    /// The inner payloads' bytes (no padding).
    pub fn inner(&self) -> &[u8] {
        &self.inner
    }

    /// The inner payloads; `Err`: authenticated but malformed (answered with INVALID_SYNTAX,
    /// 2.21.3, or UNSUPPORTED_CRITICAL_PAYLOAD, 2.5).
    pub fn payloads(&self) -> Result<Vec<Payload>, Error> {
        if let Some(e) = self.bad {
            return Err(e);
        }
        let chain = parse_chain(&self.inner, self.first)?;
        if chain.sk.is_some() {
            return Err(Error::BadEncryptedPayload);
        }
        Ok(chain.payloads)
    }
}
