//! What a workload's security policies add to each of its inbound chains, in Istio's order:
//! the CUSTOM policies' external authorization ([`super::ext_authz`]), the
//! RequestAuthentications' token verification ([`super::jwt`]), the AuthorizationPolicies'
//! RBAC ([`super::rbac`]); built once per workload for all its chains.

use super::rbac::{deny_all_filter, http_authz_filters, network_authz_filters};
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter,
};
use envoy_types::util::pack_any;
use prost::Message;

/// Paths as Istio's strictest `pathNormalization` (`DECODE_AND_MERGE_SLASHES`) reads them,
/// on a connection manager whose requests an AuthorizationPolicy checks: dot segments
/// resolved (as every connection manager of meshflow's), slashes merged, `%2F` and `%5C`
/// decoded (the client is redirected to the decoded path). A path rule then sees the path
/// the application will, so `//admin` and `%2Fadmin` cannot pass a DENY on `/admin*`
/// (CVE-2021-31920).
fn normalize_paths(hcm: &mut HttpConnectionManager) {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::PathWithEscapedSlashesAction;
    hcm.normalize_path = Some(envoy_types::pb::google::protobuf::BoolValue { value: true });
    hcm.merge_slashes = true;
    hcm.path_with_escaped_slashes_action = PathWithEscapedSlashesAction::UnescapeAndRedirect as i32;
}

/// What one workload's security policies add to each of its chains, built once for all of
/// them (a proxy has a chain per port and mode; the filters are the same on each).
pub struct Refusals<'a> {
    sec: &'a crate::model::InboundSecurity,
    http: std::cell::OnceCell<Vec<HttpFilter>>,
    network: std::cell::OnceCell<Vec<Filter>>,
}

impl<'a> Refusals<'a> {
    pub fn of(sec: &'a crate::model::InboundSecurity) -> Refusals<'a> {
        Refusals {
            sec,
            http: Default::default(),
            network: Default::default(),
        }
    }

    /// `chain` with what the security policies make it refuse, first among its filters: in
    /// the connection manager for HTTP, the RequestAuthentications' token verification, then
    /// the AuthorizationPolicies' RBAC (Istio's order: JWT, AUDIT, DENY, ALLOW); as network
    /// filters on a chain that proxies bytes, the RBAC alone; and before everything the
    /// deny-all of a policy meshflow cannot evaluate. A connection manager that cannot be
    /// read back denies everything instead, so a refusal is never lost.
    pub fn authorize(&self, chain: &mut envoy_types::pb::envoy::config::listener::v3::FilterChain) {
        let sec = self.sec;
        let mut deny_all = false;
        if !sec.authz.is_empty() || !sec.jwt.is_empty() || !sec.custom.is_empty() {
            let hcm = chain
                .filters
                .iter_mut()
                .find_map(|f| match &mut f.config_type {
                    Some(filter::ConfigType::TypedConfig(any))
                        if any.type_url.ends_with(".HttpConnectionManager") =>
                    {
                        Some(any)
                    }
                    _ => None,
                });
            match hcm {
                Some(any) => match HttpConnectionManager::decode(&any.value[..]) {
                    Ok(mut hcm) => {
                        let filters = self.http.get_or_init(|| {
                            let mut f = super::ext_authz::http_custom_filters(
                                &sec.custom,
                                &sec.ext_authz,
                                &sec.trust_domains,
                            );
                            f.extend(super::jwt::jwt_filter(&sec.jwt));
                            f.extend(http_authz_filters(&sec.authz, &sec.trust_domains));
                            f
                        });
                        hcm.http_filters.splice(0..0, filters.iter().cloned());
                        if !sec.authz.is_empty() || !sec.custom.is_empty() {
                            normalize_paths(&mut hcm);
                        }
                        *any = pack_any(hcm);
                    }
                    Err(_) => deny_all = true,
                },
                None => {
                    let filters = self.network.get_or_init(|| {
                        let mut f = super::ext_authz::network_custom_filters(
                            &sec.custom,
                            &sec.ext_authz,
                            &sec.trust_domains,
                        );
                        f.extend(network_authz_filters(&sec.authz, &sec.trust_domains));
                        f
                    });
                    chain.filters.splice(0..0, filters.iter().cloned());
                }
            }
        }
        if deny_all {
            chain.filters.insert(0, deny_all_filter());
        }
    }
}
