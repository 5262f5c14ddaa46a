//! RADIUS Accounting (RFC 2866) for the sessions EAP-RADIUS let in, as strongSwan's
//! eap-radius plugin sends it (`accounting = yes`): an Accounting-Request Start when a
//! client's IKE SA is up, Interim-Updates at an interval if asked, and a Stop when it goes,
//! with the attributes of RFC 2866 §5 and RFC 2869 §5 (Acct-Input/Output-Gigawords).
//!
//! The Request Authenticator of an Accounting-Request is not random (RFC 2866 §3):
//! `MD5(Code | Identifier | Length | 16 zero octets | Attributes | Secret)`; the
//! Accounting-Response's is `MD5(Code | Identifier | Length | Request Authenticator |
//! Attributes | Secret)` (as an Access answer's, RFC 2865 §3). A request without a valid
//! answer is retransmitted unchanged at the polled deadline (RFC 2866 §2 and RFC 2865 §2.5:
//! the same Identifier and bytes), a bounded number of times per server; then it goes to
//! the next server with a new Identifier (its Acct-Delay-Time telling how long it has
//! waited, RFC 2866 §5.2), and after the last server it is dropped and counted.
//!
//! Sans-IO like [`super::client`]: the caller sends what [`Accounting::poll_transmit`] gives
//! to the named server's accounting port (1813), feeds answers to
//! [`Accounting::handle_datagram`], and calls [`Accounting::handle_timeout`] when
//! [`Accounting::poll_timeout`] has passed. Nothing here holds a key: User-Name and
//! addresses only.

// An Accounting-Response's authenticator is computed as an Access-Accept's (RFC 2866 §3,
// RFC 2865 §3).
use super::auth::response_authenticator;
use super::packet::{attr, Builder, Packet, HEADER_LEN};
use crate::Error;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::time::Duration;
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// RFC 2866 §3 codes.
pub mod code {
    pub const ACCOUNTING_REQUEST: u8 = 4;
    pub const ACCOUNTING_RESPONSE: u8 = 5;
}

/// RFC 2866 §5 and RFC 2869 §5 attribute types (besides [`super::packet::attr`]'s).
pub mod acct_attr {
    pub const NAS_PORT: u8 = 5;
    pub const FRAMED_IP_ADDRESS: u8 = 8;
    pub const CALLED_STATION_ID: u8 = 30;
    pub const ACCT_STATUS_TYPE: u8 = 40;
    pub const ACCT_DELAY_TIME: u8 = 41;
    pub const ACCT_INPUT_OCTETS: u8 = 42;
    pub const ACCT_OUTPUT_OCTETS: u8 = 43;
    pub const ACCT_SESSION_ID: u8 = 44;
    pub const ACCT_SESSION_TIME: u8 = 46;
    pub const ACCT_INPUT_PACKETS: u8 = 47;
    pub const ACCT_OUTPUT_PACKETS: u8 = 48;
    pub const ACCT_TERMINATE_CAUSE: u8 = 49;
    pub const ACCT_INPUT_GIGAWORDS: u8 = 52;
    pub const ACCT_OUTPUT_GIGAWORDS: u8 = 53;
    pub const NAS_IPV6_ADDRESS: u8 = 95;
    pub const FRAMED_IPV6_ADDRESS: u8 = 168;
}

/// Acct-Status-Type (RFC 2866 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusType {
    Start = 1,
    Stop = 2,
    InterimUpdate = 3,
}

/// Acct-Terminate-Cause (RFC 2866 §5.10), the ones an IKE SA's end maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminateCause {
    /// The client deleted its IKE SA.
    UserRequest = 1,
    /// Dead peer detection gave up.
    LostCarrier = 2,
    /// Idle or lifetime expiry.
    SessionTimeout = 5,
    /// The operator or the daemon ended it.
    AdminReset = 6,
    /// The daemon stops.
    AdminReboot = 7,
    /// Another error.
    NasError = 9,
}

