//! The control protocol's responses as types: what tunneld answers (built by `views`,
//! `requests` and the IKE thread), written as JSON only at the socket ([`Response::to_line`])
//! and read back by the `ipsec` client ([`Reply::parse`]) into the same types. The wire form
//! is docs/control.md's v1, unchanged (`control/golden.txt` holds every shape):
//! `{"v":1,"ok":true, ...the answer's fields}` or `{"v":1,"ok":false,"error":"..."}`.

use super::event::PolicyInfo;
use super::VERSION;
use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use std::net::IpAddr;
use zeroize::Zeroizing;

/// Limits as an SA's `lifetime` gives them (none: `null`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes.
    pub bytes: Option<u64>,
    /// Packets.
    pub packets: Option<u64>,
    /// Seconds.
    pub seconds: Option<u64>,
}

/// An SA's soft and hard limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifetime {
    /// Soft.
    pub soft: Limits,
    /// Hard.
    pub hard: Limits,
}

/// What is left before a limit (`show`'s `lifetime_left`; none: `null`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Left {
    /// Seconds.
    pub seconds: Option<u64>,
    /// Bytes.
    pub bytes: Option<u64>,
    /// Packets.
    pub packets: Option<u64>,
}

/// What is left before the soft and the hard limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifetimeLeft {
    /// Soft.
    pub soft: Left,
    /// Hard.
    pub hard: Left,
}

/// An algorithm and its key size (never the key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alg {
    /// Its `ip xfrm` name.
    pub alg: String,
    /// Key bits.
    pub key_bits: usize,
    /// ICV bits (integrity and AEAD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icv_bits: Option<usize>,
}

/// ESP in UDP's ports and original address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Encap {
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// NAT-OA, if known.
    pub oa: Option<IpAddr>,
}

/// One SA (`sa.list`, `sa.get`): its parameters in words, never a key unless asked
/// (`spec_with_keys`).
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct SaInfo {
    /// Its name.
    pub name: String,
    /// Soft and hard limits.
    pub lifetime: Lifetime,
    /// `esp`, `ah` or `comp`.
    pub proto: String,
    /// SPI (IPComp: CPI).
    pub spi: u32,
    /// `transport` or `tunnel`.
    pub mode: String,
    /// Tunnel source.
    pub src: Option<String>,
    /// Tunnel destination.
    pub dst: Option<String>,
    /// ESP cipher.
    pub enc: Option<Alg>,
    /// Integrity.
    pub auth: Option<Alg>,
    /// ESP combined mode.
    pub aead: Option<Alg>,
    /// IPComp algorithm.
    pub comp: Option<String>,
    /// IPComp adaptive mode.
    pub adaptive: Option<String>,
    /// IPComp link rate.
    pub link_bps: Option<u64>,
    /// IPComp alternative.
    pub alternative: Option<String>,
    /// Replay window.
    pub replay_window: u32,
    /// ESN.
    pub esn: bool,
    /// ESP in UDP.
    #[serde(default)]
    pub encap: Option<Encap>,
    /// Engine id.
    pub id: u32,
    /// `mature`, `dying`, `expired`, `removed`.
    pub state: String,
    /// `ip xfrm state` words without keys.
    pub spec: String,
    /// The same with keys (only when asked).
    #[serde(default)]
    pub spec_with_keys: Option<String>,
}

impl core::fmt::Debug for SaInfo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SaInfo")
            .field("name", &self.name)
            .field("id", &self.id)
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl Serialize for SaInfo {
    /// The wire's order, as v1 has always written it: `name`, then `encap` (an SA in UDP) or
    /// `lifetime` in the second place, the view's fields, `lifetime` last of them if `encap`
    /// took its place, then `id`, `state`, `spec`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name)?;
        match &self.encap {
            Some(e) => m.serialize_entry("encap", e)?,
            None => m.serialize_entry("lifetime", &self.lifetime)?,
        }
        m.serialize_entry("proto", &self.proto)?;
        m.serialize_entry("spi", &self.spi)?;
        m.serialize_entry("mode", &self.mode)?;
        m.serialize_entry("src", &self.src)?;
        m.serialize_entry("dst", &self.dst)?;
        m.serialize_entry("enc", &self.enc)?;
        m.serialize_entry("auth", &self.auth)?;
        m.serialize_entry("aead", &self.aead)?;
        m.serialize_entry("comp", &self.comp)?;
        m.serialize_entry("adaptive", &self.adaptive)?;
        m.serialize_entry("link_bps", &self.link_bps)?;
        m.serialize_entry("alternative", &self.alternative)?;
        m.serialize_entry("replay_window", &self.replay_window)?;
        m.serialize_entry("esn", &self.esn)?;
        if self.encap.is_some() {
            m.serialize_entry("lifetime", &self.lifetime)?;
        }
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("state", &self.state)?;
        m.serialize_entry("spec", &self.spec)?;
        if let Some(k) = &self.spec_with_keys {
            m.serialize_entry("spec_with_keys", k)?;
        }
        m.end()
    }
}

