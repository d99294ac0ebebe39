//! Golden files of the Envoy configuration meshflow generates for the bundled bookinfo example.
//!
//! The inputs are `examples/bookinfo/config`, read by the file source exactly as `meshflow serve`
//! reads it, plus the two proxies whose bootstraps ship next to it (`envoy-gateway.yaml`, the
//! ingress gateway router, and `envoy-sidecar.yaml`, the `sleep` pod's sidecar): their node id and
//! metadata are read from those files and parsed by the same code the xDS server uses.
//!
//! Each proxy's resources are computed twice, by the naive full recompute and by the incremental
//! dataflow engine (one batch), which must agree exactly; then they are rendered as text — per
//! resource a header `== CDS <name> (<version>)` followed by the decoded protobuf (`{:#?}`; `Any`
//! payloads of the types meshflow emits are decoded in place, others shown as hex; fields at their
//! proto3 unset value — `None`, empty, `false` — are left out, as in Envoy's config dump) — and
//! compared with `tests/golden/<proxy>.txt`.
//!
//! After an intended change of the generated config, regenerate and review the diff:
//! `UPDATE_GOLDEN=1 cargo nextest run --test golden`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use dataflows::driver::{Batch, Engine};
use dataflows::materialize::Materialized;
use dataflows::model::{MeshConfig, Proxy, Record, ResourceType};
use dataflows::naive::{self, ProxyConfigs, Snapshot};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::{FilterConfig, RouteConfiguration};
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::listener::original_dst::v3::OriginalDst;
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, Secret, UpstreamTlsContext,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use meshflow::demo::simulated::node_of;
use meshflow::sources::files::FileSource;
use meshflow::xds::node::proxy_from_node;
use prost::{Message, Name};

/// The proxies of the bookinfo example: golden file stem and Envoy bootstrap.
const PROXIES: [(&str, &str); 3] = [
    ("ingressgateway", "envoy-gateway.yaml"),
    ("sleep-sidecar", "envoy-sidecar.yaml"),
    ("grpc-client", "grpc-bootstrap.json"),
];

/// The proxies of the tcp-echo example (Istio's TCP traffic shifting task): its TCP gateway,
/// a captured sidecar seeing TCP and HTTP services on one port (and a service whose ports
/// name no protocol), and that service's own sidecar (inbound chains told per connection).
const TCP_PROXIES: [(&str, &str); 3] = [
    ("tcp-echo-gateway", "envoy-gateway.yaml"),
    ("tcp-echo-sidecar", "envoy-sidecar.yaml"),
    ("tcp-echo-legacy", "envoy-legacy.yaml"),
];

/// The secure ingress gateway of `examples/gateway-tls` (HTTPS, MUTUAL, passthrough and
/// httpsRedirect servers, their Secret served over SDS).
const TLS_PROXIES: [(&str, &str); 1] = [("gateway-tls", "envoy-gateway.yaml")];

const MTLS_PROXIES: [(&str, &str); 2] = [
    ("istio-mutual-sleep", "envoy-sleep.yaml"),
    ("istio-mutual-reviews", "envoy-reviews.yaml"),
];

/// `examples/tls-ports`: a sidecar whose namespace has the rule's Secret, and a gateway
/// whose namespace has not.
const TLS_PORTS_PROXIES: [(&str, &str); 2] = [
    ("tls-ports-sleep", "envoy-sleep.yaml"),
    ("tls-ports-gateway", "envoy-gateway.yaml"),
];

/// `examples/tls-sni`: a captured sidecar routing a TLS port by SNI.
const TLS_SNI_PROXIES: [(&str, &str); 1] = [("tls-sni-sidecar", "envoy-sidecar.yaml")];

/// `examples/locality`: sleep sidecars in r1/z1 and in r2/z1.
const LOCALITY_PROXIES: [(&str, &str); 2] = [
    ("locality-sleep-r1", "envoy-sleep-r1.yaml"),
    ("locality-sleep-r2", "envoy-sleep-r2.yaml"),
];

