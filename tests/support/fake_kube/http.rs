//! The fake API server's HTTP side: authentication, API discovery, paginated lists and
//! watch streams, each answered in the API server's JSON.

use super::store::{
    event, status, type_of_object, Key, ResourceType, Scope, Selector, Snapshot, Store, Watch,
    WatchFrame, COORDINATION_GROUP, EVENTS_GROUP, GATEWAY_API_GROUP, ISTIO_GROUP, SECURITY_GROUP,
    TYPES,
};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_stream::wrappers::UnboundedReceiverStream;

pub type Body = BoxBody<Bytes, std::io::Error>;

fn full(status: StatusCode, value: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_else(|e| panic!("encode a response: {e}"));
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(bytes))
                .map_err(|never| match never {})
                .boxed(),
        )
        .unwrap_or_else(|e| panic!("build a response: {e}"))
}

fn failure(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    full(code, &status(code.as_u16(), reason, message))
}

/// Answers one request.
pub fn handle(store: &Arc<Mutex<Store>>, req: Request<Bytes>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
                .map(|(k, v)| (k.to_string(), percent_decode(v)))
                .collect()
        })
        .unwrap_or_default();
    let mut st = store.lock().unwrap_or_else(|e| e.into_inner());
    st.requests.push(format!(
        "{} {}",
        req.method(),
        req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("")
    ));
    let expected = format!("Bearer {}", st.token);
    if req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        != Some(&expected)
    {
        return failure(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    if let Some(plural) = parts.iter().find(|p| st.forbidden.iter().any(|f| f == *p)) {
        let group = type_of_plural_any(plural)
            .map(|t| t.qualified())
            .unwrap_or_default();
        let verb = req.method().as_str().to_lowercase();
        return failure(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "{group} is forbidden: User \"system:serviceaccount:istio-system:meshflow\" \
                 cannot {verb} resource \"{plural}\" (the fake forbids it)"
            ),
        );
    }
    if let (&hyper::Method::POST, ["apis", "authentication.k8s.io", "v1", "tokenreviews"]) =
        (req.method(), parts.as_slice())
    {
        return token_review(&st, req.body());
    }
    if req.method() == hyper::Method::PATCH {
        let content_type = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        // A namespaced object's status, or a cluster-scoped one's (a GatewayClass).
        let object = match parts.as_slice() {
            ["apis", group @ (ISTIO_GROUP | SECURITY_GROUP | GATEWAY_API_GROUP), version, "namespaces", ns, plural, name, "status"] => {
                Some((*version, (*group, *ns, *plural, *name)))
            }
            ["apis", group @ GATEWAY_API_GROUP, version, plural, name, "status"] => {
                Some((*version, (*group, "", *plural, *name)))
            }
            _ => None,
        };
        if let Some((version, object)) = object {
            if served(&st, object.0, version) {
                return patch_status(&mut st, version, object, content_type, req.body());
            }
        }
    }
    // Whole-object writes of the kinds clients write (Leases, Events): create on the
    // collection, update (compare-and-swap on resourceVersion) on the object.
    let method = req.method().clone();
    if let (
        &hyper::Method::POST | &hyper::Method::PUT,
        ["apis", group, version, "namespaces", ns, plural, rest @ ..],
    ) = (&method, parts.as_slice())
    {
        let rtype = type_of_plural(group, plural).filter(|t| t.writable());
        if let (Some(rtype), true) = (rtype, served(&st, group, version)) {
            let object: Value = match serde_json::from_slice(req.body()) {
                Ok(o) => o,
                Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &format!("{e}")),
            };
            let scope = Scope {
                rtype,
                api_version: rtype.api_version(version),
                namespace: Some(ns.to_string()),
                selector: Selector::default(),
                name: None,
            };
            return match (&method, rest) {
                (&hyper::Method::POST, []) => create(&mut st, &scope, object),
                (&hyper::Method::PUT, [name]) => update(&mut st, &scope, name, object),
                _ => not_found(&path),
            };
        }
    }
    if req.method() != hyper::Method::GET {
        return failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the fake API server only answers GET (discovery, list, watch, get), merge patches of Istio objects' status, and POST and PUT of Leases and Events",
        );
    }
    match parts.as_slice() {
        ["version"] => full(
            StatusCode::OK,
            &json!({"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake", "platform": "linux/amd64"}),
        ),
        ["api"] => full(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        ),
        ["api", "v1"] => full(StatusCode::OK, &resource_list("", "v1")),
        ["apis"] => full(StatusCode::OK, &group_list(&st)),
        ["apis", group] => match api_group(&st, group) {
            Some(g) => full(StatusCode::OK, &g),
            None => not_found(&path),
        },
        ["apis", group, version] if served(&st, group, version) => {
            full(StatusCode::OK, &resource_list(group, version))
        }
        ["api", "v1", rest @ ..] => collection(&mut st, "", "v1", rest, &query, &path),
        ["apis", group, version, rest @ ..] if served(&st, group, version) => {
            collection(&mut st, group, version, rest, &query, &path)
        }
        _ => not_found(&path),
    }
}

