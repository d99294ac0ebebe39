//! The kinds the Kubernetes source watches, and where the cluster serves them.
//!
//! Kubernetes kinds are fixed (`v1` Services and Pods, `discovery.k8s.io/v1` EndpointSlices:
//! GA everywhere meshflow runs). Istio's kinds are custom resources whose served versions
//! depend on the Istio release installed, so they are found by API discovery, group by group
//! ([`ISTIO_GROUPS`]: networking.istio.io and security.istio.io), one watch per kind at the
//! most stable version served (`v1`, else `v1beta1`, else `v1alpha3` where the group had it).
//! A kind the cluster does not serve is reported by name, never silently skipped.
//!
//! The Gateway API's group (gateway.networking.k8s.io) is discovered the same way; a cluster
//! without its CRDs is not missing anything (they are installed by choice), so its absence
//! is no error.
//!
//! Secrets are watched for the TLS material gateways serve (`credentialName`); every
//! Secret becomes a record, those without TLS keys an empty one that says so.
//!
//! ConfigMaps are watched for the CA bundles (`ca.crt`) BackendTLSPolicies name; every
//! ConfigMap becomes a record holding that key alone (or why it has none).
//!
//! Namespaces are watched for their labels (Gateway listeners' namespace selectors), whole:
//! cluster-scoped, one watch whatever `--namespaces` and `--selector` say.
//!
//! Not watched, and why: Endpoints (EndpointSlices supersede them; watching both would count
//! every endpoint twice).

use dataflows::model::Kind;
use kube::discovery::{verbs, ApiCapabilities, ApiResource};
use kube::Client;

/// One kind to watch and the resource it is served as.
#[derive(Clone, Debug)]
pub struct WatchedKind {
    pub kind: Kind,
    pub resource: ApiResource,
}

/// An API group of Istio's custom resources and the kinds meshflow reads from it.
#[derive(Clone, Copy, Debug)]
pub struct IstioGroup {
    pub group: &'static str,
    /// The versions meshflow reads, most stable first.
    pub versions: &'static [&'static str],
    pub kinds: &'static [(Kind, &'static str)],
    /// The group's CRDs are installed by choice, and its channels differ in kinds (the
    /// Gateway API's standard channel has no TCPRoute): a kind the cluster does not serve
    /// is not an error, it is simply not watched.
    pub optional: bool,
}

/// Istio's traffic kinds.
pub const NETWORKING: IstioGroup = IstioGroup {
    group: "networking.istio.io",
    versions: &["v1", "v1beta1", "v1alpha3"],
    kinds: &[
        (Kind::VirtualService, "VirtualService"),
        (Kind::DestinationRule, "DestinationRule"),
        (Kind::Gateway, "Gateway"),
        (Kind::ServiceEntry, "ServiceEntry"),
        (Kind::Sidecar, "Sidecar"),
        (Kind::WorkloadEntry, "WorkloadEntry"),
    ],
    optional: false,
};

/// Istio's security policies: read so that a policy in the cluster is enforced (or fails
/// closed) exactly as one in a file; a cluster that lacks them is told so like any other
/// missing kind.
pub const SECURITY: IstioGroup = IstioGroup {
    group: "security.istio.io",
    versions: &["v1", "v1beta1"],
    kinds: &[
        (Kind::PeerAuthentication, "PeerAuthentication"),
        (Kind::AuthorizationPolicy, "AuthorizationPolicy"),
        (Kind::RequestAuthentication, "RequestAuthentication"),
    ],
    optional: false,
};

/// The Kubernetes Gateway API (custom resources too, found the same way): watched where its
/// CRDs are installed.
pub const GATEWAY_API: IstioGroup = IstioGroup {
    group: "gateway.networking.k8s.io",
    versions: &["v1", "v1beta1", "v1alpha2"],
    kinds: &[
        // Cluster-scoped, watched whole (its status is written for the classes meshflow's
        // controllers answer for).
        (Kind::GatewayClass, "GatewayClass"),
        (Kind::KubernetesGateway, "Gateway"),
        (Kind::HttpRoute, "HTTPRoute"),
        (Kind::GrpcRoute, "GRPCRoute"),
        (Kind::ReferenceGrant, "ReferenceGrant"),
        (Kind::BackendTlsPolicy, "BackendTLSPolicy"),
        (Kind::ListenerSet, "ListenerSet"),
        // The experimental channel's: a cluster of the standard channel has none.
        (Kind::TcpRoute, "TCPRoute"),
        (Kind::TlsRoute, "TLSRoute"),
    ],
    optional: true,
};

