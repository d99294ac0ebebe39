//! Istio's selection and visibility rules as plain predicates, shared by the incremental
//! dataflow and the naive recompute used as its oracle. One file per kind (`sidecar.rs`,
//! `destination_rule.rs`, `virtual_service.rs`, `gateway.rs`, `aliases.rs` for
//! `ExternalName` Services), and `hosts.rs` for the matching they share; every function
//! is re-exported here, as `crate::rules::NAME`.

mod aliases;
pub mod backend_tls;
mod destination_rule;
mod frontend_tls;
mod gateway;
pub mod gateway_api;
mod hosts;
pub mod listener_set;
mod shadowed;
mod sidecar;
mod virtual_service;

pub use aliases::{
    alias_chain, alias_targets, resolve_aliases, with_alias_destinations, with_aliases, AliasTarget,
};
pub use destination_rule::{
    consolidate_drs, dr_entry_relevant, dr_export_set, dr_in_effect, dr_in_effect_inbound,
    dr_merge_warnings, policy_tls_overridden, DrEntry, DrIndex,
};
pub use frontend_tls::{ca_config_maps, ca_namespaces, frontend_validation, Applied};
pub use gateway::{
    gateway_domain, gateway_ports, gateway_ref, gateway_ref_str, gateway_selects, router_scope,
};
pub use hosts::{
    covering_patterns, exported_to, host_matches, host_namespace, hosts_overlap, labels_match,
    vs_host_specificity,
};
pub use shadowed::shadowed_rules;
pub use sidecar::{
    binds_ingress, egress_bind, egress_listeners, egress_pattern, egress_visible,
    listeners_importing_vs, sidecar_rank, sidecar_route_ports, sidecar_scope,
    sidecar_sees_hostless_vs, sidecar_tcp_ports, NsKey,
};
pub use virtual_service::{destination_hosts, vs_rank};
