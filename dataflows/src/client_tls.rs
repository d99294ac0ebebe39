//! DestinationRule `tls.credentialName` and proxyless gRPC clients, shared by the dataflow
//! and the naive recompute: what is said of a rule whose TLS a client cannot be given.
//! Which Secrets a client proxy takes a `credentialName`'s certificates from, and the SDS
//! resources it is served, are the cluster builder's
//! ([`crate::translate::cluster::ClientSecrets`], re-exported here); a cluster whose TLS
//! cannot be given fails closed there.

use crate::model::*;

pub use crate::translate::cluster::ClientSecrets;

/// What is said of `dr` where it applies to proxyless gRPC clients: each `tls` that
/// encrypts (SIMPLE, MUTUAL, ISTIO_MUTUAL) cannot be given to them, so their clusters it
/// applies to fail closed (no endpoints) instead of sending plaintext.
pub fn proxyless_errors(dr: &DestinationRule) -> Vec<ConfigError> {
    let mut out: Vec<ConfigError> = dr
        .encrypting_tls()
        .into_iter()
        .map(|t| {
            let why = if t.istio_mutual {
                format!(
                    "DestinationRule {}.mode ISTIO_MUTUAL is not supported for a proxyless gRPC \
                     client (it takes no SDS certificates)",
                    t.field
                )
            } else {
                crate::translate::cluster::proxyless_tls_reason(t)
            };
            ConfigError {
                object: dr.key.clone(),
                code: ErrorCode::ProxylessTls,
                message: format!(
                    "{why}; the rule's clusters this tls applies to fail closed (no endpoints) \
                     for proxyless gRPC clients"
                ),
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxyless gRPC client cannot verify with files (nor take SDS): the error of a rule
    /// with SIMPLE or MUTUAL names the field (its clusters fail closed: see
    /// `translate::cluster`'s `simple_and_mutual_fail_closed_for_proxyless_clients`).
    #[test]
    fn simple_and_mutual_are_errors_for_proxyless_clients() {
        for tls in [
            UpstreamTls {
                field: "spec.trafficPolicy.tls".into(),
                ..Default::default()
            },
            UpstreamTls {
                client_cert: Some(("/c.pem".into(), "/k.pem".into())),
                mutual: true,
                field: "spec.trafficPolicy.tls".into(),
                ..Default::default()
            },
        ] {
            let dr = DestinationRule {
                key: ConfigKey::new(Kind::DestinationRule, "default", "reviews"),
                host: "reviews.default.svc.cluster.local".into(),
                export_to: Vec::new(),
                traffic_policy: Some(TrafficPolicy {
                    tls: Some(Box::new(tls)),
                    ..Default::default()
                }),
                subsets: vec![Subset {
                    name: "v1".into(),
                    labels: [("version".to_string(), "v1".to_string())].into(),
                    traffic_policy: None,
                }],
                selector: None,
            };
            let errors = proxyless_errors(&dr);
            assert_eq!(errors.len(), 1);
            assert_eq!(errors[0].code, ErrorCode::ProxylessTls);
            assert!(
                errors[0].message.contains("spec.trafficPolicy.tls.mode"),
                "{}",
                errors[0].message
            );
        }
    }
}
