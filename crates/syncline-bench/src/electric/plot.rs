//! The plot of an `electric` scenario, `electric-<name>.svg` beside its JSON, laid out as on
//! Electric's benchmark page: time in milliseconds (left panel) and server memory (right
//! panel) against the number of clients or shapes.
//!
//! It reads only the scenario's JSON, so every scenario gets one without code of its own: the
//! x axis is the first of [`X_KEYS`] its points have (else their first whole-number field);
//! the time series are each point object holding `median_ms` (its median and p99), or else
//! its whole numbers named `*_ms` or `ms_*`; the memory series are its fields `rss_bytes*` and
//! `peak_rss_bytes*` that are not per-item figures, in MiB. A panel without series is left
//! out. Text is drawn by the SVG viewer, so no font is needed here.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;
use serde_json::Value;

/// Point fields that name what a scenario varies, in order of preference.
const X_KEYS: [&str; 6] = ["clients", "shapes", "requests", "rows", "writes", "changes"];
/// Pixels of the whole image.
const SIZE: (u32, u32) = (1200, 480);
/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// Named series of (x, y) points.
type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Writes the plot of the scenario JSON `result` (its `points`) to `path`; without points,
/// or without a figure to plot, writes nothing.
pub(crate) fn write(path: &Path, result: &Value) -> Result<(), Box<dyn std::error::Error>> {
    let points = result["points"].as_array().map_or(&[][..], Vec::as_slice);
    let Some(x_key) = x_key(points) else {
        return Ok(());
    };
    let (times, memory) = series(points, &x_key);
    let panels: Vec<(&str, &Series)> = [("time (ms)", &times), ("server RSS (MiB)", &memory)]
        .into_iter()
        .filter(|(_, series)| !series.is_empty())
        .collect();
    if panels.is_empty() {
        return Ok(());
    }
    let title = result["scenario"].as_str().unwrap_or("electric");
    draw(path, title, &x_key, &panels)
        .map_err(|e| -> Box<dyn std::error::Error> { format!("{}: {e}", path.display()).into() })
}

/// The field the points vary.
fn x_key(points: &[Value]) -> Option<String> {
    let first = points.first()?.as_object()?;
    X_KEYS
        .iter()
        .find(|key| first.get(**key).is_some_and(Value::is_u64))
        .map(|key| (*key).to_owned())
        .or_else(|| {
            first
                .iter()
                .find(|(_, value)| value.is_u64())
                .map(|(key, _)| key.clone())
        })
}

/// The time and the memory series of `points`, against their `x_key`.
fn series(points: &[Value], x_key: &str) -> (Series, Series) {
    let (mut latencies, mut times, mut memory) = (Series::new(), Series::new(), Series::new());
    for point in points {
        let (Some(fields), Some(x)) = (point.as_object(), point[x_key].as_f64()) else {
            continue;
        };
        for (key, value) in fields {
            if value.get("median_ms").is_some() {
                for stat in ["median", "p99"] {
                    if let Some(y) = value[format!("{stat}_ms")].as_f64() {
                        latencies
                            .entry(format!("{key} {stat}"))
                            .or_default()
                            .push((x, y));
                    }
                }
            } else if let Some(y) = value.as_f64().filter(|_| key != x_key) {
                if key.ends_with("_ms") || key.starts_with("ms_") {
                    times.entry(key.clone()).or_default().push((x, y));
                } else if (key.starts_with("rss_bytes") || key.starts_with("peak_rss_bytes"))
                    && !key.contains("_per_")
                {
                    memory.entry(key.clone()).or_default().push((x, y / MIB));
                }
            }
        }
    }
    (
        if latencies.is_empty() {
            times
        } else {
            latencies
        },
        memory,
    )
}

/// Draws `panels` side by side, each a y label and its series, under `title`.
fn draw(
    path: &Path,
    title: &str,
    x_key: &str,
    panels: &[(&str, &Series)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let areas = root.split_evenly((1, panels.len()));
    for (area, (y_desc, series)) in areas.iter().zip(panels) {
        let all = series.values().flatten();
        let (x_max, y_max) = all.fold((0.0_f64, 0.0_f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
        let mut chart = ChartBuilder::on(area)
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max * 1.05 + 1.0, 0.0..y_max * 1.1 + f64::EPSILON)?;
        chart
            .configure_mesh()
            .x_desc(x_key)
            .y_desc(*y_desc)
            .draw()?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = Palette99::pick(i).mix(1.0);
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart.draw_series(
                points
                    .iter()
                    .map(|&point| Circle::new(point, 3, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
