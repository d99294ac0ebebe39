//! Watching a proxy: every push (epoch, type, nonce, bytes, and per resource `+` added,
//! `-` removed, `~` changed with old → new version), and every ACK and NACK (with Envoy's
//! message) as it arrives. The hub publishes events on a broadcast channel only while
//! someone watches; watchers filter by proxy. A watcher that falls more than the channel's
//! buffer behind gets a `lagged` event saying how many events it missed, and carries on.
//!
//! This module turns the hub's events into [`model::WatchEvent`]s. They are served as a
//! gRPC server stream (`Debug.Watch`), as newline-delimited JSON over HTTP
//! (`GET /debug/watch?proxy=ID`), and printed by `meshflow watch PROXY`.

use super::model::{self, unix_seconds, Happened};
use crate::hub::events::{WatchEvent, WatchKind};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::broadcast;

/// The hub's event as the debug port reports it.
pub fn event(e: &WatchEvent) -> model::WatchEvent {
    let what = match &e.kind {
        WatchKind::Push {
            rtype,
            nonce,
            bytes,
            changes,
        } => Happened::Push {
            epoch: e.epoch,
            rtype: rtype.short().into(),
            nonce: nonce.clone(),
            bytes: *bytes,
            changes: changes
                .iter()
                .map(|c| model::NameChange {
                    op: c.op().into(),
                    name: c.name.clone(),
                    old_version: c.old.clone().filter(|v| !v.is_empty()),
                    new_version: c.new.clone().filter(|v| !v.is_empty()),
                })
                .collect(),
        },
        WatchKind::Ack { rtype, nonce } => Happened::Ack {
            epoch: e.epoch,
            rtype: rtype.short().into(),
            nonce: nonce.clone(),
        },
        WatchKind::Nack {
            rtype,
            nonce,
            message,
        } => Happened::Nack {
            epoch: e.epoch,
            rtype: rtype.short().into(),
            nonce: nonce.clone(),
            message: message.clone(),
        },
    };
    model::WatchEvent {
        proxy: e.proxy.clone(),
        at: unix_seconds(e.at),
        what,
    }
}

/// A `lagged` event: the watcher missed `missed` events.
pub fn lagged(proxy: &str, missed: u64) -> model::WatchEvent {
    model::WatchEvent {
        proxy: proxy.to_string(),
        at: unix_seconds(SystemTime::now()),
        what: Happened::Lagged {
            message: format!("{missed} events missed: the watcher fell behind"),
        },
    }
}

/// Waits for the next event of `proxy`; `None` when the hub is gone.
pub async fn next_for(
    rx: &mut broadcast::Receiver<Arc<WatchEvent>>,
    proxy: &str,
) -> Option<model::WatchEvent> {
    loop {
        match rx.recv().await {
            Ok(e) if e.proxy == proxy => return Some(event(&e)),
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
    use serde_json::Value;

    #[test]
    fn json_of_a_push() {
        let e = WatchEvent {
            proxy: "p".into(),
            at: std::time::UNIX_EPOCH + std::time::Duration::from_millis(3_723_004),
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
        let j = model::to_json(&event(&e));
        assert_eq!(j["changes"][2]["op"], "-");
        assert_eq!(j["changes"][2]["new_version"], Value::Null);
        assert_eq!(j["type"], "RDS");
        assert_eq!(j["at"], 3723.004);
        assert_eq!(j["bytes"], 120);
    }
}
