//! How a TUN queue's reader shares the CPU: whether it reads through io_uring, and whether it
//! yields after a batch (the settings from the environment, and the rule for a batch).

/// Whether TUN reads go through io_uring ([`uring`](super::uring)): only when the environment says
/// `TUNNELD_TUN_URING=on` (or `1`, `yes`). Off by default: on the 2-vCPU test machine it cut
/// the reading thread's system calls 15-fold but measured no less CPU per packet and fewer
/// packets per second than plain reads (docs/performance.md, "Small packets").
pub fn uring_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| matches!(std::env::var("TUNNELD_TUN_URING").as_deref(), Ok("on" | "1" | "yes")))
}

/// Whether a [`TunPort`](super::TunPort) gives up the CPU (`sched_yield(2)`) after each batch it read that
/// carried a packet other than TCP ([`yields_for`]), before reading the next: yes unless the
/// environment says `TUNNELD_TUN_YIELD=off` (or `0`, `no`).
///
/// Why (issue #20, docs/performance.md "Small packets"): when the stages of a packet's path
/// share CPUs (the sending application, both daemons' threads, the receiving application;
/// on the 2-vCPU test machine all of them), the TUN reader, whose queue never runs dry under
/// a flood, kept the CPU for whole time slices and handed the stages after it far more than
/// they could take: the peer opened it and wrote it to an application whose socket holds
/// 256 small datagrams (an iperf3 receiver's 208 KiB), and most of what both daemons sealed
/// and opened was dropped there. Yielding after each batch read lets the stages after it
/// drain first, so what cannot be carried is dropped at the TUN queue, before any work is
/// spent on it (64-byte UDP: 2x the packets received, a third of the CPU per received
/// packet, and a lower round trip under that load). Where nothing else is runnable on the
/// CPU the call returns at once (one system call per batch).
///
/// Not after batches of TCP alone: TCP's windows already pace the sender to the receiver, so
/// nothing is thrown away at the end, and a yield per batch only added context switches
/// (measured, yielding after reads and writes: 17-21% less TCP goodput, 12-26% more CPU
/// per GB). Not after writes to the device
/// either: measured, that starved the opening thread, whose socket then filled (8 MiB: a
/// round trip of 40 ms under load instead of 0.2).
pub fn yield_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| yield_setting(std::env::var("TUNNELD_TUN_YIELD").ok().as_deref()))
}

/// [`yield_allowed`] from the variable's value (unset: yes).
pub(super) fn yield_setting(v: Option<&str>) -> bool {
    !matches!(v, Some("off" | "0" | "no"))
}

/// Whether a batch of these packets is followed by a yield ([`yield_allowed`]): whether any
/// of them is not TCP (IPv4 protocol or IPv6 first next header other than 6; anything that
/// is not IPv4 or IPv6 counts as not TCP).
pub fn yields_for<'p>(mut packets: impl Iterator<Item = &'p [u8]>) -> bool {
    packets.any(|p| {
        let proto = match p.first().map(|b| b >> 4) {
            Some(4) => p.get(9),
            Some(6) => p.get(6),
            _ => None,
        };
        proto != Some(&6)
    })
}
