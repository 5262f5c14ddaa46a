//! The opt-in Wireshark key log (`--keylog DIR`).
//!
//! Both tables are opened once, at startup (before tunneld drops its privileges), and
//! written through those descriptors from then on: a table tunneld appends keys to must be a
//! regular file with one link, owned by tunneld's user, mode 0600 or stricter (created so if
//! missing), in a directory owned by that user or root that no group or other user may write
//! to. Anything else is refused with an error naming the file and why, as the secrets file
//! is (`ipsec_config::Secrets::load`): a table others can read, or own, or that links
//! elsewhere, would hand every key to them, or write keys into a file tunneld does not own.
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tracing::warn;

/// The tables, Wireshark's names for them.
const TABLES: [&str; 2] = ["ikev2_decryption_table", "esp_sa"];

/// The Wireshark key log (`--keylog DIR`): appends to `DIR/ikev2_decryption_table` and
/// `DIR/esp_sa`, each opened once by [`KeyLog::new`].
pub struct KeyLog {
    dir: PathBuf,
    /// The tables, in the order of [`TABLES`].
    files: [File; 2],
}

impl KeyLog {
    /// Opens (creates, mode 0600, in a directory created mode 0700) the directory's tables,
    /// warning loudly. Refused, naming the file and why: a directory others may write to or
    /// that another user owns, and a table that is not a regular file (a symbolic link, a
    /// directory, a FIFO), has more than one link, is owned by another user, or may be read
    /// or written by group or others.
    pub fn new(dir: PathBuf) -> std::io::Result<KeyLog> {
        let euid = crate::dev::sys::euid();
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        check_dir(&dir, euid)?;
        let open = |name: &str| open_table(&dir.join(name), euid);
        let files = [open(TABLES[0])?, open(TABLES[1])?];
        warn!(
            "--keylog {}: EVERY IKE AND ESP KEY IS WRITTEN THERE (Wireshark's ikev2_decryption_table and esp_sa): anyone who reads it decrypts this host's traffic; for tests and debugging only",
            dir.display()
        );
        Ok(KeyLog { dir, files })
    }

    pub(super) fn append(&self, file: &str, lines: &[String]) {
        let Some(i) = TABLES.iter().position(|t| *t == file) else {
            warn!("--keylog: no table {file}");
            return;
        };
        // One write per call (O_APPEND): a call's lines stay together.
        let mut text = zeroize::Zeroizing::new(String::new());
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        if let Err(e) = (&self.files[i]).write_all(text.as_bytes()) {
            warn!("--keylog: writing {}: {e}", self.dir.join(file).display());
        }
    }
}

fn refused(path: &Path, why: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "{}: {why}: refused (the key log's tables must be tunneld's own)",
            path.display()
        ),
    )
}

