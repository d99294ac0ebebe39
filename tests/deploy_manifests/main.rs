//! `deploy/`: the kustomize manifests and the Helm chart render, every document passes the
//! Kubernetes schema (`schema.rs`: `k8s-openapi` types, unknown fields named), and the
//! pieces fit together: selectors select the pods, Service and probe ports are container
//! ports, the ClusterRole grants get/list/watch on exactly what `serve --kube` watches, and
//! patch on exactly the status subresources `--write-status` writes and create on Events
//! when (and only when) the container is started with it, nothing more; with it too, a Role
//! in meshflow's own namespace grants get/create/update on Leases (the status Lease) and
//! nothing else; the bindings name the ServiceAccount the pods run as, and every flag the
//! container is started with is one `meshflow serve` accepts. The Dockerfile builds its
//! dependency layer from stubs of every target the manifests declare.
//!
//! Rendering: the chart with `helm template` and the kustomization with `kubectl kustomize`
//! when those are installed (checked the same way), and always with this test's own renderers
//! (`helm_template.rs`, `render_kustomization`), which cover the subset the files use and
//! refuse the rest, so the checks run on machines without either tool.

mod helm_template;
mod schema;

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The documents of YAML text, as JSON values (empty documents skipped).
fn documents(text: &str, what: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{what}: not YAML: {e}\n{text}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn on_path(tool: &str) -> bool {
    Command::new(tool)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// What `kubectl kustomize` does with the fields `deploy/kustomize` uses: the resources,
/// `namespace` (on namespaced objects and on ServiceAccount subjects), `labels` (metadata,
/// and pod templates with `includeTemplates`) and `images`. Any other field is an error.
fn render_kustomization(dir: &Path) -> Vec<Value> {
    let k = &documents(&read(&dir.join("kustomization.yaml")), "kustomization")[0];
    let known = [
        "apiVersion",
        "kind",
        "namespace",
        "labels",
        "resources",
        "images",
    ];
    for key in k.as_object().expect("a mapping").keys() {
        assert!(
            known.contains(&key.as_str()),
            "kustomization field {key}: not rendered by this test"
        );
    }
    let namespace = k["namespace"].as_str();
    let mut out = Vec::new();
    for r in k["resources"].as_array().expect("resources") {
        let file = dir.join(r.as_str().expect("a file name"));
        for mut doc in documents(&read(&file), &file.display().to_string()) {
            let cluster_scoped = matches!(
                doc["kind"].as_str(),
                Some("ClusterRole" | "ClusterRoleBinding" | "Namespace")
            );
            if let (Some(ns), false) = (namespace, cluster_scoped) {
                doc["metadata"]["namespace"] = json!(ns);
            }
            if let (Some(ns), Some(subjects)) = (namespace, doc["subjects"].as_array_mut()) {
                for s in subjects
                    .iter_mut()
                    .filter(|s| s["kind"] == "ServiceAccount")
                {
                    s["namespace"] = json!(ns);
                }
            }
            for l in k["labels"].as_array().into_iter().flatten() {
                assert_ne!(
                    l["includeSelectors"], true,
                    "includeSelectors: not rendered here"
                );
                for (key, value) in l["pairs"].as_object().into_iter().flatten() {
                    doc["metadata"]["labels"][key] = value.clone();
                    let template = doc.pointer_mut("/spec/template/metadata");
                    if let (true, Some(t)) = (l["includeTemplates"] == true, template) {
                        t["labels"][key] = value.clone();
                    }
                }
            }
            for image in k["images"].as_array().into_iter().flatten() {
                let containers = doc
                    .pointer_mut("/spec/template/spec/containers")
                    .and_then(Value::as_array_mut);
                for c in containers.into_iter().flatten() {
                    if c["image"] == image["name"] {
                        let name = image["newName"].as_str().unwrap_or("meshflow");
                        let tag = image["newTag"].as_str().unwrap_or("latest");
                        c["image"] = json!(format!("{name}:{tag}"));
                    }
                }
            }
            out.push(doc);
        }
    }
    out
}

/// The chart rendered with its values file merged with `overrides`.
fn render_chart(chart: &Path, overrides: Value) -> Vec<Value> {
    let mut values = documents(&read(&chart.join("values.yaml")), "values.yaml").remove(0);
    merge(&mut values, overrides);
    let ctx = helm_template::Context {
        values,
        chart: documents(&read(&chart.join("Chart.yaml")), "Chart.yaml").remove(0),
        release_name: "meshflow".into(),
        release_namespace: "istio-system".into(),
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart.join("templates"))
        .expect("templates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = helm_template::render(&read(&f), &ctx)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        out.extend(documents(&text, &f.display().to_string()));
    }
    out
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// The kinds (group, plural) whose status `--write-status` patches: Istio's, and the
/// Gateway API's GatewayClasses, Gateways and routes.
const STATUS_WRITTEN: &[(&str, &str)] = &[
    ("networking.istio.io", "virtualservices"),
    ("networking.istio.io", "destinationrules"),
    ("networking.istio.io", "gateways"),
    ("networking.istio.io", "serviceentries"),
    ("networking.istio.io", "sidecars"),
    ("security.istio.io", "peerauthentications"),
    ("security.istio.io", "authorizationpolicies"),
    ("security.istio.io", "requestauthentications"),
    ("gateway.networking.k8s.io", "gatewayclasses"),
    ("gateway.networking.k8s.io", "gateways"),
    ("gateway.networking.k8s.io", "httproutes"),
    ("gateway.networking.k8s.io", "grpcroutes"),
    ("gateway.networking.k8s.io", "tcproutes"),
    ("gateway.networking.k8s.io", "tlsroutes"),
    ("gateway.networking.k8s.io", "backendtlspolicies"),
    ("gateway.networking.k8s.io", "listenersets"),
];

/// What `serve --kube` watches, as RBAC names it.
const WATCHED: &[(&str, &str)] = &[
    ("", "namespaces"),
    ("", "services"),
    ("", "pods"),
    ("", "secrets"),
    ("", "configmaps"),
    ("discovery.k8s.io", "endpointslices"),
    ("networking.istio.io", "virtualservices"),
    ("networking.istio.io", "destinationrules"),
    ("networking.istio.io", "gateways"),
    ("networking.istio.io", "serviceentries"),
    ("networking.istio.io", "sidecars"),
    ("networking.istio.io", "workloadentries"),
    ("security.istio.io", "peerauthentications"),
    ("security.istio.io", "authorizationpolicies"),
    ("security.istio.io", "requestauthentications"),
    ("gateway.networking.k8s.io", "gatewayclasses"),
    ("gateway.networking.k8s.io", "gateways"),
    ("gateway.networking.k8s.io", "httproutes"),
    ("gateway.networking.k8s.io", "grpcroutes"),
    ("gateway.networking.k8s.io", "tcproutes"),
    ("gateway.networking.k8s.io", "tlsroutes"),
    ("gateway.networking.k8s.io", "referencegrants"),
    ("gateway.networking.k8s.io", "backendtlspolicies"),
    ("gateway.networking.k8s.io", "listenersets"),
];

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}: {docs:#?}");
    found[0]
}

fn subset(small: &Value, big: &Value) -> bool {
    small
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| big.get(k) == Some(v)))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The long flags `meshflow serve --help` lists.
fn serve_flags() -> Vec<String> {
    let help = run(env!("CARGO_BIN_EXE_meshflow"), &["serve", "--help"]);
    help.split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| {
            w.trim_end_matches([',', '.'])
                .split('=')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// Every check of the module documentation, on one rendering.
fn check(docs: &[Value], what: &str) {
    for d in docs {
        if let Err(e) = schema::validate(d) {
            panic!("{what}: {} {}: {e}", d["kind"], d["metadata"]["name"]);
        }
    }
    let deployment = one(docs, "Deployment");
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert!(
        subset(&deployment["spec"]["selector"]["matchLabels"], labels),
        "{what}: the Deployment's selector selects its pods"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{what}");
    let containers = spec["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "{what}");
    let c = &containers[0];
    let args = strings(&c["args"]);
    assert_eq!(&args[..2], ["serve", "--kube"], "{what}");
    let flags = serve_flags();
    for a in args.iter().filter(|a| a.starts_with("--")) {
        let flag = a.split('=').next().unwrap_or("");
        assert!(
            flags.iter().any(|f| f == flag),
            "{what}: meshflow serve has no {flag}"
        );
    }
    let arg_port = |flag: &str| -> i64 {
        let value = args
            .iter()
            .find_map(|a| a.strip_prefix(&format!("{flag}=")))
            .unwrap_or_else(|| panic!("{what}: no {flag}=ADDR"));
        value
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    };
    let ports: BTreeMap<String, i64> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("").to_string(),
                p["containerPort"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        ports.values().any(|p| *p == arg_port("--xds-addr")),
        "{what}: {ports:?}"
    );
    let port_of = |v: &Value| -> i64 {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|n| ports.get(n).copied()))
            .unwrap_or_else(|| panic!("{what}: {v} is not a container port: {ports:?}"))
    };
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{what}: {probe}");
        assert_eq!(
            port_of(&get["port"]),
            arg_port("--debug-addr"),
            "{what}: {probe} port"
        );
    }

    let service = one(docs, "Service");
    assert!(
        subset(&service["spec"]["selector"], labels),
        "{what}: the Service selects the pods"
    );
    for p in service["spec"]["ports"].as_array().expect("service ports") {
        port_of(&p["targetPort"]);
    }
    let pdb = one(docs, "PodDisruptionBudget");
    assert!(
        subset(&pdb["spec"]["selector"]["matchLabels"], labels),
        "{what}: PDB selector"
    );
    if let Some(hpa) = docs.iter().find(|d| d["kind"] == "HorizontalPodAutoscaler") {
        assert_eq!(
            hpa["spec"]["scaleTargetRef"]["name"],
            deployment["metadata"]["name"]
        );
        assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    }

    let sa = one(docs, "ServiceAccount");
    assert_eq!(spec["serviceAccountName"], sa["metadata"]["name"], "{what}");
    let role = one(docs, "ClusterRole");
    let binding = one(docs, "ClusterRoleBinding");
    check_binding(binding, role, sa, what);
    let rules = role["rules"].as_array().expect("rules");
    let mut granted = Vec::new();
    let mut patched = Vec::new();
    let mut created = Vec::new();
    for r in rules {
        let verbs = strings(&r["verbs"]);
        let mut sorted = verbs.clone();
        sorted.sort();
        let into = if sorted == ["patch"] {
            &mut patched
        } else if sorted == ["create"] {
            &mut created
        } else {
            assert_eq!(
                sorted,
                ["get", "list", "watch"],
                "{what}: read-only rules, patch on status, or create (Events): {r}"
            );
            &mut granted
        };
        into.extend(resources_of(r));
    }
    patched.sort();
    let writes_status = args.contains(&"--write-status");
    let reviews_tokens = args.contains(&"--token-review");
    let mut expected_created = Vec::new();
    if writes_status {
        expected_created.push(("events.k8s.io".to_string(), "events".to_string()));
    }
    if reviews_tokens {
        expected_created.push((
            "authentication.k8s.io".to_string(),
            "tokenreviews".to_string(),
        ));
    }
    created.sort();
    expected_created.sort();
    assert_eq!(
        created,
        expected_created,
        "{what}: create on Events with --write-status only, on TokenReviews with --token-review only"
    );
    check_lease_role(docs, sa, deployment, writes_status, what);
    let mut status: Vec<(String, String)> = STATUS_WRITTEN
        .iter()
        .map(|(g, r)| (g.to_string(), format!("{r}/status")))
        .collect();
    status.sort();
    if writes_status {
        assert_eq!(
            patched, status,
            "{what}: --write-status needs patch on exactly these"
        );
    } else {
        assert!(
            patched.is_empty(),
            "{what}: patch without --write-status: {patched:?}"
        );
    }
    granted.sort();
    let mut watched: Vec<(String, String)> = WATCHED
        .iter()
        .map(|(g, r)| (g.to_string(), r.to_string()))
        .collect();
    watched.sort();
    assert_eq!(
        granted, watched,
        "{what}: the ClusterRole grants what is watched"
    );
}

/// `(apiGroup, resource)` of every pair a rule names.
fn resources_of(rule: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for g in strings(&rule["apiGroups"]) {
        for res in strings(&rule["resources"]) {
            out.push((g.to_string(), res.to_string()));
        }
    }
    out
}

/// With `--write-status`, a Role in the Deployment's namespace (where the status Lease is by
/// default) grants get/create/update on Leases and nothing else, bound to the pods'
/// ServiceAccount; without it, no Role at all.
fn check_lease_role(
    docs: &[Value],
    sa: &Value,
    deployment: &Value,
    writes_status: bool,
    what: &str,
) {
    let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Role").collect();
    let bindings: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "RoleBinding").collect();
    if !writes_status {
        assert!(
            roles.is_empty() && bindings.is_empty(),
            "{what}: a Role without --write-status"
        );
        return;
    }
    let (role, binding) = (one(docs, "Role"), one(docs, "RoleBinding"));
    assert_eq!(
        role["metadata"]["namespace"], deployment["metadata"]["namespace"],
        "{what}: the Lease is in meshflow's namespace"
    );
    let rules = role["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1, "{what}: {rules:?}");
    let mut verbs = strings(&rules[0]["verbs"]);
    verbs.sort();
    assert_eq!(verbs, ["create", "get", "update"], "{what}");
    assert_eq!(
        resources_of(&rules[0]),
        [("coordination.k8s.io".to_string(), "leases".to_string())],
        "{what}"
    );
    check_binding(binding, role, sa, what);
    assert_eq!(
        binding["metadata"]["namespace"], role["metadata"]["namespace"],
        "{what}"
    );
}

/// The binding refers to `role` (of its kind) and names the pods' ServiceAccount.
fn check_binding(binding: &Value, role: &Value, sa: &Value, what: &str) {
    assert_eq!(
        binding["roleRef"]["name"], role["metadata"]["name"],
        "{what}"
    );
    assert_eq!(binding["roleRef"]["kind"], role["kind"], "{what}");
    let subjects = binding["subjects"].as_array().expect("subjects");
    assert!(
        subjects.iter().any(|s| s["kind"] == "ServiceAccount"
            && s["name"] == sa["metadata"]["name"]
            && s["namespace"] == sa["metadata"]["namespace"]),
        "{what}: {} {} names the pods' ServiceAccount: {subjects:?}",
        binding["kind"],
        binding["metadata"]["name"]
    );
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn kustomize_manifests_render_and_pass_the_schema() {
    let dir = repo().join("deploy/kustomize");
    let docs = render_kustomization(&dir);
    check(&docs, "kustomize (this test's renderer)");
    assert_eq!(
        one(&docs, "Deployment")["metadata"]["namespace"],
        "istio-system"
    );
    if on_path("kubectl") {
        let rendered = documents(
            &run("kubectl", &["kustomize", dir.to_str().expect("utf-8 path")]),
            "kubectl kustomize",
        );
        check(&rendered, "kubectl kustomize");
        let key = |d: &Value| format!("{}/{}", d["kind"], d["metadata"]["name"]);
        let ours: BTreeMap<String, &Value> = docs.iter().map(|d| (key(d), d)).collect();
        let theirs: BTreeMap<String, &Value> = rendered.iter().map(|d| (key(d), d)).collect();
        assert_eq!(
            ours, theirs,
            "this test's renderer agrees with kubectl kustomize"
        );
    } else {
        eprintln!("kubectl not installed: kustomize rendered by this test only");
    }
}

#[test]
fn helm_chart_renders_and_passes_the_schema() {
    let chart = repo().join("deploy/helm/meshflow");
    let defaults = render_chart(&chart, json!({}));
    check(&defaults, "helm chart, default values");
    let d = one(&defaults, "Deployment");
    assert!(d["spec"].get("replicas").is_none(), "the HPA owns replicas");
    let args = strings(&d["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.contains(&"--xds-addr=0.0.0.0:15010") && args.contains(&"--plaintext"));
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"], "meshflow:0.1.0",
        "the tag defaults to the chart's appVersion"
    );

    assert!(
        !args.contains(&"--write-status"),
        "status writing is off by default"
    );
    let custom = render_chart(
        &chart,
        json!({
            "writeStatus": true,
            "tls": {"secretName": "meshflow-tls"},
            "namespaces": ["default", "bookinfo"],
            "labelSelector": "mesh=on",
            "logLevel": "debug",
            "image": {"tag": "1.2.3"},
            "autoscaling": {"enabled": false},
            "replicas": 3,
        }),
    );
    check(
        &custom,
        "helm chart, TLS, namespaces, selector, no autoscaling",
    );
    assert!(custom
        .iter()
        .all(|d| d["kind"] != "HorizontalPodAutoscaler"));
    let d = one(&custom, "Deployment");
    assert_eq!(d["spec"]["replicas"], 3);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&c["args"]);
    for want in [
        "--xds-addr=0.0.0.0:15012",
        "--tls-cert=/etc/meshflow/tls/tls.crt",
        "--namespaces=default,bookinfo",
        "--label-selector=mesh=on",
        "--write-status",
    ] {
        assert!(args.contains(&want), "{want}: {args:?}");
    }
    assert!(!args.contains(&"--plaintext"));
    assert_eq!(c["env"][0]["value"], "debug");
    assert_eq!(c["image"], "meshflow:1.2.3");
    assert_eq!(
        d["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "meshflow-tls"
    );
    let ports: Vec<i64> = one(&custom, "Service")["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(ports, [15012, 15014]);

    if on_path("helm") {
        let path = chart.to_str().expect("utf-8 path");
        run("helm", &["lint", path]);
        let rendered = run(
            "helm",
            &["template", "meshflow", path, "--namespace", "istio-system"],
        );
        check(&documents(&rendered, "helm template"), "helm template");
    } else {
        eprintln!("helm not installed: the chart is rendered by this test's template subset only");
    }
}

/// The dependency layer builds from stubs: one for every target the manifests declare, or
/// `cargo build` fails in that layer (or, worse, the layer stops caching).
#[test]
fn dockerfile_stubs_every_declared_target_and_runs_as_non_root() {
    let dockerfile = read(&repo().join("deploy/Dockerfile"));
    let manifest = read(&repo().join("Cargo.toml"));
    let mut lines = manifest.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "[[bench]]" {
            let name = lines
                .next()
                .and_then(|l| l.trim().strip_prefix("name = "))
                .map(|n| n.trim_matches('"'))
                .expect("a [[bench]] starts with its name");
            assert!(
                dockerfile.contains(&format!("benches/{name}.rs")),
                "bench {name}"
            );
        }
    }
    for stub in [
        "src/main.rs",
        "src/lib.rs",
        "dataflows/src/lib.rs",
        "dataflows/Cargo.toml",
    ] {
        assert!(dockerfile.contains(stub), "{stub}");
    }
    // build.rs runs in the dependency layer: the modules it includes must be there.
    let deps_stage = dockerfile
        .split("\nFROM ")
        .nth(1)
        .expect("a dependency stage");
    let build_rs = read(&repo().join("build.rs"));
    for module in build_rs
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#[path = \""))
        .filter_map(|l| l.split('"').next())
    {
        let top = module.split('/').next().unwrap_or(module);
        assert!(
            deps_stage
                .lines()
                .any(|l| l.starts_with("COPY ") && l.split_whitespace().any(|w| w == top)),
            "build.rs includes {module}: the dependency stage copies {top}"
        );
    }
    assert!(
        dockerfile.contains("ARG MESHFLOW_COMMIT"),
        "the commit for --version can be passed in"
    );
    assert!(dockerfile.matches("\nFROM ").count() >= 2, "multi-stage");
    let last_from = dockerfile.rsplit("\nFROM ").next().expect("a final stage");
    assert!(last_from.contains("distroless") || last_from.contains("slim"));
    let user = last_from
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the image names its user");
    assert!(
        !user.starts_with('0') && !user.starts_with("root"),
        "non-root: {user}"
    );
}
