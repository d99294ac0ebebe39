//! The scenarios `meshflow bench` can run after `connect` and `idle`: one row each in
//! [`SCENARIOS`] (its `--scenarios` name and how it changes the mesh), and the mesh edits
//! the rows point at. Adding a scenario is one row here, plus its edit function if it is a
//! single edit (or its edit sequence). How a [`Change`] is measured and verified lives in
//! [`super::measure`].
//!
//! `connect` (every proxy opens its stream) and `idle` (a second without changes) always
//! run first and are not rows: they are not changes to the mesh.

use super::mesh_gen::{Edit, MeshState};
use dataflows::synth;

/// Picks the target of a one-edit scenario in the mesh model, edits the model and returns
/// the scenario's description and the file to write. `Err` skips the scenario.
pub type EditFn = fn(&mut MeshState) -> Result<(String, Edit), String>;

/// Makes the edits of a multi-edit scenario (in the mesh model or beside it) and returns
/// its description and the files to write, in order. `Err` skips the scenario.
pub type SequenceFn = fn(&mut MeshState) -> Result<(String, Vec<Edit>), String>;

/// How a scenario changes the mesh (and so how it is measured).
#[derive(Clone, Copy, Debug)]
pub enum Change {
    /// One file renamed into place: latency until every affected proxy holds every
    /// changed resource, then the held configs checked against the full recompute.
    Edit(EditFn),
    /// Several files renamed into place one after another, `gap_ms` apart (each its own
    /// epoch): measured as one window, every message any proxy receives counted, the
    /// affected proxies those whose config differs at the end; then the same check.
    Sequence(SequenceFn, u64),
    /// One-file edits made one after another, this many: each measured as an `Edit` (its
    /// affected proxies timed until they hold it) before the next is written; one latency
    /// sample per (edit, affected proxy), the messages of all of them counted.
    Repeat(EditFn, usize),
    /// Sustained endpoint churn at `--churn-rate` for `--churn-seconds` ([`super::churn`]):
    /// one latency sample per change and proxy, then the same check.
    Churn,
    /// A rolling update of one service every proxy sees: its endpoints replaced one by
    /// one, [`ROLLOUT_CHANGES`] of them [`ROLLOUT_GAP_MS`] apart (the churn's measurement,
    /// on one service): one sample per change and proxy holding its assignment.
    Rollout,
}

/// Endpoints a `rollout` replaces, and the time between two replacements.
pub const ROLLOUT_CHANGES: usize = 10;
pub const ROLLOUT_GAP_MS: u64 = 200;

/// HTTPRoute edits `httproute` makes, one after another.
pub const ROUTE_EDITS: usize = 20;

/// Changes `unrelated` writes, and the time between two (longer than any debounce window
/// the bench uses, so each is its own epoch).
pub const UNRELATED_CHANGES: usize = 50;
pub const UNRELATED_GAP_MS: u64 = 100;

/// The namespace `unrelated` puts its objects in: no proxy runs there and no Sidecar
/// imports it.
pub const UNRELATED_NAMESPACE: &str = "unrelated";

/// One scenario.
#[derive(Debug)]
pub struct Scenario {
    /// Its `--scenarios` name and its row name in the results.
    pub name: &'static str,
    pub change: Change,
}

impl Scenario {
    pub fn is_churn(&self) -> bool {
        matches!(self.change, Change::Churn)
    }

    /// Measured as a series of (change, proxy) samples, as `churn` is.
    pub fn is_sustained(&self) -> bool {
        matches!(self.change, Change::Churn | Change::Rollout)
    }
}

