//! An SVG chart of a bench run: median p99 convergence latency and median bytes received
//! per scenario, one bar per engine (plotters, SVG backend only; text is laid out without
//! system fonts).

use super::report::Report;
use crate::engine::EngineKind;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// An engine's label and, per scenario, (p99 ms, bytes).
type Series = (String, Vec<Option<(f64, f64)>>);

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Writes the chart to `path`.
pub fn write_svg(report: &Report, path: &Path) -> Result<PathBuf, String> {
    // Medians over the repetitions; `idle` has neither latency nor bytes.
    let rows: Vec<_> = super::summary::median_rows(&report.engines)
        .into_iter()
        .filter(|r| r.scenario != "idle")
        .collect();
    let mut names: Vec<String> = Vec::new();
    for r in &rows {
        if !names.contains(&r.scenario) {
            names.push(r.scenario.clone());
        }
    }
    if names.is_empty() {
        return Err("no scenario ran".into());
    }
    let mut engines: Vec<(EngineKind, &str)> = Vec::new();
    for r in &rows {
        if !engines.iter().any(|(e, _)| *e == r.engine) {
            engines.push((r.engine, r.protocol));
        }
    }
    // Per engine: (label, per scenario (median p99 ms, median bytes)).
    let series: Vec<Series> = engines
        .iter()
        .map(|(kind, protocol)| {
            let label = format!("{} ({protocol})", kind.name());
            let values = names
                .iter()
                .map(|n| {
                    let r = rows
                        .iter()
                        .find(|r| r.engine == *kind && &r.scenario == n)?;
                    Some((r.p99.unwrap_or(0.0), r.bytes.unwrap_or(0.0)))
                })
                .collect();
            (label, values)
        })
        .collect();
    let n = names.len() as f64;
    let engines = series.len().max(1) as f64;
    let width = 0.8 / engines;
    let max_lat = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().map(|x| x.0))
        .fold(1.0f64, f64::max);
    let max_bytes = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().map(|x| x.1))
        .fold(10.0f64, f64::max);

    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(600);
    let label_of = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
            names[i as usize].clone()
        } else {
            String::new()
        }
    };

    {
        let mut chart = ChartBuilder::on(&left)
            .caption("p99 convergence latency (ms)", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(n - 0.5), 0f64..(max_lat * 1.15))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(names.len() * 2 + 1)
            .x_label_formatter(&label_of)
            .draw()
            .map_err(|e| e.to_string())?;
        for (ei, (label, values)) in series.iter().enumerate() {
            let color = COLORS[ei % COLORS.len()];
            let x0 = -0.4 + ei as f64 * width;
            chart
                .draw_series(values.iter().enumerate().filter_map(|(i, v)| {
                    let (lat, _) = (*v)?;
                    let x = i as f64 + x0;
                    Some(Rectangle::new([(x, 0.0), (x + width, lat)], color.filled()))
                }))
                .map_err(|e| e.to_string())?
                .label(label.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    {
        let mut chart = ChartBuilder::on(&right)
            .caption("bytes received by all proxies (log)", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n - 0.5), (1f64..(max_bytes * 2.0)).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(names.len() * 2 + 1)
            .x_label_formatter(&label_of)
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (ei, (_, values)) in series.iter().enumerate() {
            let color = COLORS[ei % COLORS.len()];
            let x0 = -0.4 + ei as f64 * width;
            chart
                .draw_series(values.iter().enumerate().filter_map(|(i, v)| {
                    let (_, bytes) = (*v)?;
                    let x = i as f64 + x0;
                    Some(Rectangle::new(
                        [(x, 1.0), (x + width, bytes.max(1.0))],
                        color.filled(),
                    ))
                }))
                .map_err(|e| e.to_string())?;
        }
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(path.to_path_buf())
}