/// What one session's requests say (the caller fills it from the IKE SA).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// The EAP identity (User-Name).
    pub user_name: Vec<u8>,
    /// Acct-Session-Id: unique per IKE SA (strongSwan: its unique id and start time).
    pub session_id: Vec<u8>,
    /// NAS-Identifier.
    pub nas_identifier: Vec<u8>,
    /// NAS-IP-Address / NAS-IPv6-Address: our outer address.
    pub nas_ip: Option<IpAddr>,
    /// NAS-Port: a number of the IKE SA (strongSwan: its unique id).
    pub nas_port: u32,
    /// Called-Station-Id: our outer address (as text, strongSwan's `station_id_with_port`
    /// off).
    pub called: Vec<u8>,
    /// Calling-Station-Id: the client's outer address.
    pub calling: Vec<u8>,
    /// Framed-IP-Address / Framed-IPv6-Address: the client's leases.
    pub framed: Vec<IpAddr>,
}

/// Counts for Interim-Update and Stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Seconds since Start (Acct-Session-Time).
    pub session_time: u32,
    /// Octets from the client (Acct-Input-Octets, with Gigawords above 2^32).
    pub input_octets: u64,
    pub output_octets: u64,
    pub input_packets: u32,
    pub output_packets: u32,
}

/// Builds an Accounting-Request (its Request Authenticator computed, RFC 2866 §3).
pub fn request(
    secret: &[u8],
    identifier: u8,
    status: StatusType,
    record: &Record,
    usage: Option<&Usage>,
    cause: Option<TerminateCause>,
    delay: u32,
) -> Result<Vec<u8>, Error> {
    let mut b = Builder::new(code::ACCOUNTING_REQUEST, identifier, &[0; 16]);
    b.attr(acct_attr::ACCT_STATUS_TYPE, &(status as u32).to_be_bytes())?;
    b.attr(attr::USER_NAME, &record.user_name)?;
    b.attr(acct_attr::ACCT_SESSION_ID, &record.session_id)?;
    b.attr(attr::NAS_IDENTIFIER, &record.nas_identifier)?;
    match record.nas_ip {
        Some(IpAddr::V4(a)) => {
            b.attr(attr::NAS_IP_ADDRESS, &a.octets())?;
        }
        Some(IpAddr::V6(a)) => {
            b.attr(acct_attr::NAS_IPV6_ADDRESS, &a.octets())?;
        }
        None => {}
    }
    b.attr(acct_attr::NAS_PORT, &record.nas_port.to_be_bytes())?;
    b.attr(attr::NAS_PORT_TYPE, &5u32.to_be_bytes())?; // Virtual
    b.attr(attr::SERVICE_TYPE, &2u32.to_be_bytes())?; // Framed
    if !record.called.is_empty() {
        b.attr(acct_attr::CALLED_STATION_ID, &record.called)?;
    }
    if !record.calling.is_empty() {
        b.attr(attr::CALLING_STATION_ID, &record.calling)?;
    }
    for a in &record.framed {
        match a {
            IpAddr::V4(a) => b.attr(acct_attr::FRAMED_IP_ADDRESS, &a.octets())?,
            // Framed-IPv6-Address (RFC 6911 §3.1).
            IpAddr::V6(a) => b.attr(acct_attr::FRAMED_IPV6_ADDRESS, &a.octets())?,
        };
    }
    if let Some(u) = usage {
        b.attr(acct_attr::ACCT_SESSION_TIME, &u.session_time.to_be_bytes())?;
        b.attr(acct_attr::ACCT_INPUT_OCTETS, &(u.input_octets as u32).to_be_bytes())?;
        b.attr(acct_attr::ACCT_OUTPUT_OCTETS, &(u.output_octets as u32).to_be_bytes())?;
        b.attr(
            acct_attr::ACCT_INPUT_GIGAWORDS,
            &((u.input_octets >> 32) as u32).to_be_bytes(),
        )?;
        b.attr(
            acct_attr::ACCT_OUTPUT_GIGAWORDS,
            &((u.output_octets >> 32) as u32).to_be_bytes(),
        )?;
        b.attr(acct_attr::ACCT_INPUT_PACKETS, &u.input_packets.to_be_bytes())?;
        b.attr(acct_attr::ACCT_OUTPUT_PACKETS, &u.output_packets.to_be_bytes())?;
    }
    if let Some(c) = cause {
        b.attr(acct_attr::ACCT_TERMINATE_CAUSE, &(c as u32).to_be_bytes())?;
    }
    if delay > 0 {
        b.attr(acct_attr::ACCT_DELAY_TIME, &delay.to_be_bytes())?;
    }
    let mut bytes = b.finish();
    let ra = request_authenticator(secret, &bytes);
    bytes[4..20].copy_from_slice(&ra);
    Ok(bytes)
}

