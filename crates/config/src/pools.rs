//! Address pools for remote-access clients (`[[pool]]`, swanctl's `pools` section): the
//! virtual addresses, DNS servers, subnets and split-DNS domains tunneld answers a client's
//! configuration request with (RFC 7296 3.15, RFC 8598). A connection names its pools in
//! `pools`; see docs/remote-access.md.
//!
//! ```toml
//! [[pool]]
//! name = "rw4"
//! addrs = "10.3.0.0/24"                 # a prefix (network and broadcast left out for IPv4)
//!                                       # or a range "10.3.0.10-10.3.0.200"; IPv6 alike
//! dns = ["10.1.0.53"]                   # INTERNAL_IP4_DNS / INTERNAL_IP6_DNS
//! split_include = ["10.1.0.0/16"]       # INTERNAL_IP4_SUBNET / _IP6_SUBNET (macOS/iOS routes)
//! dns_domains = ["corp.example"]        # INTERNAL_DNS_DOMAIN (split DNS, RFC 8598)
//!
//! [[connection]]
//! name = "rw"
//! local_addrs = ["192.0.2.1"]
//! remote_addrs = ["%any"]
//! pools = ["rw4"]                       # the peer's virtual address from these, in order
//! unique = "no"                         # no | never | keep | replace (swanctl's meaning)
//! rekey_by = "auto"                     # auto | both | client: "client" = the server starts
//!                                       # no rekey; auto = client for Windows behind a NAT
//! # a client instead: vips = ["0.0.0.0"] (any IPv4 address; "::" for IPv6)
//! ```
use std::net::IpAddr;

/// `[[pool]]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PoolToml {
    name: String,
    addrs: String,
    #[serde(default)]
    dns: Vec<String>,
    #[serde(default, alias = "subnet")]
    split_include: Vec<String>,
    #[serde(default)]
    dns_domains: Vec<String>,
}

/// One pool, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Its name, unique in the file.
    pub name: String,
    /// 1-based line of its `[[pool]]` header.
    pub line: usize,
    /// The addresses as written (a prefix or a range).
    pub addrs: String,
    /// DNS servers.
    pub dns: Vec<IpAddr>,
    /// Subnets behind the gateway (prefixes as written).
    pub split_include: Vec<String>,
    /// Split-DNS domains.
    pub dns_domains: Vec<String>,
}

impl PoolToml {
    /// Checks and converts; `line` is the line of its `[[pool]]` header.
    pub(crate) fn into_config(self, line: usize) -> Result<PoolConfig, String> {
        let name = self.name;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
            return Err(format!("pool `{name}`: a name of letters, digits, `-`, `_` and `.`"));
        }
        let at = |m: String| format!("pool `{name}`: {m}");
        ipsec_ike::PoolConfig::new(&name, &self.addrs).map_err(|e| at(format!("addrs `{}`: {e}", self.addrs)))?;
        let mut dns = Vec::new();
        for d in &self.dns {
            dns.push(
                d.parse::<IpAddr>()
                    .map_err(|_| at(format!("dns `{d}` is not an IP address")))?,
            );
        }
        for s in &self.split_include {
            ipsec_ike::pool::parse_prefix(s).map_err(|e| at(format!("split_include `{s}`: {e}")))?;
        }
        for d in &self.dns_domains {
            let ok =
                !d.is_empty() && d.len() <= 253 && d.bytes().all(|c| c.is_ascii_alphanumeric() || b"-._".contains(&c));
            if !ok {
                return Err(at(format!("dns_domains `{d}` is not a domain name")));
            }
        }
        let total = dns.len() + self.split_include.len() + self.dns_domains.len();
        if total > 32 {
            return Err(at(
                "more than 32 dns, split_include and dns_domains entries in all".into()
            ));
        }
        Ok(PoolConfig {
            name,
            line,
            addrs: self.addrs,
            dns,
            split_include: self.split_include,
            dns_domains: self.dns_domains,
        })
    }
}

impl PoolConfig {
    /// The IKE implementation's pool.
    pub fn to_ike(&self) -> Result<ipsec_ike::PoolConfig, String> {
        let at = |m: String| format!("pool `{}` (line {}): {m}", self.name, self.line);
        let mut p = ipsec_ike::PoolConfig::new(&self.name, &self.addrs).map_err(|e| at(e.to_string()))?;
        p.dns = self.dns.clone();
        for s in &self.split_include {
            p.subnets
                .push(ipsec_ike::pool::parse_prefix(s).map_err(|e| at(e.to_string()))?);
        }
        p.dns_domains = self.dns_domains.clone();
        Ok(p)
    }
}

