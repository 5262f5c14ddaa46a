//! A connection's child SAs (swanctl's `children` sections): the words as written
//! ([`ChildToml`]) and what they become ([`ChildConfig`], its lifetimes with swanctl's defaults).

use super::StartAction;
use crate::values::Span;
/// One child SA of a connection (swanctl's `children` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildConfig {
    /// Its name, unique within the connection.
    pub name: String,
    /// Local traffic selectors in swanctl's words (empty: the connection's local address).
    pub local_ts: Vec<String>,
    /// Remote traffic selectors (empty: the connection's remote address).
    pub remote_ts: Vec<String>,
    /// ESP proposals in strongSwan's words, in order of preference.
    pub esp_proposals: Vec<String>,
    /// What happens when the connection is loaded.
    pub start_action: StartAction,
    /// Rekeying and expiry (swanctl's `rekey_time`, `life_time`, `rand_time`, `*_bytes`,
    /// `*_packets`).
    pub lifetimes: ipsec_ike::ChildLifetimes,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChildToml {
    pub(super) name: String,
    #[serde(default)]
    pub(super) local_ts: Vec<String>,
    #[serde(default)]
    pub(super) remote_ts: Vec<String>,
    #[serde(default)]
    pub(super) esp_proposals: Vec<String>,
    pub(super) start_action: Option<String>,
    pub(super) rekey_time: Option<Span>,
    pub(super) life_time: Option<Span>,
    pub(super) rand_time: Option<Span>,
    pub(super) rekey_bytes: Option<u64>,
    pub(super) rekey_packets: Option<u64>,
    pub(super) life_bytes: Option<u64>,
    pub(super) life_packets: Option<u64>,
}

/// A child's lifetimes with swanctl's defaults filled in.
pub(super) fn child_lifetimes(c: &ChildToml) -> Result<ipsec_ike::ChildLifetimes, String> {
    let d = ipsec_ike::ChildLifetimes::default();
    let rekey = c
        .rekey_time
        .as_ref()
        .map(|s| s.get("rekey_time"))
        .transpose()?
        .unwrap_or(d.rekey_time);
    let life = match &c.life_time {
        Some(s) => s.get("life_time")?,
        None => rekey + rekey / 10,
    };
    if rekey > std::time::Duration::ZERO && life < rekey {
        return Err("life_time is shorter than rekey_time".into());
    }
    let rand = match &c.rand_time {
        Some(s) => s.get("rand_time")?,
        None => life.saturating_sub(rekey),
    };
    let plus10 = |x: u64| x.saturating_add(x / 10);
    let rekey_bytes = c.rekey_bytes.unwrap_or(0);
    let rekey_packets = c.rekey_packets.unwrap_or(0);
    let life_bytes = c.life_bytes.unwrap_or(plus10(rekey_bytes));
    let life_packets = c.life_packets.unwrap_or(plus10(rekey_packets));
    if life_bytes != 0 && life_bytes < rekey_bytes || life_packets != 0 && life_packets < rekey_packets {
        return Err("life_bytes/life_packets below rekey_bytes/rekey_packets".into());
    }
    Ok(ipsec_ike::ChildLifetimes {
        rekey_time: rekey,
        life_time: life,
        rand_time: rand,
        rekey_bytes,
        rekey_packets,
        life_bytes,
        life_packets,
    })
}
