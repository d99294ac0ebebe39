//! `diff`: what changed for one proxy between two epochs (or since a time), from the hub's
//! history ([`super::history`]). Per resource: added, removed or modified, old and new
//! version, the changed fields of Envoy's JSON form (both bodies decoded with
//! [`super::envoy_json`], the two JSON trees walked together; list items that all carry a
//! `name` are matched by name, others by position), a line diff of the pretty-printed JSON,
//! and what became of each push that carried it (ACKED, NACKED with Envoy's message, IN
//! FLIGHT, NOT SENT). Per epoch: the input changes that made it.
//!
//! The window is `from < epoch <= to`: `from` is an epoch, or the last epoch applied at or
//! before `now - since`; without either, the window is the proxy's last change. Served by
//! `Debug.Diff`, `GET /debug/diff?proxy=P&from=E&to=E` (or `&since=5m`) and `meshflow diff`.

use super::envoy_json::any_json;
use super::error::DebugError;
use super::model::{self, resolve_proxy, unix_seconds, DiffQuery};
use super::status::connected;
use super::units::parse_duration;
use crate::hub::history::{Bound, Delivery, Entry, Window};
use crate::hub::Hub;
use dataflows::materialize::Name;
use dataflows::model::{Body, ResourceType};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Changed fields listed per resource, at most.
const MAX_FIELDS: usize = 200;
/// Diff lines per resource, at most.
const MAX_LINES: usize = 600;

/// Computes the diff a request asks for. Copies what it needs out of the history under its
/// lock, then decodes and compares without any lock held (CPU work: call it off the async
/// workers).
pub fn compute(hub: &Hub, req: &DiffQuery) -> Result<model::Diff, DebugError> {
    if req.proxy.is_empty() {
        return Err(DebugError::BadRequest(
            "the proxy parameter is required (node id or pod.namespace)".into(),
        ));
    }
    if req.from.is_some() && req.since.is_some() {
        return Err(DebugError::BadRequest(
            "give either from (an epoch) or since (a duration), not both".into(),
        ));
    }
    let since = match &req.since {
        None => None,
        Some(s) => {
            let d = parse_duration(s).map_err(|e| DebugError::BadRequest(format!("since: {e}")))?;
            Some(
                SystemTime::now()
                    .checked_sub(d)
                    .unwrap_or(SystemTime::UNIX_EPOCH),
            )
        }
    };
    if let (Some(f), Some(t)) = (req.from, req.to) {
        if f > t {
            return Err(DebugError::BadRequest(format!(
                "from ({f}) is after to ({t})"
            )));
        }
    }
    let (current_epoch, connected_ids) = hub.read(|st| {
        (
            st.epoch,
            connected(st)
                .map(|e| e.proxy.id.clone())
                .collect::<Vec<_>>(),
        )
    });
    let (id, window) = hub.read_history(|h| {
        let mut ids = connected_ids.clone();
        ids.extend(h.proxy_ids());
        ids.sort();
        ids.dedup();
        let id = resolve_proxy(ids.iter().map(String::as_str), &req.proxy)?;
        let to = req.to.map(Bound::Epoch);
        let from = match (req.from, since) {
            (Some(e), _) => Some(Bound::Epoch(e)),
            (None, Some(t)) => Some(Bound::Time(t)),
            (None, None) => {
                // The proxy's last change (within `to`).
                let last = h.last_change(&id, req.to);
                Some(Bound::Epoch(last.map_or(0, |e| e.saturating_sub(1))))
            }
        };
        let since_epoch = since.and_then(|t| h.epoch_at(t));
        let window = h.window(&id, from, to);
        Ok::<_, DebugError>((id, (from, window, since_epoch)))
    })?;
    let (from, window, since_epoch) = window;
    let from_epoch = match from {
        Some(Bound::Epoch(e)) => e,
        // The last epoch applied at or before the time; 0 when before everything kept.
        Some(Bound::Time(_)) => since_epoch.unwrap_or(0),
        None => 0,
    };
    let to_epoch = req.to.unwrap_or(current_epoch).min(current_epoch);
    Ok(build(&id, from_epoch, to_epoch, window))
}

