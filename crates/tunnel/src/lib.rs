//! The TUN-to-peer tunnel daemon's I/O layer. Not implemented yet: this crate is an empty
//! placeholder so the workspace layout is in place. Nothing here claims to work.
#![forbid(unsafe_code)]
