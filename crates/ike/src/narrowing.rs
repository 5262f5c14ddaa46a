//! Traffic selector narrowing (RFC 7296 section 2.9): the responder answers with the part of
//! the initiator's selectors its policy allows; the initiator accepts an answer only if it
//! lies within what it offered.
use crate::ts::TrafficSelector;
use alloc::vec::Vec;

/// The responder's narrowing of one side: every non-empty intersection of an offered
/// selector with a configured one, without duplicates, at most [`crate::limits::MAX_TS`].
/// Empty means TS_UNACCEPTABLE.
pub fn narrow(offered: &[TrafficSelector], configured: &[TrafficSelector]) -> Vec<TrafficSelector> {
    let mut out: Vec<TrafficSelector> = Vec::new();
    for c in configured {
        for o in offered.iter().filter(|o| o.is_valid()) {
            if let Some(i) = o.intersect(c) {
                if !out.iter().any(|x| i.is_subset_of(x)) {
                    out.retain(|x| !x.is_subset_of(&i));
                    if out.len() < crate::limits::MAX_TS {
                        out.push(i);
                    }
                }
            }
        }
    }
    out
}

/// The initiator's check: every selector of the answer lies within one it offered.
pub fn answer_within(answer: &[TrafficSelector], offered: &[TrafficSelector]) -> bool {
    !answer.is_empty()
        && answer
            .iter()
            .all(|a| a.is_valid() && offered.iter().any(|o| a.is_subset_of(o)))
}

/// Whether a data plane can protect packets of this (local, remote) pair with a policy: the
/// protocols agree (or one is any). A pair of two families matches no packet and needs no
/// policy; it is harmless.
pub fn pair_installable(a: &TrafficSelector, b: &TrafficSelector) -> bool {
    a.protocol == b.protocol || a.protocol == 0 || b.protocol == 0
}

/// The policies per direction a child with these selectors needs: for every pair of one
/// family, the prefixes of one side times those of the other (saturating).
pub fn policy_count(a: &[TrafficSelector], b: &[TrafficSelector]) -> usize {
    let mut n = 0usize;
    for x in a {
        for y in b.iter().filter(|y| y.is_ipv6() == x.is_ipv6()) {
            n = n.saturating_add(x.prefix_count().saturating_mul(y.prefix_count()));
        }
    }
    n
}

/// A narrowed child the data plane can install as agreed (2.9: a child is agreed only if it
/// will be installed): every pair of selectors of compatible protocols (conflicting ones
/// narrowed away, keeping the protocol that comes first, the triggering packet's), at least
/// one policy, at most [`crate::limits::MAX_CHILD_POLICIES`]. `None`: TS_UNACCEPTABLE.
pub fn installable(
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
) -> Option<(Vec<TrafficSelector>, Vec<TrafficSelector>)> {
    let all_ok =
        |a: &[TrafficSelector], b: &[TrafficSelector]| a.iter().all(|x| b.iter().all(|y| pair_installable(x, y)));
    let (tsi, tsr) = if all_ok(&tsi, &tsr) {
        (tsi, tsr)
    } else {
        let mut found = None;
        for p in tsi.iter().chain(tsr.iter()).map(|t| t.protocol).filter(|&p| p != 0) {
            let keep = |v: &[TrafficSelector]| -> Vec<TrafficSelector> {
                v.iter()
                    .filter(|t| t.protocol == 0 || t.protocol == p)
                    .copied()
                    .collect()
            };
            let (i, r) = (keep(&tsi), keep(&tsr));
            if !i.is_empty() && !r.is_empty() {
                found = Some((i, r));
                break;
            }
        }
        found?
    };
    let n = policy_count(&tsi, &tsr);
    ((1..=crate::limits::MAX_CHILD_POLICIES).contains(&n) && all_ok(&tsi, &tsr)).then_some((tsi, tsr))
}

