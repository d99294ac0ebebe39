//! An SVG chart of a bench run: median p99 convergence latency and median bytes received per
//! scenario, one bar per engine, each engine in its own colour in both panels and the legend.
//!
//! Both value axes are logarithmic, ticked at powers of ten: meshflow's latency and bytes are
//! often a hundredth of the baseline's, which a linear axis draws as nothing. Scenario labels
//! are laid out here, not left to a plotting library: each is centred under its group when
//! its estimated width fits the group, else all are turned 45° (which never overlap once a
//! group is wider than [`MIN_GROUP`]), and the canvas grows with the number of scenarios.
//! Text width is estimated ([`text_width`]: no font files are read), generously, so real
//! glyphs fit in the space reserved for them.
//!
//! The SVG is written by hand: a few rectangles, lines and texts, where plotters (used
//! before) could turn text only by quarter turns and could not measure it without system
//! fonts. Every shape carries its meaning in attributes (`class`, `data-engine`,
//! `data-value`), which the tests read back.

use super::report::Report;
use crate::engine::EngineKind;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One engine's bars: per scenario, (median p99 ms, median bytes) if it ran.
#[derive(Clone, Debug)]
pub struct Series {
    pub engine: EngineKind,
    /// The legend's text, e.g. `meshflow (delta)`.
    pub label: String,
    pub values: Vec<Option<(f64, f64)>>,
}

/// What the chart shows: scenario names along x, one series per engine.
#[derive(Clone, Debug)]
pub struct ChartData {
    pub scenarios: Vec<String>,
    pub series: Vec<Series>,
}

/// The colour of an engine, the same in every chart: readers learn it once.
pub fn engine_color(e: EngineKind) -> &'static str {
    match e {
        EngineKind::Meshflow => "#1f77b4",
        EngineKind::FullPush => "#d62728",
        EngineKind::IstioStyle => "#ff7f0e",
    }
}

/// Font sizes (px) of tick and scenario labels, and of panel titles.
const FONT: f64 = 12.0;
const TITLE_FONT: f64 = 15.0;
/// Estimated advance of one character, in ems: above the average of sans-serif fonts
/// (about 0.5), so an estimate never falls short of the real width.
const CHAR_EM: f64 = 0.62;
/// Narrowest scenario group (px): at 45° neighbouring labels are `group × sin 45°` apart,
/// which must exceed a line of text.
pub const MIN_GROUP: f64 = 2.2 * FONT;
/// Width (px) the groups of one panel share before the canvas grows.
const PLOT_WIDTH: f64 = 480.0;
const PLOT_HEIGHT: f64 = 300.0;
/// Left of a plot: the tick labels; right of it: breathing room.
const AXIS_WIDTH: f64 = 70.0;
const RIGHT_PAD: f64 = 20.0;
const TOP: f64 = 62.0;

/// Estimated width (px) of `text` at `size` px.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * CHAR_EM
}

