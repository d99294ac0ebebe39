//! Parsing and validation of input documents.

use super::convert::tests::{mesh, parse, VS};
use super::*;
use dataflows::model::Kind;

#[test]
fn splits_documents_with_their_lines() {
    let docs = split_documents("a: 1\n---\n# c\n---\nb: 2\n");
    assert_eq!(
        docs,
        vec![(1, "a: 1\n".to_string()), (5, "b: 2\n".to_string())]
    );
}

#[test]
fn type_errors_name_the_field() {
    let doc = "apiVersion: networking.istio.io/v1beta1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: reviews\n  subsets:\n  - name: v1\n    labels: [not, a, map]\n";
    let err = parse_document(doc, &mesh()).unwrap_err();
    assert_eq!(err.field, "spec.subsets[0].labels");
    let doc = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  ports:\n  - port: notanumber\n";
    let err = parse_document(doc, &mesh()).unwrap_err();
    assert!(err.field.starts_with("spec.ports[0]"), "{}", err.field);
}

#[test]
fn file_errors_carry_file_line_and_object() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: ok}\nspec: {ports: [{name: http, port: 80}]}\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: bad, namespace: x}\nspec:\n  egress:\n  - hosts: [\"no-slash\"]\n";
    let out = parse_file(std::path::Path::new("dir/f.yaml"), text, &mesh());
    assert_eq!(out.objects.len(), 1);
    assert_eq!(out.errors.len(), 1);
    let msg = out.errors[0].to_string();
    assert!(
        msg.starts_with("dir/f.yaml:6: Sidecar x/bad: spec.egress[0].hosts[0]:"),
        "{msg}"
    );
}

#[test]
fn unknown_kinds_are_skipped_and_broken_yaml_is_reported() {
    let out = parse_file(
        std::path::Path::new("f.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\n: : :\n  - [\n",
        &mesh(),
    );
    assert!(out.objects.is_empty());
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].line, 5);
    assert!(out.errors[0].invalid.object.is_none());
}

/// A decoded object (as a Kubernetes watch delivers it, JSON) parses to the same records as
/// the YAML document, and is rejected with the same object and field.
#[test]
fn decoded_objects_parse_like_documents() {
    let yaml = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: ns1}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v1}\n";
    let json = serde_json::json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "r", "namespace": "ns1", "resourceVersion": "7"},
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews", "subset": "v1"}}]}]}
    });
    assert_eq!(
        parse_object(&json, &mesh()).unwrap(),
        parse_document(yaml, &mesh()).unwrap()
    );
    let mut bad = json.clone();
    bad["spec"]["http"][0]["route"][0]["weight"] = serde_json::json!("heavy");
    let err = parse_object(&bad, &mesh()).unwrap_err();
    assert_eq!(
        err.object,
        Some(ConfigKey::new(Kind::VirtualService, "ns1", "r"))
    );
    assert!(
        err.field.starts_with("spec.http[0].route[0]"),
        "{}",
        err.field
    );
}

/// A kind meshflow reads under a mistyped apiVersion is an error naming the object and the
/// field (so the file source keeps its last valid version), never a silent skip; the same
/// kind name in an unrelated API is skipped as before.
#[test]
fn mistyped_api_versions_are_errors_and_other_apis_are_skipped() {
    let vs = |api: &str| {
        format!("apiVersion: {api}\nkind: VirtualService\nmetadata: {{name: r, namespace: ns1}}\nspec:\n  hosts: [reviews]\n")
    };
    for api in [
        "networking.istio.i0/v1",
        "networking.istio.io",
        "networking.istio.io/v2",
        "security.istio.io/v1",
        "apps/v1",
    ] {
        let err = parse_document(&vs(api), &mesh()).unwrap_err();
        assert_eq!(err.field, "apiVersion", "{api}");
        assert_eq!(
            err.object,
            Some(ConfigKey::new(Kind::VirtualService, "ns1", "r")),
            "{api}"
        );
        assert!(err.message.contains(api), "{api}: {}", err.message);
    }
    let svc =
        "apiVersion: apps/v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n";
    let err = parse_document(svc, &mesh()).unwrap_err();
    assert_eq!(
        err.object,
        Some(ConfigKey::new(Kind::Service, "default", "s"))
    );
    assert!(err.message.contains("is read as v1"), "{}", err.message);
    let other = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: s}\n";
    assert_eq!(parse_document(other, &mesh()), Ok(None), "{other}");
    // The Gateway API's Gateway is read as its own kind, not as Istio's.
    let k8s_gw = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\n";
    let err = parse_document(k8s_gw, &mesh()).unwrap_err();
    assert_eq!(
        err.object,
        Some(ConfigKey::new(Kind::KubernetesGateway, "default", "g"))
    );
    assert_eq!(err.field, "spec.gatewayClassName");
    assert!(parse_document(&vs("networking.istio.io/v1beta1"), &mesh())
        .unwrap()
        .is_some());
}

