//! The opt-in Wireshark key log (`--keylog DIR`).
use std::io::Write;
use std::path::PathBuf;
use tracing::warn;

/// The Wireshark key log (`--keylog DIR`): appends to `DIR/ikev2_decryption_table` and
/// `DIR/esp_sa`, mode 0600.
pub struct KeyLog {
    dir: PathBuf,
}

impl KeyLog {
    /// Opens (creates) the directory's tables, warning loudly.
    pub fn new(dir: PathBuf) -> std::io::Result<KeyLog> {
        std::fs::create_dir_all(&dir)?;
        warn!(
            "--keylog {}: EVERY IKE AND ESP KEY IS WRITTEN THERE (Wireshark's ikev2_decryption_table and esp_sa): anyone who reads it decrypts this host's traffic; for tests and debugging only",
            dir.display()
        );
        Ok(KeyLog { dir })
    }

    pub(super) fn append(&self, file: &str, lines: &[String]) {
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.dir.join(file);
        let r = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
            .and_then(|mut f| lines.iter().try_for_each(|l| writeln!(f, "{l}")));
        if let Err(e) = r {
            warn!("--keylog: writing {}: {e}", p.display());
        }
    }
}
