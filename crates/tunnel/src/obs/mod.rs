//! Observability: what the daemon tells about itself. [`counters`] (the daemon's own
//! counters), [`stats`] (the stats file, replaced atomically), [`metrics`] (Prometheus text
//! format, `tunneld --metrics`), [`sd_notify`] (systemd's readiness and watchdog protocol), [`ike`] (IKE's counters).
//! The devices and the data plane count into plain atomics ([`counters`]); reading them out,
//! formatting and publishing happen here, never on a packet's path.

pub mod counters;
pub mod ike;
pub mod metrics;
pub mod sd_notify;
pub mod stats;
