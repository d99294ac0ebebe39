//! Property-based fuzzing of every input meshflow takes from outside: YAML documents (files,
//! and any decoded object), xDS nodes and request sequences (Delta and State-of-the-World),
//! and the debug port's query strings. Each property is "no panic, and an answer": a bad
//! input gets an error, never a crash. The case counts are bounded so CI runs them in
//! seconds; `PROPTEST_CASES=100000 cargo nextest run --test fuzz` runs longer by hand.

use dataflows::materialize::{Materialized, Name};
use dataflows::model::{MeshConfig, Resource, ResourceType};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use meshflow::hub::view::{Bodies, ProxyView};
use meshflow::xds::delta::DeltaStream;
use meshflow::xds::sotw::SotwStream;
use proptest::prelude::*;

/// 256 cases each unless `PROPTEST_CASES` says otherwise (proptest's own default).
fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text that looks like YAML: keys, indentation, flow collections, quotes, document
/// separators and the apiVersion/kind lines that make a document an object.
fn yamlish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("apiVersion: networking.istio.io/v1\n".to_string()),
        Just("apiVersion: v1\n".to_string()),
        Just("kind: VirtualService\n".to_string()),
        Just("kind: Service\n".to_string()),
        Just("kind: DestinationRule\n".to_string()),
        Just("kind: Sidecar\n".to_string()),
        Just("metadata: {name: r, namespace: default}\n".to_string()),
        Just("spec:\n".to_string()),
        Just("  hosts: [reviews]\n".to_string()),
        Just("  http:\n  - route:\n    - destination: {host: reviews, subset: v1}\n".to_string()),
        Just("      weight: 101\n".to_string()),
        Just("  ports: [{port: 80, name: http}]\n".to_string()),
        Just("---\n".to_string()),
        "[a-z]{1,8}: [\\[\\]{}\"'0-9a-z:,-]{0,12}\n",
        "[ \\-]{0,6}[a-zA-Z]{0,8}:? ?[^\\n]{0,16}\n",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

/// A protobuf `Value` of a few levels, for node metadata.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        "[^\\x00]{0,12}".prop_map(Kind::StringValue),
        any::<f64>().prop_map(Kind::NumberValue),
        any::<bool>().prop_map(Kind::BoolValue),
    ]
    .prop_map(|k| Value { kind: Some(k) });
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop::collection::btree_map("[A-Z_a-z]{1,10}", inner, 0..4).prop_map(|m| Value {
            kind: Some(Kind::StructValue(Struct {
                fields: m.into_iter().collect(),
            })),
        })
    })
}

fn node() -> impl Strategy<Value = Node> {
    let id = prop_oneof![
        "(sidecar|router|gateway)~[0-9.]{1,15}~[a-z.\\-]{0,12}~[a-z.]{0,20}",
        "[^\\x00]{0,40}",
    ];
    let meta = prop::collection::btree_map(
        prop_oneof![
            Just("NAMESPACE".to_string()),
            Just("LABELS".to_string()),
            Just("INSTANCE_IPS".to_string()),
            Just("INTERCEPTION_MODE".to_string()),
            Just("GENERATOR".to_string()),
            "[A-Z_]{1,8}",
        ],
        value(),
        0..6,
    );
    (id, meta).prop_map(|(id, m)| Node {
        id,
        metadata: Some(Struct {
            fields: m.into_iter().collect(),
        }),
        ..Default::default()
    })
}

fn type_url() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(ResourceType::Cluster.type_url().to_string()),
        Just(ResourceType::Endpoint.type_url().to_string()),
        Just(ResourceType::Listener.type_url().to_string()),
        Just(ResourceType::Route.type_url().to_string()),
        Just("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret".to_string()),
        "[a-z./]{0,20}",
    ]
}

fn names() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(prop_oneof![Just("*".to_string()), "[a-c]{1,2}"], 0..5)
}

fn nonce() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[0-9a-f\\-]{0,20}"]
}

fn nack() -> impl Strategy<Value = Option<RpcStatus>> {
    prop::option::of("[^\\x00]{0,20}".prop_map(|m| RpcStatus {
        code: 3,
        message: m,
        details: vec![],
    }))
}

fn delta_request() -> impl Strategy<Value = DeltaDiscoveryRequest> {
    (
        type_url(),
        names(),
        names(),
        nonce(),
        nack(),
        prop::collection::hash_map("[a-c]{1,2}", "[0-9]{1,3}", 0..3),
    )
        .prop_map(
            |(type_url, sub, unsub, response_nonce, error_detail, initial)| DeltaDiscoveryRequest {
                type_url,
                resource_names_subscribe: sub,
                resource_names_unsubscribe: unsub,
                response_nonce,
                error_detail,
                initial_resource_versions: initial,
                ..Default::default()
            },
        )
}

