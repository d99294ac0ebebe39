//! ListenerSets on their Gateway (the Gateway API's GEP-1713), shared by the dataflow, the
//! naive recompute and the status writer, so all three take the same sets and the same
//! listeners:
//! - a Gateway takes the ListenerSets of the namespaces its `allowedListeners` admits (none
//!   when unset), others are `NotAllowed`;
//! - the listeners are validated as one Gateway's would be, in precedence order: the
//!   Gateway's own first, then the sets' by creation time, then by namespace and name; a
//!   listener that conflicts with one before it is left out (`Conflicted`) — one refused
//!   for its certificate still holds its place —, as is one whose certificate of another
//!   namespace no ReferenceGrant *from ListenerSets* allows;
//! - a Gateway that is not accepted itself serves none of its sets (`ParentNotAccepted`);
//! - a set with no listener left is `ListenersNotValid`; one with some is accepted and its
//!   listeners are served on the Gateway's proxies, for the routes that name the set.

use crate::model::*;

/// What can share a port: HTTP with HTTP, HTTPS and TLS with each other (told apart by
/// SNI), TCP with nothing.
fn port_class(p: ListenerProtocol) -> u8 {
    match p {
        ListenerProtocol::Http => 0,
        ListenerProtocol::Https | ListenerProtocol::Tls => 1,
        ListenerProtocol::Tcp => 2,
    }
}

/// Why listener `l` cannot be served beside `earlier` (those before it in precedence),
/// as the spec's reason and what it says: on a port another protocol holds
/// (`ProtocolConflict`), or with the same port, protocol class and hostname
/// (`HostnameConflict`; TCP has no hostname to tell two apart).
pub fn listener_conflict<'a>(
    earlier: impl IntoIterator<Item = &'a Listener>,
    l: &Listener,
) -> Option<(&'static str, String)> {
    let same_port: Vec<&Listener> = earlier.into_iter().filter(|k| k.port == l.port).collect();
    if same_port
        .iter()
        .any(|k| port_class(k.protocol) != port_class(l.protocol))
    {
        return Some((
            "ProtocolConflict",
            format!("port {} is another protocol's listener's", l.port),
        ));
    }
    if same_port
        .iter()
        .any(|k| k.hostname == l.hostname || l.protocol == ListenerProtocol::Tcp)
    {
        return Some((
            "HostnameConflict",
            format!(
                "another listener has port {} and hostname {}",
                l.port,
                l.hostname.as_deref().unwrap_or("(none)")
            ),
        ));
    }
    None
}

/// Whether Gateway `gw` takes ListenerSets of namespace `set_ns` (`labels`: the
/// namespace's, when known; [`NamespaceSelector::selects`]).
pub fn admits(gw: &KubeGateway, set_ns: &str, labels: Option<&Labels>) -> bool {
    match &gw.allowed_listeners {
        AllowedListeners::None => false,
        AllowedListeners::All => true,
        AllowedListeners::Same => set_ns == gw.key.namespace,
        AllowedListeners::Selector(selector) => selector.selects(set_ns, labels),
    }
}

/// The precedence of ListenerSets on one Gateway: the oldest first, then by namespace and
/// name.
fn precedence(s: &KubeListenerSet) -> (&str, &str, &str) {
    (&s.created, &s.key.namespace, &s.key.name)
}

