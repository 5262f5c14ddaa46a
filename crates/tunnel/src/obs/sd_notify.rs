//! systemd's service notification protocol (`sd_notify(3)`), without libsystemd: a datagram
//! of `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract
//! name written with a leading `@`). tunneld runs as `Type=notify`: `READY=1` once its
//! devices are up, `RELOADING=1` (with `MONOTONIC_USEC`) around a SIGHUP reload,
//! `STOPPING=1` when it starts to stop, and `WATCHDOG=1` from its ticker when the unit sets
//! `WatchdogSec=`. Outside systemd (`$NOTIFY_SOCKET` unset) every call does nothing.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Where notifications go, read once from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notifier {
    target: Option<String>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID` (the watchdog is this
    /// process's only when `WATCHDOG_PID` is unset or is this process).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let pid_ok = var("WATCHDOG_PID").is_none_or(|p| p.parse::<u32>().ok() == Some(std::process::id()));
        Self::new(
            var("NOTIFY_SOCKET"),
            var("WATCHDOG_USEC")
                .and_then(|u| u.parse::<u64>().ok())
                .filter(|_| pid_ok),
        )
    }

    /// A notifier for socket `target` (None: none) with a watchdog of `watchdog_usec` µs.
    pub fn new(target: Option<String>, watchdog_usec: Option<u64>) -> Self {
        Notifier {
            target,
            watchdog: watchdog_usec.filter(|&u| u > 0).map(Duration::from_micros),
        }
    }

    /// Whether a service manager listens.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// How often to send `WATCHDOG=1`: half the unit's `WatchdogSec`, as sd_watchdog_enabled(3)
    /// advises. None: no watchdog.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog.map(|w| w / 2)
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines). `Ok(false)`: nobody listens.
    pub fn notify(&self, state: &str) -> io::Result<bool> {
        let Some(t) = &self.target else {
            return Ok(false);
        };
        let sock = UnixDatagram::unbound()?;
        if let Some(name) = t.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        } else {
            sock.send_to(state.as_bytes(), t)?;
        }
        Ok(true)
    }

    /// `READY=1` with a status line.
    pub fn ready(&self, status: &str) -> io::Result<bool> {
        self.notify(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    /// `RELOADING=1` with `MONOTONIC_USEC` (systemd ≥ 253 wants it to match the reload to
    /// the request, `Type=notify-reload`; older ones ignore it).
    pub fn reloading(&self) -> io::Result<bool> {
        self.notify(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()))
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) -> io::Result<bool> {
        self.notify("STOPPING=1")
    }

    /// `WATCHDOG=1`.
    pub fn watchdog(&self) -> io::Result<bool> {
        self.notify("WATCHDOG=1")
    }
}

fn one_line(s: &str) -> String {
    s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect()
}

/// CLOCK_MONOTONIC in µs (std's `Instant` reads the same clock but does not show its value).
#[allow(unsafe_code)]
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one `timespec` through the pointer, which points to `ts`,
    // alive and exclusively borrowed for the call; CLOCK_MONOTONIC always exists on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_a_path_socket_and_an_abstract_one() {
        let dir = std::env::temp_dir().join(format!("sd-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::new(Some(path.display().to_string()), Some(4_000_000));
        assert!(n.ready("up\nand running").unwrap());
        let mut buf = [0u8; 256];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=up and running");
        n.reloading().unwrap();
        let len = rx.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..len]).unwrap();
        assert!(text.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{text}");
        let usec: u64 = text["RELOADING=1\nMONOTONIC_USEC=".len()..].parse().unwrap();
        // The same clock as /proc/uptime's (which is CLOCK_BOOTTIME: never behind it).
        let up: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            usec > 0 && usec <= (up * 1e6) as u64 + 1_000_000,
            "{usec} vs uptime {up}"
        );
        assert_eq!(n.watchdog_every(), Some(Duration::from_secs(2)));
        std::fs::remove_dir_all(&dir).unwrap();

        use std::os::linux::net::SocketAddrExt;
        let name = format!("tunneld-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        let n = Notifier::new(Some(format!("@{name}")), None);
        assert!(n.stopping().unwrap());
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"STOPPING=1");
        assert_eq!(n.watchdog_every(), None);
    }

    #[test]
    fn without_a_socket_nothing_is_sent() {
        let n = Notifier::new(None, Some(0));
        assert!(!n.enabled());
        assert!(!n.ready("x").unwrap());
        assert_eq!(n.watchdog_every(), None);
    }
}