/// The Request Authenticator of an Accounting-Request (RFC 2866 §3): MD5 of the packet with
/// 16 zero octets in the Authenticator field, then the secret.
pub fn request_authenticator(secret: &[u8], bytes: &[u8]) -> [u8; 16] {
    let len = bytes
        .get(2..4)
        .map_or(0, |l| usize::from(u16::from_be_bytes([l[0], l[1]])))
        .min(bytes.len());
    let mut md5 = Md5::new();
    md5.update(&bytes[..4.min(len)]);
    md5.update([0u8; 16]);
    md5.update(bytes.get(HEADER_LEN..len).unwrap_or(&[]));
    md5.update(secret);
    md5.finalize().into()
}

/// Checks an Accounting-Request's Request Authenticator (what a server does).
pub fn verify_request(secret: &[u8], bytes: &[u8]) -> Result<(), Error> {
    let p = Packet::new_checked(bytes)?;
    if p.code() != code::ACCOUNTING_REQUEST {
        return Err(Error::Unexpected("not an Accounting-Request"));
    }
    let want = request_authenticator(secret, p.as_bytes());
    if bool::from(want.ct_eq(&p.authenticator())) {
        Ok(())
    } else {
        Err(Error::BadAuthenticator)
    }
}

/// Signs an Accounting-Response as a server does (tests).
pub fn sign_response(secret: &[u8], request_auth: &[u8; 16], bytes: &mut [u8]) -> Result<(), Error> {
    let len = usize::from(Packet::new_checked(&*bytes)?.length());
    let ra = response_authenticator(secret, &bytes[..len], request_auth);
    bytes[4..20].copy_from_slice(&ra);
    Ok(())
}

/// Settings: the servers' secrets in order (the caller sends server n's requests to its
/// accounting port), the retransmission timing. The secrets never show in Debug.
#[derive(Clone)]
pub struct Config {
    pub secrets: Vec<Zeroizing<Vec<u8>>>,
    pub retransmit_after: Duration,
    /// Sends per server (the first included).
    pub max_tries: u8,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("servers", &self.secrets.len())
            .field("retransmit_after", &self.retransmit_after)
            .field("max_tries", &self.max_tries)
            .finish_non_exhaustive()
    }
}

/// What accounting sent, got and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests made (Start, Interim-Update, Stop).
    pub requests: u64,
    /// Datagrams handed out (retransmissions included).
    pub sent: u64,
    pub retransmitted: u64,
    /// Accounting-Responses taken.
    pub responses: u64,
    /// Requests moved to another server after every try on theirs timed out.
    pub failovers: u64,
    /// Requests dropped: every server timed out.
    pub given_up: u64,
    /// Requests not made: too many waiting already.
    pub overflow: u64,
    /// Answers dropped: wrong Response Authenticator.
    pub bad_authenticator: u64,
    /// Answers dropped: to no outstanding request, or from another server.
    pub unmatched: u64,
    /// Answers dropped: not a RADIUS packet, or not an Accounting-Response.
    pub malformed: u64,
}

/// Requests outstanding at most (one Identifier each; the rest is refused, counted).
pub const MAX_OUTSTANDING: usize = 256;

struct Pending {
    identifier: u8,
    server: usize,
    status: StatusType,
    record: Record,
    usage: Option<Usage>,
    cause: Option<TerminateCause>,
    datagram: Vec<u8>,
    tries: u8,
    deadline: Duration,
    made: Duration,
}

/// The accounting client: requests outstanding, each on one server at a time.
pub struct Accounting {
    config: Config,
    pending: Vec<Pending>,
    transmit: VecDeque<(usize, Vec<u8>)>,
    next_id: u8,
    /// The server new requests go to (the last that answered, or the first).
    server: usize,
    stats: Stats,
}

