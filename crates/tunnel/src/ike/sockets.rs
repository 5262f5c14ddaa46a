//! How the IKE thread sends, and what it tells the ESP-in-UDP sockets about peers.
use std::cell::Cell;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

/// How the IKE thread sends: UDP 500 sockets per local address, and the ESP-in-UDP sockets
/// (port 4500) per IP version.
pub struct IkeSockets<'a> {
    /// Bound to `local:500`, one per IP version in use.
    pub ike: Vec<UdpSocket>,
    /// Sends a datagram from port 4500 (the ESP-in-UDP socket of that IP version), with the
    /// address it is bound to now (`ipsec ike update` moves it, `IkeSockets::move_local`).
    pub natt: Vec<(&'a crate::dev::udp::EncapSocket, Cell<IpAddr>)>,
    /// Every ESP-in-UDP socket of each IP version (one per worker), moved together.
    pub groups: Vec<&'a [crate::dev::udp::EncapSocket]>,
    /// Toward the `[radius]` server, when a connection passes EAP to it (`ike::radius`).
    pub radius: Option<super::radius::RadiusSocket>,
}

impl IkeSockets<'_> {
    /// Our address of `to`'s IP version is `to` from now on (RFC 4555 3.5, `ipsec ike
    /// update`): the port-500 socket and every ESP-in-UDP socket of that version are bound
    /// there (each on its port, its descriptor kept: [`crate::dev::sys::replace_fd`]). The
    /// address they were bound to; an error (nothing moved, or what moved said) when `to` is
    /// not an address of this host or of no version in use.
    pub(super) fn move_local(&self, to: IpAddr) -> std::io::Result<IpAddr> {
        let same = |a: IpAddr| a.is_ipv4() == to.is_ipv4();
        let Some((_, at)) = self.natt.iter().find(|(_, a)| same(a.get())) else {
            return Err(std::io::Error::other(format!(
                "no ESP-in-UDP socket of {to}'s IP version ([tunnel] local has none)"
            )));
        };
        let old = at.get();
        for s in &self.ike {
            let a = s.local_addr()?;
            if same(a.ip()) && a.ip() != to {
                let n = UdpSocket::bind(SocketAddr::new(to, a.port()))?;
                n.set_nonblocking(true)?;
                let _ = socket2::SockRef::from(&n).set_recv_buffer_size(crate::dev::sys::RECV_BUFFER);
                crate::dev::sys::replace_fd(&n, s)?;
            }
        }
        for u in self.groups.iter().flat_map(|g| g.iter()).filter(|u| same(u.local())) {
            if u.bound_to()?.ip() != to {
                u.rebind(to)?;
            }
        }
        for (_, a) in self.natt.iter().filter(|(_, a)| same(a.get())) {
            a.set(to);
        }
        Ok(old)
    }

    /// The addresses the ESP-in-UDP sockets are bound to now, one per IP version.
    pub(super) fn bound_addresses(&self) -> Vec<IpAddr> {
        self.natt.iter().map(|(_, a)| a.get()).collect()
    }

    /// Where a datagram the ESP-in-UDP socket passed on (named by the address the socket was
    /// opened on) arrived: the address that socket is bound to now.
    pub(super) fn arrived_on(&self, local: SocketAddr) -> SocketAddr {
        self.natt
            .iter()
            .find(|(u, _)| u.local() == local.ip())
            .map_or(local, |(_, a)| SocketAddr::new(a.get(), local.port()))
    }

    /// The data plane's name for our address `ip`: after a move, the address its sockets were
    /// opened on (what the installed SAs' inbound lookup names, [`EncapSocket::rebind`]), so a
    /// child SA made after the move is found as its predecessors are.
    ///
    /// [`EncapSocket::rebind`]: crate::dev::udp::EncapSocket::rebind
    pub(super) fn dataplane_local(&self, ip: IpAddr) -> IpAddr {
        self.natt
            .iter()
            .find(|(_, a)| a.get() == ip)
            .map_or(ip, |(u, _)| u.local())
    }

    /// An IKE SA's authenticated messages came from `old` and now come from `to` (RFC 7296
    /// 2.23): the sealed packets that went to `old` (that IKE SA's children) go to `to` from
    /// now on; another client behind the same NAT address keeps its endpoint
    /// ([`EncapSocket::moved`](crate::dev::udp::EncapSocket::moved)).
    pub(super) fn peer_moved(&self, old: SocketAddr, to: SocketAddr) {
        for (u, _) in self.natt.iter().filter(|(_, l)| l.get().is_ipv4() == old.is_ipv4()) {
            u.moved(old, to);
        }
    }

    /// A child SA (outbound `spi_out`, inbound `spi_in`) is up, its IKE messages from `at`:
    /// its sealed packets go there, and a peer not configured (a connection with
    /// `remote_addrs = %any`) joins the ESP-in-UDP sockets' peers, one endpoint per address
    /// and port (clients behind one NAT address each keep theirs). `false`: no room for
    /// another such peer.
    pub(super) fn add_peer(&self, at: SocketAddr, spi_out: u32, spi_in: u32) -> bool {
        self.natt
            .iter()
            .filter(|(_, l)| l.get().is_ipv4() == at.is_ipv4())
            .all(|(u, _)| u.add_peer(at, spi_out, spi_in))
    }

    /// The child SA with inbound SPI `spi_in` is gone: an endpoint IKE added leaves the
    /// sockets' peers when no child SA uses it any more.
    pub(super) fn child_down(&self, spi_in: u32) {
        for (u, _) in &self.natt {
            u.remove_child(spi_in);
        }
    }

    /// `peer`'s last IKE SA is gone: the endpoints IKE added at that address that no child SA
    /// uses leave the sockets' peers (another client's at the same address stays).
    pub(super) fn remove_peer(&self, peer: IpAddr) {
        for (u, _) in &self.natt {
            u.remove_peer(peer);
        }
    }

    pub(super) fn send(&self, t: &ipsec_ike::Transmit) -> std::io::Result<()> {
        if let Some(s) = self.ike.iter().find(|s| s.local_addr().is_ok_and(|a| a == t.local)) {
            s.send_to(&t.payload, t.remote)?;
            return Ok(());
        }
        if let Some((u, _)) = self.natt.iter().find(|(_, a)| a.get() == t.local.ip()) {
            return u.send_datagram(&t.payload, t.remote);
        }
        Err(std::io::Error::other(format!("no socket bound to {}", t.local)))
    }
}