/// POST of a TokenReview (`authentication.k8s.io/v1`), answered as the API server answers
/// it: the review echoed with its `status` — `authenticated`, the service account's
/// `user` (`system:serviceaccount:NS:SA` and its groups) and the `audiences` both the token
/// and the request name; a token issued for none of the requested audiences, or unknown,
/// is not authenticated and says why in `status.error`.
fn token_review(st: &Store, body: &[u8]) -> Response<Body> {
    let review: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &format!("{e}")),
    };
    if review["kind"] != "TokenReview" || review["apiVersion"] != "authentication.k8s.io/v1" {
        return failure(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "not a TokenReview of authentication.k8s.io/v1",
        );
    }
    let token = review["spec"]["token"].as_str().unwrap_or("");
    let wanted: Vec<String> = review["spec"]["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let status = match st.sa_tokens.get(token) {
        None => {
            json!({"authenticated": false, "user": {}, "error": "[invalid bearer token, service account token has been invalidated]"})
        }
        Some((ns, sa, audiences)) => {
            let common: Vec<&String> = if wanted.is_empty() {
                audiences.iter().collect()
            } else {
                wanted.iter().filter(|a| audiences.contains(a)).collect()
            };
            if common.is_empty() {
                json!({"authenticated": false, "user": {}, "error": "[invalid bearer token, token audiences \"...\" is invalid for the target audiences]"})
            } else {
                json!({
                    "authenticated": true,
                    "user": {
                        "username": format!("system:serviceaccount:{ns}:{sa}"),
                        "uid": format!("uid-{ns}-{sa}"),
                        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
                    },
                    "audiences": common,
                })
            }
        }
    };
    let mut answer = review.clone();
    answer["status"] = status;
    answer["metadata"] = json!({"creationTimestamp": null});
    full(StatusCode::CREATED, &answer)
}

/// POST: creates the object, or 409 AlreadyExists (as the API server words it).
fn create(st: &mut Store, scope: &Scope, mut object: Value) -> Response<Body> {
    let ns = scope.namespace.clone().unwrap_or_default();
    if let Some(answer) = identity_problem(scope, &ns, &object, None) {
        return answer;
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let key: Key = (scope.rtype.key_kind().to_string(), ns.clone(), name.clone());
    if st.objects.contains_key(&key) {
        return failure(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("{} \"{name}\" already exists", scope.rtype.qualified()),
        );
    }
    object["metadata"]["namespace"] = Value::from(ns);
    object["metadata"]["uid"] = Value::from(format!("uid-{}", st.rv + 1));
    object["metadata"]["creationTimestamp"] = Value::from("2026-01-01T00:00:00Z");
    st.record("ADDED", key.clone(), object);
    full(StatusCode::CREATED, &scope.served(&st.objects[&key]))
}

/// PUT: replaces the object if the resourceVersion it carries is the current one (none:
/// an unconditional update, which Leases and Events allow), else 409 Conflict.
fn update(st: &mut Store, scope: &Scope, name: &str, mut object: Value) -> Response<Body> {
    let ns = scope.namespace.clone().unwrap_or_default();
    if let Some(answer) = identity_problem(scope, &ns, &object, Some(name)) {
        return answer;
    }
    let key: Key = (
        scope.rtype.key_kind().to_string(),
        ns.clone(),
        name.to_string(),
    );
    let Some(current) = st.objects.get(&key) else {
        return failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("{} \"{name}\" not found", scope.rtype.qualified()),
        );
    };
    let current_rv = current["metadata"]["resourceVersion"].clone();
    match &object["metadata"]["resourceVersion"] {
        Value::Null => {}
        rv if *rv == current_rv => {}
        _ => {
            return failure(
                StatusCode::CONFLICT,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been \
                     modified; please apply your changes to the latest version and try again",
                    scope.rtype.qualified()
                ),
            )
        }
    }
    for field in ["uid", "creationTimestamp"] {
        object["metadata"][field] = current["metadata"][field].clone();
    }
    object["metadata"]["namespace"] = Value::from(ns);
    st.record("MODIFIED", key.clone(), object);
    full(StatusCode::OK, &scope.served(&st.objects[&key]))
}

