//! Watching a proxy: every push (epoch, type, nonce, bytes, and per resource `+` added,
//! `-` removed, `~` changed with old → new version), and every ACK and NACK (with Envoy's
//! message) as it arrives. The hub publishes events on a broadcast channel only while
//! someone watches; each watcher ([`follow`]) drains it at once into a queue of its own of
//! at most [`WATCHER_QUEUE`] events, so a watcher that does not read costs that much and no
//! more: what does not fit is counted and reported as one `lagged` event when the watcher
//! reads again. When the last watcher leaves, the hub drops what its channel still holds.
//!
//! This module turns the hub's events into [`model::WatchEvent`]s. They are served as a
//! gRPC server stream (`Debug.Watch`), as newline-delimited JSON over HTTP
//! (`GET /debug/watch?proxy=ID`), and printed by `meshflow watch PROXY`.

use super::model::{self, unix_seconds, Happened};
use crate::hub::events::{WatchEvent, WatchKind};
use crate::hub::Hub;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{broadcast, mpsc};

/// Events one watcher may have waiting for it to read.
pub const WATCHER_QUEUE: usize = 16;

/// Follows `proxy`'s events into a bounded queue (see the module documentation), each
/// turned into what the caller streams by `wrap`. The follower ends, and lets the hub free
/// the channel's buffer if it was the last, when the returned receiver is dropped.
pub fn follow<T: Send + 'static>(
    hub: &Arc<Hub>,
    proxy: String,
    wrap: impl Fn(model::WatchEvent) -> T + Send + 'static,
) -> mpsc::Receiver<T> {
    let mut rx = hub.watch();
    let (tx, out) = mpsc::channel(WATCHER_QUEUE);
    let hub = hub.clone();
    tokio::spawn(async move {
        let mut missed = 0u64;
        loop {
            let next = tokio::select! {
                _ = tx.closed() => break,
                e = next_for(&mut rx, &proxy) => e,
            };
            let Some(e) = next else { break };
            if missed > 0 {
                match tx.try_send(wrap(lagged(&proxy, missed))) {
                    Ok(()) => missed = 0,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        missed += 1;
                        continue;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                }
            }
            match tx.try_send(wrap(e)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => missed += 1,
                Err(mpsc::error::TrySendError::Closed(_)) => break,
            }
        }
        drop(rx);
        hub.watch_closed();
    });
    out
}

/// The hub's event as the debug port reports it.
pub fn event(e: &WatchEvent) -> model::WatchEvent {
    let what = match &e.kind {
        WatchKind::Push {
            rtype,
            nonce,
            bytes,
            changes,
            more_changes,
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
            more_changes: *more_changes as u64,
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
                more_changes: 0,
            },
        };
        let j = model::to_json(&event(&e));
        assert_eq!(j["changes"][2]["op"], "-");
        assert_eq!(j["changes"][2]["new_version"], Value::Null);
        assert_eq!(j["type"], "RDS");
        assert_eq!(j["at"], 3723.004);
        assert_eq!(j["bytes"], 120);
    }

    /// A watcher that does not read holds at most `WATCHER_QUEUE` events; when it reads
    /// again it is told how many it missed, then gets the new ones; once it is gone, the
    /// hub holds no event for it.
    #[tokio::test]
    async fn a_stalled_watcher_is_bounded_and_told_what_it_missed() {
        use crate::hub::recorder::{Push, Recorder, StreamEvent, StreamRef};
        let hub = Hub::new(std::sync::mpsc::channel().0, Default::default());
        let mut out = follow(&hub, "p".into(), |e| e);
        let from = StreamRef {
            proxy: "p",
            stream: 1,
            protocol: "delta",
        };
        let push = |n: u64| {
            StreamEvent::Push(Push {
                rtype: ResourceType::Route,
                nonce: n.to_string(),
                bytes: 10,
                resources: vec![("80".into(), format!("v{n}").into())],
                removed: Vec::new(),
                full_set: false,
            })
        };
        for n in 0..100 {
            hub.record(from, push(n));
            tokio::task::yield_now().await;
        }
        let mut queued = Vec::new();
        while let Ok(e) = out.try_recv() {
            queued.push(e);
        }
        assert_eq!(queued.len(), WATCHER_QUEUE);
        hub.record(from, push(100));
        let told = out.recv().await.expect("lagged");
        assert_eq!(told.what.kind(), "lagged");
        let missed = 100 - WATCHER_QUEUE;
        assert_eq!(
            model::to_json(&told)["message"],
            format!("{missed} events missed: the watcher fell behind")
        );
        assert_eq!(out.recv().await.expect("the new push").what.kind(), "push");
        drop(out);
        hub.record(from, push(101)); // wakes the follower, which finds its reader gone
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(hub.watch_buffered(), 0, "nothing held for nobody");
    }
}