/// The response from a window of history.
pub fn build(proxy: &str, from_epoch: u64, to_epoch: u64, window: Window) -> model::Diff {
    let oldest = window.oldest_kept.unwrap_or(0);
    // Net change per resource over the window.
    struct Net<'a> {
        old: Option<&'a Name>,
        old_body: Option<&'a Body>,
        new: Option<&'a Name>,
        new_body: Option<&'a Body>,
        entries: Vec<&'a Entry>,
    }
    let mut net: BTreeMap<(ResourceType, &str), Net<'_>> = BTreeMap::new();
    for e in &window.entries {
        for c in &e.changes {
            let n = net.entry((e.rtype, &*c.name)).or_insert(Net {
                old: c.old.as_ref(),
                old_body: c.old_body.as_ref(),
                new: None,
                new_body: None,
                entries: Vec::new(),
            });
            n.new = c.new.as_ref();
            n.new_body = c.new_body.as_ref();
            n.entries.push(e);
        }
    }
    let resources = net
        .into_iter()
        .filter(|(_, n)| n.old != n.new)
        .map(|((t, name), n)| {
            let change = match (n.old, n.new) {
                (None, _) => "added",
                (_, None) => "removed",
                _ => "modified",
            };
            let (fields, lines) = body_diff(
                t,
                name,
                n.old_body,
                n.new_body,
                n.old.map(|v| &**v),
                n.new.map(|v| &**v),
            );
            model::ResourceDiff {
                rtype: t.short().into(),
                name: name.to_string(),
                change: change.into(),
                old_version: n.old.map(|v| v.to_string()),
                new_version: n.new.map(|v| v.to_string()),
                fields,
                lines,
                deliveries: n.entries.iter().map(|e| delivery(e)).collect(),
            }
        })
        .collect();
    let mut epochs: BTreeMap<u64, model::EpochRecord> = BTreeMap::new();
    for e in &window.entries {
        let rec = epochs.entry(e.epoch).or_insert_with(|| model::EpochRecord {
            epoch: e.epoch,
            applied: unix_seconds(e.at),
            inputs: Vec::new(),
            deliveries: Vec::new(),
        });
        rec.deliveries.push(delivery(e));
    }
    for ep in &window.epochs {
        if let Some(rec) = epochs.get_mut(&ep.epoch) {
            rec.inputs = ep
                .inputs
                .iter()
                .map(|c| model::InputChange {
                    kind: c.kind.clone(),
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    op: c.op.as_str().into(),
                    source: c.source.clone(),
                })
                .collect();
        }
    }
    model::Diff {
        proxy: proxy.to_string(),
        from_epoch,
        to_epoch,
        oldest_kept_epoch: oldest,
        truncated: window.oldest_kept.is_some_and(|o| o > from_epoch + 1),
        resources,
        epochs: epochs.into_values().collect(),
    }
}

fn delivery(e: &Entry) -> model::Delivery {
    let mut d = model::Delivery {
        epoch: e.epoch,
        rtype: e.rtype.short().into(),
        state: "NOT SENT".into(),
        nonce: None,
        sent: None,
        answered: None,
        nack: None,
    };
    if let Some(x) = &e.delivery {
        let time = |t: SystemTime| Some(unix_seconds(t)).filter(|t| *t > 0.0);
        d.state = x.state().into();
        d.nonce = Some(x.nonce.clone()).filter(|n| !n.is_empty());
        d.sent = time(x.sent_at);
        d.answered = answered(x).and_then(time);
        d.nack = x.nack.clone().filter(|m| !m.is_empty());
    }
    d
}

fn answered(d: &Delivery) -> Option<SystemTime> {
    d.nacked_at.or(d.acked_at)
}

/// Field changes and line diff of two bodies (either may be absent).
fn body_diff(
    t: ResourceType,
    name: &str,
    old: Option<&Body>,
    new: Option<&Body>,
    old_version: Option<&str>,
    new_version: Option<&str>,
) -> (Vec<model::FieldChange>, Vec<String>) {
    let decode = |b: Option<&Body>, v: Option<&str>| -> Result<Option<Value>, String> {
        match (b, v) {
            (Some(b), _) => any_json(t.type_url(), &b.0).map(Some),
            (None, Some(v)) => Err(format!("the body of {name} version {v} is no longer kept")),
            (None, None) => Ok(None),
        }
    };
    let (old, new) = match (decode(old, old_version), decode(new, new_version)) {
        (Ok(o), Ok(n)) => (o, n),
        (Err(e), _) | (_, Err(e)) => return (Vec::new(), vec![format!("! {e}")]),
    };
    let mut changes = Vec::new();
    walk(String::new(), old.as_ref(), new.as_ref(), &mut changes);
    let fields: Vec<model::FieldChange> = changes
        .into_iter()
        .take(MAX_FIELDS)
        .map(|(path, old, new)| model::FieldChange { path, old, new })
        .collect();
    let pretty = |v: &Option<Value>| {
        v.as_ref()
            .and_then(|v| serde_json::to_string_pretty(v).ok())
            .map(|s| s + "\n")
            .unwrap_or_default()
    };
    (fields, line_diff(&pretty(&old), &pretty(&new)))
}

