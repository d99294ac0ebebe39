//! The input schema: Kubernetes and Istio objects (serde types in [`istio`], `k8s-openapi`
//! for Kubernetes kinds), validated and converted into the dataflow's domain records
//! (`dataflows::model`). Every rejection names the object (kind/namespace/name) and the
//! field, and for files the file and line.
//!
//! Entry points: [`parse_file`] for multi-document YAML text, [`parse_value`] and
//! [`parse_object`] for an object already decoded (a Kubernetes watch event, any serde
//! value). Imports nothing of this crate: sources build on it.

mod convert;
pub mod cross;
mod ext_authz;
pub mod findings;
pub mod gateway_api;
pub mod istio;
pub mod mesh;
pub mod re2_size;
pub mod secret;
pub mod security;

pub use convert::{check_jwks, convert};
use dataflows::model::{ConfigKey, Kind, MeshConfig, Record};
pub use findings::{Finding, Level};
use std::fmt;
use std::path::{Path, PathBuf};

/// An object that failed validation, or a document that could not be read at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// `None` when the document is too broken to tell which object it is.
    pub object: Option<ConfigKey>,
    /// The field at fault, as a path (`spec.http[0].route[1].weight`); empty for the whole.
    pub field: String,
    pub message: String,
}

impl Invalid {
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid {
            object: None,
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A rejected document, located in its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocError {
    pub file: PathBuf,
    pub line: usize,
    pub invalid: Invalid,
}

/// `Kind namespace/name: field.path: message`, each part when known: how a rejection reads
/// wherever the object came from (a file adds its `file:line: ` in front).
impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = &self.object {
            write!(f, "{} {}/{}: ", o.kind, o.namespace, o.name)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}", self.message)
    }
}

impl fmt::Display for DocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.invalid)
    }
}

/// One valid object, the records it contributes, and what meshflow has to say about the
/// parts of it that it does not translate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub key: ConfigKey,
    pub records: Vec<Record>,
    pub findings: Vec<Finding>,
}

impl Parsed {
    /// `LEVEL: Kind ns/name: field: message`, one line per finding.
    pub fn finding_lines(&self) -> impl Iterator<Item = (Level, String)> + '_ {
        self.findings.iter().map(|f| {
            let o = &self.key;
            (
                f.level,
                format!(
                    "{}: {} {}/{}: {}: {}",
                    f.level, o.kind, o.namespace, o.name, f.field, f.message
                ),
            )
        })
    }
}

/// What a document holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Document {
    Object(Parsed),
    /// A kind of Istio's or the Gateway API's that meshflow does not serve
    /// (`PeerAuthentication (security.istio.io/v1)`): said once, never silently skipped.
    Unserved(String),
    /// Anything else (a Deployment in the config directory): not mesh config.
    Other,
    /// A `kind: List` (what `kubectl get -o yaml` writes), or a `…List` of one kind: each of
    /// its `items` read as a document of its own.
    List(Vec<Result<Document, Invalid>>),
}

/// The outcome of reading one file: the valid objects and the rejected documents.
#[derive(Debug, Default)]
pub struct FileContents {
    /// Valid objects with the line their document starts on.
    pub objects: Vec<(usize, Parsed)>,
    pub errors: Vec<DocError>,
    /// Kinds not served, with the line of each such document.
    pub unserved: Vec<(usize, String)>,
}