/// Every scenario, in the order they run by default (a `static`, so each row has one
/// address).
#[rustfmt::skip]
pub static SCENARIOS: &[Scenario] = &[
    Scenario { name: "endpoint-ip",     change: Change::Edit(endpoint_ip) },
    Scenario { name: "endpoint-shared", change: Change::Edit(endpoint_shared) },
    Scenario { name: "scale-up",        change: Change::Edit(scale_up) },
    Scenario { name: "vs-weight",       change: Change::Edit(vs_weight) },
    Scenario { name: "dr-subset",       change: Change::Edit(dr_subset) },
    Scenario { name: "new-service",     change: Change::Edit(new_service) },
    Scenario { name: "sidecar",         change: Change::Edit(sidecar) },
    Scenario { name: "mesh-wide",       change: Change::Edit(mesh_wide) },
    Scenario { name: "authz-policy",    change: Change::Edit(authz_policy) },
    Scenario { name: "peer-auth",       change: Change::Edit(peer_auth) },
    Scenario { name: "httproute",       change: Change::Repeat(http_route, ROUTE_EDITS) },
    Scenario { name: "unrelated",       change: Change::Sequence(unrelated, UNRELATED_GAP_MS) },
    Scenario { name: "rollout",         change: Change::Rollout },
    Scenario { name: "churn",           change: Change::Churn },
];

/// The scenario called `name`.
pub fn parse(name: &str) -> Result<&'static Scenario, String> {
    SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("unknown scenario {name:?} (one of {})", names().join(", ")))
}

/// Every scenario's name, in table order.
pub fn names() -> Vec<&'static str> {
    SCENARIOS.iter().map(|s| s.name).collect()
}

/// `--scenarios`' help.
pub fn cli_help() -> String {
    format!(
        "Scenarios to run after `connect`, comma-separated (default: all of {})",
        names().join(", ")
    )
}

/// Where the one-edit scenarios find their targets in a generated mesh.
struct Targets {
    /// Services of the mesh (at least 1, for modular arithmetic).
    n: usize,
    namespaces: usize,
    shared_namespaces: usize,
    sidecar_scoping: bool,
    vs_every: usize,
}

impl Targets {
    fn of(state: &MeshState) -> Targets {
        let shape = &state.shape;
        Targets {
            n: state.services.len().max(1),
            namespaces: shape.namespaces,
            shared_namespaces: shape.shared_namespaces,
            sidecar_scoping: shape.sidecar_scoping,
            vs_every: shape.vs_every,
        }
    }

    /// Whether service `s` has a VirtualService and a DestinationRule.
    fn with_rules(&self, s: usize) -> bool {
        self.vs_every > 0 && s.is_multiple_of(self.vs_every)
    }

    fn in_shared_namespace(&self, s: usize) -> bool {
        s % self.namespaces < self.shared_namespaces
    }

    /// The first service from `start` outside the namespaces every Sidecar imports: a
    /// change seen by one namespace's proxies, not by all of them (`mesh-wide` is that).
    fn outside_shared(&self, start: usize) -> usize {
        (start..self.n)
            .find(|s| !self.sidecar_scoping || !self.in_shared_namespace(*s))
            .unwrap_or(start % self.n)
    }

    /// A service with a VirtualService outside the shared namespaces (seen by fewer
    /// proxies), else any with one.
    fn local_vs(&self, state: &MeshState) -> Option<usize> {
        let services = state.services.len();
        (0..services)
            .filter(|s| self.with_rules(*s) && state.services[*s].v1_weight.is_some())
            .find(|s| !self.in_shared_namespace(*s))
            .or_else(|| (0..services).find(|s| self.with_rules(*s)))
    }
}

/// The other of the two v1 weights the edits alternate between.
fn next_weight(state: &MeshState, s: usize) -> u32 {
    if state.services[s].v1_weight == Some(50) {
        90
    } else {
        50
    }
}

/// An endpoint of a service one namespace's proxies see moves.
fn endpoint_ip(state: &mut MeshState) -> Result<(String, Edit), String> {
    let s = Targets::of(state).outside_shared(1);
    let edit = state.move_endpoint(s, 0)?;
    Ok((format!("endpoint 0 of svc-{s} moves to a new IP"), edit))
}

/// The first service after svc-0 in a namespace every Sidecar imports (any service when
/// nothing is scoped): `endpoint-shared`'s and `rollout`'s target.
pub fn shared_service(state: &MeshState) -> Result<usize, String> {
    let t = Targets::of(state);
    (1..t.n)
        .find(|s| !t.sidecar_scoping || t.in_shared_namespace(*s))
        .ok_or_else(|| "the mesh has no second service in a shared namespace".to_string())
}

