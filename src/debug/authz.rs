//! `authz check`: which filter and policy decide one request to a proxy, allowed or
//! refused, from the resources it holds — run through the routing simulation, `jwt_authn`
//! and RBAC included (`dataflows::simulate`), which the authorization tests hold to real
//! Envoy. Shared by `/debug/authz_check` and `meshflow authz check` (which fetches the
//! resources over CSDS).

use dataflows::model::ResourceType;
use dataflows::simulate::{Call, NoMatch, Outcome, ProxyConfig, Token, ISTIO_MTLS_ALPN};
use serde::Serialize;

/// The resource types the simulation reads.
pub const TYPES: [ResourceType; 4] = [
    ResourceType::Listener,
    ResourceType::Route,
    ResourceType::Cluster,
    ResourceType::Endpoint,
];

/// The request to check.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub port: u16,
    pub method: String,
    pub path: String,
    pub host: String,
    /// The client's identity (`spiffe://…`, or `TD/ns/NS/sa/SA`): the call comes over
    /// Istio's mTLS with that certificate. `None`: plaintext.
    pub from: Option<String>,
    /// The destination address (the workload's), when it matters.
    pub address: Option<String>,
    pub source_ip: Option<String>,
    pub headers: Vec<(String, String)>,
    /// The claims of a token that verifies (JSON), or `Some(None)`: one that does not.
    pub token: Option<Option<serde_json::Value>>,
    /// What an external authorization service a CUSTOM policy asks answers (`true`:
    /// allows); `None`: unknown, and the verdict says the service decides.
    pub external_authz: Option<bool>,
}

/// The answer, as `-o json` prints it.
#[derive(Debug, Serialize)]
pub struct Verdict {
    pub proxy: String,
    /// `allowed`, `denied`, or `not routed` (refused before authorization, or no route).
    pub decision: String,
    /// The HTTP status Envoy answers, if it answers one.
    pub status: Option<u32>,
    /// What each filter that may refuse said, in order.
    pub filters: Vec<String>,
    pub listener: Option<String>,
    pub filter_chain: Option<String>,
    pub route: Option<String>,
    pub clusters: Vec<String>,
    pub why: Option<String>,
    pub warnings: Vec<String>,
}

fn call_of(r: &Request, inbound: bool) -> Result<Call, String> {
    let mut call = Call::get(&r.host, r.port, &r.path).method(&r.method);
    if let Some(a) = &r.address {
        call = call.to_address(a);
    }
    if let Some(ip) = &r.source_ip {
        call = call.from_ip(ip);
    }
    for (k, v) in &r.headers {
        call = call.header(k, v);
    }
    if let Some(id) = &r.from {
        let spiffe = if id.starts_with("spiffe://") {
            id.clone()
        } else {
            format!("spiffe://{id}")
        };
        call = call.over_tls(None, &ISTIO_MTLS_ALPN).from_peer(&spiffe);
    }
    match &r.token {
        None => {}
        Some(None) => call = call.with_token(Token::Invalid),
        Some(Some(claims)) if claims.is_object() => {
            call = call.with_token(Token::Signed(claims.clone()))
        }
        Some(Some(_)) => return Err("--jwt-claims: a JSON object of claims".into()),
    }
    if let Some(allows) = r.external_authz {
        call = call.with_external_authz(allows);
    }
    Ok(if inbound { call.inbound() } else { call })
}

/// Checks `request` against `config` (the resources of proxy `proxy`): a captured inbound
/// call first (a sidecar's `virtualInbound`), else to the listener of its port (a gateway,
/// a bound listener).
pub fn check(config: &ProxyConfig, proxy: String, request: &Request) -> Result<Verdict, String> {
    let mut outcome = config.simulate(&call_of(request, true)?);
    if matches!(outcome.result, Err(NoMatch::NoListener { .. })) {
        outcome = config.simulate(&call_of(request, false)?);
    }
    Ok(verdict(proxy, &outcome))
}

fn verdict(proxy: String, o: &Outcome) -> Verdict {
    let (decision, why) = match &o.result {
        Err(NoMatch::Denied { by, .. }) => ("denied", Some(by.clone())),
        Err(NoMatch::External { cluster, by }) => (
            "decided by external authorization",
            Some(format!(
                "{by} matches: the service behind {cluster} is asked (say what it answers with \
                 --ext-authz allow|deny)"
            )),
        ),
        Ok(_) if o.authz.is_empty() => ("allowed (no policy applies)", None),
        Ok(_) => ("allowed", None),
        Err(e) => ("not routed", Some(format!("{e:?}"))),
    };
    Verdict {
        proxy,
        decision: decision.into(),
        status: o.effective_status(),
        filters: o.authz.clone(),
        listener: o.listener.clone(),
        filter_chain: o.filter_chain.clone(),
        route: o.route.as_ref().map(|r| r.name.clone()),
        clusters: o.clusters().into_iter().map(|(c, _)| c).collect(),
        why,
        warnings: o.warnings.clone(),
    }
}

/// The verdict for people.
pub fn render(v: &Verdict) -> String {
    let mut out = format!("{}: {}", v.proxy, v.decision.to_uppercase());
    if let Some(s) = v.status {
        out.push_str(&format!(" ({s})"));
    }
    out.push('\n');
    if let Some(why) = &v.why {
        out.push_str(&format!("  because: {why}\n"));
    }
    for f in &v.filters {
        out.push_str(&format!("  {f}\n"));
    }
    let at = [
        ("listener", v.listener.as_deref()),
        ("filter chain", v.filter_chain.as_deref()),
        ("route", v.route.as_deref()),
    ];
    for (what, name) in at {
        if let Some(n) = name {
            out.push_str(&format!("  {what}: {n}\n"));
        }
    }
    for c in &v.clusters {
        out.push_str(&format!("  cluster: {c}\n"));
    }
    for w in &v.warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
    out
}
