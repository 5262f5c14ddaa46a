//! The RADIUS servers that EAP is passed to (`[radius]`, or several as `[[radius]]`;
//! strongSwan's eap-radius plugin's `servers` section, RFC 3579): a connection with
//! `remote.auth = "eap-radius"` relays its clients' EAP conversations to them. See
//! docs/ike-eap.md.
//!
//! ```toml
//! [radius]
//! address = "10.1.0.5:1812"             # host:port (an IP address; the port defaults to 1812)
//! nas_identifier = "vpn-gw"             # NAS-Identifier (RFC 2865 5.32; default "tunneld")
//! retransmit_timeout = "2s"             # wait this long for an answer before sending again (default 2s)
//! retransmit_tries = 3                  # send a request this many times at most (default 3), then
//!                                       # the server is down: the next server takes the request, or
//!                                       # with none left the client gets EAP-Failure
//!
//! [[connection]]
//! name = "rw"
//! remote = { auth = "eap-radius", eap_id = "%any" }
//! ```
//!
//! Several servers, failover (strongSwan's `servers { a { address, preference } }`): one
//! `[[radius]]` per server. A request goes to the server of the highest `preference` (then
//! file order) that is not marked down; one whose every try timed out is marked down, the
//! request goes to the next, and the server is tried again after `retry_down_after`. The
//! settings of the service (`nas_identifier`, `retransmit_*`, `retry_down_after`) are
//! written once, in any entry (two different values are an error).
//!
//! ```toml
//! [[radius]]
//! address = "10.1.0.5"
//! preference = 10                       # higher first (default 0)
//! retry_down_after = "60s"              # a server marked down is skipped this long (default 60s)
//! [[radius]]
//! address = "10.1.0.6:1812"
//! ```
//!
//! Accounting (RFC 2866, strongSwan's `accounting = yes`): off by default. With
//! `accounting = true` an Accounting-Request Start goes to the servers' accounting port
//! (`acct_port`, default 1813) when a client's IKE SA is up (User-Name, Acct-Session-Id,
//! Framed-IP-Address = its lease, NAS-IP-Address, NAS-Port, Called/Calling-Station-Id), and a
//! Stop when it goes (Acct-Session-Time, the children's octets and packets,
//! Acct-Terminate-Cause), retransmitted and failed over as Access-Requests are;
//! `interim_interval = "10m"` adds Interim-Updates with the counts so far.
//!
//! The shared secrets live in the secrets file: one for every server, or one per server by
//! its address (`[[radius]] address = "10.1.0.6", secret = "..."`):
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
/// The port of RADIUS accounting (RFC 2866 3).
pub const DEFAULT_ACCT_PORT: u16 = 1813;
/// The most servers (the failover bit set of the IKE crate's RADIUS table).
pub const MAX_SERVERS: usize = 16;

/// One `[radius]` / `[[radius]]` entry as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RadiusToml {
    address: String,
    preference: Option<i64>,
    nas_identifier: Option<String>,
    retransmit_timeout: Option<Span>,
    retransmit_tries: Option<u8>,
    retry_down_after: Option<Span>,
    acct_port: Option<u16>,
    accounting: Option<bool>,
    interim_interval: Option<Span>,
    /// Refused with a pointer to the secrets file (a secret in the config would be in every
    /// copy of it).
    secret: Option<toml::Value>,
}

/// One RADIUS server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RadiusServer {
    /// Where Access-Requests go (and the only source its answers are taken from).
    pub address: SocketAddr,
    /// Higher first (strongSwan's `preference`).
    pub preference: i64,
    /// Its accounting port (RFC 2866: 1813).
    pub acct_port: u16,
    /// 1-based line of its entry.
    pub line: usize,
}

/// The RADIUS servers and the settings of the service, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RadiusConfig {
    /// The servers in the order requests try them (by preference, then file order).
    pub servers: Vec<RadiusServer>,
    /// NAS-Identifier of every request.
    pub nas_identifier: String,
    /// How long to wait for an answer before sending a request again.
    pub retransmit_timeout: Duration,
    /// How many times a request is sent to one server at most.
    pub retransmit_tries: u8,
    /// How long a server marked down is skipped.
    pub retry_down_after: Duration,
    /// RADIUS accounting (Start and Stop per client, RFC 2866).
    pub accounting: bool,
    /// Interim-Updates at this interval (strongSwan's `interim_interval`; None: none).
    pub interim_interval: Option<Duration>,
    /// 1-based line of the first entry.
    pub line: usize,
}

/// `host:port` or `host` (port 1812); IPv6 as `[::1]:1812` or `::1`.
pub fn parse_address(s: &str) -> Result<SocketAddr, String> {
    parse_address_port(s, DEFAULT_PORT)
}

fn parse_address_port(s: &str, port: u16) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let host = s.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(s);
    host.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, port))
        .map_err(|_| format!("address `{s}`: an IP address with an optional port (\"10.1.0.5:1812\")"))
}

