//! Where events go besides the log: the monitors (non-blocking sockets, pruned when their
//! client hangs up) and the `--on-event` hook (`sh -c CMD`, bounded in time and number).

use super::event::Event;
use super::response::Response;
use super::socket::write_line;
use super::{Control, HOOK_TIMEOUT, MAX_HOOKS, MAX_MONITORS, WRITE_TIMEOUT};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};
use tracing::warn;

/// Drops the monitors (non-blocking sockets) whose client hung up or whose socket failed.
pub(super) fn prune(ms: &mut Vec<UnixStream>) {
    let mut scratch = [0u8; 256];
    ms.retain_mut(|s| loop {
        match s.read(&mut scratch) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    });
}

/// Runs `sh -c cmd` with `input` on its standard input; kills it after `limit`.
pub fn run_bounded(cmd: &str, input: &[u8], limit: Duration) -> Option<std::process::ExitStatus> {
    let mut child = match Command::new("/bin/sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            warn!("--on-event: starting the command: {e}");
            return None;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                if !st.success() {
                    warn!("--on-event: the command ended with {st}");
                }
                return Some(st);
            }
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                warn!("--on-event: the command ran longer than {limit:?}: killed");
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

impl Control {
    /// Sends events to every monitor and to the hook. Monitor sockets do not block: one
    /// whose buffer is full (it does not read) or that is gone is dropped, so no monitor
    /// delays the request that raised the events. Here (the monitor and hook edge) an
    /// event becomes its JSON line.
    pub fn publish(&self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let mut ms = self.monitors();
        for ev in events {
            let mut line = ev.to_line();
            self.run_hook(&line);
            line.push('\n');
            ms.retain_mut(|s| s.write_all(line.as_bytes()).is_ok());
        }
    }

    pub(super) fn monitors(&self) -> MutexGuard<'_, Vec<UnixStream>> {
        self.monitors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many monitors are connected (those that hung up counted until the next prune).
    pub fn monitor_count(&self) -> usize {
        self.monitors().len()
    }

    /// Drops the monitors whose client hung up: a closed connection reads as end of file
    /// (what a monitor sends is ignored). Run before a monitor is added and every tick, so
    /// clients that come and go with no event between do not use up the slots.
    pub fn prune_monitors(&self) {
        prune(&mut self.monitors());
    }

    /// Makes `s` a monitor if a slot is free (after pruning): the response line `ok` is
    /// written first, under the monitors' lock, so no event comes before it. Otherwise
    /// answers `too many monitors`. Whether it was added.
    pub(super) fn add_monitor(&self, mut s: UnixStream, ok: &Response, stop: &AtomicBool) -> io::Result<bool> {
        let mut ms = self.monitors();
        prune(&mut ms);
        if ms.len() >= MAX_MONITORS {
            let e = Response::error(format!("too many monitors ({MAX_MONITORS}): try again later"));
            write_line(&mut s, &e, Instant::now() + WRITE_TIMEOUT, stop)?;
            return Ok(false);
        }
        write_line(&mut s, ok, Instant::now() + WRITE_TIMEOUT, stop)?;
        s.set_nonblocking(true)?;
        ms.push(s);
        Ok(true)
    }

    /// Runs the hook on a thread of its own with the event's line, killed after
    /// [`HOOK_TIMEOUT`].
    fn run_hook(&self, ev: &str) {
        let Some(cmd) = self.hook.clone() else { return };
        let running = Arc::clone(&self.hooks_running);
        if running.fetch_add(1, Ordering::AcqRel) >= MAX_HOOKS {
            running.fetch_sub(1, Ordering::AcqRel);
            warn!("--on-event: {MAX_HOOKS} commands still running; not run for {ev}");
            return;
        }
        let input = ev.to_string();
        let spawned = thread::Builder::new().name("on-event".into()).spawn(move || {
            run_bounded(&cmd, input.as_bytes(), HOOK_TIMEOUT);
            running.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            self.hooks_running.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