/// Splits YAML text into documents at `---` lines, with the 1-based line each starts on.
pub fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (i, line) in text.lines().enumerate() {
        let rest = line.strip_prefix("---").map(str::trim);
        if rest.is_some_and(|r| r.is_empty() || r.starts_with('#')) {
            docs.push((start, std::mem::take(&mut current)));
            start = i + 2;
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs.push((start, current));
    docs.retain(|(_, d)| {
        d.lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    });
    docs
}

/// Parses every document of a file. Unknown kinds are skipped: a config directory may
/// hold Deployments and other objects meshflow has no use for.
pub fn parse_file(path: &Path, text: &str, mesh: &MeshConfig) -> FileContents {
    parse_file_reusing(path, text, mesh, |_, _| None)
}

/// [`parse_file`], taking the reading of a document from `known` (given the line the
/// document starts on and its text) when it has one, for a document whose text was read
/// before: a file rewritten with one document changed is parsed for that document only.
pub fn parse_file_reusing(
    path: &Path,
    text: &str,
    mesh: &MeshConfig,
    mut known: impl FnMut(usize, &str) -> Option<Document>,
) -> FileContents {
    let mut out = FileContents::default();
    for (line, doc) in split_documents(text) {
        let read = match known(line, &doc) {
            Some(d) => Ok(d),
            None => read_document(&doc, mesh),
        };
        out.add(path, line, read);
    }
    out
}

impl FileContents {
    /// One document's reading, at the line it starts on (a List's items all at its line).
    fn add(&mut self, path: &Path, line: usize, read: Result<Document, Invalid>) {
        match read {
            Ok(Document::Object(parsed)) => self.objects.push((line, parsed)),
            Ok(Document::Unserved(kind)) => self.unserved.push((line, kind)),
            Ok(Document::Other) => {}
            Ok(Document::List(items)) => {
                for item in items {
                    self.add(path, line, item);
                }
            }
            Err(invalid) => self.errors.push(DocError {
                file: path.to_path_buf(),
                line,
                invalid,
            }),
        }
    }
}

/// Deepest nesting of flow collections (`[`, `{`) a document may have: Kubernetes objects
/// nest a dozen levels; a hundred thousand made the YAML parser take seconds per document.
pub const MAX_NESTING: usize = 64;
/// Largest document read.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;

/// The deepest `[`/`{` nesting of a YAML document, outside quoted strings and comments.
fn flow_nesting(doc: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for line in doc.lines() {
        let mut quote: Option<char> = None;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    deepest
}

/// Refuses a document nesting `[`/`{` deeper than [`MAX_NESTING`], before a YAML parser
/// spends seconds on it (the config files' documents and the mesh config alike).
pub fn check_nesting(doc: &str) -> Result<(), Invalid> {
    let nesting = flow_nesting(doc);
    if nesting > MAX_NESTING {
        return Err(Invalid::field(
            "",
            format!("the document nests {nesting} levels deep, more than {MAX_NESTING}"),
        ));
    }
    Ok(())
}

/// Parses one YAML document into an object's records (`None`: not mesh config).
pub fn parse_document(doc: &str, mesh: &MeshConfig) -> Result<Option<Parsed>, Invalid> {
    read_document(doc, mesh).map(Document::object)
}

impl Document {
    pub fn object(self) -> Option<Parsed> {
        match self {
            Document::Object(p) => Some(p),
            _ => None,
        }
    }
}

/// Reads one YAML document.
pub fn read_document(doc: &str, mesh: &MeshConfig) -> Result<Document, Invalid> {
    if doc.len() > MAX_DOCUMENT_BYTES {
        return Err(Invalid::field(
            "",
            format!(
                "the document is {} bytes, more than {MAX_DOCUMENT_BYTES}",
                doc.len()
            ),
        ));
    }
    check_nesting(doc)?;
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" (line {} of the document)", l.line()))
            .unwrap_or_default();
        Invalid::field("", format!("not valid YAML: {e}{at}"))
    })?;
    read_value(value, mesh)
}

/// Parses an object already decoded by serde (a Kubernetes object from a watch, JSON or
/// YAML) into its records: the same validation and errors as a file's document.
pub fn parse_object<T: serde::Serialize>(
    object: &T,
    mesh: &MeshConfig,
) -> Result<Option<Parsed>, Invalid> {
    let value = serde_yaml_ng::to_value(object)
        .map_err(|e| Invalid::field("", format!("not a Kubernetes object: {e}")))?;
    parse_value(value, mesh)
}

/// Parses one decoded object into its records. `Ok(None)` for a kind meshflow has no use
/// for (a Deployment in the config directory).
pub fn parse_value(
    value: serde_yaml_ng::Value,
    mesh: &MeshConfig,
) -> Result<Option<Parsed>, Invalid> {
    read_value(value, mesh).map(Document::object)
}

