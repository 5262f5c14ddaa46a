//! tunneld's signal handlers are installed before anything slow happens (issue #22 defect 7):
//! until then a signal's default action applies, and SIGHUP's ends the process, so a SIGHUP
//! sent while a large config was being read (or the devices set up) killed tunneld.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether process `pid` catches SIGHUP (bit 0 of the SigCgt mask in /proc/PID/status).
fn catches_sighup(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?.trim();
    Some(u64::from_str_radix(mask, 16).ok()? & 1 == 1)
}

/// tunneld reading a config of 40,000 SAs (which ends in an error, so it exits with status 2
/// after reading it, setting nothing up) catches SIGHUP while it reads, and a SIGHUP sent
/// then does not end it: it exits as the config says, with status 2.
#[test]
fn sighup_while_the_config_is_read_does_not_kill_tunneld() {
    let dir = std::env::temp_dir().join(format!("tunneld-sighup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("big.conf");
    let mut text = String::from("flush;\nspdflush;\n");
    for i in 0..40_000u32 {
        text.push_str(&format!(
            "add 192.0.2.1 192.0.2.2 esp 0x{:x} -m transport -E aes-cbc 0x101112131415161718191a1b1c1d1e1f \
             -A hmac-sha256 0x202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f;\n",
            0x10000 + i
        ));
    }
    text.push_str("no such statement;\n");
    std::fs::write(&config, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tunneld"))
        .args(["--config", config.to_str().unwrap(), "--log", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until it catches SIGHUP, or has ended.
    let t0 = Instant::now();
    let mut caught = false;
    while t0.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if catches_sighup(pid) == Some(true) {
            caught = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let still_reading = child.try_wait().unwrap().is_none();
    if still_reading {
        Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        caught,
        "tunneld did not catch SIGHUP while it read its config ({:?}, {err})",
        out.status
    );
    assert!(
        still_reading,
        "the config was read before the test could send SIGHUP: make it larger"
    );
    assert_eq!(out.status.code(), Some(2), "{:?}: {err}", out.status);
    assert!(err.contains("unknown statement"), "{err}");
}
