//! What the conversion of an accepted object found to say about it: fields meshflow does not
//! translate yet, and parts of the object it did not generate because it could not honour
//! them (a match condition, TLS). Nothing of an object is dropped without one of these.
//!
//! An `Error` means part of the object is not in effect (a route, a gateway server) or is
//! in effect failing closed (a cluster with no endpoints); a `Warning` that a field has no
//! effect. Neither rejects the object: Istio's validation accepts it, so meshflow serves
//! what it can of it. The field names follow Istio's API reference.

use serde::de::DeserializeOwned;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warning,
    /// A warning that a field is deprecated in Istio's API: still honoured as Istio honours
    /// it, with the field that replaces it named (Istio's IST0156).
    Deprecated,
    /// A warning that a certificate has expired or expires soon, as read.
    Expiring,
}

impl Level {
    /// The analysis message code and name an object's own finding of this level is reported
    /// under (`validate`, Kubernetes status): a field or kind not translated (a warning), a
    /// part of the object that generates nothing or fails closed (an error).
    pub fn message_code(self) -> (&'static str, &'static str) {
        match self {
            Level::Error => ("MF0002", "ConfigNotFullyGenerated"),
            Level::Warning => ("MF0001", "FieldNotSupported"),
            Level::Deprecated => ("MF0037", "Deprecated"),
            Level::Expiring => ("MF0038", "CertificateExpiring"),
        }
    }

    /// `line` with this level's code appended, as `validate` prints every finding:
    /// `… [MF0001 FieldNotSupported]`.
    pub fn coded(self, line: &str) -> String {
        let (code, name) = self.message_code();
        format!("{line} [{code} {name}]")
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Error => "error",
            Level::Warning | Level::Deprecated | Level::Expiring => "warning",
        })
    }
}

/// One analysis message about an accepted object's field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub level: Level,
    /// The field, as a path (`spec.http[2].mirror`).
    pub field: String,
    pub message: String,
}

impl Finding {
    pub fn warning(field: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            level: Level::Warning,
            field: field.into(),
            message: message.into(),
        }
    }

    /// A deprecated field, honoured: `message` names what replaces it.
    pub fn deprecated(field: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            level: Level::Deprecated,
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn error(field: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            level: Level::Error,
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The words every report of an untranslated field uses.
pub const IGNORED: &str = "not supported by meshflow yet; ignored";

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A field path below some prefix (`spec`), as steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    pub prefix: &'static str,
    pub steps: Vec<Step>,
}

impl FieldPath {
    /// The index after key `key` at the start: `http[3]…` → 3 for `"http"`.
    pub fn index_under(&self, key: &str) -> Option<usize> {
        match self.steps.as_slice() {
            [Step::Key(k), Step::Index(i), ..] if k == key => Some(*i),
            _ => None,
        }
    }

    /// The key at step `n`, if that step is a key.
    pub fn key_at(&self, n: usize) -> Option<&str> {
        match self.steps.get(n) {
            Some(Step::Key(k)) => Some(k),
            _ => None,
        }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.prefix)?;
        for s in &self.steps {
            match s {
                Step::Key(k) => write!(f, ".{k}")?,
                Step::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

fn steps(path: &serde_ignored::Path<'_>, out: &mut Vec<Step>) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            steps(parent, out);
            out.push(Step::Index(*index));
        }
        Path::Map { parent, key } => {
            steps(parent, out);
            out.push(Step::Key(key.clone()));
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => steps(parent, out),
    }
}

/// Deserializes `value` (found at `prefix`) into `T`, returning with it every field of the
/// input that `T` does not have: the fields meshflow does not read. A type error names
/// the field as [`super::Invalid`] does.
pub fn typed_with_ignored<T: DeserializeOwned>(
    value: serde_yaml_ng::Value,
    prefix: &'static str,
) -> Result<(T, Vec<FieldPath>), super::Invalid> {
    let mut ignored = Vec::new();
    let mut note = |p: serde_ignored::Path<'_>| {
        let mut s = Vec::new();
        steps(&p, &mut s);
        ignored.push(FieldPath { prefix, steps: s });
    };
    let de = serde_ignored::Deserializer::new(value, &mut note);
    let typed: T = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            prefix.to_string()
        } else {
            format!("{prefix}.{path}")
        };
        super::Invalid::field(field, e.into_inner().to_string())
    })?;
    Ok((typed, ignored))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, Default)]
    #[serde(default)]
    struct Outer {
        http: Vec<Inner>,
    }

    #[derive(Debug, Deserialize, Default)]
    #[serde(default)]
    struct Inner {
        name: Option<String>,
    }

    #[test]
    fn ignored_fields_are_named_as_paths_below_the_prefix() {
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(
            "http:\n- name: a\n- name: b\n  fault: {delay: {fixedDelay: 1s}}\ntcp: []\n",
        )
        .expect("YAML");
        let (o, ignored): (Outer, _) = typed_with_ignored(v, "spec").expect("valid");
        assert_eq!(o.http.len(), 2);
        assert_eq!(o.http[1].name.as_deref(), Some("b"));
        let names: Vec<String> = ignored.iter().map(|p| p.to_string()).collect();
        assert_eq!(names, vec!["spec.http[1].fault", "spec.tcp"]);
        assert_eq!(ignored[0].index_under("http"), Some(1));
        assert_eq!(ignored[0].key_at(2), Some("fault"));
        assert_eq!(ignored[1].index_under("http"), None);
    }

    #[test]
    fn a_type_error_still_names_its_field() {
        let v: serde_yaml_ng::Value =
            serde_yaml_ng::from_str("http:\n- name: [1]\n").expect("YAML");
        let e = typed_with_ignored::<Outer>(v, "spec").expect_err("a type error");
        assert_eq!(e.field, "spec.http[0].name");
    }
}
