//! Retransmission (RFC 7296 sections 2.1 and 2.4): only the initiator of an exchange
//! retransmits, with exponential back-off, and gives up after a bound (the IKE SA is then
//! deleted, 2.4). Defaults as strongSwan's: 4 s, factor 1.8, 5 retransmissions (~165 s).
use core::time::Duration;

/// Retransmission settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetransmitConfig {
    /// Wait before the first retransmission.
    pub timeout: Duration,
    /// Back-off factor in thousandths (1800 = x1.8 per try).
    pub base_permille: u32,
    /// Retransmissions before giving up.
    pub tries: u32,
    /// Cap on one wait.
    pub max_timeout: Duration,
}

impl Default for RetransmitConfig {
    fn default() -> Self {
        RetransmitConfig {
            timeout: Duration::from_secs(4),
            base_permille: 1800,
            tries: 5,
            max_timeout: Duration::from_secs(120),
        }
    }
}

impl RetransmitConfig {
    /// The wait after the `n`th send (0 = after the first transmission).
    pub fn wait(&self, n: u32) -> Duration {
        let mut ms = self.timeout.as_millis().min(u64::MAX as u128) as u64;
        for _ in 0..n.min(64) {
            ms = ms.saturating_mul(self.base_permille as u64) / 1000;
        }
        Duration::from_millis(ms).min(self.max_timeout)
    }
}

/// The timer of one outstanding request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retransmitter {
    sent: u32,
    deadline: Duration,
}

/// What to do when the deadline passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Send the request again.
    Resend,
    /// Give up: the peer is gone.
    GiveUp,
}

impl Retransmitter {
    /// Started at the first transmission.
    pub fn new(now: Duration, cfg: &RetransmitConfig) -> Self {
        Retransmitter {
            sent: 0,
            deadline: now + cfg.wait(0),
        }
    }
    /// When it fires.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
    /// Transmissions so far minus one.
    pub fn retransmissions(&self) -> u32 {
        self.sent
    }
    /// Called when `now >= deadline`.
    pub fn expire(&mut self, now: Duration, cfg: &RetransmitConfig) -> Expiry {
        if self.sent >= cfg.tries {
            return Expiry::GiveUp;
        }
        self.sent += 1;
        self.deadline = now + cfg.wait(self.sent);
        Expiry::Resend
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_and_give_up() {
        let c = RetransmitConfig::default();
        let mut r = Retransmitter::new(Duration::ZERO, &c);
        let mut t = Duration::ZERO;
        let mut waits = alloc::vec::Vec::new();
        loop {
            let d = r.deadline();
            waits.push((d - t).as_millis());
            t = d;
            if r.expire(t, &c) == Expiry::GiveUp {
                break;
            }
        }
        assert_eq!(waits, [4000, 7200, 12960, 23328, 41990, 75582]);
        assert_eq!(t.as_millis(), 165_060);
    }
}
