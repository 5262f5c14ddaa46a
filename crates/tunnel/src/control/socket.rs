//! The control socket itself: a Unix stream socket (mode 0600, or 0660 for a control group),
//! one client at a time served with newline-delimited JSON requests of bounded size, each
//! answered by [`super::handle`] on the tunnel's engine.

use super::*;

/// The control socket, bound: mode 0600, non-blocking accept.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
    /// Clients in this group may use the socket too (its mode is then 0660, its group this).
    group: Option<u32>,
}

impl ControlSocket {
    /// Binds `path` (a stale socket file there is replaced; any other file is an error) with
    /// mode 0600.
    pub fn bind(path: &Path) -> io::Result<Self> {
        if let Ok(m) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: another tunneld is listening there", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        // Connecting needs write permission: with the usual umask (022) nobody else can
        // connect even before the chmod; SO_PEERCRED is checked per client anyway.
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        Ok(ControlSocket {
            listener,
            path: path.to_path_buf(),
            group: None,
        })
    }

    /// Lets members of group `gid` use the socket: the file becomes group `gid`, mode 0660
    /// (connecting needs write permission), and a client is served when it is root or has
    /// `gid` as its primary or a supplementary group (its process's `/proc/PID/status`, read
    /// when it connects).
    pub fn allow_group(&mut self, gid: u32) -> io::Result<()> {
        std::os::unix::fs::chown(&self.path, None, Some(gid))?;
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o660))?;
        self.group = Some(gid);
        Ok(())
    }

    /// Serves clients until `stop` is set: each on a thread of its own (at most
    /// [`MAX_CLIENTS`]; one more is answered `busy`), with its own deadlines ([`CLIENT_IDLE`]
    /// for each whole request, [`CLIENT_MAX`] in all), so a slow client delays nobody. Returns
    /// once every client thread has seen `stop` (within [`POLL`] plus the request in hand).
    pub fn serve(&self, t: &Tunnel, c: &Control, stop: &AtomicBool) {
        let active = AtomicUsize::new(0);
        thread::scope(|s| {
            while !stop.load(Ordering::Relaxed) {
                match self.listener.accept() {
                    Ok((conn, _)) => {
                        if active.load(Ordering::Acquire) >= MAX_CLIENTS {
                            busy(conn);
                            continue;
                        }
                        active.fetch_add(1, Ordering::AcqRel);
                        let active = &active;
                        let spawned = thread::Builder::new()
                            .name("control-client".into())
                            .spawn_scoped(s, move || {
                                if let Err(e) = serve_client(t, c, conn, self.group, stop) {
                                    info!("control client: {e}");
                                }
                                active.fetch_sub(1, Ordering::AcqRel);
                            });
                        if let Err(e) = spawned {
                            active.fetch_sub(1, Ordering::AcqRel);
                            warn!("control socket: starting a client thread: {e}");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(20)),
                    Err(e) => {
                        warn!("control socket accept: {e}");
                        thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        });
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers a client beyond [`MAX_CLIENTS`] without waiting for it.
fn busy(conn: UnixStream) {
    let _ = conn.set_nonblocking(true);
    let line = format!(
        "{}\n",
        Response::error(format!("busy: {MAX_CLIENTS} control clients connected; try again"))
    );
    let _ = (&conn).write_all(line.as_bytes());
    warn!("control socket: {MAX_CLIENTS} clients connected; one more refused");
}

/// Request lines from one client, each of at most `max` bytes and each due by a deadline
/// (not per read: a client sending a byte at a time gets no more time than a silent one).
/// What the client sent beyond a line is kept for the next; every byte is zeroed when
/// dropped (requests carry keys).
pub struct RequestReader {
    pending: Zeroizing<Vec<u8>>,
    max: usize,
}

impl RequestReader {
    /// A reader of lines of at most `max` bytes, newline included.
    pub fn new(max: usize) -> Self {
        RequestReader {
            pending: Zeroizing::new(Vec::new()),
            max,
        }
    }

    /// The next line (without its newline) read from `s`, which must come whole before
    /// `deadline`; `Ok(None)` when the client closed (a last line without newline counts).
    /// Errors: `TimedOut` past the deadline, `InvalidData` for a line longer than `max`,
    /// `Interrupted` when `stop` is set (looked at every [`POLL`]).
    pub fn next(
        &mut self,
        s: &mut UnixStream,
        deadline: Instant,
        stop: &AtomicBool,
    ) -> io::Result<Option<Zeroizing<Vec<u8>>>> {
        let mut chunk = Zeroizing::new([0u8; 4096]);
        let mut scanned = 0;
        loop {
            if let Some(i) = self.pending[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + i;
                if end >= self.max {
                    break;
                }
                let line = Zeroizing::new(self.pending[..end].to_vec());
                self.pending.drain(..=end);
                return Ok(Some(line));
            }
            scanned = self.pending.len();
            if self.pending.len() >= self.max {
                break;
            }
            if stop.load(Ordering::Relaxed) {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "tunneld is stopping"));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no whole request in time: connection closed",
                ));
            }
            s.set_read_timeout(Some((deadline - now).clamp(Duration::from_millis(1), POLL)))?;
            match s.read(&mut chunk[..]) {
                Ok(0) if self.pending.is_empty() => return Ok(None),
                Ok(0) => return Ok(Some(Zeroizing::new(std::mem::take(&mut *self.pending)))),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("request longer than {} bytes", self.max),
        ))
    }
}

/// An answer this long (`ipsec show` of a few hundred road warriors: about 10 KB of JSON and
/// as much again of views per client while it is built) leaves that much freed memory that
/// glibc keeps; [`serve_client`] gives it back after writing it (docs/performance.md, "Many
/// remote-access clients": 1,000 clients polled with `ipsec show --json`).
const BIG_ANSWER: usize = 64 * 1024;

/// Writes `r`'s line and a newline to `s` by `deadline`, giving up early if `stop` is set:
/// the socket's edge, where a response becomes JSON. The line's length.
pub(super) fn write_line(s: &mut UnixStream, r: &Response, deadline: Instant, stop: &AtomicBool) -> io::Result<usize> {
    let mut line = r.to_line();
    line.push('\n');
    let len = line.len();
    let mut b = line.as_bytes();
    while !b.is_empty() {
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client does not read its response",
            ));
        }
        s.set_write_timeout(Some((deadline - now).clamp(Duration::from_millis(1), POLL)))?;
        match s.write(b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(len)
}