/// Pathological nesting is refused before the YAML parser sees it (it took seconds per
/// document); strings and comments with brackets are not nesting.
#[test]
fn deep_nesting_is_refused_at_once() {
    let doc = format!("a: {}\n", "[".repeat(100_000));
    let started = std::time::Instant::now();
    let err = parse_document(&doc, &mesh()).unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert!(err.message.contains("100000 levels"), "{}", err.message);
    let fine = "apiVersion: v1\nkind: Service\nmetadata: {name: s, annotations: {note: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}}\n# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\nspec: {ports: [{port: 80}]}\n";
    assert!(parse_document(fine, &mesh()).unwrap().is_some());
}

/// Regexes Envoy's RE2 cannot compile are refused with the field (Envoy would reject the
/// whole route configuration of the port); names follow Kubernetes' rules.
#[test]
fn invalid_regexes_and_names_are_refused() {
    let vs = |regex: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: r, namespace: ns1}}\nspec:\n  hosts: [reviews]\n  http:\n  - match:\n    - uri: {{regex: \"{regex}\"}}\n    route:\n    - destination: {{host: reviews}}\n")
    };
    let err = parse_document(&vs("/api/(v1"), &mesh()).unwrap_err();
    assert_eq!(err.field, "spec.http[0].match[0].uri.regex");
    assert!(parse_document(&vs("/api/v[0-9]+/.*"), &mesh()).is_ok());
    // Over Envoy's RE2 program-size limit: refused, unless the limit is raised to match the
    // proxies' runtime.
    let err = parse_document(&vs("/a{150}"), &mesh()).unwrap_err();
    assert_eq!(err.field, "spec.http[0].match[0].uri.regex");
    assert!(err.message.contains("limit of 100"), "{}", err.message);
    let raised = MeshConfig {
        max_regex_program_size: 32_768,
        ..mesh()
    };
    assert!(parse_document(&vs("/a{150}"), &raised).is_ok());
    for (doc, field) in [
        ("apiVersion: v1\nkind: Service\nmetadata: {name: \"re\\nviews\"}\nspec: {ports: [{port: 80}]}\n", "metadata.name"),
        ("apiVersion: v1\nkind: Service\nmetadata: {name: Reviews}\nspec: {ports: [{port: 80}]}\n", "metadata.name"),
        ("apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: \"a b\"}\nspec: {ports: [{port: 80}]}\n", "metadata.namespace"),
    ] {
        let err = parse_document(doc, &mesh()).unwrap_err();
        assert_eq!(err.field, field, "{doc}");
        assert!(err.message.contains("Kubernetes name"), "{}", err.message);
    }
    let dotted = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews.v1, namespace: ns1}\nspec: {host: reviews}\n";
    assert!(parse_document(dotted, &mesh()).is_ok());
}

#[test]
fn kinds_not_served_are_listed_and_other_kinds_skipped() {
    let text = "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: p}\nspec: {}\n---\napiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: e}\n---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: UDPRoute\nmetadata: {name: h}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n";
    let out = parse_file(std::path::Path::new("f.yaml"), text, &MeshConfig::default());
    assert!(out.errors.is_empty() && out.objects.is_empty());
    let kinds: Vec<&str> = out.unserved.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(
        kinds,
        vec![
            "Telemetry (telemetry.istio.io/v1)",
            "EnvoyFilter (networking.istio.io/v1alpha3)",
            "UDPRoute (gateway.networking.k8s.io/v1alpha2)",
        ]
    );
    assert_eq!(out.unserved[1].0, 6);
}

