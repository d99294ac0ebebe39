//! No field of Istio's networking API is dropped without a word. The API's own field list,
//! `tests/fixtures/istio-networking-v1-fields.txt` (generated from Istio's CRD schemas by
//! `scripts/istio-networking-fields.py`), is what is checked: every field in it is set by
//! `tests/fixtures/istio-networking-v1-every-field.yaml`, and every field the fixture sets is
//! either in [`TRANSLATED`] (or [`POLICY_TRANSLATED`]) — meshflow generates config from it — or named by an analysis
//! message of its object (the field or one of its parents), or its whole kind is reported as
//! not served; a field Istio's validation refuses wherever it is set ([`REFUSED`]) is set by
//! an object of its own, which is rejected naming it. A field newly read by the parser but not translated stops being reported and
//! fails this test until it is listed here, with the translation that backs the claim; a field
//! added to the API fails it until the fixture sets it. And every field translated or
//! reported has its row in the reference (`docs/reference/<kind>.md`, one table row per field
//! path), so what the code does with a field is written down where users look for it.

use meshflow::config::{parse_file, FileContents, Level};
use serde_yaml_ng::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Fields meshflow translates, by kind, with `[]` for any index. A field covers what is below
/// it (a map of labels, a string match).
const TRANSLATED: &[(&str, &[&str])] = &[
    (
        "VirtualService",
        &[
            "spec.hosts",
            "spec.gateways",
            "spec.exportTo",
            "spec.http[].name",
            "spec.http[].match[].uri",
            "spec.http[].match[].headers",
            "spec.http[].match[].scheme",
            "spec.http[].match[].method",
            "spec.http[].match[].authority",
            "spec.http[].match[].port",
            "spec.http[].match[].queryParams",
            "spec.http[].match[].ignoreUriCase",
            "spec.http[].match[].withoutHeaders",
            "spec.http[].match[].gateways",
            "spec.http[].match[].sourceNamespace",
            "spec.http[].match[].sourceLabels",
            "spec.http[].route[].destination.host",
            "spec.http[].route[].destination.subset",
            "spec.http[].route[].destination.port.number",
            "spec.http[].route[].weight",
            "spec.http[].route[].headers.request.set",
            "spec.http[].route[].headers.request.add",
            "spec.http[].route[].headers.request.remove[]",
            "spec.http[].route[].headers.response.set",
            "spec.http[].route[].headers.response.add",
            "spec.http[].route[].headers.response.remove[]",
            "spec.http[].timeout",
            "spec.http[].retries.attempts",
            "spec.http[].retries.perTryTimeout",
            "spec.http[].retries.retryOn",
            "spec.http[].retries.retryRemoteLocalities",
            "spec.http[].retries.retryIgnorePreviousHosts",
            "spec.http[].retries.backoff",
            "spec.http[].redirect.uri",
            "spec.http[].redirect.authority",
            "spec.http[].redirect.port",
            "spec.http[].redirect.derivePort",
            "spec.http[].redirect.scheme",
            "spec.http[].redirect.redirectCode",
            "spec.http[].directResponse.status",
            "spec.http[].directResponse.body.string",
            "spec.http[].rewrite.uri",
            "spec.http[].rewrite.authority",
            "spec.http[].rewrite.uriRegexRewrite",
            "spec.http[].headers.request",
            "spec.http[].headers.response",
            "spec.http[].mirror.host",
            "spec.http[].mirror.subset",
            "spec.http[].mirror.port.number",
            "spec.http[].mirrorPercentage.value",
            "spec.http[].mirrorPercent",
            "spec.http[].mirror_percent",
            "spec.http[].mirrors[].destination",
            "spec.http[].mirrors[].percentage.value",
            "spec.http[].fault.delay.fixedDelay",
            "spec.http[].fault.delay.percentage.value",
            "spec.http[].fault.abort.httpStatus",
            "spec.http[].fault.abort.grpcStatus",
            "spec.http[].fault.abort.percentage.value",
            "spec.http[].corsPolicy.allowOrigins[].exact",
            "spec.http[].corsPolicy.allowOrigins[].prefix",
            "spec.http[].corsPolicy.allowOrigins[].regex",
            "spec.http[].corsPolicy.allowOrigin[]",
            "spec.http[].corsPolicy.allowMethods[]",
            "spec.http[].corsPolicy.allowHeaders[]",
            "spec.http[].corsPolicy.exposeHeaders[]",
            "spec.http[].corsPolicy.maxAge",
            "spec.http[].corsPolicy.allowCredentials",
            "spec.http[].corsPolicy.unmatchedPreflights",
            "spec.http[].delegate",
            "spec.tcp[].match[].port",
            "spec.tcp[].match[].destinationSubnets",
            "spec.tcp[].match[].gateways",
            "spec.tcp[].match[].sourceNamespace",
            "spec.tcp[].match[].sourceLabels",
            "spec.tcp[].route[].destination.host",
            "spec.tcp[].route[].destination.subset",
            "spec.tcp[].route[].destination.port.number",
            "spec.tcp[].route[].weight",
            "spec.tls[].match[].sniHosts",
            "spec.tls[].match[].port",
            "spec.tls[].match[].destinationSubnets",
            "spec.tls[].match[].gateways",
            "spec.tls[].match[].sourceNamespace",
            "spec.tls[].match[].sourceLabels",
            "spec.tls[].route[].destination.host",
            "spec.tls[].route[].destination.subset",
            "spec.tls[].route[].destination.port.number",
            "spec.tls[].route[].weight",
        ],
    ),
    // its policies: `POLICY_TRANSLATED`
    (
        "DestinationRule",
        &[
            "spec.host",
            "spec.exportTo",
            "spec.workloadSelector.matchLabels",
            "spec.subsets[].name",
            "spec.subsets[].labels",
        ],
    ),
    (
        "Gateway",
        &[
            "spec.selector",
            "spec.servers[].port.number",
            "spec.servers[].port.name",
            "spec.servers[].port.protocol",
            "spec.servers[].bind",
            "spec.servers[].hosts",
            "spec.servers[].tls.httpsRedirect",
            "spec.servers[].tls.mode",
            "spec.servers[].tls.serverCertificate",
            "spec.servers[].tls.privateKey",
            "spec.servers[].tls.caCertificates",
            "spec.servers[].tls.credentialName",
            "spec.servers[].tls.subjectAltNames",
            "spec.servers[].tls.minProtocolVersion",
            "spec.servers[].tls.maxProtocolVersion",
            "spec.servers[].tls.cipherSuites",
        ],
    ),
    (
        "ServiceEntry",
        &[
            "spec.hosts",
            "spec.exportTo",
            "spec.workloadSelector.labels",
            "spec.addresses",
            "spec.ports[].number",
            "spec.ports[].name",
            "spec.ports[].protocol",
            "spec.ports[].targetPort",
            "spec.resolution",
            "spec.endpoints[].address",
            "spec.endpoints[].ports",
            "spec.endpoints[].labels",
            "spec.endpoints[].weight",
            "spec.endpoints[].locality",
            "spec.endpoints[].serviceAccount",
            "spec.endpoints[].network",
            "spec.subjectAltNames",
            "spec.location",
        ],
    ),
    (
        "Sidecar",
        &[
            "spec.workloadSelector.labels",
            "spec.ingress[].port.number",
            "spec.ingress[].port.name",
            "spec.ingress[].port.protocol",
            "spec.ingress[].bind",
            "spec.ingress[].captureMode",
            "spec.ingress[].defaultEndpoint",
            "spec.ingress[].connectionPool",
            // TLS terminated for clients outside the mesh (`httpsRedirect: false` does
            // nothing; `true` is refused, as Istio's validation refuses it).
            "spec.ingress[].tls.mode",
            "spec.ingress[].tls.serverCertificate",
            "spec.ingress[].tls.privateKey",
            "spec.ingress[].tls.caCertificates",
            "spec.ingress[].tls.minProtocolVersion",
            "spec.ingress[].tls.maxProtocolVersion",
            "spec.ingress[].tls.cipherSuites",
            "spec.ingress[].tls.httpsRedirect",
            "spec.egress[].port.number",
            "spec.egress[].port.name",
            "spec.egress[].port.protocol",
            "spec.egress[].bind",
            "spec.egress[].captureMode",
            "spec.egress[].hosts",
            "spec.outboundTrafficPolicy.mode",
            "spec.outboundTrafficPolicy.egressProxy.host",
            "spec.outboundTrafficPolicy.egressProxy.subset",
            "spec.outboundTrafficPolicy.egressProxy.port.number",
            "spec.inboundConnectionPool",
        ],
    ),
    (
        "WorkloadEntry",
        &[
            "spec.address",
            "spec.labels",
            "spec.ports",
            "spec.weight",
            "spec.locality",
            "spec.serviceAccount",
            "spec.network",
        ],
    ),
];