/// The initiator's check of an answer the same way: installable as it is.
pub fn answer_installable(tsi: &[TrafficSelector], tsr: &[TrafficSelector]) -> bool {
    installable(tsi.to_vec(), tsr.to_vec()).is_some_and(|(i, r)| i.len() == tsi.len() && r.len() == tsr.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    fn t(s: &str) -> TrafficSelector {
        TrafficSelector::from_str_config(s).unwrap()
    }

    #[test]
    fn narrows_to_policy() {
        // Initiator asks for everything; policy allows one subnet.
        assert_eq!(
            narrow(&[TrafficSelector::any(false)], &[t("10.2.0.0/16")]),
            [t("10.2.0.0/16")]
        );
        // Initiator asks for a narrower one: kept.
        assert_eq!(narrow(&[t("10.2.3.0/24")], &[t("10.2.0.0/16")]), [t("10.2.3.0/24")]);
        // Packet selector first, then the subnet (2.9): the subnet covers both.
        assert_eq!(
            narrow(&[t("10.2.3.4[tcp/80]"), t("10.2.0.0/16")], &[t("10.2.0.0/16")]),
            [t("10.2.0.0/16")]
        );
        // Nothing in common.
        assert!(narrow(&[t("192.168.0.0/16")], &[t("10.2.0.0/16")]).is_empty());
        assert!(answer_within(&[t("10.2.3.0/24")], &[t("10.2.0.0/16")]));
        assert!(!answer_within(&[t("10.3.0.0/16")], &[t("10.2.0.0/16")]));
    }

    fn range(a: &str, b: &str) -> TrafficSelector {
        let mut x = TrafficSelector::host(a.parse().unwrap());
        x.end = b.parse().unwrap();
        x
    }

    #[test]
    fn prefix_counts() {
        assert_eq!(t("10.1.0.0/16").prefix_count(), 1);
        assert_eq!(t("0.0.0.0/0").prefix_count(), 1);
        assert_eq!(t("::/0").prefix_count(), 1);
        assert_eq!(range("10.0.0.1", "10.0.0.6").prefix_count(), 4);
        assert_eq!(range("0.0.0.1", "255.255.255.254").prefix_count(), 62);
        assert_eq!(
            range("::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe").prefix_count(),
            254
        );
        assert_eq!(
            range("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe").prefix_count(),
            128
        );
        assert_eq!(range("10.0.0.2", "10.0.0.1").prefix_count(), 0);
    }

    #[test]
    fn only_installable_children() {
        // tcp on one side, udp on the other: nothing to install.
        assert!(installable(alloc::vec![t("10.2.0.0/16[tcp]")], alloc::vec![t("10.1.0.0/16[udp]")]).is_none());
        // A conflict narrowed away, the first protocol kept.
        let (i, r) = installable(
            alloc::vec![t("10.2.0.0/16[udp]"), t("10.2.0.0/16[tcp]")],
            alloc::vec![t("10.1.0.0/16[tcp]"), t("10.1.0.0/16[udp]"), t("10.3.0.0/16")],
        )
        .unwrap();
        assert_eq!(i, [t("10.2.0.0/16[udp]")]);
        assert_eq!(r, [t("10.1.0.0/16[udp]"), t("10.3.0.0/16")]);
        assert!(answer_installable(&i, &r));
        // Any protocol goes with a specific one.
        assert!(installable(alloc::vec![t("10.2.0.0/16")], alloc::vec![t("10.1.0.0/16[udp]")]).is_some());
        // Bounded: 8 ranges of 14 prefixes each way are 12544 policies.
        let many: Vec<_> = (0..8)
            .map(|k| range(&alloc::format!("10.1.{k}.1"), &alloc::format!("10.1.{k}.254")))
            .collect();
        assert_eq!(policy_count(&many, &many), 8 * 8 * 14 * 14);
        assert!(installable(many.clone(), many.clone()).is_none());
        assert!(installable(many[..1].to_vec(), many[..1].to_vec()).is_some());
        // Only pairs of one family count; none at all is nothing to install.
        assert_eq!(policy_count(&[t("10.1.0.0/16")], &[t("fd00::/64")]), 0);
        assert!(installable(alloc::vec![t("10.1.0.0/16")], alloc::vec![t("fd00::/64")]).is_none());
    }
}
