//! The dataflow graph, composed of one stage per concept (one file each). Each stage keys its
//! records so that joins happen on keys and a change touches only the groups it belongs to:
//! scopes share all scope-level work, clusters are built once per (host, DestinationRule in
//! effect), endpoints once per cluster name.
//!
//! A stage that yields resources hands back a [`Built`]: the resources and their provenance,
//! side by side, so `explain` is always exactly as current as what proxies receive.
//!
//! May import: `crate::model`, `crate::rules`, `crate::translate`, `crate::assemble`,
//! `crate::client_tls`, `crate::delegation`.
//! Only [`crate::driver`] (and the benches) build it.

mod analysis;
mod clusters;
mod endpoints;
mod gateway_api;
mod gateways;
mod inbound;
mod listeners;
mod mesh;
mod router_routes;
mod routes;
mod scopes;
mod security;
mod services;
mod tcp;
mod virtual_services;
mod visibility;

use crate::model::*;
use differential_dataflow::VecCollection;

/// A collection at epoch timestamps.
pub type Coll<'s, D> = VecCollection<'s, u64, D>;

/// The input collections, keyed for the joins that consume them.
pub struct Inputs<'s> {
    pub services: Coll<'s, (Hostname, Service)>,
    pub endpoints: Coll<'s, (Hostname, RawEndpoint)>,
    pub workloads: Coll<'s, (String, Workload)>,
    pub virtual_services: Coll<'s, (ConfigKey, VirtualService)>,
    pub destination_rules: Coll<'s, (ConfigKey, DestinationRule)>,
    pub gateways: Coll<'s, (ConfigKey, Gateway)>,
    pub sidecars: Coll<'s, (ConfigKey, Sidecar)>,
    pub proxies: Coll<'s, (ProxyId, Proxy)>,
    /// TLS Secrets by (namespace, name).
    pub secrets: Coll<'s, ((String, String), TlsSecret)>,
    /// Mesh settings, one per layer (see [`MeshSettings::in_effect`]).
    pub mesh: Coll<'s, MeshSettings>,
    /// ServiceEntries' workload selectors, per host.
    pub selections: Coll<'s, (Hostname, WorkloadSelection)>,
    /// Security policies (PeerAuthentication, AuthorizationPolicy, RequestAuthentication).
    pub security: Coll<'s, (ConfigKey, SecurityPolicy)>,
    /// Workloads whose PeerAuthentication change is held part-way ([`MtlsHold`]).
    pub mtls_holds: Coll<'s, MtlsHold>,
    /// Gateway API objects, translated into Gateways and VirtualServices first.
    pub gateway_api: Coll<'s, (ConfigKey, GatewayApiObject)>,
}

pub struct Outputs<'s> {
    /// `(proxy, resource key)`: what a connected proxy holds alone (inbound clusters,
    /// `virtualInbound`). The rest of its set is its scope's, from the two below.
    pub proxy_resources: Coll<'s, (ProxyId, ResourceKey)>,
    /// `(scope, resource key)`: what every proxy of a scope holds.
    pub scope_resources: Coll<'s, (ScopeKey, ResourceKey)>,
    /// Every distinct resource body referenced above, once.
    pub bodies: Coll<'s, Resource>,
    /// Problems found in the inputs; retracted when fixed.
    pub errors: Coll<'s, ConfigError>,
    /// The scope each connected proxy's shared resources come from.
    pub proxy_scopes: Coll<'s, (ProxyId, ScopeKey)>,
    /// Which input objects each resource was built from (`explain`), kept with the resources
    /// so it is exactly as current as they are.
    pub provenance: Coll<'s, ProvenanceRow>,
}

/// What one stage adds to the output: resources held by `H` (a scope or a proxy) and the
/// provenance rows it knows for them.
struct Built<'s, H: 'static> {
    resources: Coll<'s, (H, Resource)>,
    provenance: Coll<'s, ProvenanceRow>,
}

