//! Istio's security policies (security.istio.io: PeerAuthentication, AuthorizationPolicy,
//! RequestAuthentication) as meshflow reads them, and what they make of one proxy's inbound
//! side ([`InboundSecurity`]).
//!
//! PeerAuthentication ([`PeerModes`]), AuthorizationPolicy ALLOW, DENY and AUDIT
//! ([`super::AuthzPolicy`]) and CUSTOM ([`super::CustomAuthz`], external authorization),
//! and RequestAuthentication ([`super::JwtRule`]) are translated.
//!
//! One record type for the three kinds: they attach to workloads alike (namespace,
//! `selector.matchLabels`, the root namespace's mesh-wide rule), so they share one input
//! collection, one join with the proxies and one per-proxy reduce; only what each adds to
//! a proxy ([`PolicyEffect`]) differs.

use super::{
    AuthzPolicy, ConfigError, ConfigKey, CustomAuthz, ErrorCode, JwtRule, Kind, Labels, NamedAuthz,
    NamedCustom, ProviderTable, ProxyKind, ResolvedExtAuthz,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A PeerAuthentication mTLS mode (`UNSET` inherits from the level above).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum MtlsMode {
    Unset,
    Disable,
    /// Istio's default where no policy says otherwise.
    #[default]
    Permissive,
    Strict,
}

/// What one policy asks of the workloads it selects, as far as the stopgap reads it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PolicyEffect {
    /// PeerAuthentication: `mtls.mode` and `portLevelMtls` (by workload port).
    Peer {
        mode: MtlsMode,
        ports: BTreeMap<u16, MtlsMode>,
    },
    /// An AuthorizationPolicy with action CUSTOM (not dry-run): the requests its rules
    /// match are asked of its provider's external authorization service.
    Custom(CustomAuthz),
    /// An AuthorizationPolicy ALLOW, DENY or AUDIT (not dry-run), translated into Envoy's
    /// RBAC on every inbound chain of the workloads it selects.
    Authz(AuthzPolicy),
    /// A RequestAuthentication's `jwtRules`, translated into Envoy's `jwt_authn`.
    Jwt(Vec<JwtRule>),
}

/// One security policy object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SecurityPolicy {
    pub key: ConfigKey,
    /// `metadata.creationTimestamp` as written (RFC 3339, which sorts as time does; empty
    /// when absent, as in a config file, which sorts first as Istio's zero time does).
    pub created: String,
    /// `selector.matchLabels`; `None` (absent or empty) selects its whole namespace, or
    /// the whole mesh in the root namespace.
    pub selector: Option<Labels>,
    pub effect: PolicyEffect,
}

/// What the stopgap makes of a policy on one proxy it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Reach {
    /// The proxy fails closed in the policy's place: a sidecar with its traffic captured
    /// (its `virtualInbound`), or a gateway for an AuthorizationPolicy or a
    /// RequestAuthentication (every listener of its scope).
    Protected,
    /// The policy restricts traffic to the proxy and meshflow does not: a proxyless gRPC
    /// server, a sidecar without traffic capture.
    Unprotected,
    /// The policy means nothing to the proxy: a PeerAuthentication on a gateway, whose
    /// servers' TLS is the Gateway's to say, as in Istio.
    NotApplicable,
}

/// Where a policy attaches, for a proxy: Istio's three PeerAuthentication slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Mesh,
    Namespace,
    Workload,
}

impl SecurityPolicy {
    /// Whether the policy applies to a workload of `namespace` with `labels`, as Istio
    /// attaches it: in the workload's namespace, or in the root namespace (mesh-wide with no
    /// selector; with a selector, every matching workload of any namespace, except for
    /// PeerAuthentication, whose selector policies in the root namespace Istio ignores).
    pub fn applies(&self, namespace: &str, labels: &Labels, root: &str) -> bool {
        let ns = &self.key.namespace;
        if ns != namespace && ns != root {
            return false;
        }
        match &self.selector {
            None => true,
            // Istio collects these but puts them in no slot.
            Some(_) if ns == root && self.key.kind == Kind::PeerAuthentication => false,
            Some(s) => s.iter().all(|(k, v)| labels.get(k) == Some(v)),
        }
    }

