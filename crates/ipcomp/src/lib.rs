//! IPComp. Not implemented yet.
#![no_std]
#![forbid(unsafe_code)]