/// What is wrong with the kind, name or namespace a written object states, against the
/// request's: the API server's answer, or `None`.
fn identity_problem(
    scope: &Scope,
    ns: &str,
    object: &Value,
    name: Option<&str>,
) -> Option<Response<Body>> {
    let bad = |message: String| Some(failure(StatusCode::BAD_REQUEST, "BadRequest", &message));
    if object["kind"] != scope.rtype.kind || object["apiVersion"] != scope.api_version.as_str() {
        return bad(format!(
            "the object is {} {}, not {} {}",
            object["apiVersion"], object["kind"], scope.api_version, scope.rtype.kind
        ));
    }
    let stated = object["metadata"]["name"].as_str().unwrap_or("");
    if stated.is_empty() {
        return Some(failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!(
                "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                scope.rtype.qualified()
            ),
        ));
    }
    if let Some(name) = name.filter(|n| *n != stated) {
        return bad(format!(
            "the name of the object ({stated}) does not match the name on the URL ({name})"
        ));
    }
    match object["metadata"]["namespace"].as_str() {
        Some(stated) if stated != ns => bad(format!(
            "the namespace of the provided object ({stated}) does not match the namespace sent on the request ({ns})"
        )),
        _ => None,
    }
}

/// GET of one object.
fn get_one(st: &Store, scope: &Scope, name: &str) -> Response<Body> {
    let ns = scope.namespace.clone().unwrap_or_default();
    let key: Key = (scope.rtype.key_kind().to_string(), ns, name.to_string());
    match st.objects.get(&key) {
        Some(o) => full(StatusCode::OK, &scope.served(o)),
        None => failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("{} \"{name}\" not found", scope.rtype.qualified()),
        ),
    }
}

/// A merge patch (RFC 7386) of an Istio object's status subresource: only `status` is
/// taken from the patch. `object`: its group, namespace, plural and name.
fn patch_status(
    st: &mut Store,
    version: &str,
    (group, ns, plural, name): (&str, &str, &str, &str),
    content_type: &str,
    body: &Bytes,
) -> Response<Body> {
    let Some(rtype) = type_of_plural(group, plural) else {
        return not_found(plural);
    };
    let key: Key = (
        rtype.key_kind().to_string(),
        ns.to_string(),
        name.to_string(),
    );
    *st.status_patches.entry(key.clone()).or_default() += 1;
    if content_type != "application/merge-patch+json" {
        return failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("the fake takes only merge patches of status, not {content_type:?}"),
        );
    }
    let patch: Value = match serde_json::from_slice(body) {
        Ok(p) => p,
        Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &format!("{e}")),
    };
    let Some(mut object) = st.objects.get(&key).cloned() else {
        return failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("{plural}.{group} \"{name}\" not found"),
        );
    };
    let mut status = object.get("status").cloned().unwrap_or(Value::Null);
    merge(&mut status, &patch["status"]);
    match status {
        Value::Null => {
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        s => object["status"] = s,
    }
    st.record("MODIFIED", key.clone(), object);
    let scope = Scope {
        rtype,
        api_version: rtype.api_version(version),
        namespace: (!ns.is_empty()).then(|| ns.to_string()),
        selector: Selector::parse("").unwrap_or_else(|e| panic!("the empty selector: {e}")),
        name: None,
    };
    full(StatusCode::OK, &scope.served(&st.objects[&key]))
}