    fn level(&self, root: &str) -> Level {
        match (&self.selector, self.key.namespace == root) {
            (None, true) => Level::Mesh,
            (None, false) => Level::Namespace,
            (Some(_), _) => Level::Workload,
        }
    }

    /// What the stopgap makes of the policy on a proxy of `kind` it applies to (`captured`:
    /// its traffic is, [`Proxy::interception_none`](super::Proxy::interception_none) unset).
    pub fn reach(&self, kind: ProxyKind, captured: bool) -> Reach {
        match kind {
            ProxyKind::Sidecar if captured => Reach::Protected,
            ProxyKind::Router => match self.effect {
                PolicyEffect::Peer { .. } => Reach::NotApplicable,
                PolicyEffect::Custom(_) | PolicyEffect::Authz(_) | PolicyEffect::Jwt(_) => {
                    Reach::Protected
                }
            },
            ProxyKind::Sidecar | ProxyKind::Proxyless => Reach::Unprotected,
        }
    }

    /// Whether the policy joins what a proxy of `kind` refuses: every policy of a sidecar (an
    /// uncaptured one's bound `ingress` listeners take them too), the ones a gateway fails
    /// closed for, none of a proxyless server.
    pub fn composes(&self, kind: ProxyKind, captured: bool) -> bool {
        match kind {
            ProxyKind::Sidecar => true,
            ProxyKind::Router => self.reach(kind, captured) == Reach::Protected,
            ProxyKind::Proxyless => false,
        }
    }

    /// Istio's order among policies of one slot: the oldest first, then by name.
    fn age(&self) -> (&str, &str, &str) {
        (&self.created, &self.key.name, &self.key.namespace)
    }
}

/// The mTLS modes the PeerAuthentications that apply to one workload put in effect: the
/// workload's own (for every port `ports` does not name) and its ports'. What its inbound
/// chains take, and what its clients' auto mTLS sends it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PeerModes {
    pub mode: MtlsMode,
    /// The winning workload policy's `portLevelMtls`, resolved (by workload port).
    pub ports: BTreeMap<u16, MtlsMode>,
}

impl PeerModes {
    /// Composes the PeerAuthentications among `policies` (each for which
    /// [`SecurityPolicy::applies`] holds; other kinds are passed over), as Istio does: one
    /// mesh, one namespace and one workload policy (the oldest of each slot), each mode
    /// overriding the one above unless UNSET, starting from PERMISSIVE; ports from the
    /// workload policy, an UNSET port taking the workload's mode. `None`: none applies.
    pub fn compose<'a>(
        policies: impl IntoIterator<Item = &'a SecurityPolicy>,
        root: &str,
    ) -> Option<PeerModes> {
        let mut slots: BTreeMap<Level, &SecurityPolicy> = BTreeMap::new();
        for p in policies {
            if let PolicyEffect::Peer { .. } = &p.effect {
                let e = slots.entry(p.level(root)).or_insert(p);
                if p.age() < e.age() {
                    *e = p;
                }
            }
        }
        if slots.is_empty() {
            return None;
        }
        let mut mode = MtlsMode::Permissive;
        for p in slots.values() {
            if let PolicyEffect::Peer { mode: m, .. } = &p.effect {
                if *m != MtlsMode::Unset {
                    mode = *m;
                }
            }
        }
        let ports = match slots.get(&Level::Workload).map(|p| &p.effect) {
            Some(PolicyEffect::Peer { ports, .. }) => ports
                .iter()
                .map(|(port, m)| (*port, if *m == MtlsMode::Unset { mode } else { *m }))
                .collect(),
            _ => BTreeMap::new(),
        };
        Some(PeerModes { mode, ports })
    }

    /// What the clients of a workload must know of `policies` (each for which
    /// [`SecurityPolicy::applies`] holds): the composed modes where one disables mTLS on some
    /// port, `None` otherwise ([`Workload::peer`]).
    pub fn for_clients<'a>(
        policies: impl IntoIterator<Item = &'a SecurityPolicy>,
        root: &str,
    ) -> Option<PeerModes> {
        Self::compose(policies, root).filter(PeerModes::disables_any)
    }

    /// [`Self::for_clients`] of workload `w`, from any `policies` (those that apply to it
    /// are picked).
    pub fn client_view<'a>(
        policies: impl IntoIterator<Item = &'a SecurityPolicy>,
        w: &super::Workload,
        root: &str,
    ) -> Option<PeerModes> {
        let applying = policies
            .into_iter()
            .filter(|p| p.applies(&w.origin.namespace, &w.labels, root));
        Self::for_clients(applying, root)
    }

    /// The mode on workload port `port`.
    pub fn mode_for(&self, port: u16) -> MtlsMode {
        self.ports.get(&port).copied().unwrap_or(self.mode)
    }

    /// Whether mTLS is disabled on some port: only then do the workload's clients need to
    /// know (auto mTLS sends plaintext to its endpoints on those ports).
    pub fn disables_any(&self) -> bool {
        self.mode == MtlsMode::Disable || self.ports.values().any(|m| *m == MtlsMode::Disable)
    }
}