/// `+ `, `- `, `  ` lines with three lines of context, hunks separated by `@@`.
pub fn line_diff(old: &str, new: &str) -> Vec<String> {
    let diff = similar::TextDiff::configure()
        .timeout(Duration::from_millis(500))
        .diff_lines(old, new);
    let mut out = Vec::new();
    for (i, group) in diff.grouped_ops(3).iter().enumerate() {
        if i > 0 || !old.is_empty() && !new.is_empty() {
            out.push("@@".to_string());
        }
        for op in group {
            for c in diff.iter_changes(op) {
                let sign = match c.tag() {
                    similar::ChangeTag::Delete => "- ",
                    similar::ChangeTag::Insert => "+ ",
                    similar::ChangeTag::Equal => "  ",
                };
                out.push(format!("{sign}{}", c.value().trim_end_matches('\n')));
                if out.len() >= MAX_LINES {
                    out.push(format!("… (more than {MAX_LINES} lines)"));
                    return out;
                }
            }
        }
    }
    out
}

/// Items of a list matched by `name` when every item on both sides has a distinct one.
fn names(items: &[Value]) -> Option<Vec<&str>> {
    let names: Vec<&str> = items
        .iter()
        .map(|v| v.get("name").and_then(Value::as_str))
        .collect::<Option<_>>()?;
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() == names.len()).then_some(names)
}

type FieldDelta = (String, Option<Value>, Option<Value>);

/// Walks two JSON trees, listing each differing leaf (or whole subtree present on one side
/// only) with its path.
pub fn walk(path: String, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<FieldDelta>) {
    if out.len() > MAX_FIELDS {
        return;
    }
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                walk(join(k), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => match (names(a), names(b)) {
            (Some(na), Some(nb)) => {
                let mut all: Vec<&str> = na.iter().chain(nb.iter()).copied().collect();
                all.sort_unstable();
                all.dedup();
                for n in all {
                    let pa = na.iter().position(|x| *x == n).map(|i| &a[i]);
                    let pb = nb.iter().position(|x| *x == n).map(|i| &b[i]);
                    walk(format!("{path}[name={n}]"), pa, pb, out);
                }
            }
            _ => {
                for i in 0..a.len().max(b.len()) {
                    walk(format!("{path}[{i}]"), a.get(i), b.get(i), out);
                }
            }
        },
        (a, b) if a == b => {}
        (a, b) => out.push((path, a.cloned(), b.cloned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn walks_objects_lists_by_name_and_by_index() {
        let old = json!({
            "name": "80",
            "virtual_hosts": [
                {"name": "a", "domains": ["a"], "routes": [{"match": {"prefix": "/"}}]},
                {"name": "b", "domains": ["b"]}
            ],
            "timeout": "1s"
        });
        let new = json!({
            "name": "80",
            "virtual_hosts": [
                {"name": "b", "domains": ["b", "b:80"]},
                {"name": "a", "domains": ["a"], "routes": [{"match": {"safe_regex": {"regex": "/x"}}}]}
            ]
        });
        let mut out = Vec::new();
        walk(String::new(), Some(&old), Some(&new), &mut out);
        let paths: Vec<&str> = out.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "timeout",
                "virtual_hosts[name=a].routes[0].match.prefix",
                "virtual_hosts[name=a].routes[0].match.safe_regex",
                "virtual_hosts[name=b].domains[1]",
            ]
        );
        assert_eq!(out[0].1, Some(json!("1s")));
        assert_eq!(out[0].2, None);
        assert_eq!(out[3].2, Some(json!("b:80")));
    }

    #[test]
    fn line_diff_marks_changes_with_context() {
        let lines = line_diff("a\nb\nc\n", "a\nB\nc\n");
        assert_eq!(lines, vec!["@@", "  a", "- b", "+ B", "  c"]);
        assert_eq!(line_diff("", "x\n"), vec!["+ x"]);
    }
}
