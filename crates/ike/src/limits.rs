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