impl<'s, H: differential_dataflow::ExchangeData> Built<'s, H> {
    /// Both stages' resources and provenance. Not `distinct`: the outputs keep each
    /// resource's multiplicity, as one concatenation of every stage would.
    fn concat(self, other: Built<'s, H>) -> Built<'s, H> {
        Built {
            resources: self.resources.concat(other.resources),
            provenance: self.provenance.concat(other.provenance),
        }
    }
}

/// Builds the whole dataflow from its inputs.
pub fn build<'s>(config: &MeshConfig, i: Inputs<'s>) -> Outputs<'s> {
    // The Gateway API becomes Istio's Gateways, VirtualServices and DestinationRules (its
    // BackendTLSPolicies), served as written ones.
    let translated = gateway_api::translate(config, &i.gateway_api, &i.services);
    let gateway_api_errors = translated.errors;
    let i = Inputs {
        gateways: i.gateways.concat(translated.gateways),
        virtual_services: i.virtual_services.concat(translated.virtual_services),
        destination_rules: i.destination_rules.concat(translated.destination_rules),
        ..i
    };
    let mesh = mesh::in_effect(i.mesh, config);
    let unknown_namespaces =
        security::unknown_namespaces(&i.security, &i.workloads, &i.services, &i.proxies, &mesh);
    let defined = mesh::complete(i.services, &mesh, MeshSettings::complete_service);
    let services = services::per_namespace(defined.clone());
    // What every stage but the analysis of references routes by: `ExternalName` aliases
    // resolved into the services they name.
    let chosen = services::with_aliases(&services.chosen);
    let virtual_services = mesh::complete(i.virtual_services, &mesh, MeshSettings::complete_vs);
    let destination_rules = mesh::complete(i.destination_rules, &mesh, MeshSettings::complete_dr);
    // Endpoints carry whether their workload's PeerAuthentication disables mTLS on their
    // port: what auto mTLS clients send them depends on the destination's policies.
    let peered = security::with_peer_modes(i.workloads.clone(), &i.security, &i.mtls_holds, &mesh);
    let unselected =
        security::selecting_nothing(&i.security, &i.workloads, &mesh).concat(unknown_namespaces);
    let endpoints = endpoints::resolve(i.endpoints, peered, i.selections, &chosen);

    let providers = security::ext_authz_providers(&mesh, &chosen);
    let secured = security::per_proxy(
        i.security.clone(),
        &i.proxies,
        &mesh,
        &providers,
        &i.mtls_holds,
    );
    let proxy_scopes = scopes::of_proxies(
        &mesh,
        &i.proxies,
        scopes::ScopeInputs {
            sidecars: &i.sidecars,
            gateways: &i.gateways,
            router_security: &secured.routers,
            sidecar_security: &secured.bound,
        },
        &virtual_services,
        &destination_rules,
        &chosen,
        &endpoints,
    );
    let scopes = proxy_scopes.clone().map(|(_, s)| s).distinct();
    let specs = scopes::sidecar_specs(&scopes, &i.sidecars, &mesh);
    let visible = visibility::hosts(&specs, &chosen);

    let merged_drs = clusters::consolidated(&destination_rules);
    let gateway_workloads = analysis::gateway_workloads(&i.gateways, &i.workloads);
    let findings = analysis::findings(analysis::Inputs {
        virtual_services: &virtual_services,
        sidecars: &i.sidecars,
        destination_rules: &destination_rules,
        gateways: &i.gateways,
        workloads: &i.workloads,
        gateway_workloads: &gateway_workloads,
        services: &services.chosen,
        aliased: &chosen,
        defined: &defined,
        endpoints: &endpoints,
        security: &i.security,
        proxies: &i.proxies,
        mesh: &mesh,
    });
    let dr_merge_warnings = merged_drs.warnings.clone();
    let secret_errors = analysis::gateway_secrets(&i.gateways, &gateway_workloads, &i.secrets);
    let identified = endpoints::identified(&endpoints, &chosen, &mesh);
    let clusters = clusters::outbound(
        &mesh,
        &scopes,
        &visible,
        &merged_drs,
        &chosen,
        &identified,
        &i.secrets,
    );
    let assignments = endpoints::assignments(clusters.eds, &endpoints);

    // Analysis reads VirtualServices as written; routing reads them with delegates expanded.
    // Destinations naming an `ExternalName` alias go to the host it names.
    let routed_vss = virtual_services::alias_destinations(
        virtual_services::expand_delegates(virtual_services.clone()),
        &services.chosen,
    );
    let vss = virtual_services::resolve(&routed_vss, &chosen);
    let covering_vss = virtual_services::mesh_covering(&routed_vss, &chosen, &visible, &specs);
    let mesh_vss = virtual_services::mesh_in_effect(&covering_vss);
    let ports = routes::ports(&visible, &chosen, &specs);
    let hostless_vss = virtual_services::hostless(&routed_vss, &vss, &chosen);
    let aliases = routes::Aliases::of(&services.chosen, &specs, &routed_vss);
    let (routes, http_ports) = routes::sidecar(
        &config.domain_suffix,
        &specs,
        &ports,
        mesh_vss.clone(),
        &vss,
        &hostless_vss,
        aliases,
        &clusters.hashing,
    );
    let (tcp, unreachable) = tcp::sidecar(
        &visible,
        &chosen,
        &specs,
        covering_vss,
        &vss,
        http_ports,
        &clusters.tcp_idle,
    );
    let listeners = listeners::sidecar(&specs, ports, &config.domain_suffix);
    let (gateways, gateway_errors, gateway_mtls) = gateways::routers(
        &scopes,
        i.gateways,
        routed_vss,
        vss,
        &clusters.hashing,
        &clusters.tcp_idle,
        &i.secrets,
        &clusters.built.resources,
        &chosen,
    );

    let (inbound_inputs, mtls_proxies) = inbound::scope_inputs(
        &proxy_scopes,
        &specs,
        clusters.mtls_scopes.clone().concat(gateway_mtls),
        &visible,
        &clusters.placed,
        &merged_drs.rules,
    );
    let inbound = inbound::per_proxy(
        i.proxies,
        endpoints,
        &chosen,
        &mesh,
        inbound_inputs,
        mtls_proxies,
        secured.inbound,
    );

    // SDS secrets a scope takes from Secrets: a gateway server's and a DestinationRule
    // `credentialName`'s may be the same one (a scope holds each once).
    let (gw_secrets, gw_rest) = split_secrets(gateways.resources);
    let secrets = Built {
        resources: gw_secrets.concat(clusters.secrets.resources).distinct(),
        provenance: clusters.secrets.provenance,
    };
    let gateways = Built {
        resources: gw_rest,
        provenance: gateways.provenance,
    };
    let scoped = clusters
        .built
        .concat(assignments)
        .concat(routes)
        .concat(tcp)
        .concat(listeners)
        .concat(gateways)
        .concat(secrets);
    let errors = services
        .conflicts
        .concat(findings)
        .concat(dr_merge_warnings)
        .concat(unreachable)
        .concat(clusters.errors)
        .concat(secured.errors)
        .concat(unselected)
        .concat(secret_errors.concat(gateway_errors).distinct())
        .concat(gateway_api_errors);
    outputs(scoped, inbound, errors, proxy_scopes)
}

