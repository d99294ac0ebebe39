//! Checks a rendered manifest against the Kubernetes API schema as `k8s-openapi` types it:
//! the document must deserialize into its kind's type (a wrong type names its field path),
//! and serializing the typed object back must give the document again, so a field the type
//! does not have (a typo, a field of another kind, a wrong indentation level) is reported by
//! its path instead of being ignored as serde would.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Validates one document; `Err` lists every problem with its path.
pub fn validate(doc: &Value) -> Result<(), String> {
    use k8s_openapi::api::{apps, autoscaling, core, policy, rbac};
    let api_version = doc["apiVersion"].as_str().unwrap_or("");
    let kind = doc["kind"].as_str().unwrap_or("");
    match (api_version, kind) {
        ("v1", "ServiceAccount") => typed::<core::v1::ServiceAccount>(doc),
        ("v1", "Service") => typed::<core::v1::Service>(doc),
        ("v1", "ConfigMap") => typed::<core::v1::ConfigMap>(doc),
        ("apps/v1", "Deployment") => typed::<apps::v1::Deployment>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => typed::<rbac::v1::ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            typed::<rbac::v1::ClusterRoleBinding>(doc)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<rbac::v1::Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => typed::<rbac::v1::RoleBinding>(doc),
        ("policy/v1", "PodDisruptionBudget") => typed::<policy::v1::PodDisruptionBudget>(doc),
        ("autoscaling/v2", "HorizontalPodAutoscaler") => {
            typed::<autoscaling::v2::HorizontalPodAutoscaler>(doc)
        }
        _ => Err(format!("{api_version} {kind}: not a kind this check knows")),
    }
}

fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<(), String> {
    let object: T = serde_path_to_error::deserialize(doc.clone())
        .map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
    let back = serde_json::to_value(&object).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    compare(doc, &back, "", &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Every place where `doc` says something `typed` (its round trip) does not.
fn compare(doc: &Value, typed: &Value, path: &str, problems: &mut Vec<String>) {
    match (doc, typed) {
        (Value::Object(d), Value::Object(t)) => {
            for (k, v) in d {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match t.get(k) {
                    Some(tv) => compare(v, tv, &p, problems),
                    // An empty value the type omits says nothing.
                    None if is_empty(v) => {}
                    None => problems.push(format!("{p}: unknown field")),
                }
            }
        }
        (Value::Array(d), Value::Array(t)) if d.len() == t.len() => {
            for (i, (dv, tv)) in d.iter().zip(t).enumerate() {
                compare(dv, tv, &format!("{path}[{i}]"), problems);
            }
        }
        (d, t) if d == t => {}
        (d, t) => problems.push(format!("{path}: {d} reads as {t}")),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[test]
fn unknown_fields_and_wrong_types_are_named() {
    let doc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": 80, "targetPort": "http", "protcol": "TCP"}], "selector": {"a": "b"}},
    });
    let err = validate(&doc).unwrap_err();
    assert_eq!(err, "spec.ports[0].protcol: unknown field");
    let doc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": "eighty"}]},
    });
    assert!(validate(&doc)
        .unwrap_err()
        .starts_with("spec.ports[0].port"));
}
