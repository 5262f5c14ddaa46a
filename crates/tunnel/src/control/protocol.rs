//! The control protocol's requests as types: what `ipsec` sends and tunneld serves, one
//! [`Request`] end to end. JSON is only the wire form ([`Request::parse`] at the socket,
//! [`Request::to_line`] in the client); the format is docs/control.md's v1, unchanged.
//!
//! A request is one JSON object per line: `{"v":1,"op":OP,...}`. Every field is checked
//! here (unknown fields, wrong types, a missing or other version are errors worded for the
//! operator); what a field means (an SA's `spec`, a policy's fields) is read by the config
//! file's own loader when the request is applied, so it is checked and worded exactly as in
//! a config file.

use serde_json::{json, Map, Value};
use zeroize::Zeroizing;

/// The control protocol's version.
pub const VERSION: u64 = 1;

/// `sa.add` / `sa.update`'s SA: a config file's `[[sa]]` with `xfrm`.
#[derive(Clone)]
pub struct SaRequest {
    /// The SA's name.
    pub name: String,
    /// The SA in `ip xfrm state` words, keys included (zeroed when dropped, never shown).
    pub spec: Zeroizing<String>,
    /// The optional `lifetime` table (`{"soft":{...},"hard":{...}}`), as a config file's.
    pub lifetime: Option<Value>,
}

impl core::fmt::Debug for SaRequest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SaRequest")
            .field("name", &self.name)
            .field("spec", &"<keys not shown>")
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

/// What the control side asks of the IKE thread (`ipsec ike ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IkeRequest {
    /// Start the connection (its IKE SA with the first child), or one child of it.
    Initiate {
        /// The connection.
        conn: String,
        /// The child, if one (`CONN/CHILD` on the wire).
        child: Option<String>,
    },
    /// Delete the connection's IKE SAs.
    Terminate {
        /// The connection.
        conn: String,
    },
    /// Rekey the connection's IKE SA, or one child of it (all its pairs).
    Rekey {
        /// The connection.
        conn: String,
        /// The child, if one.
        child: Option<String>,
    },
    /// The IKE SAs and their children.
    List,
    /// Our own address changed (`ipsec ike update CONN --local ADDR`, RFC 4555 3.5): the
    /// connection's MOBIKE IKE SAs send from `local` and tell the peer (UPDATE_SA_ADDRESSES).
    Update {
        /// The connection.
        conn: String,
        /// The new local address.
        local: std::net::IpAddr,
    },
}

fn conn_child(name: &str) -> (String, Option<String>) {
    match name.split_once('/') {
        Some((c, ch)) => (c.to_string(), Some(ch.to_string())),
        None => (name.to_string(), None),
    }
}

impl IkeRequest {
    /// `ike.initiate` of `CONN` or `CONN/CHILD`.
    pub fn initiate(name: &str) -> Self {
        let (conn, child) = conn_child(name);
        IkeRequest::Initiate { conn, child }
    }

    /// `ike.rekey` of `CONN` or `CONN/CHILD`.
    pub fn rekey(name: &str) -> Self {
        let (conn, child) = conn_child(name);
        IkeRequest::Rekey { conn, child }
    }

    /// `CONN` or `CONN/CHILD`, as the request names it.
    pub fn label(&self) -> String {
        match self {
            IkeRequest::Initiate { conn, child: Some(ch) } | IkeRequest::Rekey { conn, child: Some(ch) } => {
                format!("{conn}/{ch}")
            }
            IkeRequest::Initiate { conn, .. }
            | IkeRequest::Terminate { conn }
            | IkeRequest::Rekey { conn, .. }
            | IkeRequest::Update { conn, .. } => conn.clone(),
            IkeRequest::List => String::new(),
        }
    }
}

