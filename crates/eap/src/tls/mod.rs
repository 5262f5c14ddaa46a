//! EAP-TLS (RFC 5216 for TLS 1.2, RFC 9190 for TLS 1.3): the TLS handshake carried in EAP
//! (Type 13), which IKEv2 runs inside IKE_AUTH (RFC 7296 §2.16) for clients with a
//! certificate. The TLS itself is rustls (the `ring` provider), driven sans-IO through
//! `read_tls`/`write_tls` on buffers.
//!
//! - [`packet`]: the EAP-TLS packet, flags L/M/S and the TLS Message Length (§3.1, §3.2).
//! - [`fragment`]: fragmentation both ways with a bounded reassembly (§2.1.5).
//! - [`keys`]: the MSK from the TLS exporter (RFC 5216 §2.3, RFC 9190 §2.3).
//! - [`config`]: rustls configurations (client certificate required and verified against
//!   the configured CAs, RFC 5216 §5.3).
//! - [`server`]: the authenticator; [`peer`]: the client.

pub mod config;
pub mod fragment;
pub mod keys;
pub mod packet;
pub mod peer;
pub mod server;

pub use config::{ConfigError, PeerConfig, ServerConfig, Versions};
pub use peer::{Peer, PeerStep};
/// rustls itself (its `pki_types` for keys and certificates, `ProtocolVersion`).
pub use rustls;
/// The private key type [`ServerConfig::new`] and [`PeerConfig::new`] take.
pub use rustls::pki_types::PrivateKeyDer;
pub use server::{Server, MAX_ROUNDS};

use alloc::vec::Vec;
use rustls::{ConnectionCommon, SideData};

/// The largest TLS flight rustls may queue for one write (a bound on [`drain`]).
const MAX_FLIGHT: usize = 256 * 1024;

/// Feeds one whole TLS message (set of records) from the other side into rustls.
fn feed<D: SideData>(conn: &mut ConnectionCommon<D>, mut msg: &[u8]) -> Result<(), rustls::Error> {
    while !msg.is_empty() {
        match conn.read_tls(&mut msg) {
            Ok(0) => break,
            Ok(_) => {
                conn.process_new_packets()?;
            }
            Err(_) => return Err(rustls::Error::General("TLS input not taken".into())),
        }
    }
    Ok(())
}

/// Everything rustls has to send now.
fn drain<D: SideData>(conn: &mut ConnectionCommon<D>) -> Vec<u8> {
    let mut out = Vec::new();
    while conn.wants_write() && out.len() < MAX_FLIGHT {
        if conn.write_tls(&mut out).is_err() {
            break;
        }
    }
    out
}