/// `examples/traffic-management`: the captured `sleep` sidecar, the ingress gateway, the
/// `productpage` sidecar (not selected by `sourceLabels` for `sleep`) and a `sleep` sidecar
/// of the `staging` namespace (its own VirtualService for reviews; outside `sourceNamespace`).
const TRAFFIC_PROXIES: [(&str, &str); 4] = [
    ("traffic-sleep", "envoy-sidecar.yaml"),
    ("traffic-gateway", "envoy-gateway.yaml"),
    ("traffic-productpage", "envoy-productpage.yaml"),
    ("traffic-staging-sleep", "envoy-staging-sleep.yaml"),
];

/// `examples/service-registry`: the `frontend` sidecar its Sidecar shapes, and a `sleep`
/// sidecar that sees everything.
const REGISTRY_PROXIES: [(&str, &str); 2] = [
    ("registry-frontend", "envoy-frontend.yaml"),
    ("registry-sleep", "envoy-sleep.yaml"),
];

/// A stand-in for the root a `serve` CA has (any PEM: the goldens show it as it is sent).
const GOLDEN_ROOT: &str =
    "-----BEGIN CERTIFICATE-----\nbWVzaGZsb3cgZ29sZGVuIHJvb3Q=\n-----END CERTIFICATE-----\n";

const UPDATE_HINT: &str = "UPDATE_GOLDEN=1 cargo nextest run --test golden";

/// Proves that the naive recompute and the incremental dataflow generate identical resources
/// for the bookinfo gateway, the `sleep` sidecar and a proxyless gRPC client, and that those
/// resources match the reviewed golden files `tests/golden/ingressgateway.txt`,
/// `tests/golden/sleep-sidecar.txt` and `tests/golden/grpc-client.txt` (rewritten instead
/// when `UPDATE_GOLDEN=1`).
#[test]
fn bookinfo_config_matches_golden_files() {
    // As Istio's `destination-rule-all.yaml`, ratings has a subset v2 and only ratings-v1
    // runs: MF0034 says so (Istio's IST0173).
    check_example_expecting(
        "bookinfo",
        &PROXIES,
        MeshConfig::default(),
        &["subset \"v2\" selects none of the endpoints of ratings"],
    );
}

/// As for bookinfo, for `examples/tcp-echo`: TCP listeners of a gateway (weighted subsets)
/// and of a captured sidecar (chains by service address, beside the HTTP chain of a port
/// shared with an HTTP service), against `tests/golden/tcp-echo-*.txt`.
#[test]
fn tcp_echo_config_matches_golden_files() {
    // The legacy service's unnamed and `admin` ports are detected per connection, on
    // purpose: MF0026 says so for each.
    check_example_expecting(
        "tcp-echo",
        &TCP_PROXIES,
        MeshConfig::default(),
        &[
            "port \"\" (9000): neither its name",
            "port \"admin\" (9100): neither its name",
        ],
    );
}

/// As for bookinfo, for `examples/tls-sni`: a captured sidecar's port 443 with the TLS
/// inspector, the API's SNI chains by its `tls[]` routes (a weighted one narrowed to the
/// entry's address), its chain without a name to its own cluster, the HTTPS service
/// sharing the port by its cluster IP, and the entries without addresses told apart by
/// their host names (a wildcard one, one routed by a `tls[]` route), against
/// `tests/golden/tls-sni-sidecar.txt`.
#[test]
fn tls_sni_config_matches_golden_files() {
    check_example("tls-sni", &TLS_SNI_PROXIES);
}

/// As for bookinfo, for `examples/gateway-tls`: the TLS listeners (SNI chains terminating
/// with SDS certificates, one with its `cipherSuites`, a MUTUAL one with the clients'
/// `subjectAltNames`, passthrough chains by SNI, a TLS server terminating into a
/// `tcp_proxy`, AUTO_PASSTHROUGH chains per cluster by its SNI name), the HTTPS servers' own
/// route configurations, the redirecting HTTP routes, the HTTP2 and GRPC servers' listeners
/// and routes, and the SDS secrets (rendered redacted, as the debug port shows them),
/// against `tests/golden/gateway-tls.txt`.
#[test]
fn gateway_tls_config_matches_golden_files() {
    // The `db` entry is reached through the gateway only; sidecars would share its port
    // with any other TCP service on it: MF0025 says so.
    check_example_expecting(
        "gateway-tls",
        &TLS_PROXIES,
        MeshConfig::default(),
        &["spec.ports[0]: port 5432 (TCP) carries TCP and the entry has no addresses"],
    );
}