/// One control request.
#[derive(Debug, Clone)]
pub enum Request {
    /// `sa.add`: install an SA under a free name.
    SaAdd(SaRequest),
    /// `sa.update`: replace the SA of that name, make before break.
    SaUpdate(SaRequest),
    /// `sa.del`: remove an SA.
    SaDel {
        /// Its name.
        name: String,
    },
    /// `sa.list`: every SA (keys only when asked).
    SaList {
        /// Show the keys.
        keys: bool,
    },
    /// `sa.get`: one SA.
    SaGet {
        /// Its name.
        name: String,
        /// Show the keys.
        keys: bool,
    },
    /// `policy.add`: a config file's `[[policy]]` table's fields, appended.
    PolicyAdd {
        /// The fields (`dir`, `src`, `dst`, `proto`, `src_port`, `dst_port`, `action`,
        /// `bundle`), read by the config loader.
        policy: Map<String, Value>,
    },
    /// `policy.del`: the policy at an index (1 = first).
    PolicyDel {
        /// The index, as `policy.list` numbers them.
        index: u64,
    },
    /// `policy.list`.
    PolicyList,
    /// `show`: SAs with their counters, drops, the IKE SAs.
    Show,
    /// `monitor`: the connection receives events from now on.
    Monitor,
    /// `ike.*`: answered by the IKE thread.
    Ike(IkeRequest),
}

const OPS: &str = "sa.add, sa.update, sa.del, sa.list, sa.get, policy.add, policy.del, policy.list, show, monitor, ike.initiate, ike.terminate, ike.rekey, ike.update or ike.list";

fn str_field<'a>(req: &'a Map<String, Value>, k: &str) -> Result<&'a str, String> {
    match req.get(k) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("`{k}` must be a string")),
        None => Err(format!("missing `{k}`")),
    }
}

fn bool_field(req: &Map<String, Value>, k: &str) -> Result<bool, String> {
    match req.get(k) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("`{k}` must be true or false")),
    }
}

fn only(req: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match req
        .keys()
        .find(|k| !["v", "op"].contains(&k.as_str()) && !allowed.contains(&k.as_str()))
    {
        Some(k) => Err(format!("unknown field `{k}` for this op")),
        None => Ok(()),
    }
}

fn sa_request(req: &Map<String, Value>) -> Result<SaRequest, String> {
    only(req, &["name", "spec", "lifetime"])?;
    Ok(SaRequest {
        name: str_field(req, "name")?.to_string(),
        spec: Zeroizing::new(str_field(req, "spec")?.to_string()),
        lifetime: req.get("lifetime").cloned(),
    })
}

fn ike_request(op: &str, req: &Map<String, Value>) -> Result<IkeRequest, String> {
    if op == "ike.list" {
        only(req, &[])?;
        return Ok(IkeRequest::List);
    }
    if op == "ike.update" {
        only(req, &["name", "local"])?;
        let conn = str_field(req, "name")?;
        if conn.contains('/') {
            return Err("`ike.update` takes a connection, not a child".into());
        }
        let local = str_field(req, "local")?
            .parse()
            .map_err(|_| "`local` must be an IP address (the new local address)".to_string())?;
        return Ok(IkeRequest::Update {
            conn: conn.to_string(),
            local,
        });
    }
    only(req, &["name"])?;
    let name = match req.get("name") {
        None => return Err("`name`: the connection's name is needed".into()),
        Some(_) => str_field(req, "name")?,
    };
    let (conn, child) = conn_child(name);
    match op {
        "ike.initiate" => Ok(IkeRequest::Initiate { conn, child }),
        "ike.terminate" if child.is_none() => Ok(IkeRequest::Terminate { conn }),
        "ike.terminate" => Err("`ike.terminate` takes a connection, not a child".into()),
        _ => Ok(IkeRequest::Rekey { conn, child }),
    }
}