fn type_of_plural_any(plural: &str) -> Option<ResourceType> {
    TYPES.iter().copied().find(|t| t.plural == plural)
}

fn type_of_plural(group: &str, plural: &str) -> Option<ResourceType> {
    TYPES
        .iter()
        .copied()
        .find(|t| t.group == group && t.plural == plural)
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(map) = target {
        for (k, v) in patch {
            if v.is_null() {
                map.remove(k);
            } else {
                merge(map.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn not_found(path: &str) -> Response<Body> {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("the server could not find the requested resource ({path})"),
    )
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn versions_of<'a>(st: &'a Store, group: &str) -> Vec<&'a str> {
    match group {
        ISTIO_GROUP => st.istio_versions.clone(),
        SECURITY_GROUP => st.security_versions.clone(),
        GATEWAY_API_GROUP => st.gateway_api_versions.clone(),
        "discovery.k8s.io" | COORDINATION_GROUP | EVENTS_GROUP => vec!["v1"],
        _ => Vec::new(),
    }
}

fn served(st: &Store, group: &str, version: &str) -> bool {
    versions_of(st, group).contains(&version)
}

fn api_group(st: &Store, group: &str) -> Option<Value> {
    let versions = versions_of(st, group);
    let first = versions.first()?;
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    Some(json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(first),
    }))
}

fn group_list(st: &Store) -> Value {
    let mut groups = vec![
        api_group(st, "discovery.k8s.io"),
        api_group(st, COORDINATION_GROUP),
        api_group(st, EVENTS_GROUP),
    ];
    groups.push(api_group(st, ISTIO_GROUP));
    groups.push(api_group(st, SECURITY_GROUP));
    groups.push(api_group(st, GATEWAY_API_GROUP));
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups.into_iter().flatten().collect::<Vec<_>>()})
}

fn resource_list(group: &str, version: &str) -> Value {
    let verbs = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    let mut resources = Vec::new();
    for t in TYPES.iter().filter(|t| t.group == group) {
        resources.push(json!({
            "name": t.plural,
            "singularName": t.kind.to_lowercase(),
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": verbs,
            "shortNames": t.short_names,
        }));
        resources.push(json!({
            "name": format!("{}/status", t.plural),
            "singularName": "",
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// `[namespaces/NS/]PLURAL`: a list or a watch; `namespaces/NS/PLURAL/NAME`: one object.
fn collection(
    st: &mut Store,
    group: &str,
    version: &str,
    rest: &[&str],
    query: &HashMap<String, String>,
    path: &str,
) -> Response<Body> {
    let (namespace, plural, one) = match rest {
        [plural] => (None, *plural, None),
        ["namespaces", ns, plural] => (Some(ns.to_string()), *plural, None),
        ["namespaces", ns, plural, one] => (Some(ns.to_string()), *plural, Some(*one)),
        _ => return not_found(path),
    };
    let Some(rtype) = type_of_plural(group, plural) else {
        return not_found(path);
    };
    if namespace.is_some() && !rtype.namespaced {
        return not_found(path);
    }
    let selector =
        match Selector::parse(query.get("labelSelector").map(String::as_str).unwrap_or("")) {
            Ok(s) => s,
            Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &e),
        };
    let name = match query.get("fieldSelector").map(String::as_str) {
        None | Some("") => None,
        Some(f) => match f.strip_prefix("metadata.name=") {
            Some(n) if !n.contains(',') => Some(n.to_string()),
            _ => {
                let e = format!("the fake implements only fieldSelector=metadata.name=NAME: {f}");
                return failure(StatusCode::BAD_REQUEST, "BadRequest", &e);
            }
        },
    };
    let scope = Scope {
        rtype,
        api_version: rtype.api_version(version),
        namespace,
        selector,
        name,
    };
    if let Some(one) = one {
        return get_one(st, &scope, one);
    }
    let watching = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    if watching {
        watch(st, scope, query)
    } else {
        list(st, scope, query)
    }
}

fn list(st: &mut Store, scope: Scope, query: &HashMap<String, String>) -> Response<Body> {
    if st.failing_lists.iter().any(|p| p == scope.rtype.plural) {
        return failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "the fake fails this list on purpose",
        );
    }
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX)
        .min(st.max_page);
    let (id, offset) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let parsed = token
                .split_once(':')
                .and_then(|(id, off)| Some((id.parse::<u64>().ok()?, off.parse::<usize>().ok()?)));
            match parsed {
                Some((id, off)) if st.snapshots.contains_key(&id) => (id, off),
                _ => {
                    return failure(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        "invalid continue token",
                    )
                }
            }
        }
        None => {
            let items: Vec<Value> = st
                .objects
                .iter()
                .filter(|(k, o)| scope.matches(k, o))
                .map(|(_, o)| {
                    let mut o = scope.served(o);
                    if scope.rtype.builtin() {
                        if let Some(map) = o.as_object_mut() {
                            map.remove("apiVersion");
                            map.remove("kind");
                        }
                    }
                    o
                })
                .collect();
            let id = st.next_snapshot;
            st.next_snapshot += 1;
            st.snapshots.insert(id, Snapshot { rv: st.rv, items });
            (id, 0)
        }
    };
    let compacted_below = st.compacted_below;
    let snapshot = &st.snapshots[&id];
    if offset > 0 && snapshot.rv < compacted_below {
        return failure(
            StatusCode::GONE,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result.",
        );
    }
    let end = offset.saturating_add(limit).min(snapshot.items.len());
    let items: Vec<Value> = snapshot.items.get(offset..end).unwrap_or_default().to_vec();
    let mut metadata = json!({"resourceVersion": snapshot.rv.to_string()});
    if end < snapshot.items.len() {
        metadata["continue"] = Value::from(format!("{id}:{end}"));
        metadata["remainingItemCount"] = Value::from(snapshot.items.len() - end);
    }
    full(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", scope.rtype.kind),
            "apiVersion": scope.api_version,
            "metadata": metadata,
            "items": items,
        }),
    )
}