/// As for bookinfo, for `examples/istio-mutual` with a CA's root: the client's
/// `ISTIO_MUTUAL` clusters (SDS `default` and `ROOTCA`, SNI `outbound_.9080_._.reviews…`,
/// Istio's ALPN, the trust domain's identities), the server's Sidecar `ingress` listener
/// (plaintext and mTLS chains) and cluster, and each proxy's workload secrets (`ROOTCA`,
/// and the stand-in naming its identity), against `tests/golden/istio-mutual-*.txt`.
#[test]
fn istio_mutual_config_matches_golden_files() {
    let mesh = MeshConfig {
        trust_root: Some(GOLDEN_ROOT.into()),
        ..MeshConfig::default()
    };
    check_example_with("istio-mutual", &MTLS_PROXIES, mesh);
}

/// As for bookinfo, for `examples/locality`: each sidecar's load assignments relative to
/// its own locality (failover priorities where outliers are detected, `distribute` weights
/// for the clients its entry names, the cluster's `locality_weighted_lb_config`), against
/// `tests/golden/locality-*.txt`.
#[test]
fn locality_config_matches_golden_files() {
    check_example("locality", &LOCALITY_PROXIES);
}

/// As for bookinfo, for `examples/tls-ports` with a CA's root: a DestinationRule's
/// `portLevelSettings` (port 8443's own load balancer, a consistent hash on its routes only,
/// and TLS from a Secret; subset v1's MUTUAL on port 8080 alone), the Secret's SDS resources
/// for the sidecar of its namespace, those clusters failed closed at the gateway of another
/// namespace, and the gateway's ISTIO_MUTUAL chain with its workload secrets, against
/// `tests/golden/tls-ports-*.txt`.
#[test]
fn tls_ports_config_matches_golden_files() {
    let mesh = MeshConfig {
        trust_root: Some(GOLDEN_ROOT.into()),
        ..MeshConfig::default()
    };
    // The gateway's namespace has no `api-client`: both of its `credentialName`s are said.
    check_example_expecting(
        "tls-ports",
        &TLS_PORTS_PROXIES,
        mesh,
        &[
            "spec.trafficPolicy.portLevelSettings[0].tls.credentialName: Secret istio-system/api-client",
            "spec.subsets[0].trafficPolicy.portLevelSettings[0].tls.credentialName: Secret istio-system/api-client",
        ],
    );
}

/// As for bookinfo, for `examples/traffic-management`, Istio's traffic management tasks
/// (request routing, fault injection, timeouts, retries, traffic shifting, mirroring, CORS,
/// circuit breaking) over bookinfo and httpbin: every HTTP match kind (URI regex and
/// case-insensitive prefix, headers and `withoutHeaders`, `queryParams`, `method`,
/// `authority`, `scheme`, `port`, `sourceLabels`, `sourceNamespace`) and route action
/// (fault delay and abort, `mirror` with its percentage and `mirrors[]`, `corsPolicy`,
/// `rewrite` of URI, authority and by regex, `redirect` (one with a `port`),
/// `directResponse`, request and response `headers` on the route and per destination,
/// `retries` (one with `retryRemoteLocalities`), `timeout`), `tcp` routes by
/// `destinationSubnets`, hosts by short
/// name and FQDN, a wildcard host (a `*.cdn.example` ServiceEntry's) beside an exact one under
/// it, two VirtualServices for one host each exported to its own namespace alone (the
/// `staging` sidecar routes reviews by its own; `sourceLabels` and `sourceNamespace` routes
/// are left out for the `productpage` and `staging` sidecars they do not select), and
/// DestinationRule policies (`LEAST_REQUEST` with warmup, `connectionPool`,
/// `outlierDetection`, subsets with their own policy, each `consistentHash` kind (a route
/// hashing by source IP), a port's own settings, a `workloadSelector` rule ahead of the one
/// for everyone, `PASSTHROUGH`, a wildcard host exported to its namespace alone, `SIMPLE` and
/// `MUTUAL` TLS from files with `caCrl` and `subjectAltNames`, the rule's or the
/// ServiceEntry's); at the gateway, a
/// root VirtualService delegating `/reviews`, and a wildcard host behind the exact ones,
/// against `tests/golden/traffic-*.txt`.
#[test]
fn traffic_management_config_matches_golden_files() {
    check_example("traffic-management", &TRAFFIC_PROXIES);
}