/// One setting of the service, written in one entry or more (equal).
fn once<T: PartialEq + Clone>(what: &str, values: impl Iterator<Item = Option<T>>) -> Result<Option<T>, String> {
    let mut out: Option<T> = None;
    for v in values.flatten() {
        match &out {
            Some(o) if *o != v => {
                return Err(format!(
                    "{what}: two different values (a setting of the service: write it once)"
                ))
            }
            _ => out = Some(v),
        }
    }
    Ok(out)
}

/// The entries (one `[radius]` or the `[[radius]]` list, with their lines), checked.
pub(crate) fn from_entries(entries: Vec<(RadiusToml, usize)>) -> Result<RadiusConfig, String> {
    if entries.is_empty() {
        return Err("no server (address = \"host:port\")".into());
    }
    if entries.len() > MAX_SERVERS {
        return Err(format!("{} servers: at most {MAX_SERVERS}", entries.len()));
    }
    let mut servers = Vec::new();
    for (e, line) in &entries {
        if e.secret.is_some() {
            return Err("secret: the RADIUS secret belongs in the secrets file ([radius] secret = \"...\")".into());
        }
        let address = parse_address(&e.address)?;
        if address.port() == 0 || address.ip().is_unspecified() {
            return Err(format!("address `{}`: not a server's address", e.address));
        }
        if servers.iter().any(|s: &RadiusServer| s.address == address) {
            return Err(format!("address `{}`: a second entry for this server", e.address));
        }
        let acct_port = e.acct_port.unwrap_or(DEFAULT_ACCT_PORT);
        if acct_port == 0 {
            return Err("acct_port: 1 to 65535".into());
        }
        servers.push(RadiusServer {
            address,
            preference: e.preference.unwrap_or(0),
            acct_port,
            line: *line,
        });
    }
    // Stable: equal preferences keep the file's order.
    servers.sort_by_key(|s| std::cmp::Reverse(s.preference));
    let nas_identifier = once("nas_identifier", entries.iter().map(|(e, _)| e.nas_identifier.clone()))?
        .unwrap_or_else(|| "tunneld".into());
    if nas_identifier.is_empty() || nas_identifier.len() > 253 {
        return Err("nas_identifier: 1 to 253 bytes (a RADIUS attribute)".into());
    }
    let span = |what: &str, get: &dyn Fn(&RadiusToml) -> Option<&Span>| -> Result<Option<Duration>, String> {
        let vals: Result<Vec<Option<Duration>>, String> = entries
            .iter()
            .map(|(e, _)| get(e).map(|s| s.get(what)).transpose())
            .collect();
        once(what, vals?.into_iter())
    };
    let retransmit_timeout =
        span("retransmit_timeout", &|e| e.retransmit_timeout.as_ref())?.unwrap_or(Duration::from_secs(2));
    if retransmit_timeout.is_zero() || retransmit_timeout > Duration::from_secs(60) {
        return Err("retransmit_timeout: more than 0 and at most 60 s".into());
    }
    let retry_down_after =
        span("retry_down_after", &|e| e.retry_down_after.as_ref())?.unwrap_or(Duration::from_secs(60));
    if retry_down_after > Duration::from_secs(86400) {
        return Err("retry_down_after: at most a day".into());
    }
    let retransmit_tries = once("retransmit_tries", entries.iter().map(|(e, _)| e.retransmit_tries))?.unwrap_or(3);
    if !(1..=10).contains(&retransmit_tries) {
        return Err("retransmit_tries: 1 to 10".into());
    }
    let accounting = once("accounting", entries.iter().map(|(e, _)| e.accounting))?.unwrap_or(false);
    let interim_interval = span("interim_interval", &|e| e.interim_interval.as_ref())?;
    if interim_interval.is_some_and(|i| i < Duration::from_secs(1) || i > Duration::from_secs(86400)) {
        return Err("interim_interval: 1 s to a day".into());
    }
    if interim_interval.is_some() && !accounting {
        return Err("interim_interval needs accounting = true".into());
    }
    Ok(RadiusConfig {
        servers,
        accounting,
        interim_interval,
        nas_identifier,
        retransmit_timeout,
        retransmit_tries,
        retry_down_after,
        line: entries[0].1,
    })
}

impl RadiusConfig {
    /// The first server's address (the one requests try first).
    pub fn address(&self) -> SocketAddr {
        self.servers[0].address
    }

    /// The servers' accounting addresses (their address, `acct_port`), in order.
    pub fn acct_addresses(&self) -> Vec<SocketAddr> {
        self.servers
            .iter()
            .map(|s| SocketAddr::new(s.address.ip(), s.acct_port))
            .collect()
    }