fn watch(st: &mut Store, scope: Scope, query: &HashMap<String, String>) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<WatchFrame>();
    let from = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let from: Option<u64> = match from {
        "" | "0" => None,
        v => match v.parse() {
            Ok(v) => Some(v),
            Err(_) => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("invalid resourceVersion {v:?}"),
                )
            }
        },
    };
    let body = |rx| {
        let stream = UnboundedReceiverStream::new(rx);
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .header("transfer-encoding", "chunked")
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .unwrap_or_else(|e| panic!("build a watch response: {e}"))
    };
    match from {
        Some(rv) if rv < st.compacted_below => {
            let message = format!("too old resource version: {rv} ({})", st.compacted_below);
            if st.gone_as_http {
                return failure(StatusCode::GONE, "Expired", &message);
            }
            // As the API server does: the watch is established, then ends with an ERROR event.
            let _ = tx.send(Ok(event("ERROR", &status(410, "Expired", &message))));
            drop(tx);
            return body(rx);
        }
        Some(rv) => {
            for l in st.log.iter().filter(|l| l.rv > rv) {
                if scope.matches(&l.key, &l.object) {
                    let _ = tx.send(Ok(event(l.kind, &scope.served(&l.object))));
                }
            }
        }
        None => {
            for (k, o) in st.objects.iter() {
                if scope.matches(k, o) {
                    let _ = tx.send(Ok(event("ADDED", &scope.served(o))));
                }
            }
        }
    }
    let bookmarks = matches!(
        query.get("allowWatchBookmarks").map(String::as_str),
        Some("true" | "1")
    );
    st.watches.push(Watch {
        scope,
        bookmarks,
        tx,
    });
    body(rx)
}

/// The key of an object the script applies, and its resource type.
pub fn key_of(object: &Value) -> (ResourceType, Key) {
    let kind = object["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("an object without kind: {object}"));
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let rtype = type_of_object(api_version, kind)
        .unwrap_or_else(|| panic!("the fake does not serve {kind}"));
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("an object without metadata.name: {object}"));
    let namespace = if rtype.namespaced {
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
    } else {
        ""
    };
    (
        rtype,
        (
            rtype.key_kind().to_string(),
            namespace.to_string(),
            name.to_string(),
        ),
    )
}
