//! Conversion of typed Kubernetes/Istio objects into domain records, with validation. The
//! one place that knows both the wire shape and the domain model: [`convert`] hands each
//! object to the converter of its kind, one file per kind, on the field vocabulary of
//! [`fields`].

mod destination_rule;
mod fields;
mod gateway;
mod gateway_api;
mod kube;
mod load_balancer;
mod route_actions;
mod security;
mod service_entry;
mod sidecar;
mod virtual_service;

use super::{Finding, Invalid};
use dataflows::model::{ConfigKey, Kind, MeshConfig, Record};
use destination_rule::destination_rule;
use gateway::gateway;
use kube::{endpoint_slice, endpoints, namespace, pod, service};
use serde_yaml_ng::Value;
use service_entry::{service_entry, workload_entry};
use sidecar::sidecar;
use virtual_service::virtual_service;

// What the mesh config reads as a VirtualService or DestinationRule does.
pub(super) use fields::{export_to, parse_duration_ms};
pub(super) use load_balancer::locality_lb_setting;
pub(super) use route_actions::retries;
pub use security::check_jwks;

type Result<T> = std::result::Result<T, Invalid>;

// `config::tests` shares its helpers.
#[cfg(test)]
pub(super) mod tests;

/// Converts one object to its records, and what there is to say about the parts of it
/// meshflow does not translate.
pub fn convert(
    key: &ConfigKey,
    value: Value,
    mesh: &MeshConfig,
) -> Result<(Vec<Record>, Vec<Finding>)> {
    let mut f = Vec::new();
    let records = match key.kind {
        Kind::Namespace => namespace(key, &value),
        Kind::Service => service(key, value, mesh, &mut f),
        Kind::EndpointSlice => endpoint_slice(key, value, mesh),
        Kind::Endpoints => endpoints(key, value, mesh),
        Kind::Pod => pod(key, value),
        Kind::VirtualService => virtual_service(key, &value, mesh, &mut f),
        Kind::DestinationRule => destination_rule(key, &value, mesh, &mut f),
        Kind::Gateway => gateway(key, &value, &mut f),
        Kind::Sidecar => sidecar(key, &value, &mut f),
        Kind::ServiceEntry => service_entry(key, &value, &mut f),
        Kind::WorkloadEntry => workload_entry(key, &value, &mut f),
        // Read by `config::mesh`, never as an object of a config directory.
        Kind::MeshConfig => Ok(Vec::new()),
        Kind::Secret => super::secret::secret(key, &value, &mut f),
        Kind::PeerAuthentication | Kind::AuthorizationPolicy | Kind::RequestAuthentication => {
            security::security(key, &value, mesh, &mut f)
        }
        Kind::KubernetesGateway => gateway_api::kubernetes_gateway(key, &value, &mut f),
        Kind::HttpRoute => gateway_api::http_route(key, &value, mesh, &mut f),
        Kind::GrpcRoute => gateway_api::grpc_route(key, &value, mesh, &mut f),
        Kind::TcpRoute | Kind::TlsRoute => gateway_api::l4_route(key, &value, mesh, &mut f),
        Kind::ReferenceGrant => gateway_api::reference_grant(key, &value, &mut f),
        Kind::GatewayClass => gateway_api::gateway_class(key, &value, &mut f),
        Kind::BackendTlsPolicy => gateway_api::backend_tls_policy(key, &value, &mut f),
        Kind::ConfigMap => super::secret::ca_config_map(key, &value),
        Kind::ListenerSet => gateway_api::listener_set(key, &value, &mut f),
    }?;
    Ok((records, f))
}