/// What the security policies applying to one proxy make of its inbound side.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InboundSecurity {
    /// The workload's composed mode (for ports `ports` does not name, and the catch-all).
    pub mode: Option<MtlsMode>,
    /// The winning workload policy's `portLevelMtls`, resolved.
    pub ports: BTreeMap<u16, MtlsMode>,
    /// The CUSTOM AuthorizationPolicies selecting it, sorted (namespace, name).
    #[serde(default)]
    pub custom: Vec<NamedCustom>,
    /// The providers `custom` names, resolved (filled in with the mesh's
    /// [`ProviderTable`]: [`Self::with_providers`]).
    #[serde(default)]
    pub ext_authz: BTreeMap<String, Result<ResolvedExtAuthz, String>>,
    /// The translated AuthorizationPolicies selecting it, sorted (namespace, name).
    pub authz: Vec<NamedAuthz>,
    /// The mesh's trust domains (its own, then its aliases) where `authz` is not empty: a
    /// principal of one stands for the same account in each ([`Self::with_trust_domains`]).
    #[serde(default)]
    pub trust_domains: Vec<String>,
    /// The JWT rules of the RequestAuthentications selecting it, in Istio's order: by
    /// issuer, then as the policies come (namespace, name), then as each writes them.
    pub jwt: Vec<JwtRule>,
}