/// Whether the peer of `s` may use the control socket: root, or (with `group`) a member of
/// that group. (Not simply tunneld's own user: with `--user nobody` that would be every
/// other service running as nobody.)
fn allowed(s: &UnixStream, group: Option<u32>) -> io::Result<(bool, u32)> {
    let (uid, gid, pid) = crate::dev::sys::peer_cred(s)?;
    if uid == 0 {
        return Ok((true, uid));
    }
    let Some(g) = group else { return Ok((false, uid)) };
    if gid == g {
        return Ok((true, uid));
    }
    let groups = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let member = groups
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|l| l.split_whitespace().any(|x| x.parse::<u32>().ok() == Some(g)));
    Ok((member, uid))
}

fn serve_client(t: &Tunnel, c: &Control, mut s: UnixStream, group: Option<u32>, stop: &AtomicBool) -> io::Result<()> {
    s.set_nonblocking(false)?;
    let start = Instant::now();
    let (ok, uid) = allowed(&s, group)?;
    if !ok {
        let _ = write_line(
            &mut s,
            &Response::error("only root and the control group may use the control socket"),
            start + WRITE_TIMEOUT,
            stop,
        );
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refused uid {uid}"),
        ));
    }
    let end = start + CLIENT_MAX;
    let mut r = RequestReader::new(MAX_REQUEST);
    let mut since = start;
    loop {
        let line = match r.next(&mut s, (since + CLIENT_IDLE).min(end), stop) {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(e) if matches!(e.kind(), io::ErrorKind::InvalidData | io::ErrorKind::TimedOut) => {
                let _ = write_line(
                    &mut s,
                    &Response::error(e.to_string()),
                    Instant::now() + WRITE_TIMEOUT,
                    stop,
                );
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let h = c.request(t, &line);
        if h.monitor {
            return match c.add_monitor(s, &h.response, stop)? {
                true => Ok(()),
                false => Err(io::Error::other("too many monitors")),
            };
        }
        let len = write_line(&mut s, &h.response, Instant::now() + WRITE_TIMEOUT, stop)?;
        drop(h);
        if len >= BIG_ANSWER {
            // the answer, its views and its JSON are freed now: without this the daemon's
            // resident memory keeps the high-water mark of the largest answer ever built
            crate::dev::sys::release_freed_memory();
        }
        since = Instant::now();
    }
}