/// Fields Istio's validation refuses wherever they are set, by kind: no valid object sets
/// them, so the fixture sets each in an object of its own, which meshflow rejects naming the
/// field, as Istio does.
const REFUSED: &[(&str, &str)] = &[
    ("Sidecar", "spec.ingress[].tls.credentialName"),
    ("Sidecar", "spec.ingress[].tls.subjectAltNames"),
];

/// The fields of a DestinationRule's policy meshflow translates, wherever the policy is: the
/// rule's `trafficPolicy`, a subset's, and the `portLevelSettings[]` of either
/// ([`POLICY_AT`]). A `portLevelSettings` entry has no `tunnel`, `proxyProtocol` or
/// `retryBudget`: none of those is translated anyway.
const POLICY_TRANSLATED: &[&str] = &[
    "loadBalancer.simple",
    "loadBalancer.consistentHash.httpHeaderName",
    "loadBalancer.consistentHash.httpCookie.name",
    "loadBalancer.consistentHash.httpCookie.path",
    "loadBalancer.consistentHash.httpCookie.ttl",
    "loadBalancer.consistentHash.useSourceIp",
    "loadBalancer.consistentHash.httpQueryParameterName",
    "loadBalancer.consistentHash.ringHash.minimumRingSize",
    "loadBalancer.consistentHash.maglev.tableSize",
    "loadBalancer.consistentHash.minimumRingSize",
    "loadBalancer.localityLbSetting.enabled",
    "loadBalancer.localityLbSetting.distribute",
    "loadBalancer.localityLbSetting.failover",
    "loadBalancer.localityLbSetting.failoverPriority",
    "loadBalancer.warmup.duration",
    "loadBalancer.warmup.minimumPercent",
    "loadBalancer.warmup.aggression",
    "loadBalancer.warmupDurationSecs",
    "connectionPool.tcp.connectTimeout",
    "connectionPool.tcp.maxConnections",
    "connectionPool.tcp.maxConnectionDuration",
    "connectionPool.tcp.tcpKeepalive",
    "connectionPool.tcp.idleTimeout",
    "connectionPool.http.http1MaxPendingRequests",
    "connectionPool.http.http2MaxRequests",
    "connectionPool.http.maxRequestsPerConnection",
    "connectionPool.http.maxRetries",
    "connectionPool.http.idleTimeout",
    "connectionPool.http.h2UpgradePolicy",
    "connectionPool.http.useClientProtocol",
    "connectionPool.http.maxConcurrentStreams",
    "outlierDetection.consecutive5xxErrors",
    "outlierDetection.consecutiveGatewayErrors",
    "outlierDetection.consecutiveLocalOriginFailures",
    "outlierDetection.splitExternalLocalOriginErrors",
    "outlierDetection.interval",
    "outlierDetection.baseEjectionTime",
    "outlierDetection.maxEjectionPercent",
    "outlierDetection.minHealthPercent",
    "tls.mode",
    "tls.clientCertificate",
    "tls.privateKey",
    "tls.caCertificates",
    "tls.credentialName",
    "tls.subjectAltNames",
    "tls.sni",
    "tls.insecureSkipVerify",
    "tls.caCrl",
];