/// An endpoint of a service that every proxy imports moves: the fan-out element of
/// `churn` on its own.
pub fn endpoint_shared(state: &mut MeshState) -> Result<(String, Edit), String> {
    let s = shared_service(state)?;
    let edit = state.move_endpoint(s, 0)?;
    Ok((
        format!("endpoint 0 of svc-{s} (seen by every proxy) moves to a new IP"),
        edit,
    ))
}

/// A service (not `endpoint-ip`'s) gains 10 endpoints.
fn scale_up(state: &mut MeshState) -> Result<(String, Edit), String> {
    let t = Targets::of(state);
    let s = t.outside_shared(t.outside_shared(1) + 1);
    let edit = state.scale_up(s, 10)?;
    Ok((format!("svc-{s} scales up by 10 endpoints"), edit))
}

/// A VirtualService's v1 weight changes.
fn vs_weight(state: &mut MeshState) -> Result<(String, Edit), String> {
    let s = Targets::of(state)
        .local_vs(state)
        .ok_or("the mesh has no VirtualService")?;
    let w = next_weight(state, s);
    let edit = state.shift_weight(s, w)?;
    Ok((format!("VirtualService svc-{s}: v1 weight → {w}"), edit))
}

/// A DestinationRule gains a subset.
fn dr_subset(state: &mut MeshState) -> Result<(String, Edit), String> {
    let s = Targets::of(state)
        .local_vs(state)
        .ok_or("the mesh has no DestinationRule")?;
    let name = format!("v{}", state.services[s].subsets.len() + 1);
    let edit = state.add_subset(s, &name)?;
    Ok((format!("DestinationRule svc-{s} gains subset {name}"), edit))
}

/// A service is added.
fn new_service(state: &mut MeshState) -> Result<(String, Edit), String> {
    let (s, edit) = state.add_service()?;
    Ok((
        format!("new service svc-{s} in {}", state.namespace_of(s)),
        edit,
    ))
}

/// The last namespace's Sidecar also imports a namespace in the middle.
fn sidecar(state: &mut MeshState) -> Result<(String, Edit), String> {
    let k = state.shape.namespaces;
    let n = k - 1;
    let other = synth::namespace(k / 2);
    let hosts = match state.sidecars.get(n).cloned().flatten() {
        Some(mut h) => {
            h.push(format!("{other}/*"));
            h
        }
        None => vec!["./*".to_string(), format!("{other}/*")],
    };
    let edit = state.set_sidecar(n, Some(hosts))?;
    Ok((
        format!("Sidecar of {} also imports {other}/*", synth::namespace(n)),
        edit,
    ))
}

/// svc-0's VirtualService weight changes: svc-0 lives in ns-0, which every Sidecar
/// imports, so every proxy sees it.
fn mesh_wide(state: &mut MeshState) -> Result<(String, Edit), String> {
    if !Targets::of(state).with_rules(0) || state.services.is_empty() {
        return Err("svc-0 has no VirtualService".into());
    }
    let w = next_weight(state, 0);
    let edit = state.shift_weight(0, w)?;
    Ok((
        format!("VirtualService svc-0 (seen by every proxy): v1 weight → {w}"),
        edit,
    ))
}

/// An AuthorizationPolicy selecting one proxy allows one more principal (created if the
/// shape has none): that proxy's listeners change, and no other proxy's.
fn authz_policy(state: &mut MeshState) -> Result<(String, Edit), String> {
    if state.shape.proxies == 0 {
        return Err("the mesh has no proxy for a policy to select".into());
    }
    let existed = state.shape.authz_policies > 0;
    if !existed {
        state.shape.authz_policies = 1;
    }
    let edit = state.edit_authz(0);
    Ok((
        format!(
            "AuthorizationPolicy authz-0 ({} of {} in the mesh) allows one more principal to \
             the one proxy it selects (client-0)",
            if existed {
                "one"
            } else {
                "the only one, created,"
            },
            state.shape.authz_policies
        ),
        edit,
    ))
}