impl Request {
    /// Reads one request line. Never panics; the error says what is wrong, for the
    /// operator (it never quotes a `spec`).
    pub fn parse(line: &[u8]) -> Result<Request, String> {
        let req: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(req) = req else {
            return Err("a request is a JSON object".into());
        };
        match req.get("v") {
            Some(v) if v.as_u64() == Some(VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "unsupported protocol version {v}: this tunneld speaks v {VERSION}"
                ))
            }
            None => return Err("missing `v` (the protocol version, 1)".into()),
        }
        let op = str_field(&req, "op")?;
        Ok(match op {
            "sa.add" => Request::SaAdd(sa_request(&req)?),
            "sa.update" => Request::SaUpdate(sa_request(&req)?),
            "sa.del" => {
                only(&req, &["name"])?;
                Request::SaDel {
                    name: str_field(&req, "name")?.to_string(),
                }
            }
            "sa.list" => {
                only(&req, &["keys"])?;
                Request::SaList {
                    keys: bool_field(&req, "keys")?,
                }
            }
            "sa.get" => {
                only(&req, &["name", "keys"])?;
                Request::SaGet {
                    name: str_field(&req, "name")?.to_string(),
                    keys: bool_field(&req, "keys")?,
                }
            }
            "policy.add" => {
                only(&req, &["policy"])?;
                match req.get("policy").ok_or("missing `policy`")? {
                    Value::Object(p) => Request::PolicyAdd { policy: p.clone() },
                    _ => return Err("`policy` must be an object (the fields of a config file's [[policy]])".into()),
                }
            }
            "policy.del" => {
                only(&req, &["index"])?;
                let index = req
                    .get("index")
                    .and_then(Value::as_u64)
                    .filter(|&i| i >= 1)
                    .ok_or("`index` must be a policy's index (1 = first, as policy.list gives it)")?;
                Request::PolicyDel { index }
            }
            "policy.list" => {
                only(&req, &[])?;
                Request::PolicyList
            }
            "show" => {
                only(&req, &[])?;
                Request::Show
            }
            "monitor" => {
                only(&req, &[])?;
                Request::Monitor
            }
            "ike.initiate" | "ike.terminate" | "ike.rekey" | "ike.update" | "ike.list" => {
                Request::Ike(ike_request(op, &req)?)
            }
            other => {
                return Err(format!(
                    "unknown op `{}`: use {OPS}",
                    other.chars().take(40).collect::<String>()
                ))
            }
        })
    }

    /// The request's `op`.
    pub fn op(&self) -> &'static str {
        match self {
            Request::SaAdd(_) => "sa.add",
            Request::SaUpdate(_) => "sa.update",
            Request::SaDel { .. } => "sa.del",
            Request::SaList { .. } => "sa.list",
            Request::SaGet { .. } => "sa.get",
            Request::PolicyAdd { .. } => "policy.add",
            Request::PolicyDel { .. } => "policy.del",
            Request::PolicyList => "policy.list",
            Request::Show => "show",
            Request::Monitor => "monitor",
            Request::Ike(IkeRequest::Initiate { .. }) => "ike.initiate",
            Request::Ike(IkeRequest::Terminate { .. }) => "ike.terminate",
            Request::Ike(IkeRequest::Rekey { .. }) => "ike.rekey",
            Request::Ike(IkeRequest::List) => "ike.list",
            Request::Ike(IkeRequest::Update { .. }) => "ike.update",
        }
    }

    /// The request line (without its newline), as the client sends it. It holds the keys
    /// of an `sa.add`/`sa.update`, so it is zeroed when dropped.
    pub fn to_line(&self) -> Zeroizing<String> {
        let mut v = json!({"v": VERSION, "op": self.op()});
        let m = v.as_object_mut().expect("an object");
        match self {
            Request::SaAdd(s) | Request::SaUpdate(s) => {
                m.insert("name".into(), s.name.as_str().into());
                m.insert("spec".into(), s.spec.as_str().into());
                if let Some(l) = &s.lifetime {
                    m.insert("lifetime".into(), l.clone());
                }
            }
            Request::SaDel { name } => {
                m.insert("name".into(), name.as_str().into());
            }
            Request::SaList { keys } => {
                m.insert("keys".into(), (*keys).into());
            }
            Request::SaGet { name, keys } => {
                m.insert("name".into(), name.as_str().into());
                m.insert("keys".into(), (*keys).into());
            }
            Request::PolicyAdd { policy } => {
                m.insert("policy".into(), Value::Object(policy.clone()));
            }
            Request::PolicyDel { index } => {
                m.insert("index".into(), (*index).into());
            }
            Request::PolicyList | Request::Show | Request::Monitor | Request::Ike(IkeRequest::List) => {}
            Request::Ike(IkeRequest::Update { conn, local }) => {
                m.insert("name".into(), conn.as_str().into());
                m.insert("local".into(), local.to_string().into());
            }
            Request::Ike(r) => {
                m.insert("name".into(), r.label().into());
            }
        }
        // (`v` held a copy of the spec on the way: freed here, but serde_json cannot zero it.)
        Zeroizing::new(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request the client can make reads back as itself (the wire form is one).
    #[test]
    fn every_request_round_trips_through_its_line() {
        let sa = SaRequest {
            name: "a".into(),
            spec: Zeroizing::new("proto esp spi 0x1 mode tunnel".into()),
            lifetime: Some(json!({"hard": {"seconds": 60}})),
        };
        let mut p = Map::new();
        p.insert("dir".into(), "out".into());
        let all = [
            Request::SaAdd(sa.clone()),
            Request::SaUpdate(sa),
            Request::SaDel { name: "a".into() },
            Request::SaList { keys: true },
            Request::SaGet {
                name: "a".into(),
                keys: false,
            },
            Request::PolicyAdd { policy: p },
            Request::PolicyDel { index: 3 },
            Request::PolicyList,
            Request::Show,
            Request::Monitor,
            Request::Ike(IkeRequest::Initiate {
                conn: "gw".into(),
                child: Some("net".into()),
            }),
            Request::Ike(IkeRequest::Terminate { conn: "gw".into() }),
            Request::Ike(IkeRequest::Rekey {
                conn: "gw".into(),
                child: None,
            }),
            Request::Ike(IkeRequest::List),
            Request::Ike(IkeRequest::Update {
                conn: "gw".into(),
                local: "192.0.2.7".parse().unwrap(),
            }),
        ];
        for r in all {
            let line = r.to_line();
            let back = Request::parse(line.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", line.as_str()));
            assert_eq!(back.to_line(), line);
            assert_eq!(back.op(), r.op());
        }
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        for (line, want) in [
            (&br#"{"op":"show"}"#[..], "missing `v`"),
            (br#"{"v":2,"op":"show"}"#, "unsupported protocol version 2"),
            (br#"{"v":1,"op":"nope"}"#, "unknown op `nope`"),
            (br#"{"v":1,"op":"show","x":1}"#, "unknown field `x`"),
            (br#"{"v":1,"op":"ike.terminate","name":"a/b"}"#, "takes a connection"),
            (br#"{"v":1,"op":"ike.initiate"}"#, "the connection's name is needed"),
            (br#"{"v":1,"op":"ike.update","name":"a"}"#, "missing `local`"),
            (
                br#"{"v":1,"op":"ike.update","name":"a","local":"x"}"#,
                "`local` must be an IP address",
            ),
            (
                br#"{"v":1,"op":"ike.update","name":"a/b","local":"192.0.2.1"}"#,
                "takes a connection",
            ),
            (br#"{"v":1,"op":"policy.del","index":0}"#, "`index` must be"),
            (br#"[1]"#, "a request is a JSON object"),
            (b"\xff", "not JSON"),
        ] {
            let e = Request::parse(line).unwrap_err();
            assert!(e.contains(want), "{e} (wanted {want})");
        }
    }
}
