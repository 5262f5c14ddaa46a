//! `ipsec model --plot DIR`: SVG plots of the models, computed with the same functions as the
//! tables.
//!
//! - `speedup.svg`: the Complete-model speedup against the link rate (log axes), one panel per
//!   suite class (no IPsec, AH only, ESP only, ESP + AH). In each panel, per compressor, the
//!   class's fastest and slowest suite (by crypto time per bit at the plotted payload), for one
//!   data set and payload; the line S = 1 marks where compression starts to pay.
//! - `break-even.svg`: the break-even curves of the inequalities, the codec rate compression
//!   needs against the header-free compression ratio X (log axes). Local Send:
//!   `R_COMP = 1 / ((1 - 1/X)(1/R_E + 1/R_HC))`; Local Receive likewise with `R_DECOMP`, `R_D`
//!   and `R_HV`; Complete: `1 / (1/R_COMP + 1/R_DECOMP) = 1 / ((1 - 1/X)(1/R_E + 1/R_D +
//!   1/R_HC + 1/R_HV + 1/R_SECNET))`, one curve per link, for the fastest and the slowest
//!   ESP + AH suite. The measured compressors are points (one per data set that compressed): a
//!   point above a curve pays under that curve's suite and link.

use super::{
    gain, prepare, speedup, CompModel, CompressorRates, DataSetRates, Env, Rates, Subject, Suite, SuiteRates,
    BITS_PER_MBIT,
};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// A family of suites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Null,
    IntegrityOnly,
    CipherOnly,
    Both,
}

impl Class {
    pub(crate) const ALL: [Class; 4] = [Class::Null, Class::IntegrityOnly, Class::CipherOnly, Class::Both];

    fn of(s: &Suite) -> Class {
        match (s.cipher.is_some(), s.integrity.is_some()) {
            (false, false) => Class::Null,
            (false, true) => Class::IntegrityOnly,
            (true, false) => Class::CipherOnly,
            (true, true) => Class::Both,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Class::Null => "no IPsec (IPComp alone)",
            Class::IntegrityOnly => "AH only",
            Class::CipherOnly => "ESP only (encryption)",
            Class::Both => "ESP + AH",
        }
    }
}

/// The fastest and the slowest suite of `class` at payload `pi` (crypto time per bit, both
/// directions); one entry when they are the same suite, none when the class is empty.
fn extremes<'s, 'a>(
    suites: &'s [(Suite, SuiteRates<'a>)],
    class: Class,
    pi: usize,
) -> Vec<&'s (Suite, SuiteRates<'a>)> {
    let cost = |s: &SuiteRates| s.inverse(pi).iter().sum::<f64>();
    let mut of_class: Vec<&(Suite, SuiteRates)> = suites.iter().filter(|(s, _)| Class::of(s) == class).collect();
    of_class.sort_by(|a, b| cost(&a.1).total_cmp(&cost(&b.1)));
    match of_class.as_slice() {
        [] => Vec::new(),
        [one] => vec![*one],
        [first, .., last] => vec![*first, *last],
    }
}

fn plot_err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> String + '_ {
    move |e| format!("{}: {e:?}", path.display())
}

/// `1e9` -> `1G`, `1.54e6` -> `1.54M`.
fn si(v: f64) -> String {
    let (x, unit) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    // Two decimals, more below 0.01 so that small values keep a significant digit.
    let decimals = if x > 0.0 && x < 0.01 {
        (-x.log10().floor()) as usize
    } else {
        2
    };
    let s = format!("{x:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{unit}")
}

/// Log-axis bounds around `values` (positive, finite ones), padded by a factor of 1.5.
fn log_bounds(values: impl Iterator<Item = f64>, floor: f64, ceil: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi == 0.0 {
        return (floor.max(1e-3), ceil.min(1e3));
    }
    ((lo / 1.5).max(floor), (hi * 1.5).min(ceil).max(lo * 2.0))
}

/// Compressors take the first three colours, curves the rest.
fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// One curve or set of points.
struct Series {
    name: String,
    color: RGBColor,
    /// Thick for the fastest suite, thin for the slowest.
    width: u32,
    points: Vec<(f64, f64)>,
    /// Points (circles) rather than a line.
    scatter: bool,
}