/// The IKE thread's queue (datagrams from port 4500, commands, acquires) and what wakes the
/// thread when something is put in it: the thread sleeps in `poll(2)` on its port-500
/// sockets and this wake-up socket together, until one is readable or the endpoint's next
/// deadline (issue #39 item 9: before, it slept on the queue alone and read port 500 only
/// after up to 50 ms, so an IKE_SA_INIT waited for a timer).
pub struct Inputs {
    pub(super) rx: std::sync::mpsc::Receiver<super::Input>,
    pub(super) wake: Option<std::sync::Arc<Wake>>,
}

/// A nonblocking socket pair: a sender writes one byte after queueing an input (at most one
/// byte waits: `pending`), the IKE thread drains it before it empties the queue, so no
/// input is left waiting for a timer.
pub struct Wake {
    tx: std::os::unix::net::UnixDatagram,
    rx: std::os::unix::net::UnixDatagram,
    pending: std::sync::atomic::AtomicBool,
}

impl Wake {
    pub(super) fn new() -> std::io::Result<Wake> {
        let (tx, rx) = std::os::unix::net::UnixDatagram::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        Ok(Wake {
            tx,
            rx,
            pending: Default::default(),
        })
    }

    /// After an input was queued (never blocks).
    pub(super) fn wake(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if !self.pending.swap(true, SeqCst) {
            let _ = self.tx.send(&[1]);
        }
    }
}

