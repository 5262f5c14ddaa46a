//! The RADIUS server that EAP is passed to (`[radius]`; strongSwan's eap-radius plugin's
//! `servers` section, RFC 3579): a connection with `remote.auth = "eap-radius"` relays its
//! clients' EAP conversations to it. See docs/ike-eap.md.
//!
//! ```toml
//! [radius]
//! address = "10.1.0.5:1812"             # host:port (an IP address; the port defaults to 1812)
//! nas_identifier = "vpn-gw"             # NAS-Identifier (RFC 2865 5.32; default "tunneld")
//! retransmit_timeout = "2s"             # wait this long for an answer before sending again (default 2s)
//! retransmit_tries = 3                  # send a request this many times at most (default 3), then
//!                                       # the server is down: the client gets EAP-Failure
//!
//! [[connection]]
//! name = "rw"
//! remote = { auth = "eap-radius", eap_id = "%any" }
//! ```
//!
//! The shared secret lives in the secrets file, beside the `[[eap]]` users:
//!
//! ```toml
//! [radius]
//! secret = "testing123"                 # never logged
//! ```
use crate::values::Span;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The port of RADIUS authentication (RFC 2865 3).
pub const DEFAULT_PORT: u16 = 1812;

/// `[radius]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RadiusToml {
    address: String,
    nas_identifier: Option<String>,
    retransmit_timeout: Option<Span>,
    retransmit_tries: Option<u8>,
    /// Refused with a pointer to the secrets file (a secret in the config would be in every
    /// copy of it).
    secret: Option<toml::Value>,
}

/// The RADIUS server, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RadiusConfig {
    /// Where Access-Requests go (and the only source answers are taken from).
    pub address: SocketAddr,
    /// NAS-Identifier of every request.
    pub nas_identifier: String,
    /// How long to wait for an answer before sending a request again.
    pub retransmit_timeout: Duration,
    /// How many times a request is sent at most.
    pub retransmit_tries: u8,
    /// 1-based line of the `[radius]` header.
    pub line: usize,
}

/// `host:port` or `host` (port 1812); IPv6 as `[::1]:1812` or `::1`.
pub fn parse_address(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let host = s.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(s);
    host.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, DEFAULT_PORT))
        .map_err(|_| format!("address `{s}`: an IP address with an optional port (\"10.1.0.5:1812\")"))
}

impl RadiusToml {
    pub(crate) fn into_config(self, line: usize) -> Result<RadiusConfig, String> {
        if self.secret.is_some() {
            return Err("secret: the RADIUS secret belongs in the secrets file ([radius] secret = \"...\")".into());
        }
        let address = parse_address(&self.address)?;
        if address.port() == 0 || address.ip().is_unspecified() {
            return Err(format!("address `{}`: not a server's address", self.address));
        }
        let nas_identifier = self.nas_identifier.unwrap_or_else(|| "tunneld".into());
        if nas_identifier.is_empty() || nas_identifier.len() > 253 {
            return Err("nas_identifier: 1 to 253 bytes (a RADIUS attribute)".into());
        }
        let retransmit_timeout = match &self.retransmit_timeout {
            Some(t) => t.get("retransmit_timeout")?,
            None => Duration::from_secs(2),
        };
        if retransmit_timeout.is_zero() || retransmit_timeout > Duration::from_secs(60) {
            return Err("retransmit_timeout: more than 0 and at most 60 s".into());
        }
        let retransmit_tries = self.retransmit_tries.unwrap_or(3);
        if !(1..=10).contains(&retransmit_tries) {
            return Err("retransmit_tries: 1 to 10".into());
        }
        Ok(RadiusConfig {
            address,
            nas_identifier,
            retransmit_timeout,
            retransmit_tries,
            line,
        })
    }
}

impl RadiusConfig {
    /// The RADIUS client's settings for the IKE crate, with the secrets file's secret.
    pub fn client(&self, secret: &[u8]) -> ipsec_ike::ipsec_eap::radius::client::Config {
        let mut c = ipsec_ike::ipsec_eap::radius::client::Config::new(secret, self.nas_identifier.as_bytes());
        c.retransmit_after = self.retransmit_timeout;
        c.max_tries = self.retransmit_tries;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_with_and_without_a_port() {
        assert_eq!(parse_address("10.1.0.5").unwrap(), "10.1.0.5:1812".parse().unwrap());
        assert_eq!(
            parse_address("10.1.0.5:1645").unwrap(),
            "10.1.0.5:1645".parse().unwrap()
        );
        assert_eq!(parse_address("::1").unwrap(), "[::1]:1812".parse().unwrap());
        assert_eq!(parse_address("[::1]").unwrap(), "[::1]:1812".parse().unwrap());
        assert_eq!(parse_address("[::1]:18120").unwrap(), "[::1]:18120".parse().unwrap());
        assert!(parse_address("radius.example").is_err());
    }
}