/// The directory: a directory (a symbolic link to one is followed: the tables are opened
/// without following), owned by `euid` or root, not writable by group or others (who could
/// otherwise put a link or a file of theirs where a table goes).
fn check_dir(dir: &Path, euid: u32) -> std::io::Result<()> {
    let m = std::fs::metadata(dir).map_err(|e| refused(dir, e))?;
    if !m.is_dir() {
        return Err(refused(dir, "not a directory"));
    }
    if m.uid() != euid && m.uid() != 0 {
        return Err(refused(
            dir,
            format_args!("owned by uid {}, neither root nor this user ({euid})", m.uid()),
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(refused(
            dir,
            format_args!(
                "directory mode {:04o}: group or others may write to it (and put their own file or a link where a table goes); use a directory of its own, chmod 700",
                m.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Opens (creating it mode 0600 if missing) one table for appending, without following a
/// symbolic link and without blocking on a FIFO, then checks what was opened (not the
/// name, which could change in between).
fn open_table(path: &Path, euid: u32) -> std::io::Result<File> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_symlink() {
            return Err(refused(path, "a symbolic link"));
        }
        if !m.is_file() {
            return Err(refused(path, "not a regular file"));
        }
    }
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| refused(path, format_args!("{e} (a symbolic link or a directory is refused)")))?;
    let m = f.metadata().map_err(|e| refused(path, e))?;
    if !m.is_file() {
        return Err(refused(path, "not a regular file"));
    }
    if m.uid() != euid {
        return Err(refused(
            path,
            format_args!(
                "owned by uid {}, not this user ({euid}): remove it or chown it",
                m.uid()
            ),
        ));
    }
    if m.mode() & 0o077 != 0 {
        return Err(refused(
            path,
            format_args!(
                "mode {:04o}: others may read or change the keys; chmod 600 it",
                m.mode() & 0o7777
            ),
        ));
    }
    if m.nlink() != 1 {
        return Err(refused(
            path,
            format_args!("{} links to it (a hard link elsewhere)", m.nlink()),
        ));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("keylog-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        d
    }

    fn refusal(dir: &Path) -> String {
        match KeyLog::new(dir.to_path_buf()) {
            Ok(_) => panic!("{}: accepted", dir.display()),
            Err(e) => e.to_string(),
        }
    }

    /// Issue #31 defect 6: tables that exist already are checked, not appended to: mode
    /// 0644, owned by another user (nobody; tests run as root here), a symbolic link, a
    /// directory, a FIFO, a second hard link; each refused with an error naming the file and
    /// why, and nothing written to it. (Before: the keys were appended, the file left 0644.)
    #[test]
    fn tables_that_are_not_tunnelds_own_are_refused() {
        let euid = crate::dev::sys::euid();
        for (i, table) in TABLES.iter().enumerate() {
            let d = scratch(&format!("loose{i}"));
            let p = d.join(table);
            std::fs::write(&p, "x\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = refusal(&d);
            assert!(e.contains(&p.display().to_string()) && e.contains("mode 0644"), "{e}");
            assert_eq!(std::fs::read(&p).unwrap(), b"x\n", "nothing appended");
            assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o644);
            std::fs::remove_dir_all(&d).unwrap();
        }
        if euid == 0 {
            let d = scratch("foreign");
            let p = d.join("esp_sa");
            std::fs::write(&p, "").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
            let e = refusal(&d);
            assert!(e.contains("esp_sa") && e.contains("owned by uid 65534"), "{e}");
            assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
            std::fs::remove_dir_all(&d).unwrap();
        } else {
            crate::dev::sys::tests::not_run("chown to nobody needs root: the foreign-owned table was not tried");
        }
        let d = scratch("link");
        let target = d.join("elsewhere");
        std::fs::write(&target, "").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&target, d.join("ikev2_decryption_table")).unwrap();
        let e = refusal(&d);
        assert!(
            e.contains("ikev2_decryption_table") && e.contains("symbolic link"),
            "{e}"
        );
        assert_eq!(std::fs::metadata(&target).unwrap().len(), 0);
        std::fs::remove_dir_all(&d).unwrap();
        let d = scratch("hardlink");
        std::fs::write(d.join("mine"), "").unwrap();
        std::fs::set_permissions(d.join("mine"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(d.join("mine"), d.join("esp_sa")).unwrap();
        let e = refusal(&d);
        assert!(e.contains("esp_sa") && e.contains("2 links"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
        let d = scratch("dir");
        std::fs::create_dir(d.join("esp_sa")).unwrap();
        let e = refusal(&d);
        assert!(e.contains("esp_sa") && e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
        let d = scratch("fifo");
        let made = std::process::Command::new("mkfifo")
            .args(["-m", "600"])
            .arg(d.join("esp_sa"))
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo");
        let e = refusal(&d);
        assert!(e.contains("esp_sa") && e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The directory: one group or others may write to is refused (a sticky /tmp too); a
    /// missing one is created mode 0700.
    #[test]
    fn a_directory_others_may_write_to_is_refused() {
        let d = scratch("open-dir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = refusal(&d);
        assert!(
            e.contains(&d.display().to_string()) && e.contains("directory mode 1777"),
            "{e}"
        );
        assert!(!d.join("esp_sa").exists(), "no table created");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let fresh = d.join("a/b");
        drop(KeyLog::new(fresh.clone()).unwrap());
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A fresh directory gets both tables, mode 0600, owned by this user; appends land in
    /// them; tables tunneld made before are taken again (a restart).
    #[test]
    fn a_fresh_directory_gets_tables_only_this_user_reads() {
        let d = scratch("fresh");
        let k = KeyLog::new(d.clone()).unwrap();
        for t in TABLES {
            let m = std::fs::symlink_metadata(d.join(t)).unwrap();
            assert!(m.is_file());
            assert_eq!(m.mode() & 0o777, 0o600, "{t}");
            assert_eq!(m.uid(), crate::dev::sys::euid());
        }
        k.append("esp_sa", &["one".into(), "two".into()]);
        k.append("ikev2_decryption_table", &["three".into()]);
        drop(k);
        let k = KeyLog::new(d.clone()).unwrap();
        k.append("esp_sa", &["four".into()]);
        assert_eq!(std::fs::read_to_string(d.join("esp_sa")).unwrap(), "one\ntwo\nfour\n");
        assert_eq!(
            std::fs::read_to_string(d.join("ikev2_decryption_table")).unwrap(),
            "three\n"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
