//! RADIUS (RFC 2865) for EAP pass-through (RFC 3579): the packet codec ([`packet`]), the
//! Message-Authenticator and Response Authenticator ([`auth`]), the MS-MPPE keys of RFC 2548
//! ([`mppe`]) and the sans-IO client ([`client`]).
pub mod auth;
pub mod client;
pub mod mppe;
pub mod packet;
