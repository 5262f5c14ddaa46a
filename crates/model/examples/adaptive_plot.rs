//! Draws `scripts/demos/adaptive-demo.sh`'s CSV (link,mode,data,...,goodput_mbps,...) as an SVG:
//! one panel per data set, goodput (log axis) against the link, one line per IPComp mode.
//!
//! `cargo run -p ipsec-model --example adaptive_plot -- adaptive.csv adaptive.svg`
use plotters::prelude::*;
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (csv, svg) = match args.as_slice() {
        [_, c, s] => (c, s),
        _ => return Err("usage: adaptive_plot CSV SVG".into()),
    };
    let text = std::fs::read_to_string(csv)?;
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().ok_or("empty CSV")?.split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).ok_or(format!("no column {name}"));
    let (cl, cm, cd, cg) = (col("link")?, col("mode")?, col("data")?, col("goodput_mbps")?);
    let mut rows = Vec::new();
    for l in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = l.split(',').collect();
        let g: f64 = f.get(cg).ok_or("short row")?.parse()?;
        rows.push((f[cl].to_string(), f[cm].to_string(), f[cd].to_string(), g));
    }
    let mut links: Vec<String> = Vec::new();
    let mut sets: Vec<String> = Vec::new();
    let mut modes: Vec<String> = Vec::new();
    for (l, m, d, _) in &rows {
        for (v, list) in [(l, &mut links), (d, &mut sets), (m, &mut modes)] {
            if !list.contains(v) {
                list.push(v.clone());
            }
        }
    }
    if rows.is_empty() {
        return Err("no rows".into());
    }
    let max = rows.iter().map(|r| r.3).fold(1.0, f64::max) * 1.5;
    let min = rows.iter().map(|r| r.3).fold(max, f64::min).max(0.1) / 1.5;
    let root = SVGBackend::new(svg, (420 * sets.len() as u32, 380)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, sets.len()));
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN];
    for (panel, set) in panels.iter().zip(&sets) {
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{set}: goodput through IPComp+ESP"), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(-0.3f64..(links.len() as f64 - 0.7), (min..max).log_scale())?;
        let names = links.clone();
        chart
            .configure_mesh()
            .x_labels(links.len())
            .x_label_formatter(&move |x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_desc("link (tbf rate)")
            .y_desc("Mbit/s")
            .draw()?;
        for (k, mode) in modes.iter().enumerate() {
            let c = colors[k % colors.len()];
            let pts: Vec<(f64, f64)> = links
                .iter()
                .enumerate()
                .filter_map(|(i, l)| {
                    rows.iter()
                        .find(|r| &r.0 == l && &r.1 == mode && &r.2 == set)
                        .map(|r| (i as f64, r.3.max(min)))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                .label(mode.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
