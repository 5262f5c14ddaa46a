//! RADIUS (RFC 2865) for EAP pass-through (RFC 3579): the packet codec ([`packet`]), the
//! Message-Authenticator and Response Authenticator ([`auth`]), the MS-MPPE keys of RFC 2548
//! ([`mppe`]), the sans-IO client ([`client`]) and accounting (RFC 2866, [`accounting`]).
pub mod accounting;
pub mod auth;
pub mod client;
pub mod mppe;
pub mod packet;
