//! The input schema: Kubernetes and Istio objects (serde types in [`istio`], `k8s-openapi`
//! for Kubernetes kinds), validated and converted into the dataflow's domain records
//! (`dataflows::model`). Every rejection names the object (kind/namespace/name) and the
//! field, and for files the file and line.
//!
//! Entry points: [`parse_file`] for multi-document YAML text, [`parse_value`] and
//! [`parse_object`] for an object already decoded (a Kubernetes watch event, any serde
//! value). Imports nothing of this crate: sources build on it.

mod convert;
pub mod istio;

pub use convert::convert;
use dataflows::model::{ConfigKey, Kind, MeshConfig, Record};
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

impl fmt::Display for DocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file.display(), self.line)?;
        if let Some(o) = &self.invalid.object {
            write!(f, "{:?} {}/{}: ", o.kind, o.namespace, o.name)?;
        }
        if !self.invalid.field.is_empty() {
            write!(f, "{}: ", self.invalid.field)?;
        }
        write!(f, "{}", self.invalid.message)
    }
}

/// One valid object and the records it contributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub key: ConfigKey,
    pub records: Vec<Record>,
}

/// The outcome of reading one file: the valid objects and the rejected documents.
#[derive(Debug, Default)]
pub struct FileContents {
    /// Valid objects with the line their document starts on.
    pub objects: Vec<(usize, Parsed)>,
    pub errors: Vec<DocError>,
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
    let mut out = FileContents::default();
    for (line, doc) in split_documents(text) {
        match parse_document(&doc, mesh) {
            Ok(Some(parsed)) => out.objects.push((line, parsed)),
            Ok(None) => {}
            Err(invalid) => out.errors.push(DocError {
                file: path.to_path_buf(),
                line,
                invalid,
            }),
        }
    }
    out
}

/// Parses one YAML document into an object's records.
pub fn parse_document(doc: &str, mesh: &MeshConfig) -> Result<Option<Parsed>, Invalid> {
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" (line {} of the document)", l.line()))
            .unwrap_or_default();
        Invalid::field("", format!("not valid YAML: {e}{at}"))
    })?;
    parse_value(value, mesh)
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
        // A misspelt Istio kind would otherwise vanish silently (and retract what it replaced).
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        const OTHER_ISTIO: [&str; 3] = ["WorkloadGroup", "EnvoyFilter", "ProxyConfig"];
        if group == "networking.istio.io" && !OTHER_ISTIO.contains(&kind.as_str()) {
            return Err(Invalid::field(
                "kind",
                format!("{kind:?} is not a networking.istio.io kind"),
            ));
        }
        return Ok(None);
    };
    let Some(name) = str_at(&["metadata", "name"]).filter(|n| !n.is_empty()) else {
        return Err(Invalid::field(
            "metadata.name",
            format!("{kind:?} has no name"),
        ));
    };
    let namespace = if kind == Kind::Namespace {
        String::new()
    } else {
        str_at(&["metadata", "namespace"]).unwrap_or_else(|| "default".into())
    };
    let key = ConfigKey::new(kind, namespace, name);
    match convert(&key, value, mesh) {
        Ok(records) => Ok(Some(Parsed { key, records })),
        Err(mut invalid) => {
            invalid.object = Some(key);
            Err(invalid)
        }
    }
}

fn kind_of(api_version: &str, kind: &str) -> Option<Kind> {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let istio = group == "networking.istio.io"
        && matches!(
            api_version.rsplit('/').next(),
            Some("v1" | "v1beta1" | "v1alpha3")
        );
    Some(match (group, kind) {
        ("", "Namespace") => Kind::Namespace,
        ("", "Service") => Kind::Service,
        ("", "Endpoints") => Kind::Endpoints,
        ("", "Pod") => Kind::Pod,
        ("discovery.k8s.io", "EndpointSlice") => Kind::EndpointSlice,
        (_, "VirtualService") if istio => Kind::VirtualService,
        (_, "DestinationRule") if istio => Kind::DestinationRule,
        (_, "Gateway") if istio => Kind::Gateway,
        (_, "ServiceEntry") if istio => Kind::ServiceEntry,
        (_, "Sidecar") if istio => Kind::Sidecar,
        (_, "WorkloadEntry") if istio => Kind::WorkloadEntry,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