fn sotw_request() -> impl Strategy<Value = DiscoveryRequest> {
    (type_url(), names(), nonce(), nack()).prop_map(
        |(type_url, resource_names, response_nonce, error_detail)| DiscoveryRequest {
            type_url,
            resource_names,
            response_nonce,
            error_detail,
            ..Default::default()
        },
    )
}

const PROXY: &str = "sidecar~10.0.0.1~a.default~default.svc.cluster.local";

/// What the proxy holds: resources named a, b, ab, … of every type.
fn served() -> (Materialized, Bodies) {
    let mut out = dataflows::driver::EpochOutput {
        epoch: 1,
        ..Default::default()
    };
    for t in ResourceType::ALL {
        for name in ["a", "b", "ab", "c"] {
            let r = Resource::new(t, name.into(), format!("{name}-body").into_bytes());
            out.proxy_resources.push(((PROXY.to_string(), r.key()), 1));
            out.bodies.push((r, 1));
        }
    }
    let (mut held, mut bodies) = (Materialized::default(), Bodies::default());
    bodies.add(&mut held, std::mem::take(&mut out.bodies));
    held.apply(&out, false);
    (held, bodies)
}

proptest! {
    #![proptest_config(config())]

    /// Any text as a config file: parsed or rejected with errors, never a panic.
    #[test]
    fn yaml_documents_never_panic(text in prop_oneof![yamlish(), "[^\\x00]{0,200}"]) {
        let parsed = meshflow::config::parse_file(
            std::path::Path::new("fuzz.yaml"),
            &text,
            &MeshConfig::default(),
        );
        for e in &parsed.errors {
            prop_assert!(e.line >= 1);
        }
    }

    /// Any node: a proxy or an error naming why.
    #[test]
    fn nodes_never_panic(n in node()) {
        if let Err(e) = meshflow::xds::node::proxy_from_node(Some(&n)) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    /// Any sequence of Delta requests, each followed by a look at what to send.
    #[test]
    fn delta_request_sequences_never_panic(reqs in prop::collection::vec(delta_request(), 1..12)) {
        let (held, bodies) = served();
        let mut s = DeltaStream::default();
        for req in &reqs {
            if s.on_request(req, &|n: &str| Name::from(n)).is_err() {
                break; // the stream ends here
            }
            let view = ProxyView::new(held.held(PROXY), &bodies, 0);
            for r in s.pending(&view) {
                prop_assert!(!r.nonce.is_empty());
            }
        }
    }

    /// Any sequence of State-of-the-World requests, each followed by a look.
    #[test]
    fn sotw_request_sequences_never_panic(reqs in prop::collection::vec(sotw_request(), 1..12)) {
        let (held, bodies) = served();
        let mut s = SotwStream::default();
        for req in &reqs {
            if s.on_request(req).is_err() {
                break;
            }
            let view = ProxyView::new(held.held(PROXY), &bodies, 0);
            for r in s.pending(&view) {
                prop_assert!(!r.nonce.is_empty());
            }
        }
    }
}

/// The debug port's HTTP paths with any query string: an answer (a 4xx for a bad request),
/// never a panic or a 5xx.
#[test]
fn debug_query_strings_never_panic() {
    use proptest::test_runner::TestRunner;
    use tower::ServiceExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (tx, _rx) = std::sync::mpsc::channel();
    let hub = meshflow::hub::Hub::new(tx, Default::default());
    let app = meshflow::debug::router(hub);
    let path = prop_oneof![
        Just("/debug/proxies"),
        Just("/debug/config_dump"),
        Just("/debug/config_errors"),
        Just("/debug/explain"),
        Just("/debug/authz_check"),
        Just("/debug/diff"),
        Just("/metrics"),
        Just("/healthz"),
    ];
    let key = prop_oneof![
        Just("proxy"),
        Just("proxyID"),
        Just("from"),
        Just("to"),
        Just("since"),
        Just("resource"),
        Just("port"),
        Just("jwt_claims"),
        Just("header"),
        Just("x"),
    ];
    let value = "[%0-9a-zA-Z./|~:\\-]{0,16}";
    let query = prop::collection::vec((key, value), 0..4);
    let mut runner = TestRunner::new(config());
    runner
        .run(&(path, query), |(path, query)| {
            let q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let uri = format!("{path}?{}", q.join("&"));
            let Ok(req) = axum::http::Request::get(&uri).body(axum::body::Body::empty()) else {
                return Ok(()); // not a URI at all: nothing reaches the router
            };
            let status = rt
                .block_on(app.clone().oneshot(req))
                .map(|r| r.status())
                .map_err(|e| TestCaseError::fail(format!("{uri}: {e}")))?;
            prop_assert!(!status.is_server_error(), "{uri}: {status}");
            Ok(())
        })
        .expect("the debug port answered every query");
}