struct Panel {
    title: String,
    x_desc: String,
    y_desc: String,
    x_range: (f64, f64),
    series: Vec<Series>,
    /// A horizontal reference line (y, label).
    hline: Option<(f64, String)>,
}

fn draw_panel(area: &DrawingArea<SVGBackend, Shift>, p: &Panel, path: &Path) -> Result<(), String> {
    let err = plot_err(path);
    let ys = p
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|pt| pt.1))
        .chain(p.hline.as_ref().map(|h| h.0));
    let (y0, y1) = log_bounds(ys, 1e-4, 1e7);
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((p.x_range.0..p.x_range.1).log_scale(), (y0..y1).log_scale())
        .map_err(&err)?;
    chart
        .configure_mesh()
        .x_desc(p.x_desc.as_str())
        .y_desc(p.y_desc.as_str())
        .x_labels(14)
        .y_labels(14)
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| si(*v))
        .y_label_formatter(&|v| si(*v))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(&err)?;
    if let Some((y, label)) = &p.hline {
        let style = BLACK.stroke_width(1);
        chart
            .draw_series(LineSeries::new(vec![(p.x_range.0, *y), (p.x_range.1, *y)], style))
            .map_err(&err)?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    for s in &p.series {
        let in_range = |&(x, y): &(f64, f64)| x >= p.x_range.0 && x <= p.x_range.1 && y >= y0 && y <= y1;
        if s.scatter {
            let style = s.color.filled();
            chart
                .draw_series(
                    s.points
                        .iter()
                        .filter(|pt| in_range(pt))
                        .map(move |&pt| Circle::new(pt, 4, style)),
                )
                .map_err(&err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, style));
        } else {
            let style = s.color.stroke_width(s.width);
            // Clip to the y range (curves of break-even shoot up near X = 1).
            let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(in_range).collect();
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(&err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(&err)?;
    Ok(())
}

fn write_svg(path: &Path, title: &str, grid: (usize, usize), panels: &[Panel]) -> Result<(), String> {
    let err = plot_err(path);
    let size = (640 * grid.1 as u32, 520 * grid.0 as u32 + 40);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(&err)?;
    for (area, panel) in root.split_evenly(grid).iter().zip(panels) {
        draw_panel(area, panel, path)?;
    }
    root.present().map_err(&err)?;
    Ok(())
}

/// Log-spaced points from `lo` to `hi`.
fn log_space(lo: f64, hi: f64, n: usize) -> impl Iterator<Item = f64> {
    let (a, b) = (lo.ln(), hi.ln());
    (0..n).map(move |i| (a + (b - a) * i as f64 / (n - 1) as f64).exp())
}

/// The data set `want` of every compressor (default: paper2 if all have it, else the first data
/// set of the first compressor).
fn pick_dataset<'a>(
    rates: &'a Rates,
    want: Option<&str>,
) -> Result<Vec<(&'a CompressorRates, &'a DataSetRates)>, String> {
    let name = match want {
        Some(w) => w.to_string(),
        None if rates
            .compressors
            .iter()
            .all(|c| c.datasets.iter().any(|d| d.name == "paper2")) =>
        {
            "paper2".to_string()
        }
        None => rates
            .compressors
            .first()
            .and_then(|c| c.datasets.first())
            .map(|d| d.name.clone())
            .ok_or("no data sets")?,
    };
    rates
        .compressors
        .iter()
        .map(|c| match c.datasets.iter().find(|d| d.name == name) {
            Some(d) => Ok((c, d)),
            None => Err(format!("compressor {} has no data set `{name}`", c.name)),
        })
        .collect()
}

/// Speedup against link rate, per suite class.
fn speedup_svg(
    rates: &Rates,
    env: &Env,
    suites: &[(Suite, SuiteRates)],
    pi: usize,
    dataset: Option<&str>,
    path: &Path,
) -> Result<(), String> {
    let payload = &rates.payloads[pi];
    let pairs = pick_dataset(rates, dataset)?;
    let ds_name = pairs.first().map_or("", |(_, d)| d.name.as_str());
    let x_range = (1e4, 1e11);
    let links: Vec<f64> = log_space(x_range.0, x_range.1, 141).collect();
    let mut panels = Vec::new();
    for class in Class::ALL {
        let ext = extremes(suites, class, pi);
        let mut series = Vec::new();
        for (ci, (comp, ds)) in pairs.iter().enumerate() {
            let subject = Subject::Compression {
                model: CompModel::Complete,
                comp,
                ds,
            };
            for (k, (suite, sr)) in ext.iter().enumerate() {
                let mut points = Vec::new();
                for &l in &links {
                    let bps = Some(l * env.efficiency);
                    let s = speedup(&subject, suite, *sr, pi, payload.bytes, bps, &env.overheads)
                        .map_err(|e| e.to_string())?;
                    points.extend(s.map(|s| (l, s)));
                }
                let which = match (ext.len(), k) {
                    (1, _) => "",
                    (_, 0) => " (fastest)",
                    _ => " (slowest)",
                };
                series.push(Series {
                    name: format!("{}, {}{which}", comp.name, suite.name()),
                    color: color(ci),
                    width: if k == 0 { 2 } else { 1 },
                    points,
                    scatter: false,
                });
            }
        }
        panels.push(Panel {
            title: class.title().to_string(),
            x_desc: format!("nominal link rate, bit/s ({}% sustained)", env.efficiency * 100.0),
            y_desc: "Complete-model speedup".into(),
            x_range,
            series,
            hline: Some((1.0, "S = 1 (break-even)".into())),
        });
    }
    let title = format!(
        "IPComp speedup (Complete model), data set {ds_name}, {} payload",
        payload.label
    );
    write_svg(path, &title, (2, 2), &panels)
}

/// The header-free compression ratio of `ds` at payload `pi`, when it compressed at all.
fn header_free_ratio(ds: &DataSetRates, pi: usize, payload: usize) -> Option<f64> {
    let n = super::compressed_payload(payload, ds.ratio[pi], ds.decomp_mbps[pi])?;
    (n > 0).then(|| payload as f64 / n as f64)
}

/// A measured data set: header-free ratio X, compression and decompression rates (Mbps).
type Measured = (f64, f64, f64);

/// Break-even curves of R_COMP (or the combined codec rate) against X.
fn break_even_svg(
    rates: &Rates,
    env: &Env,
    suites: &[(Suite, SuiteRates)],
    pi: usize,
    path: &Path,
) -> Result<(), String> {
    let payload = &rates.payloads[pi];
    // Measured points: (X, R_COMP, R_DECOMP) per compressor.
    let measured: Vec<(&str, Vec<Measured>)> = rates
        .compressors
        .iter()
        .map(|c| {
            let pts = c
                .datasets
                .iter()
                .filter_map(|d| {
                    header_free_ratio(d, pi, payload.bytes).map(|x| (x, d.comp_mbps[pi], d.decomp_mbps[pi]))
                })
                .collect();
            (c.name.as_str(), pts)
        })
        .collect();
    let x_max = measured
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(10.0f64, f64::max)
        .min(1e3)
        * 1.3;
    let x_range = (1.0, x_max);
    let xs: Vec<f64> = log_space(1.02, x_max, 200).collect();
    let curve = |gain: f64| -> Vec<(f64, f64)> { xs.iter().map(|&x| (x, required_mbps(gain, x))).collect() };
    let scatter = |f: &dyn Fn(&Measured) -> Option<f64>| -> Vec<Series> {
        measured
            .iter()
            .enumerate()
            .map(|(i, (name, pts))| Series {
                name: format!("{name} measured (one point per data set)"),
                color: color(i),
                width: 1,
                points: pts.iter().filter_map(|p| f(p).map(|y| (p.0, y))).collect(),
                scatter: true,
            })
            .collect()
    };
    let mut panels = Vec::new();
    for (model, title, y_desc) in [
        (CompModel::LocalSend, "Local Send", "R_COMP needed, Mbps"),
        (CompModel::LocalReceive, "Local Receive", "R_DECOMP needed, Mbps"),
    ] {
        let mut series = Vec::new();
        let mut k = 0;
        for class in [Class::IntegrityOnly, Class::CipherOnly, Class::Both] {
            for (j, (suite, sr)) in extremes(suites, class, pi).into_iter().enumerate() {
                let gain = gain(model, *sr, pi, None);
                series.push(Series {
                    name: format!("break-even, {}", suite.name()),
                    color: color(3 + k),
                    width: if j == 0 { 2 } else { 1 },
                    points: curve(gain),
                    scatter: false,
                });
                k += 1;
            }
        }
        series.extend(scatter(&|p| match model {
            CompModel::LocalSend => Some(p.1),
            _ => (p.2 > 0.0).then_some(p.2),
        }));
        panels.push(Panel {
            title: format!("{title}: fastest and slowest suite per class"),
            x_desc: "compression ratio X (header-free)".into(),
            y_desc: y_desc.into(),
            x_range,
            series,
            hline: None,
        });
    }
    let mut both = extremes(suites, Class::Both, pi);
    if both.is_empty() {
        both = extremes(suites, Class::CipherOnly, pi);
    }
    for (j, (suite, sr)) in both.iter().enumerate() {
        let mut series: Vec<Series> = env
            .links
            .iter()
            .enumerate()
            .map(|(li, link)| Series {
                name: format!("break-even, {}", link.name),
                color: color(3 + li),
                width: 2,
                points: curve(gain(CompModel::Complete, *sr, pi, Some(link.bps * env.efficiency))),
                scatter: false,
            })
            .collect();
        series.extend(scatter(&|p| (p.2 > 0.0).then(|| 1.0 / (1.0 / p.1 + 1.0 / p.2))));
        panels.push(Panel {
            title: format!(
                "Complete, {} ({})",
                suite.name(),
                if j == 0 { "fastest ESP + AH" } else { "slowest ESP + AH" }
            ),
            x_desc: "compression ratio X (header-free)".into(),
            y_desc: "1/(1/R_COMP + 1/R_DECOMP) needed, Mbps".into(),
            x_range,
            series,
            hline: None,
        });
    }
    let title = format!(
        "Break-even: codec rate needed against compression ratio, {} payload (points above a curve pay)",
        payload.label
    );
    let rows = panels.len().div_ceil(2);
    write_svg(path, &title, (rows, 2), &panels)
}

/// Writes `speedup.svg` and `break-even.svg` into `dir` (created if missing); returns their
/// paths.
pub fn write_plots(
    rates: &Rates,
    env: &Env,
    dir: &Path,
    dataset: Option<&str>,
    payload: Option<&str>,
) -> Result<Vec<PathBuf>, String> {
    let suites = prepare(rates, env).map_err(|e| e.to_string())?;
    let pi = match payload {
        Some(l) => rates
            .payload_index(l)
            .ok_or_else(|| format!("--plot-payload: no payload `{l}` in the inputs"))?,
        None => rates.payload_index("4k").unwrap_or(0),
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let speed = dir.join("speedup.svg");
    speedup_svg(rates, env, &suites, pi, dataset, &speed)?;
    let be = dir.join("break-even.svg");
    break_even_svg(rates, env, &suites, pi, &be)?;
    Ok(vec![speed, be])
}

/// The codec rate (Mbps) at which compression ratio `x` exactly breaks even against `gain`
/// (s/bit, see [`gain`]): the inverse of [`break_even`].
fn required_mbps(gain: f64, x: f64) -> f64 {
    1.0 / ((1.0 - 1.0 / x) * gain) / BITS_PER_MBIT
}

#[cfg(test)]
mod tests {
    use super::super::break_even;
    use super::*;

    #[test]
    fn curve_inverts_break_even() {
        for (gain, x) in [(1e-8, 2.0), (3.5e-9, 1.3), (2e-7, 40.0)] {
            let r = required_mbps(gain, x) * BITS_PER_MBIT;
            let back = break_even(gain, 1.0 / r);
            assert!((back - x).abs() < 1e-9 * x, "{gain} {x}: {back}");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(si(1e9), "1G");
        assert_eq!(si(1.54e6), "1.54M");
        assert_eq!(si(56e3), "56k");
        assert_eq!(si(0.5), "0.5");
        assert_eq!(si(0.001), "0.001");
        assert_eq!(si(0.0002), "0.0002");
    }
}
