//! The paper's speedup models and break-even inequalities, on per-packet times (seconds) or
//! rates. `S >= 1` means compression helps (or, for [`ipsec_only`], that IPsec costs nothing).

/// Times to protect, send and unprotect one packet.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SecTimes {
    /// Encryption, T_E.
    pub e: f64,
    /// Decryption, T_D.
    pub d: f64,
    /// Hash computation, T_HC.
    pub hc: f64,
    /// Hash verification, T_HV.
    pub hv: f64,
    /// Transmission of the secured packet, T_SECNET.
    pub secnet: f64,
}

/// Table 2: `T_NET / (T_E + T_HC + T_SECNET + T_HV + T_D)`.
pub fn ipsec_only(t_net: f64, t: &SecTimes) -> f64 {
    t_net / (t.e + t.hc + t.secnet + t.hv + t.d)
}

/// Local Send: `(T_E + T_HC) / (T_COMP + C_E + C_HC)`.
pub fn local_send(t: &SecTimes, c: &SecTimes, t_comp: f64) -> f64 {
    (t.e + t.hc) / (t_comp + c.e + c.hc)
}

/// Local Receive: `(T_HV + T_D) / (C_HV + C_D + T_DECOMP)`. When nothing is decompressed
/// (`t_decomp` is `None`: the sender found the packet incompressible and sent it without an
/// IPComp header, RFC 3173 section 2.2) the receiver does exactly the work it does without
/// compression, so the speedup is 1 (also under the null suite, where the formula is 0/0).
pub fn local_receive(t: &SecTimes, c: &SecTimes, t_decomp: Option<f64>) -> f64 {
    match t_decomp {
        Some(dc) => (t.hv + t.d) / (c.hv + c.d + dc),
        None => 1.0,
    }
}

/// Complete: `(T_E + T_HC + T_SECNET + T_HV + T_D) /
/// (T_COMP + C_E + C_HC + C_SECNET + C_HV + C_D + T_DECOMP)`; `t_decomp` 0 when nothing is
/// decompressed.
pub fn complete(t: &SecTimes, c: &SecTimes, t_comp: f64, t_decomp: f64) -> f64 {
    (t.e + t.hc + t.secnet + t.hv + t.d) / (t_comp + c.e + c.hc + c.secnet + c.hv + c.d + t_decomp)
}

/// Smallest header-free compression ratio X with `(1 - 1/X) * gain >= cost`, where `gain` is
/// the sum of the inverse rates of the work compression shrinks and `cost` that of the work it
/// adds (see [`gain_cost`]). `f64::INFINITY` when no finite ratio pays; 1 when `cost` is 0.
pub fn break_even(gain: f64, cost: f64) -> f64 {
    if cost <= 0.0 {
        1.0
    } else if gain <= cost {
        f64::INFINITY
    } else {
        gain / (gain - cost)
    }
}

/// Both sides of an inequality, as inverse rates (s/bit); `None` when a rate is 0 (not measured:
/// nothing was decompressed).
pub fn gain_cost(gain_rates: &[f64], cost_rates: &[f64]) -> Option<(f64, f64)> {
    let inv = |rs: &[f64]| {
        rs.iter()
            .map(|&r| if r > 0.0 { Some(1.0 / r) } else { None })
            .sum::<Option<f64>>()
    };
    Some((inv(gain_rates)?, inv(cost_rates)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    const T: SecTimes = SecTimes {
        e: 0.1,
        d: 0.1,
        hc: 0.2,
        hv: 0.2,
        secnet: 1.2,
    };
    const C: SecTimes = SecTimes {
        e: 0.05,
        d: 0.05,
        hc: 0.1,
        hv: 0.1,
        secnet: 0.6,
    };

    #[test]
    fn ipsec_only_hand() {
        // 1 / (0.1 + 0.2 + 1.2 + 0.2 + 0.1) = 1 / 1.8
        assert!(close(ipsec_only(1.0, &T), 1.0 / 1.8));
        assert!(close(
            ipsec_only(
                1.0,
                &SecTimes {
                    secnet: 1.0,
                    ..Default::default()
                }
            ),
            1.0
        ));
    }

    #[test]
    fn local_models_hand() {
        // (0.1 + 0.2) / (0.05 + 0.05 + 0.1) = 1.5
        assert!(close(local_send(&T, &C, 0.05), 1.5));
        // (0.2 + 0.1) / (0.1 + 0.05 + 0.15) = 1.0
        assert!(close(local_receive(&T, &C, Some(0.15)), 1.0));
        // (0.2 + 0.1) / (0.1 + 0.05 + 0.05) = 1.5
        assert!(close(local_receive(&T, &C, Some(0.05)), 1.5));
        // Nothing decompressed: the receiver's work is unchanged, whatever the times.
        assert_eq!(local_receive(&T, &T, None), 1.0);
        assert_eq!(local_receive(&SecTimes::default(), &SecTimes::default(), None), 1.0);
    }

    #[test]
    fn complete_hand() {
        // 1.8 / (0.1 + 0.05 + 0.1 + 0.6 + 0.1 + 0.05 + 0.2) = 1.8 / 1.2
        assert!(close(complete(&T, &C, 0.1, 0.2), 1.5));
        // No compression benefit, only cost: < 1.
        assert!(complete(&T, &T, 0.1, 0.0) < 1.0);
    }

    #[test]
    fn break_even_is_equality() {
        for (gain_rates, cost_rates) in [
            (vec![28.0, 28.0], vec![31.0]),
            (vec![28.0, 28.0, 274.0, 274.0, 8.0], vec![29.0, 143.0]),
            (vec![100.0], vec![300.0]),
        ] {
            let (g, c) = gain_cost(&gain_rates, &cost_rates).unwrap();
            let x = break_even(g, c);
            assert!(x.is_finite() && x > 1.0);
            assert!(close((1.0 - 1.0 / x) * g, c), "{gain_rates:?} {cost_rates:?}: X={x}");
            // Slightly better compression pays, slightly worse does not.
            assert!((1.0 - 1.0 / (x * 1.001)) * g > c);
            assert!((1.0 - 1.0 / (x * 0.999)) * g < c);
        }
        // Compression slower than everything it saves: never pays.
        let (g, c) = gain_cost(&[100.0], &[50.0]).unwrap();
        assert_eq!(break_even(g, c), f64::INFINITY);
        assert_eq!(break_even(1.0, 0.0), 1.0);
        assert_eq!(gain_cost(&[100.0], &[0.0]), None);
    }
}