    /// The servers' addresses, in the order requests try them.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(|s| s.address).collect()
    }

    /// The RADIUS client's settings for the IKE crate, with each server's secret from the
    /// secrets file (`secret_of(address)`); an error names a server without one.
    pub fn client_with(
        &self,
        secret_of: &dyn Fn(SocketAddr) -> Option<Vec<u8>>,
    ) -> Result<ipsec_ike::ipsec_eap::radius::client::Config, String> {
        let mut secrets = Vec::new();
        for s in &self.servers {
            let k = secret_of(s.address)
                .ok_or_else(|| format!("no [radius] secret for the server {} in the secrets file", s.address))?;
            secrets.push(zeroize::Zeroizing::new(k));
        }
        let mut c = self.client(&secrets[0]);
        c.fallback_secrets = secrets.split_off(1);
        Ok(c)
    }

    /// The accounting client's settings (the servers' secrets as for
    /// [`RadiusConfig::client_with`]), None when `accounting` is off.
    pub fn accounting_with(
        &self,
        secret_of: &dyn Fn(SocketAddr) -> Option<Vec<u8>>,
    ) -> Result<Option<ipsec_ike::ipsec_eap::radius::accounting::Config>, String> {
        if !self.accounting {
            return Ok(None);
        }
        let c = self.client_with(secret_of)?;
        let mut secrets = vec![c.secret.clone()];
        secrets.extend(c.fallback_secrets.iter().cloned());
        Ok(Some(ipsec_ike::ipsec_eap::radius::accounting::Config {
            secrets,
            retransmit_after: self.retransmit_timeout,
            max_tries: self.retransmit_tries,
        }))
    }

    /// The RADIUS client's settings for the IKE crate, with one secret for every server.
    pub fn client(&self, secret: &[u8]) -> ipsec_ike::ipsec_eap::radius::client::Config {
        let mut c = ipsec_ike::ipsec_eap::radius::client::Config::new(secret, self.nas_identifier.as_bytes());
        c.retransmit_after = self.retransmit_timeout;
        c.max_tries = self.retransmit_tries;
        c.retry_down_after = self.retry_down_after;
        c.fallback_secrets = (1..self.servers.len())
            .map(|_| zeroize::Zeroizing::new(secret.to_vec()))
            .collect();
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

    fn entry(t: &str) -> RadiusToml {
        toml::from_str(t).unwrap()
    }

    /// `[[radius]]`: the order requests try the servers is by preference, higher first,
    /// then file order; the service's settings written once; bad lists refused.
    #[test]
    fn several_servers_ordered_by_preference() {
        let c = from_entries(vec![
            (entry("address = \"10.0.0.1\""), 1),
            (
                entry("address = \"10.0.0.2:1645\"\npreference = 5\nretransmit_tries = 2"),
                3,
            ),
            (
                entry("address = \"10.0.0.3\"\nretransmit_tries = 2\nretry_down_after = \"30s\""),
                6,
            ),
            (entry("address = \"10.0.0.4\""), 9),
        ])
        .unwrap();
        let a: Vec<String> = c.servers.iter().map(|s| s.address.to_string()).collect();
        assert_eq!(a, ["10.0.0.2:1645", "10.0.0.1:1812", "10.0.0.3:1812", "10.0.0.4:1812"]);
        assert_eq!(c.retransmit_tries, 2);
        assert_eq!(c.retry_down_after, Duration::from_secs(30));
        assert!(!c.accounting, "accounting off by default");
        assert_eq!(c.interim_interval, None);
        let a = from_entries(vec![(
            entry("address = \"10.0.0.9\"\naccounting = true\nacct_port = 1646\ninterim_interval = \"10m\""),
            1,
        )])
        .unwrap();
        assert_eq!(
            (a.accounting, a.interim_interval),
            (true, Some(Duration::from_secs(600)))
        );
        assert_eq!(a.acct_addresses(), ["10.0.0.9:1646".parse().unwrap()]);
        let ac = a.accounting_with(&|_| Some(b"k".to_vec())).unwrap().unwrap();
        assert_eq!(ac.secrets.len(), 1);
        assert!(c.accounting_with(&|_| Some(b"k".to_vec())).unwrap().is_none());
        assert_eq!(c.acct_addresses()[0], "10.0.0.2:1813".parse().unwrap());
        let client = c.client_with(&|a| Some(format!("k-{}", a.ip()).into_bytes())).unwrap();
        assert_eq!(&client.secret[..], b"k-10.0.0.2");
        assert_eq!(client.servers(), 4);
        assert_eq!(client.secret_of(3), Some(&b"k-10.0.0.4"[..]));
        let e = c
            .client_with(&|a| (a.ip().to_string() != "10.0.0.3").then(|| b"k".to_vec()))
            .unwrap_err();
        assert!(e.contains("10.0.0.3:1812"), "{e}");
        for (bad, want) in [
            (
                vec![
                    "address = \"10.0.0.1\"\nretransmit_tries = 2",
                    "address = \"10.0.0.2\"\nretransmit_tries = 3",
                ],
                "two different values",
            ),
            (
                vec!["address = \"10.0.0.1\"", "address = \"10.0.0.1:1812\""],
                "a second entry",
            ),
        ] {
            let e = from_entries(bad.into_iter().map(|t| (entry(t), 1)).collect())
                .err()
                .unwrap();
            assert!(e.contains(want), "{e}");
        }
        assert!(from_entries(Vec::new()).is_err());
    }
}
