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
    let euid = effective_uid();
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

pub(crate) fn read_public(path: &Path) -> Result<Vec<u8>, String> {
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

/// `YYYY-MM-DD` (UTC) of a time in seconds since 1970 (the proleptic Gregorian calendar).
pub(crate) fn civil_date(unix: u64) -> String {
    let z = (unix / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// This process's effective uid, read from `/proc/self/status`; 0 if it cannot be read,
/// which only makes the ownership check stricter (root only).
pub(crate) fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|u| u.parse().ok()))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_date(0), "1970-01-01");
        assert_eq!(super::civil_date(951_782_400), "2000-02-29");
        assert_eq!(super::civil_date(4_102_444_799), "2099-12-31");
    }

    #[test]
    fn a_key_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ipsec-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("k.pem");
        std::fs::write(&p, b"-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = super::load_key(&p).unwrap_err();
        assert!(e.contains("mode 0644") && e.contains("private key"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Readable now, but not a key: refused by the parser, without its content.
        let e = super::load_key(&p).unwrap_err();
        assert!(!e.contains("BEGIN"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
