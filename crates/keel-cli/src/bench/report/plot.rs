//! SVG latency plots (plotters' SVG backend: no system fonts needed).

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::prelude::*;

use super::LatencyRecorder;

/// One line of a latency plot.
pub struct Series<'a> {
    pub label: String,
    pub latency: &'a LatencyRecorder,
}

/// Plot the percentile distribution of each series into an SVG file.
///
/// The x axis is the percentile on a "nines" scale (0, 90, 99, 99.9 … %
/// equally spaced), as HdrHistogram plots do, so the tail that decides a
/// journal's worst commits is as wide as the median; the y axis is latency
/// in µs on a log scale, so a 20 µs method and a 20 ms method fit together.
pub fn percentile_svg(path: &Path, title: &str, series: &[Series<'_>]) -> anyhow::Result<()> {
    let drawn: Vec<(&Series<'_>, Vec<(f64, f64)>)> = series
        .iter()
        .filter(|s| !s.latency.is_empty())
        .map(|s| (s, nines_points(s.latency)))
        .collect();
    anyhow::ensure!(!drawn.is_empty(), "no latencies to plot");
    let max_x = drawn
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(x, _)| x))
        .fold(1.0f64, f64::max)
        .ceil();
    let (lo_us, hi_us) = drawn
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let y_range = (lo_us.max(0.01) * 0.8)..(hi_us.max(0.02) * 1.25);

    let root = SVGBackend::new(path, (1000, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .margin_right(48)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_x, y_range.log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("percentile of commits")
        .y_desc("latency (µs, log scale)")
        .x_labels(max_x as usize + 1)
        .x_label_formatter(&|x| nines_label(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(plot_err)?;
    for (i, (s, points)) in drawn.iter().enumerate() {
        let color = series_color(i);
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present()
        .map_err(plot_err)
        .with_context(|| format!("writing {}", path.display()))
}

/// One line of an x-y plot: `(x, y)` points in x order.
pub struct XySeries {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Plot figures against a parameter (MB/s against write size), both axes on
/// a log scale so that 4 KiB … 16 MiB and 10 … 10,000 MB/s fit together;
/// `x_label` formats the x ticks (sizes as `4 KiB`).
pub fn xy_svg(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[XySeries],
    x_label: &dyn Fn(f64) -> String,
) -> anyhow::Result<()> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    anyhow::ensure!(points().next().is_some(), "no figures to plot");
    let (x_lo, x_hi) = points().fold((f64::MAX, 0.0f64), |(lo, hi), (x, _)| {
        (lo.min(x), hi.max(x))
    });
    let (y_lo, y_hi) = points().fold((f64::MAX, 0.0f64), |(lo, hi), (_, y)| {
        (lo.min(y), hi.max(y))
    });
    let x_range = (x_lo.max(1e-9) / 1.3)..(x_hi.max(x_lo * 2.0) * 1.3);
    let y_range = (y_lo.max(1e-3) / 1.5)..(y_hi.max(y_lo * 2.0).max(2e-3) * 1.5);
    let root = SVGBackend::new(path, (1000, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .margin_right(48)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range.log_scale(), y_range.log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| x_label(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(plot_err)?;
    for (i, s) in series.iter().enumerate() {
        let color = series_color(i);
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present()
        .map_err(plot_err)
        .with_context(|| format!("writing {}", path.display()))
}

/// Ten colours that stay apart from each other (matplotlib's `tab10`);
/// plotters' own palette puts similar yellows at positions 2 and 8.
const DISTINCT_COLORS: [(u8, u8, u8); 10] = [
    (0x1f, 0x77, 0xb4),
    (0xff, 0x7f, 0x0e),
    (0x2c, 0xa0, 0x2c),
    (0xd6, 0x27, 0x28),
    (0x94, 0x67, 0xbd),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x7f, 0x7f, 0x7f),
    (0xbc, 0xbd, 0x22),
    (0x17, 0xbe, 0xcf),
];

fn series_color(i: usize) -> RGBAColor {
    match DISTINCT_COLORS.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b).to_rgba(),
        None => Palette99::pick(i).to_rgba(),
    }
}

/// `(log10(1 / (1 - q)), latency_us)`: 90 % → 1, 99 % → 2, 99.9 % → 3. The
/// 100 % point (the maximum) is placed one step past the last finite one.
fn nines_points(latency: &LatencyRecorder) -> Vec<(f64, f64)> {
    let cap = (latency.len().max(10) as f64).log10();
    latency
        .percentile_points()
        .into_iter()
        .map(|(q, us)| {
            let x = if q >= 1.0 {
                cap
            } else {
                (1.0 / (1.0 - q)).log10()
            };
            (x.min(cap), us)
        })
        .collect()
}

/// Axis label for a nines-scale position: 0 → `0%`, 2 → `99%`, 3 →
/// `99.9%`.
fn nines_label(x: f64) -> String {
    let percent = 100.0 * (1.0 - 10f64.powf(-x));
    let decimals = if x <= 2.0 {
        0
    } else {
        (x - 2.0).ceil() as usize
    };
    format!("{percent:.decimals$}%")
}

fn plot_err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("cannot draw the plot: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn labels() {
        assert_eq!(nines_label(0.0), "0%");
        assert_eq!(nines_label(1.0), "90%");
        assert_eq!(nines_label(2.0), "99%");
        assert_eq!(nines_label(3.0), "99.9%");
        assert_eq!(nines_label(4.0), "99.99%");
    }

    #[test]
    fn writes_an_svg() {
        let mut fast = LatencyRecorder::new();
        let mut slow = LatencyRecorder::new();
        for i in 1..=500u64 {
            fast.record(Duration::from_micros(20 + i % 7));
            slow.record(Duration::from_micros(300 + i));
        }
        let path = std::env::temp_dir().join(format!("keel-plot-{}.svg", std::process::id()));
        let series = [
            Series {
                label: "fast".into(),
                latency: &fast,
            },
            Series {
                label: "slow".into(),
                latency: &slow,
            },
        ];
        percentile_svg(&path, "test", &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.contains("fast") && svg.contains("99%"));
        std::fs::remove_file(&path).unwrap();
        let empty = LatencyRecorder::new();
        let none = [Series {
            label: "x".into(),
            latency: &empty,
        }];
        assert!(percentile_svg(&path, "t", &none).is_err());
        let xy = [XySeries {
            label: "durable".into(),
            points: vec![(4096.0, 30.0), (16384.0, 110.0), (1048576.0, 1900.0)],
        }];
        xy_svg(&path, "t", ("size", "MB/s"), &xy, &|x| format!("{x}")).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("durable"));
        std::fs::remove_file(&path).unwrap();
    }
}
