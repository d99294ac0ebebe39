//! Where requests landed, drawn as one split bar per service
//! (`reviews      v1 ████████████ 50%  v2 ██████ 25%  v3 ██████ 25%`), and the screen the
//! demo writes to: on a terminal the bars are redrawn in place as traffic flows; otherwise
//! (a pipe, a file, a test) each phase ends with plain lines, printed once.

use super::http::Landed;
use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};

/// The width of a full bar, in characters.
const BAR: usize = 24;

/// The last requests of each service and where they landed.
pub struct Tally {
    /// In display order.
    services: Vec<Service>,
    window: usize,
}

struct Service {
    name: String,
    /// What the bar says of its requests (`through the gateway`).
    note: String,
    /// The outcomes of its last `window` requests.
    last: VecDeque<Landed>,
    /// Requests recorded since [`Tally::mark`].
    since_mark: usize,
}

impl Tally {
    /// Services in display order, each with a note (`through the gateway`); keeps the last
    /// `window` outcomes of each.
    pub fn new(services: &[(&str, &str)], window: usize) -> Tally {
        Tally {
            services: services
                .iter()
                .map(|(name, note)| Service {
                    name: name.to_string(),
                    note: note.to_string(),
                    last: VecDeque::new(),
                    since_mark: 0,
                })
                .collect(),
            window: window.max(1),
        }
    }

    pub fn record(&mut self, service: &str, landed: Landed) {
        if let Some(s) = self.services.iter_mut().find(|s| s.name == service) {
            if s.last.len() == self.window {
                s.last.pop_front();
            }
            s.last.push_back(landed);
            s.since_mark += 1;
        }
    }

    /// Starts a new phase: the bars keep showing the last requests (so a shift is seen as it
    /// happens), and [`Tally::full`] waits for a window of new ones.
    pub fn mark(&mut self) {
        for s in &mut self.services {
            s.since_mark = 0;
        }
    }

    /// Whether every service's window holds only requests recorded since the mark.
    pub fn full(&self) -> bool {
        self.services.iter().all(|s| s.since_mark >= self.window)
    }

    /// Where the service's requests landed: a label (`v1` for pod `reviews-v1`, else the
    /// pod's name, `HTTP 503`, `failed`) and its count, sorted by label.
    pub fn split(&self, service: &str) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        let Some(s) = self.services.iter().find(|s| s.name == service) else {
            return out;
        };
        for landed in &s.last {
            *out.entry(label(service, landed)).or_insert(0) += 1;
        }
        out
    }

    /// The first request that failed outright, if any (why, for the user).
    pub fn first_failure(&self) -> Option<String> {
        self.services.iter().find_map(|s| {
            s.last.iter().find_map(|l| match l {
                Landed::Failed(why) => Some(format!("{}: {why}", s.name)),
                _ => None,
            })
        })
    }

    /// One bar per service.
    pub fn lines(&self, color: bool) -> Vec<String> {
        let width = self
            .services
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0)
            + 2;
        self.services
            .iter()
            .map(
                |Service {
                     name, note, last, ..
                 }| {
                    let split = self.split(name);
                    let total = last.len();
                    let segments: Vec<String> = split
                        .iter()
                        .enumerate()
                        .map(|(i, (label, n))| {
                            segment(label, *n, total, paint_code(label, i), color)
                        })
                        .collect();
                    let segments = if segments.is_empty() {
                        "-".to_string()
                    } else {
                        segments.join("  ")
                    };
                    format!("{name:<width$}{segments}   ({total} requests {note})")
                },
            )
            .collect()
    }
}

/// `v1 ████████████ 50%`: the bar's length is the share of `BAR`, at least one block for a
/// share that is not zero.
fn segment(label: &str, n: usize, total: usize, code: &str, color: bool) -> String {
    let share = n as f64 / total.max(1) as f64;
    let blocks = ((share * BAR as f64).round() as usize).max(usize::from(n > 0));
    let bar = "█".repeat(blocks);
    let bar = if color {
        format!("\x1b[{code}m{bar}\x1b[0m")
    } else {
        bar
    };
    format!("{label} {bar} {:.0}%", share * 100.0)
}

