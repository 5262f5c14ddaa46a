//! The secrets file of the IKE connections (swanctl's `secrets` section, in a file of its
//! own, mode 0600): pre-shared keys by identity, EAP users (kept as NT hashes), the RADIUS
//! shared secret and the private keys. Nothing here is ever shown by `Debug` or an error.

/// A pre-shared key for a set of identities (one `[[ike]]` of the secrets file).
pub struct Psk {
    /// The identities it is for (swanctl's `id-*`); empty: any.
    pub ids: Vec<String>,
    /// The key. Zeroed when dropped; never shown by `Debug`.
    pub secret: zeroize::Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Psk")
            .field("ids", &self.ids)
            .field("secret", &format_args!("({} bytes, not shown)", self.secret.len()))
            .finish()
    }
}

/// An EAP user (one `[[eap]]` of the secrets file).
pub struct EapSecret {
    /// The EAP identity.
    pub id: String,
    /// The password. Zeroed when dropped; never shown by `Debug`.
    pub secret: zeroize::Zeroizing<String>,
}

impl std::fmt::Debug for EapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EapSecret")
            .field("id", &self.id)
            .field("secret", &format_args!("(not shown)"))
            .finish()
    }
}

/// The EAP-MSCHAPv2 server's users ([`ipsec_ike::ipsec_eap::mschapv2::Credentials`]): each
/// `[[eap]]` kept as its NT hash (RFC 2759 8.3), zeroized on drop; Debug shows the count.
pub struct EapUsers(Vec<(Vec<u8>, ipsec_ike::ipsec_eap::ms_chap::NtHash)>);

impl EapUsers {
    /// From the secrets file's `[[eap]]` (a password the hash cannot take, longer than 256
    /// characters, is left out: that user cannot log in).
    pub fn from_secrets(s: &Secrets) -> EapUsers {
        EapUsers(
            s.eap
                .iter()
                .filter_map(|e| {
                    let h = ipsec_ike::ipsec_eap::ms_chap::NtHash::from_password(&e.secret).ok()?;
                    Some((e.id.as_bytes().to_vec(), h))
                })
                .collect(),
        )
    }
}

impl std::fmt::Debug for EapUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EapUsers({} users)", self.0.len())
    }
}

impl ipsec_ike::ipsec_eap::mschapv2::Credentials for EapUsers {
    fn nt_hash(&self, identity: &[u8]) -> Option<ipsec_ike::ipsec_eap::ms_chap::NtHash> {
        self.0.iter().find(|(id, _)| id == identity).map(|(_, h)| h.clone())
    }
}

/// The RADIUS shared secret (the secrets file's `[radius] secret`, RFC 2865 3). Zeroed when
/// dropped; never shown by `Debug`.
pub struct RadiusSecret(pub zeroize::Zeroizing<String>);

impl std::fmt::Debug for RadiusSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RadiusSecret(not shown)")
    }
}

/// The secrets file: pre-shared keys for IKE, EAP users, and the private keys of
/// `auth = "pubkey"`.
#[derive(Debug, Default)]
pub struct Secrets {
    /// The keys, in file order.
    pub psks: Vec<Psk>,
    /// The EAP users (`[[eap]]`), in file order.
    pub eap: Vec<EapSecret>,
    /// The secret shared with the `[radius]` servers (`[radius] secret`, or a `[[radius]]`
    /// entry without an address): every server's that has none of its own.
    pub radius: Option<RadiusSecret>,
    /// Per-server secrets (`[[radius]] address = "10.1.0.6", secret = "..."`): the server's
    /// IP address and port (None: any port).
    pub radius_servers: Vec<(std::net::IpAddr, Option<u16>, RadiusSecret)>,
    /// The private keys ([`Secrets::load`] reads them from the `[[private]] file`s).
    pub keys: Vec<crate::credentials::LoadedKey>,
    /// `[[private]] file` paths not read yet (as written).
    pub key_files: Vec<std::path::PathBuf>,
}

impl Secrets {
    /// The secret shared with the RADIUS server at `server`: its own entry (address and
    /// port, or the address written without a port), else the one for every server.
    pub fn radius_secret_for(&self, server: std::net::SocketAddr) -> Option<&RadiusSecret> {
        let own = |port: Option<u16>| {
            self.radius_servers
                .iter()
                .find(|(ip, p, _)| *ip == server.ip() && *p == port)
                .map(|(_, _, s)| s)
        };
        own(Some(server.port())).or_else(|| own(None)).or(self.radius.as_ref())
    }

    /// The key for a connection between identities `local` and `remote`: the first entry
    /// whose identities include both (an entry naming one identity matches either side, as
    /// swanctl's best match does for a single `id`; an entry naming none matches any).
    pub fn psk_for(&self, local: &str, remote: &str) -> Option<&Psk> {
        let score = |p: &Psk| -> Option<u8> {
            let l = p.ids.iter().any(|i| i == local);
            let r = p.ids.iter().any(|i| i == remote);
            match (p.ids.len(), l, r) {
                (0, _, _) => Some(0),
                (_, true, true) => Some(3),
                (1, true, _) | (1, _, true) => Some(1),
                _ => None,
            }
        };
        self.psks
            .iter()
            .filter_map(|p| score(p).map(|s| (s, p)))
            .max_by_key(|(s, _)| *s)
            .map(|(_, p)| p)
    }

