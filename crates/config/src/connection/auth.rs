//! One side's authentication of a connection (swanctl's `local` and `remote` sections): the
//! words as written ([`AuthToml`]), checked into an [`AuthConfig`], and described in words for
//! `ipsec check-config` ([`describe`]).

use crate::credentials::{civil_date, load_certs, load_trust};
/// An authentication round's identity and method (swanctl's `local` / `remote` sections).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// The identity (swanctl's `id`): an address, an FQDN, `user@fqdn`, a DN (`C=CH, O=x,
    /// CN=y`); for the remote side also a wildcard (`CN=*`, `*.example.org`, `%any`);
    /// None: the address (local), any (remote).
    pub id: Option<String>,
    /// `auth = "psk"` (default) or `"pubkey"`.
    pub pubkey: bool,
    /// `auth = "eap-mschapv2"`, `"eap-tls"` or `"eap-radius"` (the peer authenticates with EAP).
    pub eap: bool,
    /// `auth = "eap-tls"` (RFC 5216, RFC 9190; remote side only): the client's certificate
    /// must chain to `cacerts`, checked in the TLS handshake inside EAP.
    pub eap_tls: bool,
    /// `auth = "eap-radius"` (remote only): the EAP conversation is passed to the `[radius]`
    /// server ([`crate::radius`]) instead of run here with the `[[eap]]` users.
    pub radius: bool,
    /// EAP identity (swanctl's `eap_id`): the client's user name (local); `%any` or unset on
    /// the server means the EAP-Identity exchange asks it (always done).
    pub eap_id: Option<String>,
    /// Local: our certificate, then intermediate CA certificates to send (files, PEM or DER).
    pub certs: Vec<std::path::PathBuf>,
    /// Remote: the CA certificates the peer's certificate must chain to.
    pub cacerts: Vec<std::path::PathBuf>,
    /// Remote: certificate revocation lists of those CAs (files, PEM or DER).
    pub crls: Vec<std::path::PathBuf>,
}

impl AuthConfig {
    pub(super) fn from_toml(a: AuthToml, side: &str) -> Result<Self, String> {
        let eap_tls = a.auth.as_deref() == Some("eap-tls");
        let (pubkey, eap) = match a.auth.as_deref() {
            None | Some("psk") => (false, false),
            Some("pubkey") => (true, false),
            Some("eap-mschapv2") | Some("eap-radius") => (false, true),
            Some("eap-tls") if side == "local" => return Err(
                "local.auth = \"eap-tls\": tunneld as an EAP-TLS client is not supported (as a server: remote.auth)"
                    .into(),
            ),
            Some("eap-tls") if a.cacerts.is_empty() => {
                return Err(
                    "remote.auth = \"eap-tls\" needs remote.cacerts (the CAs of the clients' certificates)".into(),
                )
            }
            Some("eap-tls") => (false, true),
            Some(other) => {
                return Err(format!(
                    "{side}.auth = \"{other}\": \"psk\", \"pubkey\", \"eap-mschapv2\", \"eap-tls\" or \"eap-radius\""
                ))
            }
        };
        let radius = a.auth.as_deref() == Some("eap-radius");
        if radius && side == "local" {
            return Err(
                "local.auth = \"eap-radius\": a client authenticates with \"eap-mschapv2\" (eap-radius is the server's remote.auth)"
                    .into(),
            );
        }
        if a.eap_id.is_some() && !eap {
            return Err(format!(
                "{side}.eap_id needs {side}.auth = \"eap-mschapv2\", \"eap-tls\" or \"eap-radius\""
            ));
        }
        if side == "local" && eap && a.eap_id.as_deref().is_none_or(|i| i.is_empty() || i.starts_with('%')) {
            return Err("local.auth = \"eap-mschapv2\" needs local.eap_id (the user name)".into());
        }
        if let Some(id) = &a.id {
            let wildcard = side == "remote" && is_wildcard(id);
            if !wildcard {
                ipsec_ike::Identity::from_str_config(id).map_err(|e| format!("{side}.id `{id}`: {e}"))?;
            } else {
                ipsec_ike::pki::IdPattern::from_str_config(id).map_err(|e| format!("{side}.id `{id}`: {e}"))?;
            }
        }
        match (side, pubkey) {
            ("local", true) if a.certs.is_empty() => {
                return Err("local.auth = \"pubkey\" needs local.certs (our certificate)".into())
            }
            ("remote", true) if a.cacerts.is_empty() => {
                return Err("remote.auth = \"pubkey\" needs remote.cacerts (the CAs to trust)".into())
            }
            _ => {}
        }
        if side == "local" && !(a.cacerts.is_empty() && a.crls.is_empty()) {
            return Err("local: cacerts and crls belong in remote".into());
        }
        if side == "remote" && !a.certs.is_empty() {
            return Err("remote.certs: pinning the peer's certificate is not supported; use remote.cacerts".into());
        }
        Ok(AuthConfig {
            id: a.id,
            pubkey,
            eap,
            eap_tls,
            radius,
            eap_id: a.eap_id,
            certs: a.certs,
            cacerts: a.cacerts,
            crls: a.crls,
        })
    }
}