/// A colour per version; red for what is not a workload's answer.
fn paint_code(label: &str, i: usize) -> &'static str {
    if label.starts_with("HTTP") || label == "failed" {
        return "31";
    }
    ["32", "36", "35", "33", "34"][i % 5]
}

fn label(service: &str, landed: &Landed) -> String {
    match landed {
        Landed::Pod(pod) => pod
            .strip_prefix(service)
            .and_then(|rest| rest.strip_prefix('-'))
            .unwrap_or(pod)
            .to_string(),
        Landed::Status(code) => format!("HTTP {code}"),
        Landed::Failed(_) => "failed".into(),
    }
}

/// The demo's stdout.
pub struct Screen {
    /// Redraw in place (stdout is a terminal).
    live: bool,
    pub color: bool,
    /// Lines of the live block last drawn (to move back over).
    drawn: usize,
}

impl Screen {
    pub fn new() -> Screen {
        let live = std::io::stdout().is_terminal();
        Screen {
            live,
            color: crate::debug::client::use_color(),
            drawn: 0,
        }
    }

    /// Whether bars are redrawn in place (stdout is a terminal).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Prints text that stays (ends any live block).
    pub fn say(&mut self, text: &str) -> Result<(), String> {
        self.drawn = 0;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", text.trim_end_matches('\n'))
            .and_then(|()| out.flush())
            .map_err(stdout_error)
    }

    /// Draws `lines` in place of the previous live block (on a terminal; nothing otherwise).
    pub fn live(&mut self, lines: &[String]) -> Result<(), String> {
        if !self.live {
            return Ok(());
        }
        let mut text = String::new();
        if self.drawn > 0 {
            text.push_str(&format!("\x1b[{}A", self.drawn));
        }
        for l in lines {
            // Clear the line first: the new one may be shorter.
            text.push_str(&format!("\x1b[2K{l}\n"));
        }
        self.drawn = lines.len();
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(stdout_error)
    }

    /// The last state of a live block, kept: redrawn once more on a terminal, printed as
    /// plain lines otherwise.
    pub fn settle(&mut self, lines: &[String]) -> Result<(), String> {
        if self.live {
            self.live(lines)?;
            self.drawn = 0;
            Ok(())
        } else {
            self.say(&lines.join("\n"))
        }
    }
}

impl Default for Screen {
    fn default() -> Self {
        Screen::new()
    }
}

fn stdout_error(e: std::io::Error) -> String {
    format!("writing to stdout: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_show_each_versions_share() {
        let mut t = Tally::new(&[("reviews", "via the sidecar"), ("ratings", "")], 4);
        for pod in [
            "reviews-v1",
            "reviews-v1",
            "reviews-v2",
            "reviews-v3",
            "reviews-v3",
        ] {
            t.record("reviews", Landed::Pod(pod.into()));
        }
        t.record("ratings", Landed::Status(503));
        // The window keeps the last four.
        let split = t.split("reviews");
        assert_eq!(
            split.into_iter().collect::<Vec<_>>(),
            [("v1".into(), 1), ("v2".into(), 1), ("v3".into(), 2)]
        );
        let lines = t.lines(false);
        assert_eq!(
            lines[0],
            "reviews  v1 ██████ 25%  v2 ██████ 25%  v3 ████████████ 50%   (4 requests via the sidecar)"
        );
        assert!(
            lines[1].starts_with("ratings  HTTP 503 ████"),
            "{}",
            lines[1]
        );
        assert!(Tally::new(&[("a", "")], 1).lines(false)[0].contains("-   (0 requests"));
        // Full once every window holds only requests recorded since the mark.
        assert!(!t.full());
        t.mark();
        for _ in 0..4 {
            t.record("reviews", Landed::Pod("reviews-v3".into()));
        }
        assert!(!t.full(), "ratings has no new requests");
        for _ in 0..4 {
            t.record("ratings", Landed::Pod("ratings-v1".into()));
        }
        assert!(t.full());
        assert_eq!(t.split("reviews").len(), 1);
    }
}