/// Counts by name in their order: drops by reason, in the engine's order (read back, a value
/// that is not a count is left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drops(pub Vec<(String, u64)>);

impl Serialize for Drops {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Drops {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Drops;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("drop counts by reason")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Drops, A::Error> {
                let mut v = Vec::new();
                while let Some((k, n)) = a.next_entry::<String, Num>()? {
                    if let Num::N(n) = n {
                        v.push((k, n));
                    }
                }
                Ok(Drops(v))
            }
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Num {
            N(u64),
            Other(serde::de::IgnoredAny),
        }
        d.deserialize_map(V)
    }
}

impl From<&ipsec_engine::Drops> for Drops {
    fn from(d: &ipsec_engine::Drops) -> Drops {
        Drops(
            ipsec_engine::DropReason::ALL
                .iter()
                .map(|&r| (r.name().to_string(), d.get(r)))
                .collect(),
        )
    }
}

/// One direction's traffic and drops of an SA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Packets.
    pub packets: u64,
    /// Bytes before sealing or opening.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// Bytes added (or removed, IPComp) on the wire.
    pub overhead_bytes: i64,
    /// IPComp: packets not compressed.
    pub not_compressed: u64,
    /// Drops by reason.
    pub drops: Drops,
}

impl From<&ipsec_engine::Counters> for Counters {
    fn from(c: &ipsec_engine::Counters) -> Counters {
        Counters {
            packets: c.packets,
            bytes_before: c.bytes_before,
            bytes_after: c.bytes_after,
            overhead_bytes: c.overhead_bytes,
            not_compressed: c.not_compressed,
            drops: (&c.drops).into(),
        }
    }
}

/// Bytes and packets counted against an SA's lifetime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Bytes.
    pub bytes: u64,
    /// Packets.
    pub packets: u64,
}

/// An ESP or AH SA's sequence state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqState {
    /// The highest sequence number received.
    pub replay_top: u64,
    /// The next one sent (none: exhausted).
    pub next_seq: Option<u64>,
}

/// One SA in `show`: as [`SaInfo`], with its counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowSa {
    /// The SA.
    #[serde(flatten)]
    pub sa: SaInfo,
    /// Replaced, kept until idle.
    pub retiring: bool,
    /// The hard limit that expired it.
    pub expired_by: Option<String>,
    /// Counted against its lifetime.
    pub usage: Usage,
    /// Seconds since installed.
    pub age_seconds: u64,
    /// Inbound.
    pub inbound: Counters,
    /// Outbound.
    pub outbound: Counters,
    /// Before its limits.
    pub lifetime_left: LifetimeLeft,
    /// ESP and AH: sequence numbers.
    #[serde(flatten)]
    pub seq: Option<SeqState>,
}

/// `ike.list`'s message IDs of an IKE SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageIds {
    /// Our next request's.
    pub next_request: u32,
    /// The peer's next request's.
    pub peer_next: u32,
}

/// An IKE SA's exchange counters (those a client does not know read as 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IkeSaCounters {
    /// Requests sent.
    pub requests_sent: u64,
    /// Of those, answered.
    pub requests_answered: u64,
    /// Retransmissions.
    pub retransmits: u64,
    /// Child rekeys.
    pub child_rekeys: u64,
    /// INVALID_SYNTAX.
    pub invalid_syntax: u64,
    /// Fragments sent.
    pub fragments_sent: u64,
    /// Fragments received.
    pub fragments_received: u64,
    /// Messages reassembled.
    pub fragmented_messages: u64,
    /// Fragments dropped.
    pub fragments_dropped: u64,
    /// First IKE_AUTH responses sent EAP-only (RFC 5998).
    pub eap_only: u64,
    /// MOBIKE return-routability checks answered from the peer's new address (RFC 4555 3.5).
    pub mobike_checks: u64,
}

