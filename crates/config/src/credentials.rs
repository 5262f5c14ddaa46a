//! Certificates and private keys for `auth = "pubkey"` connections, read from files named in
//! the config (swanctl's `local.certs`, `remote.cacerts`, and its `secrets { private-* { file
//! } }` as `[[private]] file` entries of the secrets file). The IKE crate parses and checks
//! what is read ([`ipsec_ike::pki`]); this module only reads, refusing a private key file
//! others may read exactly as the secrets file is refused.
use ipsec_ike::pki::{Certificate, PrivateKey, TrustStore};
use std::path::{Path, PathBuf};

/// Largest certificate, CRL or key file read.
const MAX_FILE: u64 = 1 << 20;

/// Reads a file that holds a secret: a regular file (not a symbolic link), mode 0600 or
/// stricter, owned by this user or root, at most 1 MiB. Errors name the file and the
/// reason, never its content.
pub(crate) fn read_private(path: &Path, what: &str) -> Result<zeroize::Zeroizing<Vec<u8>>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let shown = path.display();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("{shown}: {e} (a symbolic link is refused)"))?;
    let m = f.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if !m.is_file() {
        return Err(format!("{shown}: not a regular file"));
    }
    if m.mode() & 0o077 != 0 {
        return Err(format!(
            "{shown}: mode {:04o}: others may read or change the {what}; chmod 600 it",
            m.mode() & 0o7777
        ));
    }
    let euid = crate::connection::effective_uid();
    if m.uid() != 0 && m.uid() != euid {
        return Err(format!("{shown}: owned by uid {}, neither root nor this user", m.uid()));
    }
    if m.len() > MAX_FILE {
        return Err(format!("{shown}: larger than 1 MiB"));
    }
    let mut v = zeroize::Zeroizing::new(Vec::new());
    f.read_to_end(&mut v).map_err(|e| format!("{shown}: {e}"))?;
    Ok(v)
}

fn read_public(path: &Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let m = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if m.len() > MAX_FILE {
        return Err(format!("{shown}: larger than 1 MiB"));
    }
    std::fs::read(path).map_err(|e| format!("{shown}: {e}"))
}

/// The certificates in the files `paths` (PEM with one or more certificates, or DER), in order.
pub fn load_certs(paths: &[PathBuf]) -> Result<Vec<Certificate>, String> {
    let mut v = Vec::new();
    for p in paths {
        let bytes = read_public(p)?;
        v.extend(Certificate::parse_pem_or_der(&bytes).map_err(|e| format!("{}: {e}", p.display()))?);
    }
    Ok(v)
}

/// The trust store of CA certificates `cacerts` and CRLs `crls`.
pub fn load_trust(cacerts: &[PathBuf], crls: &[PathBuf]) -> Result<TrustStore, String> {
    let mut t = TrustStore::new();
    for (p, c) in cacerts.iter().flat_map(|p| match load_certs(std::slice::from_ref(p)) {
        Ok(v) => v.into_iter().map(|c| (p, Ok(c))).collect::<Vec<_>>(),
        Err(e) => vec![(p, Err(e))],
    }) {
        let c = c?;
        t.add_ca(c).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    for p in crls {
        let bytes = read_public(p)?;
        t.add_crl(&bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(t)
}

/// A private key read from the secrets file's `[[private]] file`.
pub struct LoadedKey {
    /// Where it was read from.
    pub path: PathBuf,
    /// The key (zeroed when dropped; `Debug` shows only its kind).
    pub key: PrivateKey,
}

impl std::fmt::Debug for LoadedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedKey({}, {:?})", self.path.display(), self.key.kind())
    }
}

/// Reads the private key at `path` (PEM: PKCS#8, PKCS#1 or SEC1), refusing a file others
/// may read.
pub fn load_key(path: &Path) -> Result<LoadedKey, String> {
    let bytes = read_private(path, "private key")?;
    let key = PrivateKey::from_pem(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(LoadedKey {
        path: path.to_path_buf(),
        key,
    })
}
