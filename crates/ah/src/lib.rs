//! AH (RFC 4302 / RFC 2402). Not implemented yet: this crate is an empty placeholder so the
//! workspace layout is in place. Nothing here claims to work.
#![no_std]
#![forbid(unsafe_code)]