/// A child pair of an IKE SA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSaInfo {
    /// Its name.
    pub child: String,
    /// `installed`, `rekeying`, `rekeyed`, `deleting`.
    pub state: String,
    /// Inbound SPI, 8 hex digits.
    pub spi_in: String,
    /// Outbound SPI.
    pub spi_out: String,
    /// Its algorithms.
    pub proposal: String,
    /// The pair it replaced.
    pub rekeys: Option<String>,
    /// Seconds to its rekey.
    pub rekey_in_seconds: Option<u64>,
    /// Seconds to its hard expiry.
    pub expires_in_seconds: Option<u64>,
    /// Bytes received on its inbound SA (the data plane's count; null when the engine has
    /// not got it, or from a tunneld before these were listed).
    #[serde(default)]
    pub bytes_in: Option<u64>,
    /// Bytes sent on its outbound SA.
    #[serde(default)]
    pub bytes_out: Option<u64>,
}

/// One IKE SA (`ike.list`, `show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IkeSaInfo {
    /// The connection.
    pub conn: String,
    /// Its state.
    pub state: String,
    /// `initiator` or `responder`.
    pub role: String,
    /// Initiator's SPI.
    pub spi_i: String,
    /// Responder's SPI.
    pub spi_r: String,
    /// Our address and port.
    pub local: String,
    /// The peer's.
    pub remote: String,
    /// Our identity.
    pub local_id: Option<String>,
    /// The peer's.
    pub remote_id: Option<String>,
    /// A NAT was found.
    pub nat: bool,
    /// The virtual addresses the peer assigned us or we leased it (RFC 7296 3.15).
    #[serde(default)]
    pub virtual_ips: Vec<String>,
    /// MOBIKE is in use (RFC 4555; docs/ike-mobike.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mobike: bool,
    /// The peer's additional addresses it told us with MOBIKE (ADDITIONAL_IP4/6_ADDRESS).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peer_addresses: Vec<String>,
    /// The EAP method that authenticated the peer (`eap-mschapv2`, `eap-radius`; we are
    /// the server); `remote_id` is then its EAP identity.
    #[serde(default)]
    pub eap_method: Option<String>,
    /// Its algorithms.
    pub proposal: Option<String>,
    /// Message IDs.
    pub message_ids: MessageIds,
    /// Seconds since it was set up.
    pub age_seconds: u64,
    /// Seconds to its rekey.
    pub rekey_in_seconds: Option<u64>,
    /// Its counters.
    pub counters: IkeSaCounters,
    /// Its child pairs.
    pub children: Vec<ChildSaInfo>,
}

/// `sa.add`, `sa.del`: the SA's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdAnswer {
    /// Engine id.
    pub id: u32,
}

/// `sa.update`: the new SA's id and the old one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replaced {
    /// The new SA.
    pub id: u32,
    /// The old one, kept until idle.
    pub old_id: u32,
}

/// `sa.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaList {
    /// The SAs by name.
    pub sas: Vec<SaInfo>,
}

/// `sa.get`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OneSa {
    /// The SA.
    pub sa: SaInfo,
}

/// `policy.add`: where it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyIndex {
    /// 1 = first.
    pub index: usize,
}

/// `policy.del`: the policy removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnePolicy {
    /// It.
    pub policy: PolicyInfo,
}

/// `policy.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyList {
    /// In match order.
    pub policies: Vec<PolicyInfo>,
}

/// `show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Show {
    /// Seconds since tunneld started.
    pub uptime_seconds: u64,
    /// The SAs, by id, retiring ones too.
    pub sas: Vec<ShowSa>,
    /// Inbound drops not charged to an SA.
    pub inbound_drops: Drops,
    /// Outbound drops likewise.
    pub outbound_drops: Drops,
    /// The IKE SAs, when tunneld runs IKE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ike_sas: Option<Vec<IkeSaInfo>>,
}

/// `ike.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IkeList {
    /// The IKE SAs.
    pub ike_sas: Vec<IkeSaInfo>,
}

/// `ike.initiate`, `ike.terminate`, `ike.rekey`: what was started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IkeStarted {
    /// The connection.
    pub conn: String,
    /// A new IKE SA's SPI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spi: Option<String>,
    /// The child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<String>,
    /// A child rekey: how many pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs: Option<usize>,
}