    /// The `[[eap]]` entry of EAP identity `id`.
    pub fn eap_for(&self, id: &str) -> Option<&EapSecret> {
        self.eap.iter().find(|e| e.id == id)
    }

    /// Parses the secrets file's text. Errors name the line, never a secret.
    pub fn parse(text: &str) -> Result<Secrets, String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[serde(default)]
            ike: Vec<toml::Spanned<Entry>>,
            #[serde(default)]
            eap: Vec<toml::Spanned<EapEntry>>,
            #[serde(default)]
            private: Vec<KeyFile>,
            radius: Option<toml::Value>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RadiusEntry {
            address: Option<String>,
            secret: crate::values::Secret,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct EapEntry {
            id: String,
            secret: crate::values::Secret,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct KeyFile {
            file: std::path::PathBuf,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            #[serde(default)]
            id: Ids,
            secret: crate::values::Secret,
        }
        #[derive(serde::Deserialize, Default)]
        #[serde(untagged)]
        enum Ids {
            #[default]
            None,
            One(String),
            Many(Vec<String>),
        }
        let line = |off: usize| text[..off.min(text.len())].matches('\n').count() + 1;
        // A TOML error's message may quote the offending value: report only where it is.
        let file: File = toml::from_str(text).map_err(|e| match e.span() {
            Some(s) => format!(
                "line {}: not a well-formed secrets file (value not shown)",
                line(s.start)
            ),
            None => "not a well-formed secrets file (value not shown)".to_string(),
        })?;
        let mut psks = Vec::new();
        for e in file.ike {
            let at = line(e.span().start);
            let e = e.into_inner();
            let secret = if let Some(hex) = e.secret.as_str().strip_prefix("0x") {
                zeroize::Zeroizing::new(
                    hex::decode(hex).map_err(|_| format!("line {at}: the secret is not valid hex after 0x"))?,
                )
            } else {
                zeroize::Zeroizing::new(e.secret.as_str().as_bytes().to_vec())
            };
            if secret.is_empty() {
                return Err(format!("line {at}: an empty secret"));
            }
            let ids = match e.id {
                Ids::None => vec![],
                Ids::One(s) => vec![s],
                Ids::Many(v) => v,
            };
            psks.push(Psk { ids, secret });
        }
        let mut eap = Vec::new();
        for e in file.eap {
            let at = line(e.span().start);
            let e = e.into_inner();
            if e.id.is_empty() || e.secret.as_str().is_empty() {
                return Err(format!("line {at}: [[eap]] needs an id and a secret"));
            }
            if eap.iter().any(|x: &EapSecret| x.id == e.id) {
                return Err(format!("line {at}: a second [[eap]] for `{}`", e.id));
            }
            eap.push(EapSecret {
                id: e.id,
                secret: zeroize::Zeroizing::new(e.secret.as_str().to_string()),
            });
        }
        let entries: Vec<RadiusEntry> = match file.radius {
            None => Vec::new(),
            Some(toml::Value::Array(list)) => list
                .into_iter()
                .map(|v| v.try_into::<RadiusEntry>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("[radius]: {}", e.message()))?,
            Some(v) => vec![v
                .try_into::<RadiusEntry>()
                .map_err(|e| format!("[radius]: {}", e.message()))?],
        };
        let mut radius = None;
        let mut radius_servers = Vec::new();
        for r in entries {
            if r.secret.as_str().is_empty() {
                return Err("[radius]: an empty secret".into());
            }
            let secret = RadiusSecret(zeroize::Zeroizing::new(r.secret.as_str().to_string()));
            match r.address {
                None if radius.is_some() => return Err("[radius]: a second secret without an address".into()),
                None => radius = Some(secret),
                Some(a) => {
                    let (ip, port) = match crate::radius::parse_address(&a)? {
                        sa if a.trim().parse::<std::net::SocketAddr>().is_ok() => (sa.ip(), Some(sa.port())),
                        sa => (sa.ip(), None),
                    };
                    if radius_servers.iter().any(|(i, p, _)| *i == ip && *p == port) {
                        return Err(format!("[radius]: a second secret for the server `{a}`"));
                    }
                    radius_servers.push((ip, port, secret));
                }
            }
        }
        Ok(Secrets {
            psks,
            eap,
            radius,
            radius_servers,
            keys: Vec::new(),
            key_files: file.private.into_iter().map(|k| k.file).collect(),
        })
    }

    /// Reads the secrets file at `path`: it must be a regular file (not a symbolic link)
    /// that only its owner may read or write (mode 0600 or stricter) and owned by the user
    /// reading it or by root; anything else is refused, as strongSwan and OpenSSH refuse
    /// keys others can read.
    pub fn load(path: &std::path::Path) -> Result<Secrets, String> {
        let shown = path.display();
        let bytes = crate::credentials::read_private(path, "pre-shared keys")?;
        let text = std::str::from_utf8(&bytes).map_err(|_| format!("{shown}: not UTF-8 text"))?;
        let mut s = Secrets::parse(text).map_err(|e| format!("{shown}: {e}"))?;
        // Key files named relative to the secrets file's directory.
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        for f in std::mem::take(&mut s.key_files) {
            let f = dir.join(f);
            s.keys.push(crate::credentials::load_key(&f)?);
        }
        Ok(s)
    }
}