/// Groups whose kinds are mesh config: one meshflow does not serve is said, not skipped.
fn mesh_group(group: &str) -> bool {
    group.ends_with(".istio.io") || group == "gateway.networking.k8s.io"
}

/// Reads one decoded object, or the items of a List.
pub fn read_value(value: serde_yaml_ng::Value, mesh: &MeshConfig) -> Result<Document, Invalid> {
    if let Some(items) = list_items(&value)? {
        let items = items.into_iter().enumerate().map(|(i, item)| {
            if list_items(&item).ok().flatten().is_some() {
                return Err(Invalid::field(
                    format!("items[{i}]"),
                    "a List inside a List is not read",
                ));
            }
            read_value(item, mesh).map_err(|mut e| {
                if e.object.is_none() {
                    e.field = match e.field.as_str() {
                        "" => format!("items[{i}]"),
                        f => format!("items[{i}].{f}"),
                    };
                }
                e
            })
        });
        return Ok(Document::List(items.collect()));
    }
    read_object(value, mesh)
}

/// The items of a `kind: List` (`v1`, what `kubectl get -o yaml` writes) or of a
/// `KindList` (what the API server lists); `None` for any other document.
fn list_items(value: &serde_yaml_ng::Value) -> Result<Option<Vec<serde_yaml_ng::Value>>, Invalid> {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    let listed = kind == "List"
        || (kind.len() > 4 && kind.ends_with("List") && value.get("items").is_some());
    if !listed {
        return Ok(None);
    }
    match value.get("items") {
        Some(serde_yaml_ng::Value::Sequence(items)) => Ok(Some(items.clone())),
        None | Some(serde_yaml_ng::Value::Null) => Ok(Some(Vec::new())),
        Some(_) => Err(Invalid::field(
            "items",
            format!("the items of a {kind} must be a list"),
        )),
    }
}

/// Reads one decoded object.
fn read_object(value: serde_yaml_ng::Value, mesh: &MeshConfig) -> Result<Document, Invalid> {
    let str_at = |path: &[&str]| {
        let mut v = &value;
        for p in path {
            v = v.get(*p)?;
        }
        v.as_str().map(str::to_string)
    };
    let (Some(api_version), Some(kind)) = (str_at(&["apiVersion"]), str_at(&["kind"])) else {
        return Err(Invalid::field(
            "",
            "a Kubernetes object needs apiVersion and kind",
        ));
    };
    let Some(kind) = kind_of(&api_version, &kind) else {
        // A kind meshflow reads under a mistyped apiVersion would vanish silently (and retract
        // what it replaced): an error naming the object keeps its last valid version.
        if let Some((intended, message)) = api_version_mistake(&api_version, &kind) {
            let name = str_at(&["metadata", "name"]).unwrap_or_default();
            let namespace = str_at(&["metadata", "namespace"]).unwrap_or_else(|| "default".into());
            return Err(Invalid {
                object: Some(ConfigKey::new(intended, namespace, name)),
                field: "apiVersion".into(),
                message,
            });
        }
        // So would a misspelt Istio kind.
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        const OTHER_ISTIO: [&str; 3] = ["WorkloadGroup", "EnvoyFilter", "ProxyConfig"];
        if group == "networking.istio.io" && !OTHER_ISTIO.contains(&kind.as_str()) {
            return Err(Invalid::field(
                "kind",
                format!("{kind:?} is not a networking.istio.io kind"),
            ));
        }
        if mesh_group(group) {
            return Ok(Document::Unserved(format!("{kind} ({api_version})")));
        }
        return Ok(Document::Other);
    };
    let Some(name) = str_at(&["metadata", "name"]).filter(|n| !n.is_empty()) else {
        return Err(Invalid::field(
            "metadata.name",
            format!("{kind:?} has no name"),
        ));
    };
    let namespace = if matches!(kind, Kind::Namespace | Kind::GatewayClass) {
        String::new()
    } else {
        str_at(&["metadata", "namespace"]).unwrap_or_else(|| "default".into())
    };
    // Kubernetes' own name rules (the API server enforces them; files must too): a name
    // with a newline or a terminal escape would otherwise reach resource names and output.
    let service_like = matches!(kind, Kind::Service | Kind::Namespace);
    if let Err(why) = kubernetes_name(&name, if service_like { 63 } else { 253 }, !service_like) {
        return Err(Invalid::field("metadata.name", format!("{name:?} {why}")));
    }
    if !namespace.is_empty() {
        if let Err(why) = kubernetes_name(&namespace, 63, false) {
            return Err(Invalid::field(
                "metadata.namespace",
                format!("{namespace:?} {why}"),
            ));
        }
    }
    let key = ConfigKey::new(kind, namespace, name);
    match convert(&key, value, mesh) {
        Ok((records, findings)) => Ok(Document::Object(Parsed {
            key,
            records,
            findings,
        })),
        Err(mut invalid) => {
            invalid.object = Some(key);
            Err(invalid)
        }
    }
}