impl fmt::Debug for Accounting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Accounting")
            .field("pending", &self.pending.len())
            .field("server", &self.server)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Accounting {
    pub fn new(config: Config) -> Accounting {
        Accounting {
            config,
            pending: Vec::new(),
            transmit: VecDeque::new(),
            next_id: 0,
            server: 0,
            stats: Stats::default(),
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Requests waiting for an answer.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    fn free_identifier(&mut self) -> Option<u8> {
        for _ in 0..=255u8 {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if !self.pending.iter().any(|p| p.identifier == id) {
                return Some(id);
            }
        }
        None
    }

    /// Queues an Accounting-Request (Start, Interim-Update with `usage`, Stop with `usage`
    /// and `cause`).
    pub fn send(
        &mut self,
        status: StatusType,
        record: &Record,
        usage: Option<Usage>,
        cause: Option<TerminateCause>,
        now: Duration,
    ) -> Result<(), Error> {
        if self.config.secrets.is_empty() {
            return Err(Error::Unexpected("no accounting server"));
        }
        if self.pending.len() >= MAX_OUTSTANDING {
            self.stats.overflow += 1;
            return Err(Error::Unexpected("too many accounting requests outstanding"));
        }
        let Some(identifier) = self.free_identifier() else {
            self.stats.overflow += 1;
            return Err(Error::Unexpected("no RADIUS Identifier free"));
        };
        let server = self.server.min(self.config.secrets.len() - 1);
        let datagram = request(
            &self.config.secrets[server],
            identifier,
            status,
            record,
            usage.as_ref(),
            cause,
            0,
        )?;
        self.stats.requests += 1;
        self.stats.sent += 1;
        self.transmit.push_back((server, datagram.clone()));
        self.pending.push(Pending {
            identifier,
            server,
            status,
            record: record.clone(),
            usage,
            cause,
            datagram,
            tries: 1,
            deadline: now + self.config.retransmit_after,
            made: now,
        });
        Ok(())
    }

    /// The next datagram and the server (number) it goes to.
    pub fn poll_transmit(&mut self) -> Option<(usize, Vec<u8>)> {
        self.transmit.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Duration> {
        self.pending.iter().map(|p| p.deadline).min()
    }

    /// Retransmits what is due; a request out of tries on its server goes to the next (a
    /// new Identifier, Acct-Delay-Time set), or is dropped after the last.
    pub fn handle_timeout(&mut self, now: Duration) {
        let servers = self.config.secrets.len();
        let mut i = 0;
        while i < self.pending.len() {
            if now < self.pending[i].deadline {
                i += 1;
                continue;
            }
            if self.pending[i].tries < self.config.max_tries {
                let p = &mut self.pending[i];
                p.tries += 1;
                p.deadline = now + self.config.retransmit_after;
                self.stats.sent += 1;
                self.stats.retransmitted += 1;
                self.transmit.push_back((p.server, p.datagram.clone()));
                i += 1;
                continue;
            }
            let p = self.pending.remove(i);
            let next = p.server + 1;
            if next >= servers {
                self.stats.given_up += 1;
                continue;
            }
            // The next server by preference takes this request and the ones after it.
            self.server = next;
            let Some(identifier) = self.free_identifier() else {
                self.stats.given_up += 1;
                continue;
            };
            let delay = now.saturating_sub(p.made).as_secs().min(u64::from(u32::MAX)) as u32;
            let Ok(datagram) = request(
                &self.config.secrets[next],
                identifier,
                p.status,
                &p.record,
                p.usage.as_ref(),
                p.cause,
                delay,
            ) else {
                self.stats.given_up += 1;
                continue;
            };
            self.stats.failovers += 1;
            self.stats.sent += 1;
            self.transmit.push_back((next, datagram.clone()));
            // Inserted where it was: the loop looks at it again only after its deadline.
            self.pending.insert(
                i,
                Pending {
                    identifier,
                    server: next,
                    datagram,
                    tries: 1,
                    deadline: now + self.config.retransmit_after,
                    ..p
                },
            );
            i += 1;
        }
    }

    /// An answer from server `server`: an Accounting-Response to an outstanding request
    /// there, its Response Authenticator checked; an error means it was dropped (counted).
    pub fn handle_datagram(&mut self, server: usize, bytes: &[u8]) -> Result<(), Error> {
        let p = match Packet::new_checked(bytes) {
            Ok(p) if p.code() == code::ACCOUNTING_RESPONSE => p,
            Ok(_) => {
                self.stats.malformed += 1;
                return Err(Error::Unexpected("not an Accounting-Response"));
            }
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        let Some(i) = self
            .pending
            .iter()
            .position(|q| q.identifier == p.identifier() && q.server == server)
        else {
            self.stats.unmatched += 1;
            return Err(Error::Unexpected("Accounting-Response to no outstanding request"));
        };
        let q = &self.pending[i];
        let mut request_auth = [0u8; 16];
        request_auth.copy_from_slice(&q.datagram[4..20]);
        let want = response_authenticator(&self.config.secrets[server], p.as_bytes(), &request_auth);
        if !bool::from(want.ct_eq(&p.authenticator())) {
            self.stats.bad_authenticator += 1;
            return Err(Error::BadAuthenticator);
        }
        self.pending.remove(i);
        self.stats.responses += 1;
        self.server = server;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::radius::packet::Repr;

    fn record() -> Record {
        Record {
            user_name: b"alice".to_vec(),
            session_id: b"5f3a-0001".to_vec(),
            nas_identifier: b"tunneld".to_vec(),
            nas_ip: Some("10.94.1.1".parse().unwrap()),
            nas_port: 7,
            called: b"10.94.1.1".to_vec(),
            calling: b"10.94.1.2".to_vec(),
            framed: alloc::vec!["10.94.3.1".parse().unwrap()],
        }
    }

    /// RFC 2866 §3: the Request Authenticator is MD5(Code + Identifier + Length + 16 zero
    /// octets + request attributes + shared secret), computed here independently of the
    /// code under test (by concatenating the fields and hashing once).
    #[test]
    fn request_authenticator_is_rfc_2866_md5() {
        let secret = b"xyzzy5461";
        let bytes = request(secret, 0x2a, StatusType::Start, &record(), None, None, 0).unwrap();
        let mut input = Vec::new();
        input.extend_from_slice(&[4, 0x2a]);
        input.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        input.extend_from_slice(&[0u8; 16]);
        input.extend_from_slice(&bytes[20..]);
        input.extend_from_slice(secret);
        let want: [u8; 16] = Md5::digest(&input).into();
        assert_eq!(bytes[4..20], want);
        assert_eq!(bytes[2..4], (bytes.len() as u16).to_be_bytes());
        verify_request(secret, &bytes).unwrap();
        assert_eq!(verify_request(b"other", &bytes), Err(Error::BadAuthenticator));
        // An RFC 2866 example-independent fixed vector: all-empty attributes, secret "s".
        let empty = [4u8, 1, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut input = Vec::from(&empty[..4]);
        input.extend_from_slice(&[0; 16]);
        input.extend_from_slice(b"s");
        let want: [u8; 16] = Md5::digest(&input).into();
        assert_eq!(request_authenticator(b"s", &empty), want);
    }

    #[test]
    fn start_and_stop_carry_the_attributes() {
        let u = Usage {
            session_time: 61,
            input_octets: (5u64 << 32) + 1000,
            output_octets: 2000,
            input_packets: 10,
            output_packets: 20,
        };
        let bytes = request(
            b"s",
            1,
            StatusType::Stop,
            &record(),
            Some(&u),
            Some(TerminateCause::UserRequest),
            0,
        )
        .unwrap();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        let n = |t| u32::from_be_bytes(r.get(t).unwrap().try_into().unwrap());
        assert_eq!(n(acct_attr::ACCT_STATUS_TYPE), 2);
        assert_eq!(r.get(attr::USER_NAME), Some(&b"alice"[..]));
        assert_eq!(r.get(acct_attr::ACCT_SESSION_ID), Some(&b"5f3a-0001"[..]));
        assert_eq!(r.get(acct_attr::FRAMED_IP_ADDRESS), Some(&[10, 94, 3, 1][..]));
        assert_eq!(r.get(attr::NAS_IP_ADDRESS), Some(&[10, 94, 1, 1][..]));
        assert_eq!(r.get(attr::CALLING_STATION_ID), Some(&b"10.94.1.2"[..]));
        assert_eq!(r.get(acct_attr::CALLED_STATION_ID), Some(&b"10.94.1.1"[..]));
        assert_eq!(n(acct_attr::NAS_PORT), 7);
        assert_eq!(n(acct_attr::ACCT_SESSION_TIME), 61);
        assert_eq!(n(acct_attr::ACCT_INPUT_OCTETS), 1000);
        assert_eq!(n(acct_attr::ACCT_INPUT_GIGAWORDS), 5);
        assert_eq!(n(acct_attr::ACCT_OUTPUT_OCTETS), 2000);
        assert_eq!(n(acct_attr::ACCT_INPUT_PACKETS), 10);
        assert_eq!(n(acct_attr::ACCT_OUTPUT_PACKETS), 20);
        assert_eq!(n(acct_attr::ACCT_TERMINATE_CAUSE), 1);
        assert_eq!(r.get(acct_attr::ACCT_DELAY_TIME), None);
    }

    fn answer(secret: &[u8], req: &[u8]) -> Vec<u8> {
        let mut b = Builder::new(code::ACCOUNTING_RESPONSE, req[1], &[0; 16]).finish();
        let mut ra = [0u8; 16];
        ra.copy_from_slice(&req[4..20]);
        sign_response(secret, &ra, &mut b).unwrap();
        b
    }

    fn config() -> Config {
        Config {
            secrets: alloc::vec![Zeroizing::new(b"one".to_vec()), Zeroizing::new(b"two".to_vec())],
            retransmit_after: Duration::from_secs(2),
            max_tries: 2,
        }
    }

    /// Answers checked: a wrong Response Authenticator, an unknown Identifier, another
    /// server, not an Accounting-Response: dropped and counted, the request still waiting;
    /// the right one ends it.
    #[test]
    fn responses_are_checked() {
        let mut a = Accounting::new(config());
        a.send(StatusType::Start, &record(), None, None, Duration::ZERO)
            .unwrap();
        let (server, req) = a.poll_transmit().unwrap();
        assert_eq!(server, 0);
        verify_request(b"one", &req).unwrap();
        assert_eq!(
            a.handle_datagram(0, &answer(b"two", &req)),
            Err(Error::BadAuthenticator)
        );
        let mut other = answer(b"one", &req);
        other[1] ^= 1;
        assert!(a.handle_datagram(0, &other).is_err());
        assert!(a.handle_datagram(1, &answer(b"one", &req)).is_err());
        assert!(a.handle_datagram(0, &[5, 0, 0]).is_err());
        let s = a.stats();
        assert_eq!((s.bad_authenticator, s.unmatched, s.malformed), (1, 2, 1));
        assert_eq!(a.outstanding(), 1);
        a.handle_datagram(0, &answer(b"one", &req)).unwrap();
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.stats().responses, 1);
        assert_eq!(a.poll_timeout(), None);
    }

    /// Retransmitted unchanged, then moved to the next server (new Identifier, that
    /// server's secret, Acct-Delay-Time), then dropped after the last; new requests go to
    /// the server that took over.
    #[test]
    fn retransmission_failover_and_giving_up() {
        let mut a = Accounting::new(config());
        a.send(StatusType::Start, &record(), None, None, Duration::ZERO)
            .unwrap();
        let (_, first) = a.poll_transmit().unwrap();
        a.handle_timeout(Duration::from_secs(1));
        assert!(a.poll_transmit().is_none(), "not yet");
        a.handle_timeout(Duration::from_secs(2));
        assert_eq!(a.poll_transmit(), Some((0, first.clone())), "the same bytes again");
        a.handle_timeout(Duration::from_secs(4));
        let (server, moved) = a.poll_transmit().unwrap();
        assert_eq!(server, 1);
        assert_ne!(moved[1], first[1]);
        verify_request(b"two", &moved).unwrap();
        let r = Repr::parse(&Packet::new_checked(&moved[..]).unwrap())
            .unwrap()
            .get(acct_attr::ACCT_DELAY_TIME)
            .map(|v| v.to_vec());
        assert_eq!(r, Some(4u32.to_be_bytes().to_vec()));
        a.send(
            StatusType::Stop,
            &record(),
            Some(Usage::default()),
            Some(TerminateCause::UserRequest),
            Duration::from_secs(4),
        )
        .unwrap();
        assert_eq!(
            a.poll_transmit().unwrap().0,
            1,
            "new requests go to the server that took over"
        );
        for t in [6, 8, 10] {
            a.handle_timeout(Duration::from_secs(t));
        }
        let s = a.stats();
        assert_eq!((s.failovers, s.given_up, s.retransmitted), (1, 2, 3), "{s:?}");
        assert_eq!(a.outstanding(), 0);
    }
}