/// As for bookinfo, for `examples/service-registry`, where services come from: Kubernetes
/// Services whose ports take their protocol by name prefix or `appProtocol` (HTTP, gRPC,
/// MongoDB, Redis, TCP, TLS), a named target port, a headless and an ExternalName Service,
/// EndpointSlice endpoints ready, not ready and terminating, pods' topology labels as
/// localities; ServiceEntries of each resolution (STATIC with weighted endpoints in two
/// localities and a port of their own, DNS with endpoint names, DNS_ROUND_ROBIN, NONE), a
/// Unix socket endpoint, and a `workloadSelector` entry backed by WorkloadEntries (ports,
/// weight, locality) and a Pod; and a Sidecar (`ingress` bound with `captureMode: NONE` to
/// its `defaultEndpoint`, bound HTTP and MONGO `egress` listeners for one host each, captured
/// egress for its namespace and one host of another, `REGISTRY_ONLY`) beside a sidecar under
/// none, against `tests/golden/registry-*.txt`.
#[test]
fn service_registry_config_matches_golden_files() {
    check_example("service-registry", &REGISTRY_PROXIES);
}

/// Computes the proxies of `examples/NAME` both ways and compares them with their goldens.
fn check_example(name: &str, proxies: &[(&str, &str)]) {
    check_example_with(name, proxies, MeshConfig::default())
}

/// As [`check_example`], under `mesh`.
fn check_example_with(name: &str, proxies: &[(&str, &str)], mesh: MeshConfig) {
    check_example_expecting(name, proxies, mesh, &[])
}

