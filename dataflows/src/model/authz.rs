//! An AuthorizationPolicy as meshflow translates it: its action and its rules, each a set
//! of source and operation matches and `when` conditions, by what each match looks at
//! ([`AuthzField`]).
//!
//! What a chain that proxies bytes cannot check (hosts, methods, paths, headers, token
//! fields) errs the way Istio's own TCP rules err ([`AuthzRule::on_chain`]): in an ALLOW
//! policy the whole rule goes (less is allowed), in DENY and AUDIT only the condition (more
//! is denied).

use serde::{Deserialize, Serialize};

/// What a policy does with the requests its rules match (CUSTOM, which asks an external
/// service, is [`super::CustomAuthz`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AuthzAction {
    /// Envoy's RBAC runs AUDIT (LOG), then DENY, then ALLOW: the order of this enum.
    Audit,
    Deny,
    Allow,
}

/// What one match of a rule looks at.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AuthzField {
    /// `principals`, `source.principal`: the peer's SPIFFE identity (without `spiffe://`).
    Principal,
    /// `namespaces`, `source.namespace`.
    Namespace,
    /// `serviceAccounts`: `SA` or `NS/SA` (the policy's namespace when unwritten).
    ServiceAccount,
    /// `trustDomains`: the trust domain of the peer's SPIFFE identity (`*` any; one `*`
    /// within a name, any run of it).
    TrustDomain,
    /// `ipBlocks`, `source.ip`: the connection's peer address.
    SourceIp,
    /// `remoteIpBlocks`, `remote.ip`: the client address the HTTP connection manager trusts.
    RemoteIp,
    /// `hosts`: the request's `:authority`, case-insensitive.
    Host,
    /// `methods`.
    Method,
    /// `paths`: the path without the query.
    Path,
    /// `ports`, `destination.port`.
    Port,
    /// `destination.ip`.
    DestinationIp,
    /// `connection.sni`.
    Sni,
    /// `request.headers[NAME]`.
    Header(String),
    /// `requestPrincipals`, `request.auth.principal`: `ISS/SUB` of the request's verified
    /// token (a RequestAuthentication's `jwt_authn` puts its payload where RBAC reads it).
    RequestPrincipal,
    /// `request.auth.audiences`: the token's `aud`.
    Audience,
    /// `request.auth.presenter`: the token's `azp`.
    Presenter,
    /// `request.auth.claims[A][B]…`: a claim of the token, nested claims by path.
    Claim(Vec<String>),
    /// `experimental.envoy.filters.F[K]`: key `K` of Envoy filter `envoy.filters.F`'s
    /// dynamic metadata (a value written `[v]`: a list holding `v`).
    FilterMetadata { filter: String, key: String },
}

impl AuthzField {
    /// Whether only an HTTP request has it (a chain that proxies bytes cannot check it).
    pub fn http_only(&self) -> bool {
        matches!(
            self,
            AuthzField::Host
                | AuthzField::Method
                | AuthzField::Path
                | AuthzField::Header(_)
                | AuthzField::RequestPrincipal
                | AuthzField::Audience
                | AuthzField::Presenter
                | AuthzField::Claim(_)
        )
    }

    /// Whether it is about who calls (Envoy's principals) rather than what is called
    /// (its permissions).
    pub fn of_source(&self) -> bool {
        matches!(
            self,
            AuthzField::Principal
                | AuthzField::TrustDomain
                | AuthzField::Namespace
                | AuthzField::ServiceAccount
                | AuthzField::SourceIp
                | AuthzField::RemoteIp
                | AuthzField::Header(_)
                | AuthzField::RequestPrincipal
                | AuthzField::Audience
                | AuthzField::Presenter
                | AuthzField::Claim(_)
        )
    }
}

/// One match: `field` is one of `values` (`not`: none of them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AuthzMatch {
    pub field: AuthzField,
    pub values: Vec<String>,
    pub not: bool,
}

/// One rule: any of `from` (each all of its matches; none written: anyone), any of `to`
/// (likewise), and all of `when`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AuthzRule {
    pub from: Vec<Vec<AuthzMatch>>,
    pub to: Vec<Vec<AuthzMatch>>,
    pub when: Vec<AuthzMatch>,
}

