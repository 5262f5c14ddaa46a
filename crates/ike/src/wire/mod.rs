//! The IKEv2 wire format (RFC 7296 section 3): the header, the generic payload header and
//! chain, each payload's codec, and whole messages. Pure parsing and building (smoltcp-style
//! views and reprs): no keys, no state. The Encrypted payload is opened and sealed by
//! [`crate::sk`], fragments reassembled by [`crate::fragment`], CERT and CERTREQ are
//! [`crate::pki`]'s, AUTH is computed by [`crate::auth`].
pub mod delete;
pub mod fragment;
pub mod header;
pub mod id;
pub mod ke;
pub mod message;
pub mod nonce;
pub mod notify;
pub mod payload;
pub mod sa;
pub mod ts;