/// A scope's SDS secrets apart from its other resources.
#[allow(clippy::type_complexity)]
fn split_secrets<'s>(
    resources: Coll<'s, (ScopeKey, Resource)>,
) -> (
    Coll<'s, (ScopeKey, Resource)>,
    Coll<'s, (ScopeKey, Resource)>,
) {
    let secrets = resources
        .clone()
        .filter(|(_, r)| r.rtype == ResourceType::Secret);
    let rest = resources.filter(|(_, r)| r.rtype != ResourceType::Secret);
    (secrets, rest)
}

/// The file secrets resource `r` of `holder` names: `((holder, type, name) of r, (holder,
/// secret))`.
#[allow(clippy::type_complexity)] // the provenance key and the held secret, as joined
fn named_files(
    holder: Holder,
    r: &Resource,
) -> Vec<((Holder, ResourceType, String), (Holder, Resource))> {
    crate::translate::secret::file_secrets(r)
        .into_iter()
        .map(|s| {
            let by = (holder.clone(), r.rtype, r.name.clone());
            (by, (holder.clone(), s))
        })
        .collect()
}

/// The stages' results as the outputs the driver captures.
fn outputs<'s>(
    scoped: Built<'s, ScopeKey>,
    owned: Built<'s, ProxyId>,
    errors: Coll<'s, ConfigError>,
    proxy_scopes: Coll<'s, (ProxyId, ScopeKey)>,
) -> Outputs<'s> {
    let (scope_res, proxy_res) = (scoped.resources, owned.resources);
    // Listeners carry their scope's node metadata `IDLE_TIMEOUT` and the mesh's
    // `pathNormalization`, whichever stage built them, and a router scope's refusals.
    let scope_res = scope_res.flat_map(|(s, r)| {
        let r = crate::assemble::apply_idle_timeout(s.idle_timeout_ns(), r);
        let r = crate::assemble::apply_path_normalization(s.path_normalization(), r);
        crate::assemble::apply_router_security(&s, r).map(|r| (s, r))
    });
    // Every resource of a scope governed by a Sidecar resource comes from it too.
    let sidecar_prov = scope_res.clone().flat_map(|(s, r)| match &s {
        ScopeKey::Sidecar {
            sidecar: Some(k), ..
        } => {
            let k = k.clone();
            Some(((Holder::Scope(s), r.rtype, r.name), k))
        }
        _ => None,
    });
    let provenance = scoped
        .provenance
        .concat(owned.provenance)
        .concat(sidecar_prov);
    // The certificates proxies read from their own files, as SDS secrets of their own
    // (`translate::secret::file_secrets`), held with the resource that names them and coming
    // from the same objects.
    let files = scope_res
        .clone()
        .flat_map(|(s, r)| named_files(Holder::Scope(s), &r))
        .concat(
            proxy_res
                .clone()
                .flat_map(|(id, r)| named_files(Holder::Proxy(id), &r)),
        );
    let file_prov = files
        .clone()
        .map(|(by, (holder, secret))| (by, (holder, secret.name)))
        .join_map(provenance.clone(), |_, (holder, name), origin| {
            (
                (holder.clone(), ResourceType::Secret, name.clone()),
                origin.clone(),
            )
        });
    let provenance = provenance.concat(file_prov).distinct();
    let files = files.map(|(_, held)| held).distinct();
    let scope_res = scope_res.concat(files.clone().flat_map(|(h, r)| match h {
        Holder::Scope(s) => Some((s, r)),
        Holder::Proxy(_) => None,
    }));
    let proxy_res = proxy_res.concat(files.flat_map(|(h, r)| match h {
        Holder::Proxy(id) => Some((id, r)),
        Holder::Scope(_) => None,
    }));
    // Never joined with `proxy_scopes`: that would write one record per (proxy, resource)
    // pair. Consumers resolve a proxy's set from its scope (`materialize`).
    let scope_resources = scope_res.clone().map(|(s, r)| (s, r.key()));
    let proxy_resources = proxy_res.clone().map(|(id, r)| (id, r.key()));
    let bodies = scope_res
        .map(|(_, r)| r)
        .concat(proxy_res.map(|(_, r)| r))
        .distinct();
    Outputs {
        proxy_resources,
        scope_resources,
        bodies,
        errors,
        proxy_scopes,
        provenance,
    }
}
