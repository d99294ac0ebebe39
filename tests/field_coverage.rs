//! No field of Istio's networking API is dropped without a word: every field of
//! `tests/fixtures/istio-networking-v1-every-field.yaml` (one object per kind, every field set)
//! is either in [`TRANSLATED`] — meshflow generates config from it — or named by an analysis
//! message of its object (the field or one of its parents). A field newly read by the
//! parser but not translated stops being reported and fails this test until it is listed
//! here, with the translation that backs the claim.

use meshflow::config::{parse_file, FileContents, Level};
use serde_yaml_ng::Value;
use std::collections::BTreeSet;

/// Fields meshflow translates, with `[]` for any index. A field covers what is below it
/// (a map of labels, a string match).
const TRANSLATED: &[&str] = &[
    // VirtualService
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
    "spec.http[].mirrors[].destination",
    "spec.http[].mirrors[].percentage.value",
    "spec.http[].fault.delay.fixedDelay",
    "spec.http[].fault.delay.percentage.value",
    "spec.http[].fault.abort.httpStatus",
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
    // DestinationRule
    "spec.host",
    "spec.workloadSelector.matchLabels",
    "spec.trafficPolicy.loadBalancer.simple",
    "spec.trafficPolicy.loadBalancer.consistentHash",
    "spec.trafficPolicy.loadBalancer.localityLbSetting.enabled",
    "spec.trafficPolicy.loadBalancer.localityLbSetting.failoverPriority",
    "spec.subsets[].trafficPolicy.loadBalancer.warmup",
    "spec.trafficPolicy.connectionPool.tcp.connectTimeout",
    "spec.trafficPolicy.connectionPool.tcp.maxConnections",
    "spec.trafficPolicy.connectionPool.tcp.maxConnectionDuration",
    "spec.trafficPolicy.connectionPool.tcp.tcpKeepalive",
    "spec.trafficPolicy.connectionPool.tcp.idleTimeout",
    "spec.trafficPolicy.connectionPool.http.http1MaxPendingRequests",
    "spec.trafficPolicy.connectionPool.http.http2MaxRequests",
    "spec.trafficPolicy.connectionPool.http.maxRequestsPerConnection",
    "spec.trafficPolicy.connectionPool.http.maxRetries",
    "spec.trafficPolicy.connectionPool.http.idleTimeout",
    "spec.trafficPolicy.connectionPool.http.h2UpgradePolicy",
    "spec.trafficPolicy.connectionPool.http.useClientProtocol",
    "spec.trafficPolicy.connectionPool.http.maxConcurrentStreams",
    "spec.trafficPolicy.outlierDetection",
    "spec.trafficPolicy.tls.mode",
    "spec.trafficPolicy.tls.clientCertificate",
    "spec.trafficPolicy.tls.privateKey",
    "spec.trafficPolicy.tls.caCertificates",
    "spec.trafficPolicy.tls.subjectAltNames",
    "spec.trafficPolicy.tls.sni",
    "spec.trafficPolicy.tls.insecureSkipVerify",
    "spec.trafficPolicy.tls.caCrl",
    "spec.subsets[].name",
    "spec.subsets[].labels",
    "spec.subsets[].trafficPolicy.loadBalancer.simple",
    "spec.subsets[].trafficPolicy.connectionPool.tcp.connectTimeout",
    "spec.subsets[].trafficPolicy.tls.mode",
    "spec.subsets[].trafficPolicy.tls.credentialName",
    "spec.trafficPolicy.portLevelSettings[].port.number",
    "spec.trafficPolicy.portLevelSettings[].loadBalancer",
    "spec.trafficPolicy.portLevelSettings[].connectionPool.tcp.maxConnections",
    "spec.trafficPolicy.portLevelSettings[].outlierDetection",
    "spec.trafficPolicy.portLevelSettings[].tls.mode",
    // Gateway
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
    // ServiceEntry
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
    // Sidecar
    "spec.workloadSelector.labels",
    "spec.ingress[].port.number",
    "spec.ingress[].port.name",
    "spec.ingress[].port.protocol",
    "spec.ingress[].bind",
    "spec.ingress[].captureMode",
    "spec.ingress[].defaultEndpoint",
    "spec.ingress[].connectionPool.tcp.maxConnections",
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
    "spec.inboundConnectionPool.http.http1MaxPendingRequests",
    // WorkloadEntry
    "spec.address",
    "spec.labels",
    "spec.ports",
    "spec.weight",
    "spec.locality",
    "spec.serviceAccount",
    "spec.network",
];

/// Every leaf of `v` below `path`, indices as `[]`.
fn leaves(v: &Value, path: String, out: &mut BTreeSet<String>) {
    match v {
        Value::Mapping(m) if !m.is_empty() => {
            for (k, v) in m {
                let k = k
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{k:?}"));
                leaves(v, format!("{path}.{k}"), out);
            }
        }
        Value::Sequence(s) if !s.is_empty() => {
            for v in s {
                leaves(v, format!("{path}[]"), out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
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

/// The fixture's text, and what the parser makes of it.
fn fixture() -> (String, FileContents) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/istio-networking-v1-every-field.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the fixture");
    let mesh = dataflows::model::MeshConfig::default();
    let contents = parse_file(std::path::Path::new(path), &text, &mesh);
    (text, contents)
}

#[test]
fn every_networking_field_is_translated_or_reported() {
    let (text, contents) = fixture();
    assert!(
        contents.errors.is_empty(),
        "every object of the fixture is valid Istio config: {:?}",
        contents.errors
    );
    assert_eq!(
        contents.objects.len(),
        7,
        "one object per kind (two ServiceEntries: endpoints and workloadSelector exclude \
         each other)"
    );
    let docs = meshflow::config::split_documents(&text);
    let mut uncovered = Vec::new();
    let mut reported = 0;
    for ((_, parsed), (_, doc)) in contents.objects.iter().zip(&docs) {
        let value: Value = serde_yaml_ng::from_str(doc).expect("YAML");
        let mut all = BTreeSet::new();
        leaves(&value["spec"], "spec".into(), &mut all);
        let findings: Vec<String> = parsed
            .findings
            .iter()
            .map(|f| without_indices(&f.field))
            .collect();
        reported += findings.len();
        for leaf in all {
            let translated = TRANSLATED.iter().any(|t| covered_by(&leaf, t));
            let said = findings.iter().any(|f| covered_by(&leaf, f));
            if !translated && !said {
                uncovered.push(format!("{:?}: {leaf}", parsed.key.kind));
            }
        }
    }
    assert!(
        uncovered.is_empty(),
        "fields neither translated nor reported:\n{}",
        uncovered.join("\n")
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
        // TLS: an HTTPS server whose tls names a field meshflow cannot honour (which
        // certificates to accept) is not generated.
        "Gateway spec.servers[1].tls.caCrl",
        "Gateway spec.servers[1].tls.credentialNames",
        "Gateway spec.servers[1].tls.verifyCertificateSpki",
        "Gateway spec.servers[1].tls.verifyCertificateHash",
    ] {
        assert!(errors.contains(expected), "{expected} in {errors:#?}");
    }
    // Every tls of the DestinationRule (files, a Secret, per port) is generated.
    assert!(
        !errors.iter().any(|e| e.starts_with("DestinationRule")),
        "{errors:#?}"
    );
}