/// An AuthorizationPolicy's action and rules, as translated.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AuthzPolicy {
    pub action: AuthzAction,
    pub rules: Vec<AuthzRule>,
    /// `istio.io/dry-run`: evaluated and logged (Envoy's shadow rules), not enforced.
    #[serde(default)]
    pub dry_run: bool,
}

/// A rule as one kind of chain can check it: the sources (each all of its matches, the
/// source-side `when` conditions added) and the operations (likewise).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckedRule {
    pub sources: Vec<Vec<AuthzMatch>>,
    pub operations: Vec<Vec<AuthzMatch>>,
}

impl AuthzRule {
    /// The rule as a chain checks it (`http`: the chain runs the HTTP connection manager):
    /// `None` when it goes (ALLOW, a match it cannot check), else without the matches it
    /// cannot check (DENY, AUDIT: more is matched).
    pub fn on_chain(&self, action: AuthzAction, http: bool) -> Option<CheckedRule> {
        let checkable = |m: &AuthzMatch| http || !m.field.http_only();
        let all = self.from.iter().chain(&self.to).flatten().chain(&self.when);
        if action == AuthzAction::Allow && !all.clone().all(checkable) {
            return None;
        }
        let kept = |ms: &[AuthzMatch]| -> Vec<AuthzMatch> {
            ms.iter().filter(|m| checkable(m)).cloned().collect()
        };
        let (when_src, when_op): (Vec<AuthzMatch>, Vec<AuthzMatch>) = kept(&self.when)
            .into_iter()
            .partition(|m| m.field.of_source());
        let side = |entries: &[Vec<AuthzMatch>], extra: &[AuthzMatch]| -> Vec<Vec<AuthzMatch>> {
            let mut out: Vec<Vec<AuthzMatch>> = entries.iter().map(|e| kept(e)).collect();
            if out.is_empty() {
                out.push(Vec::new());
            }
            for e in &mut out {
                e.extend(extra.iter().cloned());
            }
            out
        };
        Some(CheckedRule {
            sources: side(&self.from, &when_src),
            operations: side(&self.to, &when_op),
        })
    }
}

/// A policy that applies to a proxy, with what names it in Envoy's RBAC
/// (`ns[NS]-policy[NAME]-rule[I]`, as Istio names its rules).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NamedAuthz {
    pub namespace: String,
    pub name: String,
    pub policy: AuthzPolicy,
}

impl NamedAuthz {
    pub fn rule_name(&self, i: usize) -> String {
        format!("ns[{}]-policy[{}]-rule[{i}]", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(field: AuthzField, v: &str) -> AuthzMatch {
        AuthzMatch {
            field,
            values: vec![v.into()],
            not: false,
        }
    }

    /// Istio's TCP rules: ALLOW drops a rule with a match the chain cannot check, DENY only
    /// the match; `when` conditions join every source or every operation.
    #[test]
    fn what_a_chain_cannot_check_errs_closed() {
        let rule = AuthzRule {
            from: vec![vec![m(AuthzField::Namespace, "foo")]],
            to: vec![
                vec![m(AuthzField::Method, "GET")],
                vec![m(AuthzField::Port, "80")],
            ],
            when: vec![m(AuthzField::SourceIp, "10.0.0.0/8")],
        };
        assert_eq!(rule.on_chain(AuthzAction::Allow, false), None);
        let http = rule.on_chain(AuthzAction::Allow, true).expect("kept");
        assert_eq!(
            http.sources,
            vec![vec![
                m(AuthzField::Namespace, "foo"),
                m(AuthzField::SourceIp, "10.0.0.0/8")
            ]]
        );
        assert_eq!(http.operations.len(), 2);
        let tcp = rule.on_chain(AuthzAction::Deny, false).expect("kept");
        assert_eq!(
            tcp.operations,
            vec![vec![], vec![m(AuthzField::Port, "80")]],
            "the method goes: that entry matches everything"
        );
        let claims = AuthzRule {
            when: vec![m(AuthzField::Claim(vec!["groups".into()]), "x")],
            ..Default::default()
        };
        assert_eq!(claims.on_chain(AuthzAction::Allow, false), None);
        let denied = claims.on_chain(AuthzAction::Deny, false).expect("kept");
        assert_eq!(denied.sources, vec![Vec::<AuthzMatch>::new()]);
        assert_eq!(denied.operations, vec![Vec::<AuthzMatch>::new()]);
    }
}