/// Gateway `gw` (its own certificates' grants applied) with the ListenerSets naming it
/// (`sets`, any order) taken as the spec says: [`KubeGateway::sets`] filled, oldest
/// first, each accepted with the listeners it may serve or refused with the spec's
/// reason; and what is wrong, for the sets' owners (none for a Gateway of a class meshflow
/// does not own: its sets are another controller's). `ns_labels`: a namespace's labels,
/// when known. `grants`: ReferenceGrants (those of other namespaces than a set's let it
/// name Secrets there; others are ignored).
pub fn attach_sets<'a>(
    gw: &KubeGateway,
    sets: &[&KubeListenerSet],
    ns_labels: impl Fn(&str) -> Option<&'a Labels>,
    grants: &[&ReferenceGrant],
) -> (KubeGateway, Vec<ConfigError>) {
    let mut out = gw.clone();
    out.sets.clear();
    let mut errors = Vec::new();
    let mut sets: Vec<&KubeListenerSet> = sets.to_vec();
    sets.sort_by(|a, b| precedence(a).cmp(&precedence(b)));
    sets.dedup_by(|a, b| a.key == b.key);
    let owned = gw.owned();
    let mut error = |set: &KubeListenerSet, code, message: String| {
        if owned {
            errors.push(ConfigError {
                object: set.key.clone(),
                code,
                message,
            });
        }
    };
    let gw_name = format!("Gateway {}/{}", gw.key.namespace, gw.key.name);
    // The listeners that hold their port and hostname so far, in precedence order (served,
    // or accepted though refused for their certificate): each set's are checked against
    // them.
    let mut taken: Vec<Listener> = gw.claims().cloned().collect();
    for set in sets {
        let refuse = |reason: &str, why: String| AttachedSet {
            key: set.key.clone(),
            refused: Some((reason.to_string(), why)),
            listeners: Vec::new(),
            refused_listeners: Vec::new(),
        };
        if !owned {
            out.sets.push(refuse(
                "NotOwned",
                format!("{gw_name} is not of a class meshflow serves"),
            ));
            continue;
        }
        if !gw.accepted() {
            let why = match &gw.invalid_parameters {
                Some(why) => format!("{gw_name} is not accepted: {why}"),
                None => format!("{gw_name} is not accepted: none of its own listeners is"),
            };
            error(
                set,
                ErrorCode::ListenerSetNotAccepted,
                format!("spec.parentRef: ParentNotAccepted: {why}"),
            );
            out.sets.push(refuse("ParentNotAccepted", why));
            continue;
        }
        if !admits(gw, &set.key.namespace, ns_labels(&set.key.namespace)) {
            let why = match &gw.allowed_listeners {
                AllowedListeners::None => {
                    format!("{gw_name} takes no ListenerSet (spec.allowedListeners)")
                }
                _ => format!(
                    "{gw_name} does not take ListenerSets of namespace {} (spec.allowedListeners)",
                    set.key.namespace
                ),
            };
            error(
                set,
                ErrorCode::ListenerSetNotAccepted,
                format!("spec.parentRef: NotAllowed: {why}"),
            );
            out.sets.push(refuse("NotAllowed", why));
            continue;
        }
        // The set's listeners that claim a place, in the order written: those it may
        // serve, and those refused for their certificate as written (accepted, they hold
        // their port and hostname). A conflict goes first: a listener that conflicts is
        // `Conflicted` whatever its certificate.
        let mut claimants: Vec<(&Listener, Option<&RefusedListener>)> = set
            .listeners
            .iter()
            .map(|l| (l, None))
            .chain(
                set.refused
                    .iter()
                    .filter_map(|r| r.holds.as_ref().map(|l| (l, Some(r)))),
            )
            .collect();
        claimants.sort_by_key(|(l, _)| l.index);
        let mut kept = Vec::new();
        let mut refused_listeners: Vec<RefusedListener> = set
            .refused
            .iter()
            .filter(|r| r.holds.is_none())
            .cloned()
            .collect();
        for (l, as_written) in claimants {
            if let Some((reason, why)) = listener_conflict(&taken, l) {
                error(
                    set,
                    ErrorCode::ListenerSetNotAccepted,
                    format!(
                        "spec.listeners[{}]: {reason}: {why} on {gw_name}; the listener is left out",
                        l.index
                    ),
                );
                refused_listeners.push(RefusedListener::conflicted(l, reason, why));
                continue;
            }
            taken.push(l.clone());
            if let Some(r) = as_written {
                refused_listeners.push(r.clone());
                continue;
            }
            if let Some(why) = ungranted_certificate(l, &set.key.namespace, grants) {
                error(
                    set,
                    ErrorCode::GatewaySecret,
                    format!(
                        "spec.listeners[{}].tls.certificateRefs[0]: RefNotPermitted: {why}",
                        l.index
                    ),
                );
                refused_listeners.push(RefusedListener {
                    name: l.name.clone(),
                    reason: "RefNotPermitted".into(),
                    why,
                    kinds: l.protocol.default_kind_names(),
                    holds: Some(l.clone()),
                    accepted_reason: None,
                });
                continue;
            }
            kept.push(l.clone());
        }
        refused_listeners.sort_by_key(|r| {
            set.listeners
                .iter()
                .chain(set.refused.iter().filter_map(|r| r.holds.as_ref()))
                .find(|l| l.name == r.name)
                .map_or(usize::MAX, |l| l.index)
        });
        let refused = kept.is_empty().then(|| {
            let why = "none of its listeners can be served".to_string();
            error(
                set,
                ErrorCode::ListenerSetNotAccepted,
                format!("spec.listeners: ListenersNotValid: {why}"),
            );
            ("ListenersNotValid".to_string(), why)
        });
        out.sets.push(AttachedSet {
            key: set.key.clone(),
            refused,
            listeners: kept,
            refused_listeners,
        });
    }
    (out, errors)
}

/// Why a terminating listener of a ListenerSet of namespace `set_ns` may not serve its
/// certificate: a Secret of another namespace that no ReferenceGrant there lets
/// ListenerSets of `set_ns` name (a Gateway's grants are not a set's).
fn ungranted_certificate(l: &Listener, set_ns: &str, grants: &[&ReferenceGrant]) -> Option<String> {
    let tls = l.tls.as_ref().filter(|t| !t.passthrough)?;
    let (cert_ns, cert) = tls.certificates.first().filter(|(ns, _)| ns != set_ns)?;
    let granted = grants
        .iter()
        .any(|g| g.key.namespace == *cert_ns && g.allows("ListenerSet", set_ns, "Secret", cert));
    (!granted).then(|| {
        format!(
            "Secret {cert_ns}/{cert} is in another namespace and no ReferenceGrant there \
             allows ListenerSets of {set_ns} to name it; the listener is left out"
        )
    })
}

/// The namespaces other than its own whose Secrets a set's terminating listeners name:
/// the ReferenceGrants there decide whether it may.
pub fn set_certificate_namespaces(set: &KubeListenerSet) -> Vec<String> {
    let mut out: Vec<String> = set
        .listeners
        .iter()
        .filter_map(|l| {
            let tls = l.tls.as_ref().filter(|t| !t.passthrough)?;
            tls.certificates
                .first()
                .filter(|(ns, _)| *ns != set.key.namespace)
                .map(|(ns, _)| ns.clone())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
