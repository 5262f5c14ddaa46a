//! The daemon's own counters: traffic through its devices and the drops that happen before
//! or after the SA engine (packets that are not IP, I/O errors, sealed packets that would not
//! go to the peer). What the engine drops is counted by the engine, per SA and reason, and
//! appears here only as a total per direction.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Live counters, shared by the daemon's threads (relaxed atomics: each is an
        /// independent tally, read for reports only).
        #[derive(Debug, Default)]
        pub struct DaemonCounters {
            $($(#[doc = $doc])* pub $name: AtomicU64,)*
        }

        /// The counters at one moment (serializes to JSON).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
        pub struct DaemonSnapshot {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl DaemonCounters {
            /// Reads every counter.
            pub fn snapshot(&self) -> DaemonSnapshot {
                DaemonSnapshot {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

counters! {
    /// Packets read from the TUN device.
    tun_rx_packets,
    /// Their bytes.
    tun_rx_bytes,
    /// Sealed packets sent to the peer on the underlay.
    underlay_tx_packets,
    /// Their bytes (whole IPv4 or IPv6 packets as sealed).
    underlay_tx_bytes,
    /// Packets read from the underlay's raw or UDP sockets (ESP, AH, IPComp addressed to this
    /// host; not keepalives, non-ESP datagrams or runts).
    underlay_rx_packets,
    /// Their bytes (whole IPv4 or IPv6 packets, with the header rebuilt where the socket
    /// does not deliver it).
    underlay_rx_bytes,
    /// Opened packets written to the TUN device.
    tun_tx_packets,
    /// Their bytes.
    tun_tx_bytes,
    /// Packets from the TUN device that are not IPv4 or IPv6 (dropped before the engine).
    not_ip,
    /// Outbound packets the engine dropped (by SA and reason in the engine's counters).
    engine_out_drops,
    /// Inbound packets the engine dropped (by SA and reason in the engine's counters).
    engine_in_drops,
    /// Packets a bypass policy let through in the clear: tunneld carries only protected
    /// traffic, so it drops them.
    bypass_dropped,
    /// Sealed packets not addressed to one of the configured peers (a config whose outermost
    /// SA is not a tunnel to a peer): dropped, never sent.
    not_to_peer,
    /// RFC 3948 NAT-keepalives received (one 0xFF byte in UDP).
    udp_keepalives_rx,
    /// NAT-keepalives sent.
    udp_keepalives_tx,
    /// UDP datagrams with the non-ESP marker (IKE, which tunneld does not speak): dropped.
    udp_non_esp,
    /// UDP datagrams too short to be ESP or a keepalive: dropped.
    udp_runts,
    /// ESP-in-UDP sends that went as one UDP GSO message (`UDP_SEGMENT`) of more than one
    /// datagram.
    udp_gso_sends,
    /// The datagrams those carried.
    udp_gso_datagrams,
    /// ESP-in-UDP reads that brought a run of more than one datagram coalesced by the kernel
    /// (`UDP_GRO`).
    udp_gro_reads,
    /// The datagrams those carried.
    udp_gro_datagrams,
    /// Errors reading the TUN device.
    tun_read_errors,
    /// Errors writing the TUN device (the packet is lost).
    tun_write_errors,
    /// Errors reading an underlay socket (raw or UDP).
    underlay_recv_errors,
    /// Errors sending on an underlay socket (the packet is lost; EMSGSIZE: larger than the
    /// underlay's MTU).
    underlay_send_errors,
    /// TCP (TSO) or UDP (USO) super-packets read from the TUN device (offloads on) and cut
    /// into segments, each counted in `tun_rx_packets`.
    tun_gso_packets,
    /// Super-packets written to the TUN device (offloads on), each coalesced from several
    /// opened packets (counted one by one in `tun_tx_packets`).
    tun_gro_packets,
    /// Packets from the TUN device with a bad virtio-net header or a super-packet that cannot
    /// be segmented: dropped.
    tun_offload_errors,
    /// Packets an `AF_PACKET` receive ring had no free frame for (raw ESP/AH/IPComp, the
    /// kernel's `PACKET_STATISTICS`): dropped before tunneld saw them, like a full socket
    /// queue's.
    underlay_ring_drops,
    /// TCP SYNs and SYN-ACKs whose MSS option was lowered (`[tunnel] mss_clamp`, either
    /// direction).
    mss_clamped,
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Counts one event.
pub(crate) fn inc(c: &AtomicU64) {
    add(c, 1);
}

/// Counts one error and logs it: the first one, then at every power of two, so a peer that
/// floods errors cannot flood the log.
pub(crate) fn count_error(c: &AtomicU64, what: &str, e: &std::io::Error) {
    let n = c.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!("{what}: {e} ({n} so far)");
    } else {
        tracing::debug!("{what}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_every_counter_and_serializes_by_name() {
        let c = DaemonCounters::default();
        inc(&c.not_ip);
        add(&c.tun_rx_bytes, 1500);
        inc(&c.underlay_send_errors);
        let s = c.snapshot();
        assert_eq!((s.not_ip, s.tun_rx_bytes, s.underlay_send_errors), (1, 1500, 1));
        assert_eq!(s.tun_rx_packets, 0);
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(v["not_ip"], 1);
        assert_eq!(v["tun_rx_bytes"], 1500);
        assert_eq!(v.as_object().unwrap().len(), 30);
    }
}