/// Writes the chart of `report` to `path`.
pub fn write_svg(report: &Report, path: &Path) -> Result<PathBuf, String> {
    let svg = render(&chart_data(report))?;
    std::fs::write(path, svg).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// Medians over the repetitions, per engine and scenario (`idle` has neither latency nor
/// bytes).
fn chart_data(report: &Report) -> ChartData {
    let rows: Vec<_> = super::summary::median_rows(&report.engines)
        .into_iter()
        .filter(|r| r.scenario != "idle")
        .collect();
    let mut scenarios: Vec<String> = Vec::new();
    for r in &rows {
        if !scenarios.contains(&r.scenario) {
            scenarios.push(r.scenario.clone());
        }
    }
    let mut engines: Vec<(EngineKind, &str)> = Vec::new();
    for r in &rows {
        if !engines.iter().any(|(e, _)| *e == r.engine) {
            engines.push((r.engine, r.protocol));
        }
    }
    let series = engines
        .iter()
        .map(|(engine, protocol)| Series {
            engine: *engine,
            label: format!("{} ({protocol})", engine.name()),
            values: scenarios
                .iter()
                .map(|n| {
                    let r = rows
                        .iter()
                        .find(|r| r.engine == *engine && &r.scenario == n)?;
                    Some((r.p99.unwrap_or(0.0), r.bytes.unwrap_or(0.0)))
                })
                .collect(),
        })
        .collect();
    ChartData { scenarios, series }
}

/// `text` safe inside an SVG element or attribute.
fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick label for 10^exp: plain digits where short (`0.01`, `1`, `1000`), else `1e6`
/// (written out, not formatted from a float that may be a hair off).
fn decade_label(exp: i32) -> String {
    match exp {
        0..=4 => format!("1{}", "0".repeat(exp as usize)),
        -3..=-1 => format!("0.{}1", "0".repeat((-exp - 1) as usize)),
        _ => format!("1e{exp}"),
    }
}

/// A log axis over whole decades: `lo` is strictly below the smallest value (so its bar has
/// a height), `hi` at or above the largest.
struct LogAxis {
    lo: i32,
    hi: i32,
    top: f64,
    bottom: f64,
}

impl LogAxis {
    /// The axis for `values` (positive, finite), or `None` if there are none.
    fn new(values: impl Iterator<Item = f64>, top: f64, bottom: f64) -> Option<LogAxis> {
        let (min, max) = values.filter(|v| v.is_finite() && *v > 0.0).fold(
            None,
            |acc: Option<(f64, f64)>, v| match acc {
                None => Some((v, v)),
                Some((a, b)) => Some((a.min(v), b.max(v))),
            },
        )?;
        // Within f64's range, so the casts keep their value.
        let lo = min.log10().ceil() as i32 - 1;
        let hi = (max.log10().ceil() as i32).max(lo + 1);
        Some(LogAxis {
            lo,
            hi,
            top,
            bottom,
        })
    }

    fn y(&self, v: f64) -> f64 {
        let span = f64::from(self.hi - self.lo);
        let at = (v.log10() - f64::from(self.lo)) / span;
        self.bottom - at.clamp(0.0, 1.0) * (self.bottom - self.top)
    }
}

/// One panel: which value of a series it shows, and how.
struct Panel {
    name: &'static str,
    title: &'static str,
    unit: &'static str,
    pick: fn((f64, f64)) -> f64,
}

const PANELS: [Panel; 2] = [
    Panel {
        name: "latency",
        title: "p99 convergence latency (ms, log scale)",
        unit: "ms",
        pick: |(ms, _)| ms,
    },
    Panel {
        name: "bytes",
        title: "bytes received by all proxies (log scale)",
        unit: "bytes",
        pick: |(_, bytes)| bytes,
    },
];

/// The chart as SVG text.
pub fn render(data: &ChartData) -> Result<String, String> {
    let n = data.scenarios.len();
    if n == 0 {
        return Err("no scenario ran".into());
    }
    let group = (PLOT_WIDTH / n as f64).max(MIN_GROUP);
    let plot_width = group * n as f64;
    let panel_width = AXIS_WIDTH + plot_width + RIGHT_PAD;
    let widest = data
        .scenarios
        .iter()
        .map(|s| text_width(s, FONT))
        .fold(0.0, f64::max);
    // Horizontal when every label fits its group with a little air, else turned 45°.
    let turned = widest + 6.0 > group;
    let label_depth = if turned {
        (widest + FONT) * std::f64::consts::FRAC_1_SQRT_2 + 12.0
    } else {
        FONT + 12.0
    };
    // Turned labels reach left of their group: room for the first one on the canvas.
    let lead = if turned {
        (label_depth - (AXIS_WIDTH + group / 2.0) + 4.0).max(0.0)
    } else {
        0.0
    };
    let bottom = TOP + PLOT_HEIGHT;
    let width = lead + 2.0 * panel_width;
    let height = bottom + label_depth + 10.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{width:.0}" height="{height:.0}" fill="white"/>"#
    );
    for (pi, panel) in PANELS.iter().enumerate() {
        let x0 = lead + pi as f64 * panel_width;
        let left = x0 + AXIS_WIDTH;
        let _ = writeln!(
            svg,
            r#"<text class="title" x="{:.1}" y="22" text-anchor="middle" font-size="{TITLE_FONT}">{}</text>"#,
            left + plot_width / 2.0,
            esc(panel.title)
        );
        legend(&mut svg, data, left, pi);
        for (i, name) in data.scenarios.iter().enumerate() {
            let cx = left + (i as f64 + 0.5) * group;
            if turned {
                // Anchored at its end just below the axis, rising to the left.
                let (x, y) = (cx, bottom + 8.0);
                let _ = writeln!(
                    svg,
                    r#"<text class="x-label" x="{x:.1}" y="{y:.1}" dy="0.7em" text-anchor="end" transform="rotate(-45 {x:.1} {y:.1})" font-size="{FONT}">{}</text>"#,
                    esc(name)
                );
            } else {
                let _ = writeln!(
                    svg,
                    r#"<text class="x-label" x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="{FONT}">{}</text>"#,
                    bottom + 6.0 + FONT,
                    esc(name)
                );
            }
        }
        let values = data
            .series
            .iter()
            .flat_map(|s| s.values.iter().flatten().map(|v| (panel.pick)(*v)));
        let Some(axis) = LogAxis::new(values, TOP, bottom) else {
            let _ = writeln!(
                svg,
                r#"<text class="no-data" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="{FONT}">no data</text>"#,
                left + plot_width / 2.0,
                TOP + PLOT_HEIGHT / 2.0
            );
            continue;
        };
        for exp in axis.lo..=axis.hi {
            let y = axis.y(10f64.powi(exp));
            let _ = writeln!(
                svg,
                r##"<line class="grid" x1="{left:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                left + plot_width
            );
            let _ = writeln!(
                svg,
                r#"<text class="y-tick" data-panel="{}" x="{:.1}" y="{:.1}" text-anchor="end" font-size="{FONT}">{}</text>"#,
                panel.name,
                left - 6.0,
                y + FONT * 0.35,
                decade_label(exp)
            );
        }
        let _ = writeln!(
            svg,
            r#"<line class="axis" x1="{left:.1}" x2="{left:.1}" y1="{TOP:.1}" y2="{bottom:.1}" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<line class="axis" x1="{left:.1}" x2="{:.1}" y1="{bottom:.1}" y2="{bottom:.1}" stroke="black"/>"#,
            left + plot_width
        );
        let bar = 0.8 * group / data.series.len().max(1) as f64;
        for (si, s) in data.series.iter().enumerate() {
            for (i, v) in s.values.iter().enumerate() {
                let Some(value) = v.map(panel.pick).filter(|v| v.is_finite() && *v > 0.0) else {
                    continue;
                };
                let x = left + i as f64 * group + 0.1 * group + si as f64 * bar;
                let y = axis.y(value);
                let _ = writeln!(
                    svg,
                    r#"<rect class="bar" data-panel="{}" data-engine="{}" data-scenario="{}" data-value="{value}" x="{x:.2}" y="{y:.2}" width="{bar:.2}" height="{:.2}" fill="{}"><title>{}: {} {value:.4} {}</title></rect>"#,
                    panel.name,
                    s.engine.name(),
                    esc(&data.scenarios[i]),
                    bottom - y,
                    engine_color(s.engine),
                    esc(&s.label),
                    esc(&data.scenarios[i]),
                    panel.unit
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// The legend of panel `pi`: a swatch in each engine's colour and its label, in a row under
/// the title.
fn legend(svg: &mut String, data: &ChartData, left: f64, pi: usize) {
    let mut x = left;
    for s in &data.series {
        let _ = writeln!(
            svg,
            r#"<rect class="legend-swatch" data-panel="{}" data-engine="{}" x="{x:.1}" y="34" width="12" height="12" fill="{}"/>"#,
            PANELS[pi].name,
            s.engine.name(),
            engine_color(s.engine)
        );
        let _ = writeln!(
            svg,
            r#"<text class="legend" x="{:.1}" y="45" font-size="{FONT}">{}</text>"#,
            x + 16.0,
            esc(&s.label)
        );
        x += 16.0 + text_width(&s.label, FONT) + 16.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// The elements of `class` in `svg`, each as its attributes (and text, under "").
    fn elements(svg: &str, class: &str) -> Vec<BTreeMap<String, String>> {
        let element = regex::Regex::new(r#"<(\w+) class="([\w-]+)"([^>]*)>([^<]*)"#).unwrap();
        let attribute = regex::Regex::new(r#"([\w-]+)="([^"]*)""#).unwrap();
        element
            .captures_iter(svg)
            .filter(|c| &c[2] == class)
            .map(|c| {
                let mut m: BTreeMap<String, String> = attribute
                    .captures_iter(&c[3])
                    .map(|a| (a[1].to_string(), a[2].to_string()))
                    .collect();
                m.insert(String::new(), c[4].to_string());
                m
            })
            .collect()
    }

    fn num(e: &BTreeMap<String, String>, k: &str) -> f64 {
        e[k].parse()
            .unwrap_or_else(|_| panic!("{k} of {e:?} is a number"))
    }

    fn data(scenarios: &[&str], meshflow_ms: f64, full_push_ms: f64) -> ChartData {
        let values = |ms: f64, bytes: f64| scenarios.iter().map(|_| Some((ms, bytes))).collect();
        ChartData {
            scenarios: scenarios.iter().map(|s| s.to_string()).collect(),
            series: vec![
                Series {
                    engine: EngineKind::Meshflow,
                    label: "meshflow (delta)".into(),
                    values: values(meshflow_ms, 3.0e3),
                },
                Series {
                    engine: EngineKind::FullPush,
                    label: "full-push (sotw)".into(),
                    values: values(full_push_ms, 4.0e7),
                },
            ],
        }
    }

    /// The bench's scenarios (those the chart shows; `connect` and `idle` draw no bars, but
    /// their labels are as long).
    fn names() -> Vec<&'static str> {
        super::super::scenarios::names()
    }

    /// Latency ticks are consecutive powers of ten, evenly spaced, and a bar's top is at
    /// its value's logarithm: meshflow's 2 ms stays visible next to the baseline's 2 s.
    #[test]
    fn latency_axis_is_logarithmic() {
        let svg = render(&data(&names(), 2.0, 2000.0)).unwrap();
        let ticks: Vec<_> = elements(&svg, "y-tick")
            .into_iter()
            .filter(|t| t["data-panel"] == "latency")
            .collect();
        let values: Vec<f64> = ticks
            .iter()
            .map(|t| t[""].parse::<f64>().unwrap())
            .collect();
        assert_eq!(values, [1.0, 10.0, 100.0, 1000.0, 10000.0], "{ticks:?}");
        let ys: Vec<f64> = ticks.iter().map(|t| num(t, "y")).collect();
        let step = ys[0] - ys[1];
        assert!(step > 50.0, "decades {step} px apart");
        for w in ys.windows(2) {
            assert!((w[0] - w[1] - step).abs() < 0.2, "{ys:?}");
        }
        let bars = elements(&svg, "bar");
        let height = |engine: &str| {
            let b = bars
                .iter()
                .find(|b| b["data-panel"] == "latency" && b["data-engine"] == engine)
                .expect("a latency bar");
            num(b, "height")
        };
        // 2 ms and 2000 ms: three decades apart; 2 ms is log10(2) of a decade above 1 ms.
        assert!((height("full-push") - height("meshflow") - 3.0 * step).abs() < 0.1);
        assert!((height("meshflow") - 2f64.log10() * step).abs() < 0.1);
        assert!(height("meshflow") > 15.0, "meshflow's bar is visible");
        // The bytes panel is logarithmic too.
        let bytes: Vec<f64> = elements(&svg, "y-tick")
            .iter()
            .filter(|t| t["data-panel"] == "bytes")
            .map(|t| t[""].parse::<f64>().unwrap())
            .collect();
        assert_eq!(bytes.first(), Some(&1000.0));
        assert_eq!(bytes.last(), Some(&1e8));
        for w in bytes.windows(2) {
            assert_eq!(w[1], w[0] * 10.0, "{bytes:?}");
        }
    }

    /// The box a label covers, as its four corners, from its anchor, size, alignment and
    /// rotation.
    fn label_corners(e: &BTreeMap<String, String>) -> [(f64, f64); 4] {
        let (x, y, size) = (num(e, "x"), num(e, "y"), num(e, "font-size"));
        let w = text_width(&e[""], size);
        let left = match e.get("text-anchor").map(String::as_str) {
            Some("end") => x - w,
            Some("middle") => x - w / 2.0,
            _ => x,
        };
        // `dy="0.7em"` moves the baseline down; the box spans an ascent above it and a
        // descent below.
        let baseline = y + e.get("dy").map_or(0.0, |_| 0.7 * size);
        let (top, bot) = (baseline - 0.8 * size, baseline + 0.25 * size);
        let corners = [(left, top), (left + w, top), (left + w, bot), (left, bot)];
        let Some(t) = e.get("transform") else {
            return corners;
        };
        let args: Vec<f64> = t
            .trim_start_matches("rotate(")
            .trim_end_matches(')')
            .split_whitespace()
            .map(|a| a.parse().unwrap())
            .collect();
        let (a, cx, cy) = (args[0].to_radians(), args[1], args[2]);
        corners.map(|(px, py)| {
            let (dx, dy) = (px - cx, py - cy);
            (
                cx + dx * a.cos() - dy * a.sin(),
                cy + dx * a.sin() + dy * a.cos(),
            )
        })
    }

    /// Whether two convex quadrilaterals intersect (separating axis theorem).
    fn overlap(a: &[(f64, f64); 4], b: &[(f64, f64); 4]) -> bool {
        let axes = |p: &[(f64, f64); 4]| {
            (0..4)
                .map(|i| {
                    let (x1, y1) = p[i];
                    let (x2, y2) = p[(i + 1) % 4];
                    (y1 - y2, x2 - x1)
                })
                .collect::<Vec<_>>()
        };
        let project = |p: &[(f64, f64); 4], (ax, ay): (f64, f64)| {
            let d: Vec<f64> = p.iter().map(|(x, y)| x * ax + y * ay).collect();
            (
                d.iter().cloned().fold(f64::MAX, f64::min),
                d.iter().cloned().fold(f64::MIN, f64::max),
            )
        };
        axes(a).into_iter().chain(axes(b)).all(|axis| {
            let (a0, a1) = project(a, axis);
            let (b0, b1) = project(b, axis);
            a1 > b0 && b1 > a0
        })
    }

    fn assert_labels_apart(svg: &str, scenarios: &[&str]) {
        let labels = elements(svg, "x-label");
        assert_eq!(
            labels.len(),
            2 * scenarios.len(),
            "a label per scenario and panel"
        );
        let width: f64 = regex::Regex::new(r#"<svg [^>]*width="([\d.]+)" height="([\d.]+)""#)
            .unwrap()
            .captures(svg)
            .map(|c| c[1].parse::<f64>().unwrap())
            .unwrap();
        let height: f64 = regex::Regex::new(r#"<svg [^>]*height="([\d.]+)""#)
            .unwrap()
            .captures(svg)
            .map(|c| c[1].parse::<f64>().unwrap())
            .unwrap();
        let boxes: Vec<_> = labels.iter().map(label_corners).collect();
        for (i, a) in boxes.iter().enumerate() {
            for (x, y) in a {
                assert!(
                    (0.0..=width).contains(x) && (0.0..=height).contains(y),
                    "{:?} leaves the {width}x{height} canvas: {a:?}",
                    labels[i][""]
                );
            }
            for (j, b) in boxes.iter().enumerate().skip(i + 1) {
                assert!(
                    !overlap(a, b),
                    "{:?} overlaps {:?}: {a:?} {b:?}",
                    labels[i][""],
                    labels[j][""]
                );
            }
        }
        // Below the plot: no label reaches into the bars.
        let axis_bottom = TOP + PLOT_HEIGHT;
        assert!(boxes.iter().flatten().all(|(_, y)| *y > axis_bottom));
    }

    /// Scenario labels never overlap each other, stay on the canvas and below the plot:
    /// the bench's scenarios (turned), three short ones (level), and forty long ones
    /// (the canvas widens).
    #[test]
    fn scenario_labels_do_not_overlap() {
        let svg = render(&data(&names(), 2.0, 2000.0)).unwrap();
        assert_labels_apart(&svg, &names());
        assert!(svg.contains("rotate(-45"), "the bench's names are turned");

        let few = ["a", "bb", "ccc"];
        let svg = render(&data(&few, 2.0, 2000.0)).unwrap();
        assert_labels_apart(&svg, &few);
        assert!(!svg.contains("rotate("), "short names stay level");

        let many: Vec<String> = (0..40)
            .map(|i| format!("a-rather-long-scenario-name-{i}"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let svg = render(&data(&many, 2.0, 2000.0)).unwrap();
        assert_labels_apart(&svg, &many);
    }

    /// Every bar and legend swatch of an engine has its colour, in both panels, and the
    /// engines' colours differ.
    #[test]
    fn one_colour_per_engine() {
        let svg = render(&data(&names(), 2.0, 2000.0)).unwrap();
        let mut fills: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let shapes = elements(&svg, "bar")
            .into_iter()
            .chain(elements(&svg, "legend-swatch"));
        for e in shapes {
            fills
                .entry(e["data-engine"].clone())
                .or_default()
                .insert(e["fill"].clone());
        }
        let meshflow = fills.get("meshflow").expect("meshflow drawn");
        let full_push = fills.get("full-push").expect("full-push drawn");
        assert_eq!(meshflow.len(), 1, "{fills:?}");
        assert_eq!(full_push.len(), 1, "{fills:?}");
        assert_ne!(meshflow, full_push);
        assert_eq!(
            elements(&svg, "bar").len(),
            2 * 2 * names().len(),
            "two engines, two panels"
        );
    }

    /// Missing, zero and non-finite values draw no bar and no panic; nothing positive at
    /// all says so; names are escaped.
    #[test]
    fn odd_values_and_names() {
        let mut d = data(&["<x&y>", "b"], 2.0, 2000.0);
        d.series[0].values = vec![None, Some((0.0, f64::NAN))];
        d.series[1].values = vec![Some((f64::INFINITY, -1.0)), None];
        let svg = render(&d).unwrap();
        assert!(elements(&svg, "bar").is_empty(), "{svg}");
        assert_eq!(elements(&svg, "no-data").len(), 2);
        assert!(svg.contains("&lt;x&amp;y&gt;") && !svg.contains("<x&y>"));
        assert!(render(&ChartData {
            scenarios: vec![],
            series: vec![]
        })
        .is_err());
    }
}
