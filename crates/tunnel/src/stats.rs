//! The stats file: the counters as JSON, replaced atomically (written to a temporary file
//! beside it, then renamed over it), so a reader never sees half a file.

use serde::Serialize;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `value` as pretty JSON (and a newline) to `path`, atomically.
pub fn write_json(path: &Path, value: &impl Serialize) -> io::Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    text.push(b'\n');
    let tmp = temp_path(path);
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&text))
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("tunnel-stats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("stats.json");
        write_json(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json(&p, &serde_json::json!({"a": 2, "b": [1, 2]})).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v, serde_json::json!({"a": 2, "b": [1, 2]}));
        assert!(!temp_path(&p).exists());
        assert_eq!(temp_path(&p), dir.join("stats.json.tmp"));
        // A directory that does not exist: an error, nothing left behind.
        assert!(write_json(&dir.join("missing/x.json"), &1).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
