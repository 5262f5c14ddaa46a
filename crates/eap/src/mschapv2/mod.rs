//! EAP-MSCHAPv2 (draft-kamath-pppext-eap-mschapv2-02): the message framing and both roles.
pub mod message;
pub mod peer;
pub mod server;
pub use peer::{Peer, PeerStep};
pub use server::{Credentials, Server};