/// `monitor`: nothing but `ok`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// What a successful request answers (its fields follow `"v":1,"ok":true`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// `sa.add`, `sa.del`.
    Id(IdAnswer),
    /// `sa.update`.
    Replaced(Replaced),
    /// `sa.list`.
    Sas(SaList),
    /// `sa.get`.
    Sa(Box<OneSa>),
    /// `policy.add`.
    Index(PolicyIndex),
    /// `policy.del`.
    Policy(OnePolicy),
    /// `policy.list`.
    Policies(PolicyList),
    /// `show`.
    Show(Box<Show>),
    /// `monitor`.
    Empty(Empty),
    /// `ike.list`.
    IkeList(IkeList),
    /// `ike.initiate`, `ike.terminate`, `ike.rekey`.
    IkeStarted(IkeStarted),
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `{"v":1,"ok":true,...}`.
    Ok(Answer),
    /// `{"v":1,"ok":false,"error":...}`.
    Error(String),
}

#[derive(Serialize)]
struct OkLine<'a> {
    v: u64,
    ok: bool,
    #[serde(flatten)]
    answer: &'a Answer,
}

#[derive(Serialize, Deserialize)]
struct ErrorLine {
    v: u64,
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

impl Response {
    /// An error response.
    pub fn error(msg: impl Into<String>) -> Response {
        Response::Error(msg.into())
    }

    /// Whether the request succeeded.
    pub fn is_ok(&self) -> bool {
        matches!(self, Response::Ok(_))
    }

    /// The response line (without its newline), as the socket writes it; zeroed when
    /// dropped (`sa.get --keys` carries keys).
    pub fn to_line(&self) -> Zeroizing<String> {
        Zeroizing::new(
            match self {
                Response::Ok(answer) => serde_json::to_string(&OkLine {
                    v: VERSION,
                    ok: true,
                    answer,
                }),
                Response::Error(e) => serde_json::to_string(&ErrorLine {
                    v: VERSION,
                    ok: false,
                    error: Some(e.clone()),
                }),
            }
            .unwrap_or_default(),
        )
    }

    /// The line as JSON (tests).
    #[cfg(test)]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.to_line()).unwrap_or_default()
    }
}

impl core::fmt::Display for Response {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.to_line())
    }
}

/// The client's reading of a response line.
pub struct Reply;

impl Reply {
    /// Reads a response line as the answer `T` the request calls for, or its error.
    pub fn parse<T: DeserializeOwned>(line: &str) -> Result<T, String> {
        let head: ErrorLine = serde_json::from_str(line).map_err(|_| "tunneld's response is not JSON".to_string())?;
        if !head.ok {
            return Err(head.error.unwrap_or_else(|| "tunneld refused the request".into()));
        }
        serde_json::from_str(line).map_err(|e| format!("tunneld's response is not what was asked for: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every response line of the golden transcript reads back as its answer type, which
    /// writes the same line again.
    #[test]
    fn every_golden_response_reads_back_as_itself() {
        fn again<T: DeserializeOwned>(line: &str, wrap: fn(T) -> Answer) -> String {
            Response::Ok(wrap(Reply::parse::<T>(line).unwrap_or_else(|e| panic!("{line}: {e}"))))
                .to_line()
                .to_string()
        }
        let golden = [include_str!("golden.txt"), include_str!("../ike/golden.txt")].concat();
        let mut n = 0;
        for line in golden.lines().filter_map(|l| l.strip_prefix("< ").or(Some(l))) {
            if !line.starts_with(r#"{"v":1,"ok""#) {
                continue;
            }
            let back = if line.contains(r#""ok":false"#) {
                Response::error(Reply::parse::<Empty>(line).unwrap_err())
                    .to_line()
                    .to_string()
            } else if line.contains(r#""old_id""#) {
                again(line, Answer::Replaced)
            } else if line.contains(r#""uptime_seconds""#) {
                again(line, |s: Show| Answer::Show(Box::new(s)))
            } else if line.contains(r#""sas""#) {
                again(line, Answer::Sas)
            } else if line.contains(r#""sa""#) {
                again(line, |s: OneSa| Answer::Sa(Box::new(s)))
            } else if line.contains(r#""id""#) {
                again(line, Answer::Id)
            } else if line.contains(r#""policies""#) {
                again(line, Answer::Policies)
            } else if line.contains(r#""index""#) && !line.contains(r#""policy""#) {
                again(line, Answer::Index)
            } else if line.contains(r#""policy""#) {
                again(line, Answer::Policy)
            } else if line.contains(r#""ike_sas""#) {
                again(line, Answer::IkeList)
            } else {
                again(line, Answer::Empty)
            };
            assert_eq!(back, line);
            n += 1;
        }
        assert!(n > 25, "{n} responses");
    }
}
