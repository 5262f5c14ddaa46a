//! Bounds on everything a peer controls: every loop over outside bytes and every allocation
//! made for them is capped by one of these.

/// Largest IKE message accepted or built (a UDP datagram's payload; RFC 7296 2 says a
/// message can be as large as UDP allows). Also the bound on a message reassembled from
/// IKE fragments (RFC 7383 2.6): the plaintext of all its fragments together.
pub const MAX_MESSAGE_LEN: usize = 65_535 - 8;
/// Largest unauthenticated request taken: a new IKE_SA_INIT (SPIr 0). RFC 7296 2 asks every
/// implementation to take 1,280 octets (MUST) and 3,000 (SHOULD); strongSwan's `max_packet`
/// is 10,000 for any message. An IKE_SA_INIT with a MODP-8192 KE (1,024 octets) and a long
/// proposal list is under 2,000, with an ML-KEM-1024 key share under 3,000. A half-open SA
/// keeps the request (AUTH signs it, 2.15), so this bounds what each one holds.
pub const MAX_INIT_LEN: usize = 6_000;
/// Payloads in one message (outer plus inner of the Encrypted payload, counted separately).
pub const MAX_PAYLOADS: usize = 64;
/// Proposals in one SA payload.
pub const MAX_PROPOSALS: usize = 32;
/// Transforms in one proposal.
pub const MAX_TRANSFORMS: usize = 64;
/// Traffic selectors in one TS payload.
pub const MAX_TS: usize = 16;
/// SPIs in one Delete payload.
pub const MAX_DELETE_SPIS: usize = 64;
/// IKE SAs one [`crate::Endpoint`] holds (half-open ones included).
pub const MAX_IKE_SAS: usize = 4096;
/// Child SAs one IKE SA holds.
pub const MAX_CHILD_SAS: usize = 64;
/// Queued commands (requests waiting for the window) per IKE SA.
pub const MAX_QUEUED_REQUESTS: usize = 32;
/// Events and transmits kept for the caller before the oldest are dropped.
pub const MAX_QUEUED_OUTPUT: usize = 4096;
/// Policies one child SA pair may need per direction (RFC 7296 2.9: every pair of its
/// selectors, each address range as the prefixes that cover it exactly; see
/// [`crate::narrowing::policy_count`]): a narrowing that needs more is refused with
/// TS_UNACCEPTABLE, so one peer cannot fill a data plane's policy table.
pub const MAX_CHILD_POLICIES: usize = 256;
/// CA key hashes we put in one CERTREQ (3.7): the CAs trusted by the connections that may
/// answer a peer.
pub const MAX_CERTREQ_CAS: usize = 32;
/// Fragments one IKE message may be split into, sent or received (RFC 7383 2.5: Total
/// Fragments); a peer announcing more is refused, and a message that would need more is
/// sent whole.
pub const MAX_FRAGMENTS: usize = 32;
/// A partly reassembled message is dropped this long after its first fragment came (RFC
/// 7383 2.6 leaves the time to the implementation): its sender retransmits all fragments.
pub const FRAGMENT_REASSEMBLY_TIMEOUT: core::time::Duration = core::time::Duration::from_secs(30);
/// The smallest `fragment_size` (the IP datagram, RFC 7383 2.5.1) used: a smaller one is
/// raised to this, so a fragment always carries some payload bytes.
pub const MIN_FRAGMENT_SIZE: u16 = 256;
/// Largest message a partly reassembled set of IKE fragments may come to before the peer
/// is authenticated (a half-open responder SA's IKE_AUTH request, or the response to ours):
/// the keys of an unauthenticated IKE_SA_INIT are enough to send fragments, and a half-open
/// SA must not hold [`MAX_MESSAGE_LEN`] for anyone (RFC 7383 2.6 leaves the bound to the
/// implementation). 16 KiB: an IKE_AUTH with a chain of three RSA-4096 certificates, a
/// CERTREQ and an AUTH is under 8 KiB; strongSwan refuses any message over its
/// `max_packet`, 10,000 octets, reassembled ones included.
pub const MAX_PREAUTH_MESSAGE_LEN: usize = 16 * 1024;
/// IKE SAs of one authenticated peer identity, those a rekey replaced and whose Delete has
/// not come yet included: an IKE SA rekey past it is refused with NO_ADDITIONAL_SAS, and an
/// IKE_AUTH without INITIAL_CONTACT with AUTHENTICATION_FAILED, so one peer cannot fill
/// [`MAX_IKE_SAS`] and lock the others out. A peer has one IKE SA, two while a rekey's
/// Delete is on its way, a few more while an old one waits to be found dead (peers sharing
/// one identity on a `%any` connection count together). (IKE SA rekeys are also refused
/// while the endpoint holds `MAX_IKE_SAS - half_open_max` SAs: the room of half-open SAs
/// stays free.)
pub const MAX_IKE_SAS_PER_IDENTITY: usize = 8;
/// Child SAs one IKE SA holds counting the pairs a rekey replaced whose Delete has not come
/// yet: a child rekey past it is refused with NO_ADDITIONAL_SAS (new children stop at
/// [`MAX_CHILD_SAS`], replaced ones counted too), so rekeys that never delete what they
/// replace cannot grow an IKE SA without bound. Twice [`MAX_CHILD_SAS`]: every child can be
/// in the middle of its rekey.
pub const MAX_CHILD_SAS_WITH_REPLACED: usize = 2 * MAX_CHILD_SAS;
/// IKE_AUTH requests one EAP conversation takes at most, the first (without AUTH) and the
/// last (AUTH with the MSK) included (RFC 7296 2.16). EAP-MSCHAPv2 needs 5 (first, Identity,
/// Challenge Response, Success Response, AUTH); a few more allow for re-sent EAP Requests
/// after out-of-order Responses. EAP-TLS (RFC 5216 2.1.5) takes one round per fragment of
/// 1 KiB each way plus the ACKs: about 10 for a handshake with one certificate each side,
/// more with chains. More: AUTHENTICATION_FAILED.
pub const MAX_EAP_ROUNDS: u8 = 40;