/// A remote identity with a wildcard: swanctl's `%any`, an RDN value `*`, `*.domain`, `*@domain`.
pub(super) fn is_wildcard(id: &str) -> bool {
    id.starts_with("%any") || id.contains('*')
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct AuthToml {
    pub(super) id: Option<String>,
    pub(super) auth: Option<String>,
    pub(super) eap_id: Option<String>,
    #[serde(default)]
    pub(super) certs: Vec<std::path::PathBuf>,
    #[serde(default)]
    pub(super) cacerts: Vec<std::path::PathBuf>,
    #[serde(default)]
    pub(super) crls: Vec<std::path::PathBuf>,
}

/// How one side of a connection authenticates, in words, for `ipsec check-config`: for
/// `auth = "pubkey"` what is presented (our certificate's subject, key type, expiry and the
/// intermediates sent) or trusted (the CAs, the CRLs). Files that cannot be read are named.
pub fn describe(a: &AuthConfig, local: bool) -> String {
    if a.radius {
        return "EAP, passed to the RADIUS server of [radius] (EAP-Identity asked here)".into();
    }
    if a.eap_tls {
        return format!(
            "EAP-TLS (TLS 1.2/1.3; client certificates from the {} CA file(s) of remote.cacerts)",
            a.cacerts.len()
        );
    }
    if a.eap {
        return match (local, a.eap_id.as_deref()) {
            (true, Some(id)) => format!("EAP-MSCHAPv2 as `{id}` (password from the secrets file's [[eap]])"),
            _ => "EAP-MSCHAPv2 (EAP-Identity asked; users from the secrets file's [[eap]])".into(),
        };
    }
    if !a.pubkey {
        return "pre-shared key (from the secrets file)".into();
    }
    if local {
        match load_certs(&a.certs) {
            Err(e) => format!("certificate: cannot be read: {e}"),
            Ok(v) => match v.split_first() {
                None => "certificate: none in local.certs".into(),
                Some((ours, rest)) => {
                    let mut s = format!(
                        "certificate `{}` ({}, valid until {}), issued by `{}`",
                        ours.subject(),
                        ours.key_kind().map_or("unknown key".to_string(), |k| format!("{k:?}")),
                        civil_date(ours.not_after_unix()),
                        ours.issuer()
                    );
                    if !rest.is_empty() {
                        s += &format!("; sends {} intermediate CA certificate(s)", rest.len());
                    }
                    s
                }
            },
        }
    } else {
        match load_trust(&a.cacerts, &a.crls) {
            Err(e) => format!("certificate: trust cannot be read: {e}"),
            Ok(t) => {
                let cas: Vec<String> = t.cas().iter().map(|c| format!("`{}`", c.subject())).collect();
                let mut s = format!("certificate chaining to {}", cas.join(", "));
                if !a.crls.is_empty() {
                    s += &format!("; {} CRL file(s)", a.crls.len());
                }
                s
            }
        }
    }
}