/// Kubernetes' DNS name rules: lowercase letters, digits and `-` (and `.` between labels
/// when `dotted`, a DNS-1123 subdomain), starting and ending with a letter or digit, at most
/// `max` characters.
fn kubernetes_name(name: &str, max: usize, dotted: bool) -> Result<(), String> {
    if name.len() > max {
        return Err(format!("is longer than {max} characters"));
    }
    let ok_char =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dotted && c == '.');
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !name.chars().all(ok_char) || !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        let allowed = if dotted { "'-' and '.'" } else { "'-'" };
        return Err(format!(
            "is not a valid Kubernetes name (lowercase letters, digits and {allowed}, starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

/// Built-in Kubernetes API groups (`""` is the core group): none of them has a kind named
/// like an Istio one, and meshflow's Kubernetes kinds live only where [`kind_of`] says.
const KUBERNETES_GROUPS: [&str; 12] = [
    "",
    "apps",
    "batch",
    "policy",
    "autoscaling",
    "discovery.k8s.io",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "coordination.k8s.io",
    "events.k8s.io",
    "apiextensions.k8s.io",
];

/// A kind meshflow reads under an apiVersion that cannot be meant for something else: the
/// right group with an unknown or missing version, a group a letter or two away from the
/// right one, another `*.istio.io` group, or a built-in Kubernetes group that has no such
/// kind. A kind of the same name in an unrelated API (a Knative `Service`, a Gateway API
/// `Gateway`) is not a mistake and is skipped as any other kind.
fn api_version_mistake(api_version: &str, kind: &str) -> Option<(Kind, String)> {
    let (intended, group, versions): (Kind, &str, &[&str]) = match kind {
        "Service" => (Kind::Service, "", &["v1"]),
        "Endpoints" => (Kind::Endpoints, "", &["v1"]),
        "Pod" => (Kind::Pod, "", &["v1"]),
        "Namespace" => (Kind::Namespace, "", &["v1"]),
        "Secret" => (Kind::Secret, "", &["v1"]),
        "EndpointSlice" => (Kind::EndpointSlice, "discovery.k8s.io", &["v1"]),
        "VirtualService" => (Kind::VirtualService, ISTIO, ISTIO_VERSIONS),
        "DestinationRule" => (Kind::DestinationRule, ISTIO, ISTIO_VERSIONS),
        "Gateway" => (Kind::Gateway, ISTIO, ISTIO_VERSIONS),
        "ServiceEntry" => (Kind::ServiceEntry, ISTIO, ISTIO_VERSIONS),
        "Sidecar" => (Kind::Sidecar, ISTIO, ISTIO_VERSIONS),
        "WorkloadEntry" => (Kind::WorkloadEntry, ISTIO, ISTIO_VERSIONS),
        "PeerAuthentication" => (Kind::PeerAuthentication, SECURITY, SECURITY_VERSIONS),
        "AuthorizationPolicy" => (Kind::AuthorizationPolicy, SECURITY, SECURITY_VERSIONS),
        "RequestAuthentication" => (Kind::RequestAuthentication, SECURITY, SECURITY_VERSIONS),
        _ => return None,
    };
    let (given_group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, Some(v)),
        // `networking.istio.io` alone is a group without a version; `v1` alone the core group.
        None if api_version.contains('.') => (api_version, None),
        None => ("", Some(api_version)),
    };
    let mistaken = given_group == group
        || (given_group.len() > 3 && edit_distance(given_group, group) <= 2)
        || (given_group.ends_with(".istio.io") && group.ends_with(".istio.io"))
        || KUBERNETES_GROUPS.contains(&given_group);
    if !mistaken {
        return None;
    }
    let expected: Vec<String> = versions
        .iter()
        .map(|v| {
            if group.is_empty() {
                v.to_string()
            } else {
                format!("{group}/{v}")
            }
        })
        .collect();
    let why = match version {
        None => "has no version".to_string(),
        Some(_) if given_group == group => "names a version meshflow does not read".to_string(),
        Some(_) => "is not where this kind is served".to_string(),
    };
    Some((
        intended,
        format!(
            "{api_version:?} {why}: {kind} is read as {}",
            expected.join(", ")
        ),
    ))
}

const ISTIO: &str = "networking.istio.io";
const ISTIO_VERSIONS: &[&str] = &["v1", "v1beta1", "v1alpha3"];
const SECURITY: &str = "security.istio.io";
const SECURITY_VERSIONS: &[&str] = &["v1", "v1beta1"];

/// Levenshtein distance, for telling a typo from another API group.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

fn kind_of(api_version: &str, kind: &str) -> Option<Kind> {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let istio = group == "networking.istio.io"
        && matches!(
            api_version.rsplit('/').next(),
            Some("v1" | "v1beta1" | "v1alpha3")
        );
    let gateway_api = group == "gateway.networking.k8s.io"
        && matches!(
            api_version.rsplit('/').next(),
            Some("v1" | "v1beta1" | "v1alpha2")
        );
    let security =
        group == SECURITY && matches!(api_version.rsplit('/').next(), Some("v1" | "v1beta1"));
    Some(match (group, kind) {
        ("", "Namespace") => Kind::Namespace,
        ("", "Service") => Kind::Service,
        ("", "Endpoints") => Kind::Endpoints,
        ("", "Pod") => Kind::Pod,
        ("", "Secret") => Kind::Secret,
        ("", "ConfigMap") => Kind::ConfigMap,
        ("discovery.k8s.io", "EndpointSlice") => Kind::EndpointSlice,
        (_, "VirtualService") if istio => Kind::VirtualService,
        (_, "DestinationRule") if istio => Kind::DestinationRule,
        (_, "Gateway") if istio => Kind::Gateway,
        (_, "ServiceEntry") if istio => Kind::ServiceEntry,
        (_, "Sidecar") if istio => Kind::Sidecar,
        (_, "WorkloadEntry") if istio => Kind::WorkloadEntry,
        (_, "PeerAuthentication") if security => Kind::PeerAuthentication,
        (_, "AuthorizationPolicy") if security => Kind::AuthorizationPolicy,
        (_, "RequestAuthentication") if security => Kind::RequestAuthentication,
        (_, "Gateway") if gateway_api => Kind::KubernetesGateway,
        (_, "HTTPRoute") if gateway_api => Kind::HttpRoute,
        (_, "GRPCRoute") if gateway_api => Kind::GrpcRoute,
        (_, "TCPRoute") if gateway_api => Kind::TcpRoute,
        (_, "TLSRoute") if gateway_api => Kind::TlsRoute,
        (_, "ReferenceGrant") if gateway_api => Kind::ReferenceGrant,
        (_, "GatewayClass") if gateway_api => Kind::GatewayClass,
        (_, "BackendTLSPolicy") if gateway_api => Kind::BackendTlsPolicy,
        (_, "ListenerSet") if gateway_api => Kind::ListenerSet,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