#[test]
fn finding_lines_name_level_object_and_field() {
    let p = parse(&format!(
        "{VS}  http:\n  - redirect: {{uri: /moved}}\n    fault: {{abort: {{http2Error: CANCEL}}}}\n"
    ));
    let lines: Vec<String> = p.finding_lines().map(|(_, l)| l).collect();
    assert_eq!(
        lines,
        vec![format!(
            "warning: VirtualService ns/r: spec.http[0].fault.abort.http2Error: {}",
            findings::IGNORED
        )]
    );
    assert_eq!(p.key, ConfigKey::new(Kind::VirtualService, "ns", "r"));
}

/// `kind: List` (what `kubectl get -o yaml` writes) and a `KindList` are read item by item,
/// each item as a document of its own at the List's line: objects, kinds not served, kinds
/// of no use, and an invalid item named by its object (or by its index, when it has none).
/// An empty List is nothing; `items` that is not a list, and a List inside a List, are errors.
#[test]
fn lists_are_read_item_by_item() {
    let text = "\
apiVersion: v1
kind: Service
metadata: {name: first, namespace: ns}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: List
metadata: {resourceVersion: \"\"}
items:
- apiVersion: v1
  kind: Service
  metadata: {name: reviews, namespace: ns}
  spec: {ports: [{name: http, port: 9080}]}
- apiVersion: networking.istio.io/v1
  kind: VirtualService
  metadata: {name: reviews, namespace: ns}
  spec: {hosts: [reviews], http: [{timeout: soon, route: [{destination: {host: reviews}}]}]}
- apiVersion: telemetry.istio.io/v1
  kind: Telemetry
  metadata: {name: t, namespace: ns}
  spec: {}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: d}
- {kind: Service}
- {apiVersion: v1, kind: List, items: []}
---
apiVersion: networking.istio.io/v1
kind: DestinationRuleList
items:
- apiVersion: networking.istio.io/v1
  kind: DestinationRule
  metadata: {name: reviews, namespace: ns}
  spec: {host: reviews}
---
apiVersion: v1
kind: List
items: []
---
apiVersion: v1
kind: List
items: {not: a list}
";
    let out = parse_file(std::path::Path::new("f.yaml"), text, &MeshConfig::default());
    let objects: Vec<(usize, String)> = out
        .objects
        .iter()
        .map(|(l, p)| (*l, format!("{:?} {}", p.key.kind, p.key.name)))
        .collect();
    assert_eq!(
        objects,
        vec![
            (1, "Service first".to_string()),
            (6, "Service reviews".to_string()),
            (28, "DestinationRule reviews".to_string()),
        ]
    );
    assert_eq!(
        out.unserved,
        vec![(6, "Telemetry (telemetry.istio.io/v1)".to_string())]
    );
    let errors: Vec<(usize, String)> = out
        .errors
        .iter()
        .map(|e| (e.line, e.invalid.to_string()))
        .collect();
    assert_eq!(errors.len(), 4, "{errors:#?}");
    assert!(
        errors[0].0 == 6
            && errors[0].1.contains("VirtualService ns/reviews")
            && errors[0].1.contains("spec.http[0].timeout"),
        "{errors:#?}"
    );
    assert!(
        errors[1].1.contains("items[4]") && errors[1].1.contains("apiVersion and kind"),
        "{errors:#?}"
    );
    assert!(
        errors[2].1.contains("items[5]") && errors[2].1.contains("List inside a List"),
        "{errors:#?}"
    );
    assert!(
        errors[3].0 == 40 && errors[3].1.contains("items"),
        "{errors:#?}"
    );
}

/// A Service port of a protocol Kubernetes does not have (a file can hold one) is read as
/// TCP, as Istio reads it, with a warning naming the field; UDP ports carry nothing.
#[test]
fn a_service_port_of_an_unknown_protocol_is_read_as_tcp() {
    let doc = "apiVersion: v1\nkind: Service\nmetadata: {name: legacy, namespace: ns}\nspec:\n  ports:\n  - {name: http, port: 80, protocol: HTTP}\n  - {name: dns, port: 53, protocol: UDP}\n";
    let p = parse(doc);
    let Some(Record::Service(svc)) = p.records.first() else {
        panic!("{:?}", p.records);
    };
    let ports: Vec<u16> = svc.ports.iter().map(|p| p.port).collect();
    assert_eq!(ports, vec![80]);
    let lines: Vec<String> = p.finding_lines().map(|(_, l)| l).collect();
    assert!(
        lines.len() == 1
            && lines[0].starts_with("warning: Service ns/legacy: spec.ports[0].protocol: \"HTTP\" is not a Kubernetes port protocol"),
        "{lines:?}"
    );
}