/// Reads the `[[pool]]`s into `config` and checks the connections' `pools` name them.
pub(crate) fn read(
    pools: Vec<toml::Spanned<PoolToml>>,
    config: &mut crate::Config,
    line_of: &dyn Fn(&toml::Spanned<PoolToml>) -> usize,
) -> Result<(), crate::ConfigError> {
    use crate::{ConfigError, ErrorKind};
    for p in pools {
        let line = line_of(&p);
        let p = p
            .into_inner()
            .into_config(line)
            .map_err(|m| ConfigError::at(line, ErrorKind::Invalid(m)))?;
        if let Some(other) = config.pools.iter().find(|o| o.name == p.name) {
            return Err(ConfigError::at(
                line,
                ErrorKind::Invalid(format!(
                    "another pool is already named `{}` (line {})",
                    p.name, other.line
                )),
            ));
        }
        config.pools.push(p);
    }
    for c in &config.connections {
        for n in &c.pools {
            if !config.pools.iter().any(|p| &p.name == n) {
                return Err(ConfigError::at(
                    c.line,
                    ErrorKind::Invalid(format!("connection `{}`: pools: no [[pool]] named `{n}`", c.name)),
                ));
            }
        }
    }
    Ok(())
}

/// The IKE configuration's pools.
pub fn to_ike(pools: &[PoolConfig]) -> Result<Vec<ipsec_ike::PoolConfig>, String> {
    pools.iter().map(PoolConfig::to_ike).collect()
}

#[cfg(test)]
mod tests {
    use crate::from_toml::parse;

    #[test]
    fn pools_and_a_connection_that_uses_them() {
        let c = parse(
            r#"
[[pool]]
name = "rw4"
addrs = "10.3.0.0/24"
dns = ["10.1.0.53"]
split_include = ["10.1.0.0/16"]
dns_domains = ["corp.example"]

[[pool]]
name = "rw6"
addrs = "fd00:3::10-fd00:3::ff"

[[connection]]
name = "rw"
local_addrs = ["192.0.2.1"]
remote_addrs = ["%any"]
pools = ["rw4", "rw6"]
unique = "never"
rekey_by = "client"
[[connection.children]]
name = "net"
local_ts = ["10.1.0.0/16"]

[[connection]]
name = "client"
local_addrs = ["192.0.2.9"]
remote_addrs = ["192.0.2.1"]
vips = ["0.0.0.0"]
[[connection.children]]
name = "net"
remote_ts = ["10.1.0.0/16"]
"#,
        )
        .unwrap();
        assert_eq!(c.pools.len(), 2);
        let p = c.pools[0].to_ike().unwrap();
        assert_eq!(
            (p.first, p.last),
            ("10.3.0.1".parse().unwrap(), "10.3.0.254".parse().unwrap())
        );
        assert_eq!(p.subnets, [("10.1.0.0".parse().unwrap(), 16)]);
        assert_eq!(c.pools[1].to_ike().unwrap().size(), 240);
        assert_eq!(c.connections[0].pools, ["rw4", "rw6"]);
        assert_eq!(c.connections[0].unique, ipsec_ike::Unique::Never);
        assert_eq!(c.connections[0].rekey_by, ipsec_ike::RekeyBy::Client);
        assert_eq!(c.connections[1].rekey_by, ipsec_ike::RekeyBy::Auto, "the default");
        let secrets = crate::connection::Secrets::parse("[[ike]]\nsecret = \"k\"\n").unwrap();
        assert_eq!(
            c.connections[0].to_ike(&secrets).unwrap().rekey_by,
            ipsec_ike::RekeyBy::Client
        );
        assert_eq!(c.connections[1].vips, ["0.0.0.0".parse::<std::net::IpAddr>().unwrap()]);
    }

    #[test]
    fn mistakes_are_refused_with_their_line() {
        let base = |pool: &str, conn: &str| {
            format!(
                "{pool}\n[[connection]]\nname = \"rw\"\nlocal_addrs = [\"192.0.2.1\"]\n{conn}\n[[connection.children]]\nname = \"net\"\n"
            )
        };
        let ok_pool = "[[pool]]\nname = \"p\"\naddrs = \"10.3.0.0/24\"\n";
        for (pool, conn, want) in [
            ("[[pool]]\nname = \"p\"\naddrs = \"10.3.0.0/33\"\n", "", "addrs"),
            ("[[pool]]\nname = \"p\"\naddrs = \"10.3.0.9-10.3.0.1\"\n", "", "addrs"),
            (
                "[[pool]]\nname = \"p\"\naddrs = \"10.3.0.0/24\"\ndns = [\"x\"]\n",
                "",
                "dns",
            ),
            (
                "[[pool]]\nname = \"p\"\naddrs = \"10.3.0.0/24\"\ndns_domains = [\"a b\"]\n",
                "",
                "dns_domains",
            ),
            (ok_pool, "pools = [\"q\"]", "no [[pool]] named `q`"),
            (ok_pool, "unique = \"sometimes\"", "unique"),
            (ok_pool, "rekey_by = \"server\"", "rekey_by"),
            (ok_pool, "vips = [\"me\"]", "vips"),
            (&format!("{ok_pool}{ok_pool}"), "", "another pool"),
        ] {
            let e = parse(&base(pool, conn)).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
