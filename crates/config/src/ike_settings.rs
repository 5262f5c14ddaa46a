//! The IKE daemon's global settings (the TOML `[ike]` table), strongSwan's `charon.*`
//! settings of the same purpose: how the responder holds up under a flood of IKE_SA_INIT
//! requests (RFC 7296 2.6 cookies, RFC 8019). Every key is optional; the defaults are
//! `ipsec_ike::Config::new`'s (docs/ike-dos.md explains them).
//!
//! ```toml
//! [ike]
//! cookies = "auto"              # "auto": cookies past the thresholds; "force": always (strongSwan: cookie_threshold = 0)
//! cookie_threshold = 30         # half-open IKE SAs from which every new IKE_SA_INIT needs a cookie (charon.cookie_threshold)
//! cookie_threshold_ip = 3       # half-open IKE SAs of one source address from which its requests need one (charon.cookie_threshold_ip)
//! half_open_per_source = 5      # half-open IKE SAs one address may have; more are refused (charon.block_threshold)
//! half_open_max = 1024          # half-open IKE SAs in all; more are refused (at most 2048: half of the 4096 IKE SAs)
//! half_open_timeout = "30s"     # a half-open responder SA without IKE_AUTH goes after this (charon.half_open_timeout)
//! ```

use std::time::Duration;

/// `[ike]`: the values given (None: the IKE crate's default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IkeSettings {
    /// `cookies = "force"`: every new IKE_SA_INIT must bring a cookie.
    pub force_cookies: Option<bool>,
    /// `cookie_threshold`.
    pub cookie_threshold: Option<usize>,
    /// `cookie_threshold_ip`.
    pub cookie_threshold_ip: Option<usize>,
    /// `half_open_per_source`.
    pub half_open_per_source: Option<usize>,
    /// `half_open_max`.
    pub half_open_max: Option<usize>,
    /// `half_open_timeout`.
    pub half_open_timeout: Option<Duration>,
}

/// `[ike]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IkeToml {
    cookies: Option<String>,
    cookie_threshold: Option<u64>,
    cookie_threshold_ip: Option<u64>,
    half_open_per_source: Option<u64>,
    half_open_max: Option<u64>,
    half_open_timeout: Option<crate::values::Span>,
}

/// The most half-open SAs allowed: half the IKE SAs an endpoint holds, so they never take the
/// room of established SAs and of tunneld's own initiations.
pub const HALF_OPEN_MAX_LIMIT: usize = ipsec_ike::limits::MAX_IKE_SAS / 2;

