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
}