impl InboundSecurity {
    /// Composes the policies that apply to one proxy (each for which [`SecurityPolicy::applies`]
    /// holds), as Istio does: for PeerAuthentication one mesh, one namespace and one
    /// workload policy (the oldest of each slot), each mode overriding the one above unless
    /// UNSET, ports from the workload policy; the rest accumulate.
    pub fn compose<'a>(
        policies: impl IntoIterator<Item = &'a SecurityPolicy>,
        root: &str,
    ) -> InboundSecurity {
        let mut out = InboundSecurity::default();
        let mut peers = Vec::new();
        let mut jwt: Vec<(&ConfigKey, &[JwtRule])> = Vec::new();
        for p in policies {
            match &p.effect {
                PolicyEffect::Peer { .. } => peers.push(p),
                PolicyEffect::Custom(c) => out.custom.push(NamedCustom {
                    namespace: p.key.namespace.clone(),
                    name: p.key.name.clone(),
                    custom: c.clone(),
                }),
                PolicyEffect::Authz(a) => out.authz.push(NamedAuthz {
                    namespace: p.key.namespace.clone(),
                    name: p.key.name.clone(),
                    policy: a.clone(),
                }),
                PolicyEffect::Jwt(rules) => jwt.push((&p.key, rules)),
            }
        }
        jwt.sort_by_key(|(k, _)| (&k.namespace, &k.name));
        out.jwt = jwt
            .into_iter()
            .flat_map(|(_, r)| r.iter().cloned())
            .collect();
        // Stable: rules of one issuer keep the order above.
        out.jwt.sort_by(|a, b| a.issuer.cmp(&b.issuer));
        if let Some(peer) = PeerModes::compose(peers, root) {
            out.mode = Some(peer.mode);
            out.ports = peer.ports;
        }
        out.authz.sort();
        out.custom.sort();
        out
    }

    /// With the providers its CUSTOM policies name, from the mesh's `table` (a name the
    /// table lacks is unusable, as in istiod).
    pub fn with_providers(mut self, table: &ProviderTable) -> InboundSecurity {
        self.ext_authz = self
            .custom
            .iter()
            .map(|c| {
                let name = &c.custom.provider;
                let got = table.get(name).cloned().unwrap_or_else(|| {
                    Err(format!(
                        "no extension provider of an external authorization kind is named \
                         {name:?} in the mesh config (known: {})",
                        table.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                });
                (name.clone(), got)
            })
            .collect();
        self
    }

    /// With the mesh's trust domains, where an AuthorizationPolicy needs them (kept out
    /// otherwise, so a trust-domain change touches only proxies with policies).
    pub fn with_trust_domains(mut self, tds: &[String]) -> InboundSecurity {
        if !self.authz.is_empty() {
            self.trust_domains = tds.to_vec();
        }
        self
    }

    /// The mode in effect on workload port `port`.
    pub fn mode_for(&self, port: u16) -> MtlsMode {
        self.ports
            .get(&port)
            .copied()
            .or(self.mode)
            .unwrap_or(MtlsMode::Permissive)
    }

    /// Whether `port` takes mTLS only (its plaintext chains are gone).
    pub fn strict(&self, port: u16) -> bool {
        self.mode_for(port) == MtlsMode::Strict
    }

    /// What of it a gateway's listeners take: the authorization and the token checks (a
    /// PeerAuthentication does not apply to gateways); `None` when that restricts nothing.
    pub fn for_router(mut self) -> Option<InboundSecurity> {
        self.mode = None;
        self.ports.clear();
        (!self.is_open()).then_some(self)
    }

    /// Whether a RequestAuthentication selects the workload: its HTTP connection managers
    /// verify tokens.
    pub fn checks_tokens(&self) -> bool {
        !self.jwt.is_empty()
    }

    /// Whether the policies change nothing of the inbound side (a DISABLE mode does: it
    /// takes the mTLS chains away).
    pub fn is_open(&self) -> bool {
        let permissive = |m: &MtlsMode| matches!(m, MtlsMode::Permissive | MtlsMode::Unset);
        self.custom.is_empty()
            && self.authz.is_empty()
            && !self.checks_tokens()
            && self.mode.as_ref().is_none_or(permissive)
            && self.ports.values().all(permissive)
    }
}

impl SecurityPolicy {
    /// Whether the policy asks for anything the stopgap must fail closed for: a STRICT
    /// mode (of the workload or a port), an authorization that restricts, a token check.
    pub fn restricts(&self) -> bool {
        match &self.effect {
            PolicyEffect::Peer { mode, ports } => {
                *mode == MtlsMode::Strict || ports.values().any(|m| *m == MtlsMode::Strict)
            }
            PolicyEffect::Authz(a) => !a.dry_run,
            PolicyEffect::Custom(_) | PolicyEffect::Jwt(_) => true,
        }
    }

    /// The error that the policy restricts traffic to proxies meshflow does not protect
    /// (`unprotected`: proxyless gRPC servers, sidecars without traffic capture; see
    /// [`Reach`]). `None` for a policy that restricts nothing or reaches none of them.
    pub fn not_enforced(&self, unprotected: bool) -> Option<ConfigError> {
        if !self.restricts() || !unprotected {
            return None;
        }
        Some(ConfigError {
            object: self.key.clone(),
            code: ErrorCode::SecurityPolicyFailsClosed,
            message: format!(
                "{:?}: enforced on the sidecars with traffic capture (and the gateways) it \
                 selects; it also selects proxyless gRPC servers or sidecars without traffic \
                 capture, which meshflow does NOT protect: traffic to them is not restricted \
                 by this policy (but for the Sidecar ingress listeners such sidecars bind, \
                 which enforce it)",
                self.key.kind
            ),
        })
    }
}

impl SecurityPolicy {
    /// The namespaces an AuthorizationPolicy's rules name, with where: `namespaces` and
    /// `notNamespaces` values, and the namespace of `principals` written
    /// `TRUST_DOMAIN/ns/NS/sa/SA` (without a wildcard there).
    pub fn namespace_refs(&self) -> Vec<(String, String)> {
        let rules = match &self.effect {
            PolicyEffect::Authz(a) => &a.rules,
            PolicyEffect::Custom(c) => &c.rules,
            _ => return Vec::new(),
        };
        let mut out = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let from = r.from.iter().flatten().map(|m| (m, false));
            for (m, when) in from.chain(r.when.iter().map(|m| (m, true))) {
                let field = match (&m.field, m.not, when) {
                    (super::AuthzField::Namespace, _, true) => "when[source.namespace]",
                    (super::AuthzField::Principal, _, true) => "when[source.principal]",
                    (super::AuthzField::Namespace, false, _) => "from.source.namespaces",
                    (super::AuthzField::Namespace, true, _) => "from.source.notNamespaces",
                    (super::AuthzField::Principal, false, _) => "from.source.principals",
                    (super::AuthzField::Principal, true, _) => "from.source.notPrincipals",
                    _ => continue,
                };
                for v in &m.values {
                    let ns = match m.field {
                        super::AuthzField::Namespace => Some(v.as_str()),
                        _ => v
                            .split_once("/ns/")
                            .and_then(|(_, rest)| rest.split_once("/sa/"))
                            .map(|(ns, _)| ns)
                            .filter(|ns| !ns.contains('*') && !ns.is_empty()),
                    };
                    if let Some(ns) = ns {
                        out.push((format!("spec.rules[{i}].{field}"), ns.to_string()));
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// What is wrong with the keys of a RequestAuthentication's `jwksUri` rules: none
    /// fetched yet or every fetch failed (its tokens are refused), or the latest refresh
    /// failed (the keys fetched before stay in use). One error per rule, naming its field.
    pub fn jwks_problems(&self) -> Vec<ConfigError> {
        let PolicyEffect::Jwt(rules) = &self.effect else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let super::Jwks::Uri { uri, keys, problem } = &r.jwks else {
                continue;
            };
            let why = problem.as_deref().unwrap_or("not fetched yet");
            let (code, message) = match keys {
                None => (
                    ErrorCode::JwksUnavailable,
                    format!(
                        "spec.jwtRules[{i}].jwksUri: no keys from {uri:?} ({why}): a request \
                         carrying a token of this rule is refused (401) until they are fetched"
                    ),
                ),
                Some(_) => (
                    ErrorCode::JwksStale,
                    format!(
                        "spec.jwtRules[{i}].jwksUri: refreshing the keys from {uri:?} failed \
                         ({why}); the keys fetched before stay in use"
                    ),
                ),
            };
            if keys.is_none() || problem.is_some() {
                out.push(ConfigError {
                    object: self.key.clone(),
                    code,
                    message,
                });
            }
        }
        out
    }
}

impl InboundSecurity {
    /// Whether a chain it adds names the workload certificate: a STRICT catch-all, or a
    /// STRICT `ingress` port whose `tls` is set aside for the mesh's mTLS.
    pub fn names_certificate(&self) -> bool {
        self.mode == Some(MtlsMode::Strict) || self.ports.values().any(|m| *m == MtlsMode::Strict)
    }
}
