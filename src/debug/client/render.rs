//! The debug port's answers for people on a terminal: aligned tables, the proxy-status
//! table, a diff's epochs and `+`/`-` lines, one line per watch event, an explanation.
//! `color` adds ANSI colours.

use crate::debug::model::{self, Diff, Explanation, Happened, ProxyList, WatchEvent};
use std::time::Duration;

/// Aligned columns, two spaces apart; `paint` may wrap a padded cell in colour codes (which
/// do not count towards the width).
pub fn table(rows: &[Vec<String>], paint: impl Fn(&str, String) -> String) -> String {
    // Cells come from proxies and configs: a control character in one must not reach the
    // terminal as itself.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| printable(c)).collect())
        .collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| paint(c, format!("{c:<w$}")))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `s` with every control character escaped (`\u{1b}` for ESC).
pub fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// `s` in ANSI colour `code` when `color`.
fn paint(color: bool, code: &str, s: &str) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

/// `3s`, `2m5s`, `1h2m`: an age for people.
pub fn short_age(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m", s / 3600, s / 60 % 60)
    }
}

/// `HH:MM:SS.mmm` (UTC) of a Unix time.
pub fn format_time(unix: f64) -> String {
    let ms = (unix * 1000.0).max(0.0) as u64;
    let day_ms = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

/// One row per connected proxy with its sync state per type (and the resource count), then
/// the NACK messages.
pub fn proxy_status(list: &ProxyList, color: bool) -> String {
    let mut rows = vec![vec![
        "NAME".to_string(),
        "KIND".into(),
        "CDS".into(),
        "EDS".into(),
        "LDS".into(),
        "RDS".into(),
        "SDS".into(),
    ]];
    let mut nacks = Vec::new();
    for p in &list.proxies {
        let mut row = vec![p.id.clone(), p.kind.clone()];
        for t in &p.types {
            match t.stale_seconds {
                Some(age) if t.sync == "STALE" => {
                    let age = Duration::from_secs_f64(age.max(0.0));
                    row.push(format!("STALE ({})", short_age(age)));
                }
                _ => row.push(format!("{} ({})", t.sync, t.resources)),
            }
            if let Some(nack) = &t.last_nack {
                nacks.push(format!("{} {}: {}", p.id, t.rtype, nack));
            }
        }
        rows.push(row);
    }
    let mut out = table(&rows, |cell, padded| {
        let code = match cell.split(" (").next() {
            _ if !color => None,
            Some("SYNCED") => Some("32"),
            Some("STALE") => Some("33"),
            Some("NACKED") => Some("31"),
            _ => None,
        };
        match code {
            Some(c) => paint(true, c, &padded),
            None => padded,
        }
    });
    out.push_str(&format!(
        "{} proxies, epoch {}\n",
        list.proxies.len(),
        list.epoch
    ));
    for n in nacks {
        out.push_str(&format!("NACK {n}\n"));
    }
    out
}

/// A diff: epochs with their inputs and pushes, then per resource its fields and `+`/`-`
/// lines.
pub fn diff(d: &Diff, color: bool) -> String {
    let paint = |code: &str, s: &str| paint(color, code, s);
    let mut out = format!(
        "{} {}\n",
        paint("1", &format!("proxy {}", d.proxy)),
        format_args!("epochs {} → {}", d.from_epoch, d.to_epoch)
    );
    if d.truncated {
        out.push_str(&paint(
            "33",
            &format!(
                "history starts at epoch {}: older changes were evicted\n",
                d.oldest_kept_epoch
            ),
        ));
        out.push('\n');
    }
    for e in &d.epochs {
        out.push_str(&format!(
            "epoch {} at {}\n",
            e.epoch,
            format_time(e.applied)
        ));
        for i in &e.inputs {
            out.push_str(&format!(
                "  input  {} {}/{} {}  ({})\n",
                i.kind, i.namespace, i.name, i.op, i.source
            ));
        }
        for x in &e.deliveries {
            out.push_str(&format!("  push   {}\n", delivery(x, color)));
        }
    }
    if d.resources.is_empty() {
        out.push_str("no resource changed\n");
    }
    for r in &d.resources {
        out.push('\n');
        out.push_str(&resource_diff(r, color));
    }
    out
}

/// One resource of a diff: its head line, its NACKs, its fields and its lines.
fn resource_diff(r: &model::ResourceDiff, color: bool) -> String {
    let paint = |code: &str, s: &str| paint(color, code, s);
    let version = |v: &Option<String>| v.clone().unwrap_or_default();
    let (old, new) = (version(&r.old_version), version(&r.new_version));
    let mut out = match r.change.as_str() {
        "added" => paint("32", &format!("+ {} {} {}", r.rtype, r.name, new)),
        "removed" => paint("31", &format!("- {} {} {}", r.rtype, r.name, old)),
        _ => paint(
            "33",
            &format!("~ {} {} {} -> {}", r.rtype, r.name, old, new),
        ),
    };
    out.push('\n');
    for x in &r.deliveries {
        if x.state == "NACKED" {
            out.push_str(&format!(
                "  {} epoch {}: {}\n",
                paint("31", "NACKED by the proxy"),
                x.epoch,
                x.nack.as_deref().unwrap_or_default()
            ));
        }
    }
    if r.change == "modified" {
        let show = |v: &Option<serde_json::Value>| {
            v.as_ref()
                .map_or_else(|| "(none)".to_string(), |v| v.to_string())
        };
        for f in &r.fields {
            out.push_str(&format!(
                "  {}: {} → {}\n",
                f.path,
                show(&f.old),
                show(&f.new)
            ));
        }
    }
    for l in &r.lines {
        let line = if l.starts_with('+') {
            paint("32", l)
        } else if l.starts_with('-') {
            paint("31", l)
        } else if l.starts_with("@@") || l.starts_with('!') {
            paint("36", l)
        } else {
            l.clone()
        };
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// What became of one push, on one line.
fn delivery(x: &model::Delivery, color: bool) -> String {
    let state = match x.state.as_str() {
        "ACKED" => paint(color, "32", &x.state),
        "NACKED" => paint(color, "31", &x.state),
        _ => paint(color, "33", &x.state),
    };
    let mut s = format!("{} {}", x.rtype, state);
    let sent = x.sent.unwrap_or(0.0);
    if let Some(nonce) = &x.nonce {
        s.push_str(&format!(" nonce {} sent {}", nonce, format_time(sent)));
    }
    if let Some(answered) = x.answered {
        s.push_str(&format!(
            " answered {} (+{:.0}ms)",
            format_time(answered),
            (answered - sent) * 1e3
        ));
    }
    if let Some(nack) = &x.nack {
        s.push_str(&format!(": {nack}"));
    }
    s
}

/// One watch event as the lines `meshflow watch` prints.
pub fn watch_event(e: &WatchEvent, color: bool) -> String {
    let paint = |code: &str, s: String| paint(color, code, &s);
    let time = format_time(e.at);
    match &e.what {
        Happened::Push {
            epoch,
            rtype,
            nonce,
            bytes,
            changes,
            more_changes,
        } => {
            let mut out = format!(
                "{time} epoch {epoch} {rtype} push nonce {nonce} ({bytes} bytes, {} changes)\n",
                changes.len() as u64 + more_changes
            );
            for c in changes {
                let old = c.old_version.as_deref().unwrap_or_default();
                let new = c.new_version.as_deref().unwrap_or_default();
                let line = match c.op.as_str() {
                    "+" => paint("32", format!("  + {} {new}", c.name)),
                    "-" => paint("31", format!("  - {} {old}", c.name)),
                    _ => paint("33", format!("  ~ {} {old} -> {new}", c.name)),
                };
                out.push_str(&line);
                out.push('\n');
            }
            if *more_changes > 0 {
                out.push_str(&format!("  … and {more_changes} more\n"));
            }
            out
        }
        Happened::Ack {
            epoch,
            rtype,
            nonce,
        } => format!(
            "{time} epoch {epoch} {rtype} {} nonce {nonce}\n",
            paint("32", "ACK".into())
        ),
        Happened::Nack {
            epoch,
            rtype,
            nonce,
            message,
        } => format!(
            "{time} epoch {epoch} {rtype} {} nonce {nonce}: {message}\n",
            paint("31", "NACK".into())
        ),
        Happened::Lagged { message } => format!("{time} lagged: {message}\n"),
    }
}

/// An explanation: the resource, its scope, and a table of the input objects.
pub fn explanation(e: &Explanation) -> String {
    let mut out = format!(
        "{} {} of {}\nshared by: {}\nbuilt from:\n",
        e.rtype, e.name, e.proxy, e.scope
    );
    let mut rows = vec![vec!["KIND".to_string(), "NAMESPACE".into(), "NAME".into()]];
    rows.extend(
        e.inputs
            .iter()
            .map(|i| vec![i.kind.clone(), i.namespace.clone(), i.name.clone()]),
    );
    out.push_str(&table(&rows, |_, cell| cell));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debug::model::NameChange;

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["A".to_string(), "LONGER".into()],
            vec!["value".to_string(), "x".into()],
        ];
        assert_eq!(table(&rows, |_, p| p), "A      LONGER\nvalue  x\n");
    }

    #[test]
    fn text_of_a_push() {
        let change = |name: &str, op: &str, old: Option<&str>, new: Option<&str>| NameChange {
            op: op.into(),
            name: name.into(),
            old_version: old.map(Into::into),
            new_version: new.map(Into::into),
        };
        let e = WatchEvent {
            proxy: "p".into(),
            at: 3723.004,
            what: Happened::Push {
                epoch: 7,
                rtype: "RDS".into(),
                nonce: "3".into(),
                bytes: 120,
                changes: vec![
                    change("80", "~", Some("a"), Some("b")),
                    change("81", "+", None, Some("c")),
                    change("82", "-", Some("d"), None),
                ],
                more_changes: 0,
            },
        };
        assert_eq!(
            watch_event(&e, false),
            "01:02:03.004 epoch 7 RDS push nonce 3 (120 bytes, 3 changes)\n  ~ 80 a -> b\n  + 81 c\n  - 82 d\n"
        );
    }

    /// A cell with a terminal escape sequence is printed escaped, and aligned as printed.
    #[test]
    fn tables_escape_control_characters() {
        let rows = vec![
            vec!["ID".to_string(), "CDS".to_string()],
            vec!["a\x1b[2Jb".to_string(), "SYNCED".to_string()],
        ];
        let out = table(&rows, |_, s| s);
        assert!(!out.contains('\x1b'), "{out:?}");
        assert_eq!(out, "ID           CDS\na\\u{1b}[2Jb  SYNCED\n");
    }
}