impl IkeToml {
    /// Checks the values against each other and the IKE crate's limits.
    pub(crate) fn into_settings(self) -> Result<IkeSettings, String> {
        let force_cookies = match self.cookies.as_deref() {
            None => None,
            Some("auto") => Some(false),
            Some("force") => Some(true),
            Some(other) => return Err(format!("cookies `{other}`: use \"auto\" or \"force\"")),
        };
        let n = |v: Option<u64>| v.map(|v| usize::try_from(v).unwrap_or(usize::MAX));
        let s = IkeSettings {
            force_cookies,
            cookie_threshold: n(self.cookie_threshold),
            cookie_threshold_ip: n(self.cookie_threshold_ip),
            half_open_per_source: n(self.half_open_per_source),
            half_open_max: n(self.half_open_max),
            half_open_timeout: self.half_open_timeout.map(|t| t.get("half_open_timeout")).transpose()?,
        };
        let e = s.apply(ipsec_ike::Config::new(Vec::new()));
        if !(1..=HALF_OPEN_MAX_LIMIT).contains(&e.half_open_max) {
            return Err(format!(
                "half_open_max {} is not in 1-{HALF_OPEN_MAX_LIMIT}",
                e.half_open_max
            ));
        }
        if e.half_open_per_source == 0 {
            return Err("half_open_per_source 0 would refuse every peer".into());
        }
        if e.cookie_threshold > e.half_open_max {
            return Err(format!(
                "cookie_threshold {} is above half_open_max {}: the cap would refuse requests before any cookie is asked for",
                e.cookie_threshold, e.half_open_max
            ));
        }
        if e.cookie_threshold_ip >= e.half_open_per_source {
            return Err(format!(
                "cookie_threshold_ip {} must be below half_open_per_source {}: else requests spoofed from an address fill its quota and its real peer is refused",
                e.cookie_threshold_ip, e.half_open_per_source
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&e.half_open_timeout) {
            return Err(format!(
                "half_open_timeout {} s is not in 1-300 s",
                e.half_open_timeout.as_secs()
            ));
        }
        Ok(s)
    }
}

impl IkeSettings {
    /// `cfg` with the values given.
    pub fn apply(&self, mut cfg: ipsec_ike::Config) -> ipsec_ike::Config {
        if let Some(v) = self.force_cookies {
            cfg.force_cookies = v;
        }
        if let Some(v) = self.cookie_threshold {
            cfg.cookie_threshold = v;
        }
        if let Some(v) = self.cookie_threshold_ip {
            cfg.cookie_threshold_ip = v;
        }
        if let Some(v) = self.half_open_per_source {
            cfg.half_open_per_source = v;
        }
        if let Some(v) = self.half_open_max {
            cfg.half_open_max = v;
        }
        if let Some(v) = self.half_open_timeout {
            cfg.half_open_timeout = v;
        }
        cfg
    }
}

#[cfg(test)]
mod tests {
    use crate::from_toml::parse;

    #[test]
    fn the_ike_table_sets_the_flood_defences() {
        let c = parse(
            "[ike]\ncookies = \"force\"\ncookie_threshold = 10\ncookie_threshold_ip = 2\nhalf_open_per_source = 4\nhalf_open_max = 100\nhalf_open_timeout = \"20s\"\n",
        )
        .unwrap();
        let e = c.ike.apply(ipsec_ike::Config::new(Vec::new()));
        assert!(e.force_cookies);
        assert_eq!(
            (
                e.cookie_threshold,
                e.cookie_threshold_ip,
                e.half_open_per_source,
                e.half_open_max
            ),
            (10, 2, 4, 100)
        );
        assert_eq!(e.half_open_timeout.as_secs(), 20);
        // none given: the IKE crate's defaults
        let d = parse("").unwrap().ike.apply(ipsec_ike::Config::new(Vec::new()));
        let base = ipsec_ike::Config::new(Vec::new());
        assert_eq!(
            (
                d.force_cookies,
                d.cookie_threshold,
                d.half_open_max,
                d.half_open_timeout
            ),
            (
                base.force_cookies,
                base.cookie_threshold,
                base.half_open_max,
                base.half_open_timeout
            )
        );
    }

    #[test]
    fn values_that_defeat_the_defences_are_refused_with_their_line() {
        for (text, says) in [
            ("[ike]\ncookies = \"sometimes\"\n", "cookies `sometimes`"),
            ("[ike]\nhalf_open_max = 0\n", "half_open_max 0"),
            ("[ike]\nhalf_open_max = 4096\n", "half_open_max 4096"),
            ("[ike]\ncookie_threshold = 2000\n", "cookie_threshold 2000 is above"),
            (
                "[ike]\ncookie_threshold_ip = 5\n",
                "cookie_threshold_ip 5 must be below",
            ),
            ("[ike]\nhalf_open_per_source = 0\n", "half_open_per_source 0"),
            ("[ike]\nhalf_open_timeout = \"1h\"\n", "half_open_timeout 3600 s"),
            ("[ike]\nblock_threshold = 5\n", "block_threshold"),
        ] {
            let e = parse(text).unwrap_err();
            let m = e.to_string();
            assert!(m.contains(says), "{text}: {m}");
            assert!(e.line.is_some(), "{text}: {m}");
        }
    }
}
