//! The stats file: the counters as JSON, replaced atomically (written to a temporary file
//! beside it, then renamed over it), so a reader never sees half a file.
//!
//! The daemon runs as root and the stats directory may be writable by others: nothing here
//! follows a symbolic link. The temporary file is created with `O_CREAT | O_EXCL` (which
//! refuses an existing name, a symbolic link included, and never writes through one), after
//! removing whatever stale entry has its name (`unlink` removes a link, not its target); the
//! rename replaces the name `FILE`, a link there included, not what a link points to.

use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Creates `tmp` as a new regular file (mode 0644), never through a symbolic link: a stale
/// entry of that name (a crashed writer's file, or a link someone planted) is removed first;
/// if one appears again in between, the call fails rather than follow it.
fn create_temp(tmp: &Path) -> io::Result<File> {
    let open = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(tmp)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            open()
        }
        r => r,
    }
}

/// Writes `value` as pretty JSON (and a newline) to `path`, atomically, following no
/// symbolic link (see the module doc).
pub fn write_json(path: &Path, value: &impl Serialize) -> io::Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    text.push(b'\n');
    let tmp = temp_path(path);
    let mut f = create_temp(&tmp)?;
    let result = f.write_all(&text).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Checks at start that [`write_json`] can write `path`: it is not a directory and its
/// temporary file can be created beside it (then removed). Opens nothing through a link.
pub fn check_path(path: &Path) -> Result<(), String> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => return Err(format!("{shown}: is a directory")),
        _ => {}
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!("{shown}: directory {} does not exist", parent.display()));
    }
    let tmp = temp_path(path);
    create_temp(&tmp)
        .map_err(|e| format!("{shown}: cannot write {}: {e}", tmp.display()))
        .map(drop)?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tunnel-stats-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = dir("replace");
        let p = dir.join("stats.json");
        write_json(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json(&p, &serde_json::json!({"a": 2, "b": [1, 2]})).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v, serde_json::json!({"a": 2, "b": [1, 2]}));
        assert!(!temp_path(&p).exists());
        assert_eq!(temp_path(&p), dir.join("stats.json.tmp"));
        // A directory that does not exist: an error, nothing left behind.
        assert!(write_json(&dir.join("missing/x.json"), &1).is_err());
        assert!(check_path(&dir.join("missing/x.json")).is_err());
        assert!(check_path(&dir).is_err(), "a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue #22 defect 8: a symbolic link planted at `FILE.tmp` (to an existing file, or to
    /// a name that does not exist yet) is never written through, by the start-up check or
    /// by a write; the stats still land in FILE. A link at FILE itself is replaced, its
    /// target untouched.
    #[test]
    fn never_writes_through_a_planted_link() {
        let dir = dir("symlink");
        let p = dir.join("stats.json");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let absent = dir.join("would-be-created");
        for target in [&victim, &absent] {
            symlink(target, temp_path(&p)).unwrap();
            check_path(&p).unwrap();
            assert!(!temp_path(&p).exists() && std::fs::symlink_metadata(temp_path(&p)).is_err());
            symlink(target, temp_path(&p)).unwrap();
            write_json(&p, &serde_json::json!({"n": 1})).unwrap();
            assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
            assert!(!absent.exists(), "nothing created through the link");
            assert!(std::fs::read_to_string(&p).unwrap().contains("\"n\": 1"));
        }
        std::fs::remove_file(&p).unwrap();
        symlink(&victim, &p).unwrap();
        write_json(&p, &serde_json::json!({"n": 2})).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
