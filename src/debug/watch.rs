//! Watching a proxy: every push (epoch, type, nonce, bytes, and per resource `+` added,
//! `-` removed, `~` changed with old → new version), and every ACK and NACK (with Envoy's
//! message) as it arrives. The hub publishes events on a broadcast channel only while
//! someone watches; watchers filter by proxy. A watcher that falls more than the channel's
//! buffer behind gets a `lagged` event saying how many events it missed, and carries on.
//!
//! Served as a gRPC server stream (`Debug.Watch`), as newline-delimited JSON over HTTP
//! (`GET /debug/watch?proxy=ID`), and printed by `meshflow watch PROXY`.

use super::pb;
use crate::hub::events::{WatchEvent, WatchKind};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// Unix time in seconds, to the millisecond (so it survives JSON and YAML round trips).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as f64 / 1000.0)
        .unwrap_or(0.0)
}

/// The event as the Debug API's message.
pub fn to_pb(e: &WatchEvent) -> pb::WatchEvent {
    let mut out = pb::WatchEvent {
        proxy: e.proxy.clone(),
        at_unix_seconds: unix_seconds(e.at),
        epoch: e.epoch,
        ..Default::default()
    };
    match &e.kind {
        WatchKind::Push {
            rtype,
            nonce,
            bytes,
            changes,
        } => {
            out.kind = "push".into();
            out.r#type = rtype.short().into();
            out.nonce = nonce.clone();
            out.bytes = *bytes;
            out.changes = changes
                .iter()
                .map(|c| pb::NameChange {
                    op: c.op().into(),
                    name: c.name.clone(),
                    old_version: c.old.clone().unwrap_or_default(),
                    new_version: c.new.clone().unwrap_or_default(),
                })
                .collect();
        }
        WatchKind::Ack { rtype, nonce } => {
            out.kind = "ack".into();
            out.r#type = rtype.short().into();
            out.nonce = nonce.clone();
        }
        WatchKind::Nack {
            rtype,
            nonce,
            message,
        } => {
            out.kind = "nack".into();
            out.r#type = rtype.short().into();
            out.nonce = nonce.clone();
            out.message = message.clone();
        }
    }
    out
}

/// A `lagged` event: the watcher missed `missed` events.
pub fn lagged(proxy: &str, missed: u64) -> pb::WatchEvent {
    pb::WatchEvent {
        proxy: proxy.to_string(),
        at_unix_seconds: unix_seconds(SystemTime::now()),
        kind: "lagged".into(),
        message: format!("{missed} events missed: the watcher fell behind"),
        ..Default::default()
    }
}

/// The JSON form (one line of `/debug/watch`).
pub fn to_json(e: &pb::WatchEvent) -> Value {
    let mut v = json!({
        "proxy": e.proxy,
        "at": e.at_unix_seconds,
        "kind": e.kind,
    });
    if e.kind != "lagged" {
        v["epoch"] = json!(e.epoch);
        v["type"] = json!(e.r#type);
        v["nonce"] = json!(e.nonce);
    }
    if e.kind == "push" {
        v["bytes"] = json!(e.bytes);
        v["changes"] = e
            .changes
            .iter()
            .map(|c| {
                json!({
                    "op": c.op,
                    "name": c.name,
                    "old_version": (!c.old_version.is_empty()).then_some(&c.old_version),
                    "new_version": (!c.new_version.is_empty()).then_some(&c.new_version),
                })
            })
            .collect();
    }
    if !e.message.is_empty() {
        v["message"] = json!(e.message);
    }
    v
}

/// One event as the lines `meshflow watch` prints.
pub fn to_text(e: &pb::WatchEvent, color: bool) -> String {
    let paint = |code: &str, s: String| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s
        }
    };
    let time = format_time(e.at_unix_seconds);
    match e.kind.as_str() {
        "push" => {
            let mut out = format!(
                "{time} epoch {} {} push nonce {} ({} bytes, {} changes)\n",
                e.epoch,
                e.r#type,
                e.nonce,
                e.bytes,
                e.changes.len()
            );
            for c in &e.changes {
                let line = match c.op.as_str() {
                    "+" => paint("32", format!("  + {} {}", c.name, c.new_version)),
                    "-" => paint("31", format!("  - {} {}", c.name, c.old_version)),
                    _ => paint(
                        "33",
                        format!("  ~ {} {} -> {}", c.name, c.old_version, c.new_version),
                    ),
                };
                out.push_str(&line);
                out.push('\n');
            }
            out
        }
        "ack" => format!(
            "{time} epoch {} {} {} nonce {}\n",
            e.epoch,
            e.r#type,
            paint("32", "ACK".into()),
            e.nonce
        ),
        "nack" => format!(
            "{time} epoch {} {} {} nonce {}: {}\n",
            e.epoch,
            e.r#type,
            paint("31", "NACK".into()),
            e.nonce,
            e.message
        ),
        _ => format!("{time} {}: {}\n", e.kind, e.message),
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

/// Waits for the next event of `proxy`; `None` when the hub is gone.
pub async fn next_for(
    rx: &mut broadcast::Receiver<Arc<WatchEvent>>,
    proxy: &str,
) -> Option<pb::WatchEvent> {
    loop {
        match rx.recv().await {
            Ok(e) if e.proxy == proxy => return Some(to_pb(&e)),
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(n)) => return Some(lagged(proxy, n)),
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::events::NameChange;
    use dataflows::model::ResourceType;

    #[test]
    fn text_and_json_of_a_push() {
        let e = WatchEvent {
            proxy: "p".into(),
            at: UNIX_EPOCH + std::time::Duration::from_millis(3_723_004),
            epoch: 7,
            kind: WatchKind::Push {
                rtype: ResourceType::Route,
                nonce: "3".into(),
                bytes: 120,
                changes: vec![
                    NameChange::new("80", Some("a"), Some("b")),
                    NameChange::new("81", None, Some("c")),
                    NameChange::new("82", Some("d"), None),
                ],
            },
        };
        let p = to_pb(&e);
        assert_eq!(
            to_text(&p, false),
            "01:02:03.004 epoch 7 RDS push nonce 3 (120 bytes, 3 changes)\n  ~ 80 a -> b\n  + 81 c\n  - 82 d\n"
        );
        let j = to_json(&p);
        assert_eq!(j["changes"][2]["op"], "-");
        assert_eq!(j["changes"][2]["new_version"], Value::Null);
        assert_eq!(j["type"], "RDS");
    }
}