/// Every custom-resource group the source discovers.
pub const ISTIO_GROUPS: [IstioGroup; 3] = [NETWORKING, SECURITY, GATEWAY_API];

/// Services, Pods, EndpointSlices, Secrets, ConfigMaps and Namespaces.
pub fn kubernetes_kinds() -> Vec<WatchedKind> {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    vec![
        WatchedKind {
            kind: Kind::Namespace,
            resource: ApiResource::erase::<Namespace>(&()),
        },
        WatchedKind {
            kind: Kind::Service,
            resource: ApiResource::erase::<Service>(&()),
        },
        WatchedKind {
            kind: Kind::EndpointSlice,
            resource: ApiResource::erase::<EndpointSlice>(&()),
        },
        WatchedKind {
            kind: Kind::Pod,
            resource: ApiResource::erase::<Pod>(&()),
        },
        WatchedKind {
            kind: Kind::Secret,
            resource: ApiResource::erase::<Secret>(&()),
        },
        WatchedKind {
            kind: Kind::ConfigMap,
            resource: ApiResource::erase::<ConfigMap>(&()),
        },
    ]
}

/// Asks the cluster (API discovery: `/apis`, then `/apis/GROUP/VERSION`) which Istio kinds
/// it serves and at which versions, for each of [`ISTIO_GROUPS`]; see [`istio_kinds`]. `Err`
/// when the API server cannot be asked; a cluster without a group serves none of its kinds.
pub async fn discover_istio(
    client: &Client,
) -> Result<(Vec<WatchedKind>, Vec<String>), kube::Error> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for g in &ISTIO_GROUPS {
        let served: Vec<_> = match kube::discovery::group(client, g.group).await {
            Ok(group) => group
                .versions()
                .map(|v| (v.to_string(), group.versioned_resources(v)))
                .collect(),
            Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => {
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        let (f, m) = istio_kinds(g, &served);
        found.extend(f);
        if !g.optional {
            missing.extend(m);
        }
    }
    Ok((found, missing))
}

/// Which version of each kind of `group` to watch, given the resources each served version
/// of the group lists (`served`: version → resources); the kinds no version serves with
/// list and watch, as errors naming them.
pub fn istio_kinds(
    group: &IstioGroup,
    served: &[(String, Vec<(ApiResource, ApiCapabilities)>)],
) -> (Vec<WatchedKind>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for &(kind, name) in group.kinds {
        let chosen = group.versions.iter().find_map(|v| {
            served
                .iter()
                .filter(|(version, _)| version == v)
                .flat_map(|(_, resources)| resources)
                .find(|(ar, caps)| {
                    ar.kind == name
                        && caps.supports_operation(verbs::LIST)
                        && caps.supports_operation(verbs::WATCH)
                })
        });
        match chosen {
            Some((ar, _)) => found.push(WatchedKind {
                kind,
                resource: ar.clone(),
            }),
            None => missing.push(not_served(group, name, served)),
        }
    }
    (found, missing)
}

/// The error for an Istio kind the cluster does not serve.
pub fn not_served(
    group: &IstioGroup,
    kind: &str,
    served: &[(String, Vec<(ApiResource, ApiCapabilities)>)],
) -> String {
    let name = group.group;
    let versions: Vec<&str> = served.iter().map(|(v, _)| v.as_str()).collect();
    let wanted: Vec<String> = group
        .versions
        .iter()
        .map(|v| format!("{name}/{v}"))
        .collect();
    let serves = if versions.is_empty() {
        format!("the cluster does not serve the {name} API group")
    } else {
        format!("the cluster serves {name} {}", versions.join(", "))
    };
    format!(
        "{kind}: not watched: {serves}, without {kind} (read as {}); are Istio's CRDs \
         installed? (looked for again every minute)",
        wanted.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::discovery::Scope;

    fn served(
        version: &str,
        kinds: &[&str],
        verbs: &[&str],
    ) -> (String, Vec<(ApiResource, ApiCapabilities)>) {
        let resources = kinds
            .iter()
            .map(|k| {
                let ar = ApiResource {
                    group: NETWORKING.group.into(),
                    version: version.into(),
                    api_version: format!("{}/{version}", NETWORKING.group),
                    kind: k.to_string(),
                    plural: format!("{}s", k.to_lowercase()),
                };
                let caps = ApiCapabilities {
                    scope: Scope::Namespaced,
                    subresources: Vec::new(),
                    operations: verbs.iter().map(|v| v.to_string()).collect(),
                };
                (ar, caps)
            })
            .collect();
        (version.into(), resources)
    }

    #[test]
    fn prefers_v1_then_v1beta1_then_v1alpha3_and_names_what_is_missing() {
        let all = ["list", "watch", "get"];
        let group = [
            served(
                "v1alpha3",
                &["VirtualService", "DestinationRule", "Gateway", "Sidecar"],
                &all,
            ),
            served(
                "v1beta1",
                &["VirtualService", "DestinationRule", "ServiceEntry"],
                &all,
            ),
            served("v1", &["VirtualService"], &all),
            // Listed but not watchable: not used.
            served("v2", &["WorkloadEntry"], &all),
        ];
        let (found, missing) = istio_kinds(&NETWORKING, &group);
        let versions: Vec<(Kind, &str)> = found
            .iter()
            .map(|w| (w.kind, w.resource.version.as_str()))
            .collect();
        assert_eq!(
            versions,
            vec![
                (Kind::VirtualService, "v1"),
                (Kind::DestinationRule, "v1beta1"),
                (Kind::Gateway, "v1alpha3"),
                (Kind::ServiceEntry, "v1beta1"),
                (Kind::Sidecar, "v1alpha3"),
            ]
        );
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0].starts_with("WorkloadEntry: not watched"),
            "{}",
            missing[0]
        );
    }

    /// The Gateway API's kinds are found at their most stable version; a release without
    /// one of them (no ReferenceGrant in v1) falls back to an older version of the group.
    #[test]
    fn gateway_api_kinds_are_found_at_their_most_stable_version() {
        let all = ["list", "watch", "get"];
        let group = [
            served(
                "v1",
                &[
                    "GatewayClass",
                    "Gateway",
                    "HTTPRoute",
                    "GRPCRoute",
                    "BackendTLSPolicy",
                    "ListenerSet",
                ],
                &all,
            ),
            served("v1beta1", &["Gateway", "HTTPRoute", "ReferenceGrant"], &all),
        ];
        let (found, missing) = istio_kinds(&GATEWAY_API, &group);
        let versions: Vec<(Kind, &str)> = found
            .iter()
            .map(|w| (w.kind, w.resource.version.as_str()))
            .collect();
        assert_eq!(
            versions,
            vec![
                (Kind::GatewayClass, "v1"),
                (Kind::KubernetesGateway, "v1"),
                (Kind::HttpRoute, "v1"),
                (Kind::GrpcRoute, "v1"),
                (Kind::ReferenceGrant, "v1beta1"),
                (Kind::BackendTlsPolicy, "v1"),
                (Kind::ListenerSet, "v1"),
            ]
        );
        // TCPRoute and TLSRoute (experimental) are not served: named, but not errors.
        assert_eq!(missing.len(), 2, "{missing:?}");
        let optional: Vec<bool> = ISTIO_GROUPS.iter().map(|g| g.optional).collect();
        assert_eq!(
            optional,
            [false, false, true],
            "only the Gateway API's group"
        );
    }

    #[test]
    fn a_kind_without_watch_is_not_served() {
        let group = [served("v1", &["Sidecar"], &["get", "list"])];
        let (found, missing) = istio_kinds(&NETWORKING, &group);
        assert!(found.is_empty());
        assert_eq!(missing.len(), NETWORKING.kinds.len());
        assert!(missing
            .iter()
            .any(|m| m.starts_with("Sidecar: not watched")));
    }

    #[test]
    fn no_istio_group_is_one_error_per_kind() {
        let (found, missing) = istio_kinds(&NETWORKING, &[]);
        assert!(found.is_empty());
        assert_eq!(missing.len(), 6);
        assert!(missing[0].contains("does not serve the networking.istio.io API group"));
    }

    #[test]
    fn security_kinds_are_found_in_their_own_group_and_named_when_missing() {
        let all = ["list", "watch", "get"];
        let group = [
            served(
                "v1beta1",
                &["PeerAuthentication", "AuthorizationPolicy"],
                &all,
            ),
            served("v1", &["AuthorizationPolicy"], &all),
        ];
        let (found, missing) = istio_kinds(&SECURITY, &group);
        let versions: Vec<(Kind, &str)> = found
            .iter()
            .map(|w| (w.kind, w.resource.version.as_str()))
            .collect();
        assert_eq!(
            versions,
            vec![
                (Kind::PeerAuthentication, "v1beta1"),
                (Kind::AuthorizationPolicy, "v1"),
            ]
        );
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0].starts_with("RequestAuthentication: not watched: the cluster serves security.istio.io v1beta1, v1")
                && missing[0].contains("security.istio.io/v1, security.istio.io/v1beta1"),
            "{}",
            missing[0]
        );
        let (_, none) = istio_kinds(&SECURITY, &[]);
        assert_eq!(none.len(), 3);
        assert!(none[0].contains("does not serve the security.istio.io API group"));
    }
}