/// Where a DestinationRule has a policy; `portLevelSettings[]` entries add `port.number`.
const POLICY_AT: &[&str] = &[
    "spec.trafficPolicy",
    "spec.trafficPolicy.portLevelSettings[]",
    "spec.subsets[].trafficPolicy",
    "spec.subsets[].trafficPolicy.portLevelSettings[]",
];

/// Whether meshflow translates the field `leaf` of an object of `kind`.
fn translated(kind: &str, leaf: &str) -> bool {
    let of_kind = TRANSLATED.iter().filter(|(k, _)| *k == kind);
    if of_kind
        .flat_map(|(_, fields)| *fields)
        .any(|t| covered_by(leaf, t))
    {
        return true;
    }
    kind == "DestinationRule"
        && POLICY_AT.iter().any(|at| {
            leaf.strip_prefix(at)
                .and_then(|r| r.strip_prefix('.'))
                .is_some_and(|rest| {
                    (at.ends_with("[]") && covered_by(rest, "port.number"))
                        || POLICY_TRANSLATED.iter().any(|t| covered_by(rest, t))
                })
        })
}

/// A field path as segments: keys, `[]` for a list item; in the API's list `*` stands for any
/// map key.
type Segments = Vec<String>;

/// Every leaf of `v` below `path`.
fn leaves(v: &Value, path: Segments, out: &mut BTreeSet<Segments>) {
    match v {
        Value::Mapping(m) if !m.is_empty() => {
            for (k, v) in m {
                let k = k
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{k:?}"));
                let mut p = path.clone();
                p.push(k);
                leaves(v, p, out);
            }
        }
        Value::Sequence(s) if !s.is_empty() => {
            let mut p = path.clone();
            p.push("[]".into());
            for v in s {
                leaves(v, p.clone(), out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// `spec.http[].match[].uri` as segments.
fn segments(path: &str) -> Segments {
    let mut out = Vec::new();
    for part in path.split('.') {
        let mut name = part;
        let mut lists = 0;
        while let Some(n) = name.strip_suffix("[]") {
            name = n;
            lists += 1;
        }
        out.push(name.to_string());
        out.extend(std::iter::repeat_n("[]".to_string(), lists));
    }
    out
}

/// Segments back to a path: `spec.http[].match[].uri`.
fn joined(segs: &[String]) -> String {
    let mut out = String::new();
    for s in segs {
        if s == "[]" {
            out.push_str("[]");
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(s);
        }
    }
    out
}

/// Whether leaf `leaf` sets API field `field` (a leaf of a map or of an object of unknown
/// fields is below the field).
fn sets(leaf: &[String], field: &[String]) -> bool {
    leaf.len() >= field.len()
        && field
            .iter()
            .zip(leaf)
            .all(|(f, l)| f == l || (f == "*" && l != "[]"))
}

/// `spec.http[2].fault` → `spec.http[].fault`.
fn without_indices(field: &str) -> String {
    let mut out = String::new();
    let mut in_index = false;
    for c in field.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            c => out.push(c),
        }
    }
    out
}

fn covered_by(leaf: &str, field: &str) -> bool {
    leaf == field
        || leaf
            .strip_prefix(field)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// The API's field list: kind → fields (`tests/fixtures/istio-networking-v1-fields.txt`).
fn api_fields() -> BTreeMap<String, Vec<String>> {
    fields_of("istio-networking-v1-fields.txt")
}

/// A field list of `tests/fixtures/`: kind → fields.
fn fields_of(file: &str) -> BTreeMap<String, Vec<String>> {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("the field list");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut kind = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(k) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            kind = Some(k.to_string());
            continue;
        }
        let kind = kind.clone().expect("a [Kind] line before the first field");
        out.entry(kind).or_default().push(line.to_string());
    }
    out
}

/// One document of the fixture: its kind, first line and the leaves of its spec.
struct Doc {
    kind: String,
    line: usize,
    leaves: BTreeSet<Segments>,
}

/// The fixture's documents, and what the parser makes of the file.
fn fixture() -> (Vec<Doc>, FileContents) {
    fixture_of("istio-networking-v1-every-field.yaml")
}

/// A fixture of `tests/fixtures/`: its documents, and what the parser makes of the file.
fn fixture_of(file: &str) -> (Vec<Doc>, FileContents) {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("the fixture");
    let mesh = dataflows::model::MeshConfig::default();
    let contents = parse_file(std::path::Path::new(&path), &text, &mesh);
    let docs = meshflow::config::split_documents(&text)
        .into_iter()
        .map(|(line, doc)| {
            let value: Value = serde_yaml_ng::from_str(&doc).expect("YAML");
            let kind = value["kind"].as_str().expect("a kind").to_string();
            let mut leaves_of = BTreeSet::new();
            leaves(&value["spec"], vec!["spec".into()], &mut leaves_of);
            Doc {
                kind,
                line,
                leaves: leaves_of,
            }
        })
        .collect();
    (docs, contents)
}

#[test]
fn the_fixture_sets_every_field_of_the_api() {
    let api = api_fields();
    let (docs, _) = fixture();
    assert_eq!(
        api.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "DestinationRule",
            "Gateway",
            "ServiceEntry",
            "Sidecar",
            "VirtualService",
            "WorkloadEntry",
            "WorkloadGroup"
        ],
        "the networking.istio.io v1 kinds"
    );
    assert!(api.values().map(Vec::len).sum::<usize>() > 500);
    let mut unset = Vec::new();
    let mut unknown = Vec::new();
    for (kind, fields) in &api {
        let fields: Vec<Segments> = fields.iter().map(|f| segments(f)).collect();
        let set: Vec<&Segments> = docs
            .iter()
            .filter(|d| &d.kind == kind)
            .flat_map(|d| &d.leaves)
            .collect();
        for f in &fields {
            if !set.iter().any(|l| sets(l, f)) {
                unset.push(format!("{kind}: {}", joined(f)));
            }
        }
        // Nor does the fixture set what the API does not have (a misspelt field would test
        // nothing).
        for l in set {
            if !fields.iter().any(|f| sets(l, f)) {
                unknown.push(format!("{kind}: {}", joined(l)));
            }
        }
    }
    assert!(
        unset.is_empty(),
        "fields of the API the fixture does not set:\n{}",
        unset.join("\n")
    );
    assert!(
        unknown.is_empty(),
        "fields the fixture sets that are not in the API:\n{}",
        unknown.join("\n")
    );
    let kinds: BTreeSet<&str> = docs.iter().map(|d| d.kind.as_str()).collect();
    assert!(kinds.iter().all(|k| api.contains_key(*k)), "{kinds:?}");
}

#[test]
fn every_networking_field_is_translated_or_reported() {
    let (docs, contents) = fixture();
    // Every object of the fixture is valid Istio config, but those that set a field Istio
    // refuses: each is rejected naming that field.
    let refused: BTreeSet<(String, String)> = contents
        .errors
        .iter()
        .map(|e| {
            let doc = docs
                .iter()
                .find(|d| d.line == e.line)
                .unwrap_or_else(|| panic!("a document at line {}", e.line));
            (doc.kind.clone(), without_indices(&e.invalid.field))
        })
        .collect();
    let expected: BTreeSet<(String, String)> = REFUSED
        .iter()
        .map(|(k, f)| (k.to_string(), f.to_string()))
        .collect();
    assert_eq!(
        contents.errors.len(),
        REFUSED.len(),
        "{:?}",
        contents.errors
    );
    assert_eq!(refused, expected, "{:?}", contents.errors);
    let rejected: BTreeSet<usize> = contents.errors.iter().map(|e| e.line).collect();
    let mut uncovered = Vec::new();
    let mut reported = 0;
    for doc in docs.iter().filter(|d| !rejected.contains(&d.line)) {
        if let Some((_, kind)) = contents.unserved.iter().find(|(l, _)| *l == doc.line) {
            // A kind meshflow does not serve is reported once as such: all its fields with it.
            assert!(kind.starts_with(&doc.kind), "{kind}");
            assert_eq!(doc.kind, "WorkloadGroup", "the one kind not served");
            continue;
        }
        let (_, parsed) = contents
            .objects
            .iter()
            .find(|(l, _)| *l == doc.line)
            .unwrap_or_else(|| panic!("the {} at line {} is an object", doc.kind, doc.line));
        assert_eq!(format!("{:?}", parsed.key.kind), doc.kind);
        let findings: Vec<String> = parsed
            .findings
            .iter()
            .map(|f| without_indices(&f.field))
            .collect();
        reported += findings.len();
        for leaf in &doc.leaves {
            let leaf = joined(leaf);
            let said = findings.iter().any(|f| covered_by(&leaf, f));
            if !translated(&doc.kind, &leaf) && !said {
                uncovered.push(format!("{}: {leaf}", doc.kind));
            }
        }
    }
    uncovered.sort();
    uncovered.dedup();
    assert!(
        uncovered.is_empty(),
        "fields neither translated nor reported:\n{}",
        uncovered.join("\n")
    );
    assert!(
        !contents.unserved.is_empty()
            && contents
                .unserved
                .iter()
                .all(|(_, k)| k == "WorkloadGroup (networking.istio.io/v1)"),
        "{:?}",
        contents.unserved
    );
    // The fixture sets fields meshflow does not translate: they were reported.
    assert!(reported > 12, "{reported} findings");
}

#[test]
fn restricting_fields_not_honoured_are_errors() {
    let (_, contents) = fixture();
    let errors: BTreeSet<String> = contents
        .objects
        .iter()
        .flat_map(|(_, p)| {
            p.findings
                .iter()
                .filter(|f| f.level == Level::Error)
                .map(|f| format!("{:?} {}", p.key.kind, f.field))
        })
        .collect();
    for expected in [
        // Match conditions: the route is left out.
        "VirtualService spec.tcp[0].match[0].sourceSubnet",
        // A query parameter by prefix (Istio supports exact and regex only).
        "VirtualService spec.http[10].match[0].queryParams.p.prefix",
        // TLS: an HTTPS server whose tls names a field meshflow cannot honour (which
        // certificates to accept) is not generated.
        "Gateway spec.servers[1].tls.caCrl",
        "Gateway spec.servers[1].tls.credentialNames",
        "Gateway spec.servers[1].tls.verifyCertificateSpki",
        "Gateway spec.servers[1].tls.verifyCertificateHash",
        "Gateway spec.servers[2].tls.tlsCertificates",
        "Gateway spec.servers[2].tls.caCertCredentialName",
        // A Sidecar ingress listener's tls naming what meshflow cannot honour: its inbound
        // cluster has no endpoints.
        "Sidecar spec.ingress[1].tls.caCrl",
        "Sidecar spec.ingress[1].tls.caCertCredentialName",
        "Sidecar spec.ingress[1].tls.credentialNames",
        "Sidecar spec.ingress[1].tls.tlsCertificates",
        "Sidecar spec.ingress[1].tls.verifyCertificateSpki",
        "Sidecar spec.ingress[1].tls.verifyCertificateHash",
    ] {
        assert!(errors.contains(expected), "{expected} in {errors:#?}");
    }
    // Every tls of the DestinationRule (files, a Secret, per port) is generated.
    assert!(
        !errors.iter().any(|e| e.starts_with("DestinationRule")),
        "{errors:#?}"
    );
}

/// The reference file (`docs/reference/`) of each kind meshflow serves: one table row per
/// field path.
const REFERENCE_FILES: &[(&str, &str)] = &[
    ("VirtualService", "virtual_service.md"),
    ("DestinationRule", "destination_rule.md"),
    ("Gateway", "gateway.md"),
    ("ServiceEntry", "service_entry.md"),
    ("Sidecar", "sidecar.md"),
    ("WorkloadEntry", "workload_entry.md"),
];

/// The field paths a reference file has rows for, in order: every table row (a line opening
/// with `|`) but the header and its rule; each row's first cell must be one path in backticks,
/// `` | `spec.http[].match[].uri.exact` | … ``. A row whose first cell is anything else is
/// returned as an error, so a row cannot slip past the check by its form.
fn reference_rows(file: &str) -> (Vec<String>, Vec<String>) {
    let path = format!("{}/docs/reference/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut rows = Vec::new();
    let mut malformed = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix('|') else {
            continue;
        };
        let first = rest.split('|').next().unwrap_or_default().trim();
        if first == "field" || first.starts_with("---") {
            continue;
        }
        let path = first
            .strip_prefix('`')
            .and_then(|p| p.strip_suffix('`'))
            .filter(|p| !p.contains('`') && !p.contains(' '));
        match path {
            Some(p) => rows.push(p.to_string()),
            None => malformed.push(format!("{file}:{}: {first}", n + 1)),
        }
    }
    (rows, malformed)
}

/// The row that documents `field` of `kind`: the field itself, but for a DestinationRule's
/// policy, which is written once at `spec.trafficPolicy.…` and holds at a subset's policy
/// and at `portLevelSettings[]` of either ([`POLICY_AT`]).
fn reference_path(kind: &str, field: &str) -> String {
    if kind != "DestinationRule" {
        return field.to_string();
    }
    let mut at: Vec<&str> = POLICY_AT.to_vec();
    at.sort_by_key(|a| std::cmp::Reverse(a.len()));
    for a in at {
        let Some(rest) = field.strip_prefix(a).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        if a.ends_with("[]") && rest == "port.number" {
            return "spec.trafficPolicy.portLevelSettings[].port.number".to_string();
        }
        return format!("spec.trafficPolicy.{rest}");
    }
    field.to_string()
}

#[test]
fn every_translated_or_reported_field_has_a_reference_row() {
    let api = api_fields();
    let (docs, contents) = fixture();
    let rejected: BTreeSet<usize> = contents.errors.iter().map(|e| e.line).collect();
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    let mut malformed = Vec::new();
    let mut unknown = Vec::new();
    for (kind, file) in REFERENCE_FILES {
        let fields = api.get(*kind).expect("a kind of the API");
        // What the fixture's valid objects of this kind set, with what was said of them.
        let said: Vec<(String, Vec<String>)> = docs
            .iter()
            .filter(|d| &d.kind == kind && !rejected.contains(&d.line))
            .flat_map(|d| {
                let findings: Vec<String> = contents
                    .objects
                    .iter()
                    .find(|(l, _)| *l == d.line)
                    .map(|(_, p)| {
                        p.findings
                            .iter()
                            .map(|f| without_indices(&f.field))
                            .collect()
                    })
                    .unwrap_or_default();
                d.leaves.iter().map(move |l| (joined(l), findings.clone()))
            })
            .collect();
        // A field is translated or reported when a leaf that sets it is (a field Istio's
        // validation refuses is reported by the rejection of its object).
        let (needed, unsaid): (Vec<&String>, Vec<&String>) = fields.iter().partition(|f| {
            REFUSED.iter().any(|(k, r)| k == kind && covered_by(f, r))
                || said.iter().any(|(leaf, findings)| {
                    sets(&segments(leaf), &segments(f))
                        && (translated(kind, leaf) || findings.iter().any(|x| covered_by(leaf, x)))
                })
        });
        // Every field of a served kind is translated or reported (the test above checks
        // it), so each needs its row.
        unknown.extend(unsaid.iter().map(|f| format!("{kind} {f}")));
        let (rows, bad) = reference_rows(file);
        malformed.extend(bad);
        let mut seen = BTreeSet::new();
        for row in &rows {
            if !fields.contains(row) {
                stale.push(format!("{file}: `{row}` is not a field of {kind}"));
            }
            if !seen.insert(row) {
                stale.push(format!("{file}: `{row}` has two rows"));
            }
        }
        for f in needed {
            let row = reference_path(kind, f);
            if !rows.contains(&row) {
                missing.push(format!("{file}: {kind} {f} (row `{row}`)"));
            }
        }
    }
    assert!(
        malformed.is_empty(),
        "table rows whose first cell is not one field path in backticks:\n{}",
        malformed.join("\n")
    );
    assert!(
        missing.is_empty(),
        "fields translated or reported without a row in docs/reference/:\n{}",
        missing.join("\n")
    );
    assert!(
        stale.is_empty(),
        "rows of docs/reference/ that name no field of the API:\n{}",
        stale.join("\n")
    );
    assert!(
        unknown.is_empty(),
        "fields of the API neither translated nor reported:\n{}",
        unknown.join("\n")
    );
}

/// The security API (security.istio.io v1): fields meshflow translates, by kind (see
/// `docs/reference/security.md`). `targetRef`/`targetRefs` are not: each is an error finding
/// (the policy is for Gateway API gateways and waypoints, which meshflow does not serve).
const SECURITY_TRANSLATED: &[(&str, &[&str])] = &[
    (
        "AuthorizationPolicy",
        &[
            "spec.selector",
            "spec.action",
            "spec.provider",
            "spec.rules",
        ],
    ),
    (
        "PeerAuthentication",
        &["spec.selector", "spec.mtls", "spec.portLevelMtls"],
    ),
    ("RequestAuthentication", &["spec.selector", "spec.jwtRules"]),
];

/// Fields of the security API that are reported, not translated: (kind, field, the field
/// of the error finding that says so).
const SECURITY_REPORTED: &[(&str, &str, &str)] = &[
    ("AuthorizationPolicy", "spec.targetRef", "spec.targetRef"),
    ("AuthorizationPolicy", "spec.targetRefs", "spec.targetRefs"),
    ("RequestAuthentication", "spec.targetRef", "spec.targetRef"),
    (
        "RequestAuthentication",
        "spec.targetRefs",
        "spec.targetRefs",
    ),
];

fn security_translated(kind: &str, leaf: &str) -> bool {
    SECURITY_TRANSLATED
        .iter()
        .filter(|(k, _)| *k == kind)
        .flat_map(|(_, fields)| *fields)
        .any(|t| covered_by(leaf, t))
}

/// Every field of the security API is set by its fixture, nothing else is, and each is
/// translated or, where not, named by an error finding of its object; every object of the
/// fixture is accepted. A field added to the API fails here until it is read (a field that
/// restricts traffic must never pass unread: Istio's `trustDomains` and `presence` did).
#[test]
fn every_security_field_is_set_and_translated_or_reported() {
    let api = fields_of("istio-security-v1-fields.txt");
    let (docs, contents) = fixture_of("istio-security-v1-every-field.yaml");
    assert_eq!(
        api.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "AuthorizationPolicy",
            "PeerAuthentication",
            "RequestAuthentication"
        ]
    );
    assert!(contents.errors.is_empty(), "{:?}", contents.errors);
    let mut unset = Vec::new();
    let mut unknown = Vec::new();
    for (kind, fields) in &api {
        let fields: Vec<Segments> = fields.iter().map(|f| segments(f)).collect();
        let set: Vec<&Segments> = docs
            .iter()
            .filter(|d| &d.kind == kind)
            .flat_map(|d| &d.leaves)
            .collect();
        unset.extend(
            fields
                .iter()
                .filter(|f| !set.iter().any(|l| sets(l, f)))
                .map(|f| format!("{kind}: {}", joined(f))),
        );
        unknown.extend(
            set.iter()
                .filter(|l| !fields.iter().any(|f| sets(l, f)))
                .map(|l| format!("{kind}: {}", joined(l))),
        );
    }
    assert!(
        unset.is_empty(),
        "fields the fixture does not set:\n{}",
        unset.join("\n")
    );
    assert!(
        unknown.is_empty(),
        "fields not in the API:\n{}",
        unknown.join("\n")
    );
    let mut uncovered = Vec::new();
    for doc in &docs {
        let (_, parsed) = contents
            .objects
            .iter()
            .find(|(l, _)| *l == doc.line)
            .unwrap_or_else(|| panic!("the {} at line {} is an object", doc.kind, doc.line));
        let errors: Vec<String> = parsed
            .findings
            .iter()
            .filter(|f| f.level == Level::Error)
            .map(|f| without_indices(&f.field))
            .collect();
        // Nothing of the security API is reported as merely ignored (a warning).
        let warned: Vec<&str> = parsed
            .findings
            .iter()
            .filter(|f| f.level == Level::Warning)
            .map(|f| f.field.as_str())
            .collect();
        assert!(
            warned.is_empty(),
            "{} line {}: {warned:?}",
            doc.kind,
            doc.line
        );
        for leaf in &doc.leaves {
            let leaf = joined(leaf);
            let reported = SECURITY_REPORTED.iter().any(|(k, f, at)| {
                *k == doc.kind && covered_by(&leaf, f) && errors.iter().any(|e| e == at)
            });
            if !security_translated(&doc.kind, &leaf) && !reported {
                uncovered.push(format!("{}: {leaf}", doc.kind));
            }
        }
    }
    uncovered.sort();
    uncovered.dedup();
    assert!(
        uncovered.is_empty(),
        "security fields neither translated nor reported:\n{}",
        uncovered.join("\n")
    );
}

/// Every field of the security API has its row in `docs/reference/security.md` (first cell
/// `` `Kind:field` ``), and every row names a field of the API.
#[test]
fn every_security_field_has_a_reference_row() {
    let api = fields_of("istio-security-v1-fields.txt");
    let (rows, malformed) = reference_rows("security.md");
    assert!(malformed.is_empty(), "{malformed:?}");
    let all: BTreeSet<String> = api
        .iter()
        .flat_map(|(k, fs)| fs.iter().map(move |f| format!("{k}:{f}")))
        .collect();
    let listed: BTreeSet<String> = rows.iter().cloned().collect();
    let missing: Vec<&String> = all.iter().filter(|f| !listed.contains(*f)).collect();
    let stale: Vec<&String> = listed.iter().filter(|r| !all.contains(*r)).collect();
    assert!(missing.is_empty(), "fields without a row: {missing:#?}");
    assert!(stale.is_empty(), "rows that name no field: {stale:#?}");
}