/// As [`check_example_with`], where the dataflow reports exactly one error per entry of
/// `errors`, each containing it.
fn check_example_expecting(
    name: &str,
    proxies: &[(&str, &str)],
    mesh: MeshConfig,
    errors: &[&str],
) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);

    let scan = FileSource::new(example.join("config"), mesh.clone()).rescan();
    assert!(
        scan.errors.is_empty(),
        "examples/{name}/config has problems: {:#?}",
        scan.errors
    );
    let mut changes = scan.changes;
    assert!(
        changes.iter().all(|(_, diff)| *diff == 1),
        "a first rescan only inserts: {changes:?}"
    );
    let proxies: Vec<(&str, Proxy)> = proxies
        .iter()
        .map(|(stem, bootstrap)| (*stem, proxy_of_bootstrap(&example.join(bootstrap))))
        .collect();
    changes.extend(proxies.iter().map(|(_, p)| (Record::Proxy(p.clone()), 1)));

    let snapshot = Snapshot {
        records: changes.iter().map(|(r, _)| r.clone()).collect(),
    };
    let oracle = naive::compute(&mesh, &snapshot);
    let incremental = compute_incrementally(&mesh, changes, errors);
    assert_same_configs(&oracle, &incremental);

    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| !v.is_empty() && v != "0");
    let mut failures = Vec::new();
    for (stem, proxy) in &proxies {
        let resources = oracle
            .get(&proxy.id)
            .unwrap_or_else(|| panic!("no resources computed for {}", proxy.id));
        let text = render_proxy(name, proxy, resources);
        let path = golden_path(stem);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).expect("create tests/golden");
            std::fs::write(&path, &text)
                .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            eprintln!("UPDATE_GOLDEN: rewrote {}", path.display());
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("read {}: {e}\nTo create it: {UPDATE_HINT}", path.display())
        });
        if let Some(diff) = first_difference(&expected, &text) {
            failures.push(format!(
                "{} differs from the generated config:\n{diff}",
                path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nIf the change is intended, review it and regenerate: {UPDATE_HINT}",
        failures.join("\n")
    );
}

/// `tests/golden/<stem>.txt`.
fn golden_path(stem: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{stem}.txt"))
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// The proxy an Envoy started with this bootstrap presents: its `node` (id, metadata) turned
/// into an xDS `Node` as `meshflow demo --no-envoy`'s proxies present it, and parsed by the
/// xDS server's own `proxy_from_node`.
fn proxy_of_bootstrap(path: &Path) -> Proxy {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let node = node_of(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    proxy_from_node(Some(&node)).unwrap_or_else(|e| panic!("{}: invalid node: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// The incremental engine, and the comparison with the oracle
// ---------------------------------------------------------------------------------------------

/// Feeds all `changes` to the dataflow engine as one epoch and rebuilds each proxy's resources
/// from the `(proxy, type, name, version)` output and the shared bodies.
fn compute_incrementally(
    mesh: &MeshConfig,
    changes: Vec<(Record, isize)>,
    expected_errors: &[&str],
) -> ProxyConfigs {
    let engine = Engine::start(1, mesh.clone());
    let mut output = engine
        .step(Batch { epoch: 1, changes })
        .expect("the dataflow engine stopped");
    let mut messages: Vec<&str> = output
        .errors
        .iter()
        .map(|(e, _)| e.message.as_str())
        .collect();
    messages.sort_unstable();
    assert!(
        messages.len() == expected_errors.len()
            && expected_errors
                .iter()
                .all(|x| messages.iter().any(|m| m.contains(x))),
        "the dataflow reports configuration errors: {:#?} (expected {expected_errors:?})",
        output.errors
    );
    let mut bodies = BTreeMap::new();
    for (resource, diff) in std::mem::take(&mut output.bodies) {
        assert_eq!(
            diff,
            1,
            "body of {} {} has multiplicity {diff}",
            resource.rtype.short(),
            resource.name
        );
        bodies.insert(resource.key(), resource);
    }
    for ((scope, key), diff) in &output.scope_resources {
        assert_eq!(diff, &1, "{scope:?} holds {key:?} with multiplicity {diff}");
    }
    for ((proxy, key), diff) in &output.proxy_resources {
        assert_eq!(diff, &1, "{proxy} holds {key:?} with multiplicity {diff}");
    }
    // Each proxy's set: its scope's plus its own, resolved as the xDS hub does.
    let mut held = Materialized::default();
    held.apply(&output, false);
    let mut configs = ProxyConfigs::new();
    for (proxy, keys) in held.snapshot() {
        for key in keys.into_keys() {
            let resource = bodies.get(&key).unwrap_or_else(|| {
                panic!(
                    "{proxy} holds {} {} ({}) but no body has that version",
                    key.rtype.short(),
                    key.name,
                    key.version
                )
            });
            let previous = configs
                .entry(proxy.clone())
                .or_default()
                .insert((key.rtype, key.name.clone()), resource.clone());
            assert!(
                previous.is_none(),
                "{proxy} holds two versions of {} {}",
                key.rtype.short(),
                key.name
            );
        }
    }
    configs
}

/// The oracle and the dataflow must give every proxy the same resources, byte for byte.
fn assert_same_configs(oracle: &ProxyConfigs, incremental: &ProxyConfigs) {
    let ids = |c: &ProxyConfigs| c.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        ids(oracle),
        ids(incremental),
        "naive vs incremental: proxies differ"
    );
    for (proxy, expected) in oracle {
        let actual = &incremental[proxy];
        let names = |c: &BTreeMap<(ResourceType, String), _>| {
            c.keys()
                .map(|(t, n)| format!("{} {n}", t.short()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(expected),
            names(actual),
            "naive vs incremental: resource names of {proxy} differ"
        );
        for (key, resource) in expected {
            let other = &actual[key];
            assert!(
                resource == other,
                "naive vs incremental: {} {} of {proxy} differs (version {} vs {})",
                key.0.short(),
                key.1,
                resource.version,
                other.version
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// The golden text of one proxy: a short preamble with its identity, then every resource in
/// (type, name) order.
fn render_proxy(
    example: &str,
    proxy: &Proxy,
    resources: &BTreeMap<(ResourceType, String), dataflows::model::Resource>,
) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "# Generated by tests/golden.rs from examples/{example}; regenerate with"
    )
    .unwrap();
    writeln!(out, "# {UPDATE_HINT}").unwrap();
    writeln!(out, "# proxy {}", proxy.id).unwrap();
    writeln!(
        out,
        "# kind {:?}, namespace {}, ips {:?}, labels {:?}, interception_none {}",
        proxy.kind, proxy.namespace, proxy.ips, proxy.labels, proxy.interception_none
    )
    .unwrap();
    for ((rtype, name), resource) in resources {
        writeln!(out, "\n== {} {name} ({})", rtype.short(), resource.version).unwrap();
        let bytes: &[u8] = &resource.body.0;
        let text = match rtype {
            ResourceType::Cluster => render::<Cluster>(bytes),
            ResourceType::Endpoint => render::<ClusterLoadAssignment>(bytes),
            ResourceType::Listener => render::<Listener>(bytes),
            ResourceType::Route => render::<RouteConfiguration>(bytes),
            ResourceType::Secret => {
                render::<Secret>(&meshflow::debug::redact::bytes(rtype.type_url(), bytes))
            }
        };
        out.push_str(&text);
        out.push('\n');
    }
    out
}

/// Decodes `bytes` as `M` and pretty-prints it, with `Any` payloads expanded and unset fields
/// left out.
fn render<M: Message + Default + Debug>(bytes: &[u8]) -> String {
    match M::decode(bytes) {
        Ok(message) => without_unset_fields(&expand_anys(&format!("{message:#?}"))),
        Err(e) => format!("<undecodable {}: {e}>", std::any::type_name::<M>()),
    }
}

/// The `Any` payload types meshflow emits, decoded and pretty-printed (recursively expanded).
fn decode_any(type_url: &str, bytes: &[u8]) -> Option<String> {
    fn known<M: Message + Default + Debug + Name>(
        type_url: &str,
        bytes: &[u8],
    ) -> Option<Option<String>> {
        (type_url == M::type_url()).then(|| {
            M::decode(bytes)
                .ok()
                .map(|m| expand_anys(&format!("{m:#?}")))
        })
    }
    known::<HttpConnectionManager>(type_url, bytes)
        .or_else(|| known::<Router>(type_url, bytes))
        .or_else(|| known::<TcpProxy>(type_url, bytes))
        .or_else(|| known::<OriginalDst>(type_url, bytes))
        .or_else(|| known::<HttpProtocolOptions>(type_url, bytes))
        .or_else(|| known::<TlsInspector>(type_url, bytes))
        .or_else(|| known::<DownstreamTlsContext>(type_url, bytes))
        .or_else(|| known::<UpstreamTlsContext>(type_url, bytes))
        // Per-route filter configs; the fault filter's empty config in a connection
        // manager's filter list stays shown as the empty payload it is.
        .or_else(|| known::<FilterConfig>(type_url, bytes))
        .or_else(|| known::<CorsPolicy>(type_url, bytes))
        .or_else(|| {
            (!bytes.is_empty())
                .then(|| known::<HttpFault>(type_url, bytes))
                .flatten()
        })
        .flatten()
}

/// Rewrites the `value: [ <one byte per line> ]` of every `Any` in `{:#?}` output: decoded in
/// place when its type is known, else as a hex string.
fn expand_anys(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let type_url = i
            .checked_sub(1)
            .and_then(|prev| lines[prev].trim_start().strip_prefix("type_url: \""))
            .and_then(|rest| rest.strip_suffix("\","));
        if let (Some(type_url), "value: [" | "value: [],") = (type_url, trimmed) {
            let mut bytes = Vec::new();
            let mut end = i;
            if trimmed == "value: [" {
                end += 1;
                while end < lines.len() && lines[end].trim() != "]," {
                    let byte = lines[end].trim().trim_end_matches(',');
                    bytes.push(byte.parse::<u8>().unwrap_or_else(|_| {
                        panic!("unexpected line in Any bytes: {:?}", lines[end])
                    }));
                    end += 1;
                }
            }
            match decode_any(type_url, &bytes) {
                Some(decoded) => {
                    let mut decoded_lines = decoded.lines();
                    let first = decoded_lines.next().unwrap_or_default();
                    write!(out, "{indent}value: {first}").unwrap();
                    for l in decoded_lines {
                        write!(out, "\n{indent}{l}").unwrap();
                    }
                    out.push_str(",\n");
                }
                None => {
                    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                    writeln!(out, "{indent}value: <{} bytes> {hex:?},", bytes.len()).unwrap();
                }
            }
            i = end + 1;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        i += 1;
    }
    out.truncate(out.trim_end().len());
    out
}

/// Drops the lines of fields at their proto3 "unset" value (`None`, `[]`, `{}`, `""`, `false`),
/// which say nothing on the wire either, as Envoy's config dump omits them. Numbers and enums
/// are kept even when zero.
fn without_unset_fields(text: &str) -> String {
    text.lines()
        .filter(|line| {
            let Some((field, value)) = line.trim_start().split_once(": ") else {
                return true;
            };
            let is_field = !field.is_empty()
                && field
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            !(is_field && matches!(value, "None," | "[]," | "{}," | "\"\"," | "false,"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A short unified-style diff around the first differing line of `expected` and `actual`, or
/// `None` if they are equal.
fn first_difference(expected: &str, actual: &str) -> Option<String> {
    if expected == actual {
        return None;
    }
    let old: Vec<&str> = expected.lines().collect();
    let new: Vec<&str> = actual.lines().collect();
    if old == new {
        return Some("the files differ only in line endings or a trailing newline\n".to_owned());
    }
    let first = old
        .iter()
        .zip(&new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    // Resynchronise: the shortest skip on either side after which a few lines agree again.
    let agree = |a: usize, b: usize| {
        (0..3).all(|k| old.get(a + k) == new.get(b + k)) && (a < old.len() || b < new.len())
    };
    let (mut old_end, mut new_end) = (old.len(), new.len());
    'search: for total in 0..(old.len() + new.len()).min(400) {
        for skip_old in 0..=total {
            let (a, b) = (first + skip_old, first + total - skip_old);
            if a <= old.len() && b <= new.len() && agree(a, b) {
                (old_end, new_end) = (a, b);
                break 'search;
            }
        }
    }
    const CONTEXT: usize = 3;
    const MAX_LINES: usize = 40;
    let start = first.saturating_sub(CONTEXT);
    let trailing = CONTEXT.min(new.len() - new_end);
    let mut diff = format!(
        "@@ -{},{} +{},{} @@ (first difference at line {})\n",
        start + 1,
        old_end - start + trailing,
        start + 1,
        new_end - start + trailing,
        first + 1
    );
    for line in &old[start..first] {
        diff += &format!(" {line}\n");
    }
    for line in old[first..old_end].iter().take(MAX_LINES) {
        diff += &format!("-{line}\n");
    }
    if old_end - first > MAX_LINES {
        diff += &format!("-… ({} more lines)\n", old_end - first - MAX_LINES);
    }
    for line in new[first..new_end].iter().take(MAX_LINES) {
        diff += &format!("+{line}\n");
    }
    if new_end - first > MAX_LINES {
        diff += &format!("+… ({} more lines)\n", new_end - first - MAX_LINES);
    }
    for line in new.iter().skip(new_end).take(trailing) {
        diff += &format!(" {line}\n");
    }
    Some(diff)
}