/// The last namespace becomes STRICT (a namespace-wide PeerAuthentication): the inbound
/// listeners of its proxies lose their plaintext chains; no client's clusters change (its
/// endpoints were not DISABLE), and no other namespace's proxy.
fn peer_auth(state: &mut MeshState) -> Result<(String, Edit), String> {
    let n = state.shape.namespaces - 1;
    let edit = state.peer_authentication(n, Some("STRICT"));
    Ok((
        format!(
            "namespace {} flips to STRICT (PeerAuthentication): its proxies' inbound listeners \
             change",
            dataflows::synth::namespace(n)
        ),
        edit,
    ))
}

/// An HTTPRoute on the gateways' Gateway API Gateway sends 10% of its requests to a
/// canary service of its namespace, or takes it back: the routes in turn (route `i mod R`
/// at the `i`-th call). Only the gateway proxies route by it.
fn http_route(state: &mut MeshState) -> Result<(String, Edit), String> {
    let routes = state.shape.http_routes.min(state.services.len());
    if !synth::has_http_routes(&state.shape) || routes == 0 {
        return Err("the mesh has no HTTPRoute (it needs --gateways and --http-routes)".into());
    }
    let s = state.route_edits % routes;
    state.route_edits += 1;
    let weight = match state.services[s].route_canary {
        Some(_) => None,
        None => Some(10),
    };
    let edit = state.set_route_canary(s, weight)?;
    let what = match state.services[s].route_canary {
        Some((w, t)) => format!("sends {w}% to svc-{t}"),
        None => "takes its canary back".to_string(),
    };
    Ok((
        format!("HTTPRoute svc-{s} (one of {routes} on the gateways' Gateway API Gateway) {what}"),
        edit,
    ))
}

/// Changes that change no proxy's output, in turn: a Service in a namespace no Sidecar
/// imports (exported to its own namespace only, so no gateway sees it either), a label no
/// subset selects on a pod of the shared service, a DestinationRule for a host that does
/// not exist. Each is a file of its own (the label: the service's file).
fn unrelated(state: &mut MeshState) -> Result<(String, Vec<Edit>), String> {
    let shared = shared_service(state)?;
    let ns = UNRELATED_NAMESPACE;
    let suffix = state.mesh.domain_suffix.clone();
    let mut edits = Vec::with_capacity(UNRELATED_CHANGES);
    for i in 0..UNRELATED_CHANGES {
        let edit = match i % 3 {
            0 => Edit {
                path: format!("{ns}/unrelated-svc-{i}.yaml").into(),
                content: Some(format!(
                    "apiVersion: v1
kind: Service
metadata:
  name: unrelated-{i}
  namespace: {ns}
  annotations:
    networking.istio.io/exportTo: \".\"
spec:
  selector:
    app: unrelated-{i}
  ports:
  - name: http
    port: 80
    targetPort: 8080
"
                )),
            },
            1 => state.relabel(shared, i)?,
            _ => Edit {
                path: format!("{ns}/unrelated-dr-{i}.yaml").into(),
                content: Some(format!(
                    "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: unrelated-{i}
  namespace: {ns}
spec:
  host: nobody-{i}.{ns}.svc.{suffix}
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: {max}
",
                    max = 100 + i
                )),
            },
        };
        edits.push(edit);
    }
    Ok((
        format!(
            "{UNRELATED_CHANGES} changes {UNRELATED_GAP_MS} ms apart that change no proxy's \
             output: Services in {ns} (imported by no Sidecar), a label no subset selects on \
             the pods of svc-{shared}, DestinationRules for hosts that do not exist"
        ),
        edits,
    ))
}

#[cfg(test)]
mod tests {
    use super::{parse, SCENARIOS};

    #[test]
    fn bench_every_scenario_name_parses_to_its_own_row() {
        for s in SCENARIOS {
            assert!(std::ptr::eq(parse(s.name).unwrap(), s), "{}", s.name);
        }
        assert!(parse("connect").is_err());
    }
}