impl Inputs {
    /// Sleeps until a port-500 socket of `ike` or the queue has something, at most `wait`
    /// (no sleep when it is zero); then the queue is to be emptied with [`Inputs::next`].
    #[cfg(test)]
    pub(super) fn wait(&self, ike: &[UdpSocket], wait: Duration) {
        self.wait_also(ike, &[], wait)
    }

    /// [`Inputs::wait`], also until one of `also` (the RADIUS socket, the address watch) is
    /// readable.
    pub(super) fn wait_also(&self, ike: &[UdpSocket], also: &[std::os::fd::RawFd], wait: Duration) {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::Ordering::SeqCst;
        let Some(w) = &self.wake else {
            // No wake-up socket (it could not be made): the queue is waited on, as before.
            return;
        };
        if !wait.is_zero() {
            let mut fds: Vec<_> = ike.iter().map(|s| s.as_raw_fd()).take(13).collect();
            fds.extend(also.iter().take(2));
            fds.push(w.rx.as_raw_fd());
            let _ = crate::dev::sys::poll_readable_any(&fds, wait);
        }
        // Cleared before the queue is read: an input queued after this wakes the next wait.
        w.pending.store(false, SeqCst);
        let mut b = [0u8; 16];
        while w.rx.recv(&mut b).is_ok() {}
    }

    /// The next queued input; the first of a pass waits up to `wait` when there is no
    /// wake-up socket (then port 500 is read only between waits, as before).
    pub(super) fn next(&self, first: bool, wait: Duration) -> Result<super::Input, std::sync::mpsc::RecvTimeoutError> {
        use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
        if first && self.wake.is_none() {
            return self.rx.recv_timeout(wait);
        }
        self.rx.try_recv().map_err(|e| match e {
            TryRecvError::Empty => RecvTimeoutError::Timeout,
            TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{IkeHandle, Input};
    use crate::control::IkeService;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    /// The IKE thread's sleep ends when a port-500 datagram arrives or an input is queued,
    /// not at its timer (issue #39 item 9: an IKE_SA_INIT waited up to 50 ms).
    #[test]
    fn the_wait_ends_on_a_datagram_or_a_queued_input() {
        let (h, inputs) = IkeHandle::new();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_nonblocking(true).unwrap();
        let ike = [s];
        // Nothing: the whole wait.
        let t = Instant::now();
        inputs.wait(&ike, Duration::from_millis(100));
        assert!(t.elapsed() >= Duration::from_millis(80), "{:?}", t.elapsed());
        // A datagram on the socket, 30 ms into a 10 s wait.
        let to = ike[0].local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"x", to).unwrap();
        });
        let t = Instant::now();
        inputs.wait(&ike, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        sender.join().unwrap();
        let mut b = [0u8; 8];
        assert_eq!(ike[0].recv(&mut b).unwrap(), 1);
        // An input queued from another thread, 30 ms into a 10 s wait, is there after it.
        let h2 = h.clone();
        let queuer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            h2.rekey_child(7);
        });
        let t = Instant::now();
        inputs.wait(&ike, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        queuer.join().unwrap();
        assert!(matches!(inputs.next(true, Duration::ZERO), Ok(Input::RekeyChild(7))));
        // Queued before the wait: no sleep at all; then empty, and the next wait is whole.
        h.rekey_child(8);
        let t = Instant::now();
        inputs.wait(&ike, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(matches!(inputs.next(true, Duration::ZERO), Ok(Input::RekeyChild(8))));
        assert!(inputs.next(false, Duration::ZERO).is_err());
        let t = Instant::now();
        inputs.wait(&ike, Duration::from_millis(100));
        assert!(
            t.elapsed() >= Duration::from_millis(80),
            "a wake-up left over: {:?}",
            t.elapsed()
        );
    }
}
