//! The IKE thread's socket toward the RADIUS server (EAP-RADIUS, RFC 3579; the config's
//! `[radius]`, docs/ike-eap.md): one unconnected UDP socket on an ephemeral port, shared by
//! every IKE SA whose EAP conversation the server has. The endpoint gives each outstanding
//! request its own RADIUS Identifier and routes answers back by it
//! ([`ipsec_ike::Endpoint::handle_radius`]); here the socket sends what
//! [`ipsec_ike::Endpoint::poll_radius`] gives and reads what comes back.
//!
//! Several servers (`[[radius]]`, failover): the endpoint says which server each datagram
//! goes to ([`ipsec_ike::RadiusTransmit::server`], the servers' order of preference), and an
//! answer is handed on with the number of the server it came from.
//!
//! Only datagrams from a server's address and port are handed on: anything else on the
//! socket is dropped and counted (`wrong_source`), as are answers the endpoint refuses (no
//! request with their Identifier, a wrong authenticator: `dropped`), each with a log line
//! (at the first and then at every power of two, so a flood does not flood the log).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::{debug, warn};

/// Datagrams read from the socket in one pass of the IKE thread at most.
const READS_PER_PASS: usize = 64;

/// The socket and what it dropped.
pub struct RadiusSocket {
    sock: UdpSocket,
    /// The servers, in the order of preference (the endpoint's server numbers).
    servers: Vec<SocketAddr>,
    /// Datagrams from another address or port than the server's.
    pub wrong_source: AtomicU64,
    /// Datagrams from the server the endpoint dropped (unmatched, wrong authenticator,
    /// malformed; the endpoint's `radius_stats` says which).
    pub dropped: AtomicU64,
    /// Sends that failed.
    pub send_errors: AtomicU64,
}

fn note(counter: &AtomicU64) -> Option<u64> {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    n.is_power_of_two().then_some(n)
}

impl RadiusSocket {
    /// A nonblocking socket on an ephemeral port of the server's address family.
    pub fn open(server: SocketAddr) -> std::io::Result<RadiusSocket> {
        RadiusSocket::open_many(&[server])
    }

    /// A nonblocking socket on an ephemeral port toward `servers` (in the order of
    /// preference; all of one address family).
    pub fn open_many(servers: &[SocketAddr]) -> std::io::Result<RadiusSocket> {
        let Some(server) = servers.first().copied() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no RADIUS server",
            ));
        };
        if servers.iter().any(|s| s.is_ipv4() != server.is_ipv4()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the RADIUS servers must be of one address family (IPv4 or IPv6)",
            ));
        }
        let any = match server.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let sock = UdpSocket::bind(SocketAddr::new(any, 0))?;
        sock.set_nonblocking(true)?;
        Ok(RadiusSocket {
            sock,
            servers: servers.to_vec(),
            wrong_source: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
        })
    }

    /// The first server (by preference).
    pub fn server(&self) -> SocketAddr {
        self.servers[0]
    }

    /// The servers, in the order of preference.
    pub fn servers(&self) -> &[SocketAddr] {
        &self.servers
    }

    /// The socket (for the IKE thread's poll).
    pub(super) fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// Sends everything the endpoint has for the server.
    pub(super) fn send_all(&self, endpoint: &mut ipsec_ike::Endpoint) {
        while let Some(t) = endpoint.poll_radius() {
            let Some(&to) = self.servers.get(t.server) else {
                note(&self.send_errors);
                continue;
            };
            if let Err(e) = self.sock.send_to(&t.data, to) {
                if let Some(n) = note(&self.send_errors) {
                    warn!("IKE: sending to the RADIUS server {to}: {e} ({n} failed sends)");
                }
            }
        }
    }

    /// Reads what is waiting (at most [`READS_PER_PASS`] datagrams) and hands the server's
    /// to the endpoint; returns how many were read.
    pub(super) fn receive(
        &self,
        endpoint: &mut ipsec_ike::Endpoint,
        now: Duration,
        buf: &mut [u8],
        rng: &mut impl rand_core::CryptoRngCore,
    ) -> usize {
        let mut read = 0;
        while read < READS_PER_PASS {
            let Ok((n, from)) = self.sock.recv_from(buf) else { break };
            read += 1;
            let Some(server) = self.servers.iter().position(|s| *s == from) else {
                if let Some(k) = note(&self.wrong_source) {
                    warn!("IKE: a datagram from {from} on the RADIUS socket dropped: not a RADIUS server ({k} so far)");
                }
                continue;
            };
            if let Err(e) = endpoint.handle_radius_from(now, server, &buf[..n], rng) {
                debug!("IKE: RADIUS answer dropped: {e}");
                if let Some(k) = note(&self.dropped) {
                    warn!("IKE: an answer from the RADIUS server {from} dropped: {e} ({k} so far)");
                }
            }
        }
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bad input: a datagram from another address or port than the server's is dropped and
    /// counted, never handed to the endpoint; one from the server that matches no request
    /// is the endpoint's to count.
    #[test]
    fn datagrams_from_anywhere_but_the_server_are_dropped_and_counted() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        let r = RadiusSocket::open(server.local_addr().unwrap()).unwrap();
        let to = SocketAddr::new("127.0.0.1".parse().unwrap(), r.sock.local_addr().unwrap().port());
        let mut endpoint = ipsec_ike::Endpoint::new(ipsec_ike::Config::new(Vec::new()));
        // An Access-Accept header with Identifier 7: no request has it.
        let mut answer = vec![2u8, 7, 0, 20];
        answer.extend_from_slice(&[0; 16]);
        stranger.send_to(&answer, to).unwrap();
        server.send_to(&answer, to).unwrap();
        let mut buf = [0u8; 4096];
        let mut rng = rand_core::OsRng;
        let mut read = 0;
        for _ in 0..100 {
            read += r.receive(&mut endpoint, Duration::ZERO, &mut buf, &mut rng);
            if read == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(read, 2);
        assert_eq!(r.wrong_source.load(Ordering::Relaxed), 1);
        assert_eq!(r.dropped.load(Ordering::Relaxed), 1);
        // Only the server's reached the endpoint (and matched nothing there).
        assert_eq!(endpoint.radius_stats().unmatched, 1);
    }
}
