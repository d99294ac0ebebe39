//! The mesh config as a source: Istio's MeshConfig (`mesh`) and `meshNetworks`, from files
//! (`serve --mesh-config FILE [--mesh-networks FILE]`, watched; a mounted ConfigMap's
//! symlink swap is a change like any other) or from the `istio` ConfigMap of the Kubernetes
//! source. Each change is one retraction and one insertion of a `MeshSettings` record, so
//! the dataflow recomputes only what the changed settings reach. An invalid config is
//! reported naming its field and the last valid one stays in effect.

use super::{Report, Sink, Source};
use crate::config::mesh::{mesh_config_key, parse_mesh, MeshOverrides};
use crate::config::Level;
use crate::input::{ChangeOp, InputChange, SourceName};
use dataflows::model::{ConfigKey, MeshConfig, MeshSettings, Record};
use std::path::{Path, PathBuf};

/// What a mesh config source holds: the settings it put in effect and what it said.
pub struct MeshState {
    base: MeshConfig,
    overrides: MeshOverrides,
    origin: ConfigKey,
    /// Where the config is, for messages: a file path, `ConfigMap ns/name`.
    place: String,
    /// Where changes come from in the history (`files`, `kubernetes`).
    source: &'static str,
    /// The texts last read, so a rewrite of the same bytes changes nothing.
    last: Option<(String, Option<String>)>,
    /// The settings in effect from this source (the last valid ones).
    current: Option<MeshSettings>,
    /// Analysis lines of the settings in effect, with their level.
    analysis: Vec<(Level, String)>,
    /// The current problem, if the last read was not valid.
    error: Option<String>,
}

impl MeshState {
    pub fn new(
        base: MeshConfig,
        overrides: MeshOverrides,
        origin: ConfigKey,
        place: String,
        source: &'static str,
    ) -> Self {
        MeshState {
            base,
            overrides,
            origin,
            place,
            source,
            last: None,
            current: None,
            analysis: Vec::new(),
            error: None,
        }
    }

    /// Reads new texts; `None` if they are the ones last read.
    pub fn update(&mut self, mesh: &str, networks: Option<&str>) -> Option<Report> {
        let texts = (mesh.to_string(), networks.map(str::to_string));
        if self.last.as_ref() == Some(&texts) {
            return None;
        }
        self.last = Some(texts);
        let mut changes = Vec::new();
        match parse_mesh(
            mesh,
            networks,
            self.origin.clone(),
            &self.base,
            &self.overrides,
        ) {
            Ok(parsed) => {
                self.error = None;
                self.analysis = parsed
                    .findings
                    .iter()
                    .map(|f| {
                        let line =
                            format!("{}: {}: {}: {}", self.place, f.level, f.field, f.message);
                        super::log_finding(f.level, &line);
                        (f.level, line)
                    })
                    .collect();
                if self.current.as_ref() != Some(&parsed.settings) {
                    changes = self.replace(Some(parsed.settings));
                }
            }
            Err(e) => {
                let error = format!(
                    "{}: {e} (the last valid mesh config stays in effect)",
                    self.place
                );
                super::log_rejection(&error);
                self.error = Some(error);
            }
        }
        Some(self.report(changes))
    }

    /// The config is gone (a deleted ConfigMap): Istio's defaults and the command line's
    /// settings apply again.
    pub fn remove(&mut self) -> Option<Report> {
        if self.last.is_none() && self.current.is_none() && self.error.is_none() {
            return None;
        }
        self.last = None;
        self.error = None;
        self.analysis.clear();
        let changes = self.replace(None);
        Some(self.report(changes))
    }

    /// A problem reading the config (a file that cannot be read): said; what is in effect
    /// stays.
    pub fn unreadable(&mut self, problem: String) -> Option<Report> {
        let e = format!(
            "{}: {problem} (the last valid mesh config stays in effect)",
            self.place
        );
        if self.error.as_ref() == Some(&e) {
            return None;
        }
        super::log_rejection(&e);
        self.error = Some(e);
        self.last = None;
        Some(self.report(Vec::new()))
    }

    fn replace(&mut self, next: Option<MeshSettings>) -> Vec<(Record, isize)> {
        let mut changes = Vec::new();
        if let Some(old) = self.current.take() {
            changes.push((Record::Mesh(old), -1));
        }
        if let Some(new) = next {
            changes.push((Record::Mesh(new.clone()), 1));
            self.current = Some(new);
        }
        changes
    }

    fn report(&self, changes: Vec<(Record, isize)>) -> Report {
        let described = if changes.is_empty() {
            Vec::new()
        } else {
            let op = match changes.as_slice() {
                [(_, -1)] => ChangeOp::Delete,
                [(_, 1)] => ChangeOp::Insert,
                _ => ChangeOp::Update,
            };
            vec![InputChange {
                kind: self.origin.kind.to_string(),
                namespace: self.origin.namespace.clone(),
                name: self.origin.name.clone(),
                op,
                source: self.source.into(),
            }]
        };
        Report {
            changes,
            described,
            errors: self.error.iter().cloned().collect(),
            analysis: self.analysis.iter().map(|(_, l)| l.clone()).collect(),
            seen: None,
        }
    }
}

/// The mesh config from files, watched.
pub struct MeshFileSource {
    mesh: PathBuf,
    networks: Option<PathBuf>,
    state: MeshState,
}

impl MeshFileSource {
    pub fn new(
        mesh: PathBuf,
        networks: Option<PathBuf>,
        base: MeshConfig,
        overrides: MeshOverrides,
    ) -> Self {
        let place = mesh.display().to_string();
        let state = MeshState::new(base, overrides, mesh_config_key("", "mesh"), place, "files");
        MeshFileSource {
            mesh,
            networks,
            state,
        }
    }

    /// Reads both files; the report if anything changed. `Err` if a file cannot be read.
    pub fn read(&mut self) -> Result<Option<Report>, String> {
        let mesh = read(&self.mesh)?;
        let networks = self.networks.as_deref().map(read).transpose()?;
        Ok(self.state.update(&mesh, networks.as_deref()))
    }

    /// What the analysis says of the config in effect, by level (`validate`).
    pub fn analysis(&self) -> Vec<(Level, String)> {
        self.state.analysis.clone()
    }

    fn reread(&mut self) -> Option<Report> {
        match self.read() {
            Ok(r) => r,
            Err(e) => self.state.unreadable(e),
        }
    }
}

/// The largest mesh config file read: it is a few kilobytes in practice.
const MAX_BYTES: u64 = 1 << 20;

fn read(path: &Path) -> Result<String, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if len > MAX_BYTES {
        return Err(format!(
            "{}: {len} bytes, more than {MAX_BYTES}; not read",
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// How long a burst of events may take to settle before the files are read again.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(5);

impl Source for MeshFileSource {
    fn name(&self) -> SourceName {
        "mesh-config"
    }

    fn run(mut self: Box<Self>, mut sink: Sink) -> Result<(), String> {
        use notify::{RecursiveMode, Watcher};
        let (tx, rx) = std::sync::mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |ev| {
            let _ = tx.send(ev);
        })
        .map_err(|e| format!("watching the mesh config: {e}"))?;
        // The directories, not the files: a ConfigMap volume replaces its files by swapping
        // a symlink, which a watch on the old file never sees.
        let mut dirs: Vec<PathBuf> = [Some(&self.mesh), self.networks.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| parent(p))
            .collect();
        dirs.dedup();
        for d in &dirs {
            watcher
                .watch(d, RecursiveMode::NonRecursive)
                .map_err(|e| format!("watching {}: {e}", d.display()))?;
        }
        // The first read must succeed: a path that cannot be read is a mistake to stop on,
        // not a mesh to run on defaults.
        let first = self.read()?.unwrap_or_default();
        if !sink.send(first) {
            return Ok(());
        }
        loop {
            match rx.recv() {
                Ok(_) => {}
                Err(_) => return Ok(()),
            }
            while rx.recv_timeout(SETTLE).is_ok() {}
            if let Some(report) = self.reread() {
                if !sink.send(report) {
                    return Ok(());
                }
            }
        }
    }
}

fn parent(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> MeshState {
        MeshState::new(
            MeshConfig::default(),
            MeshOverrides::default(),
            mesh_config_key("", "mesh"),
            "mesh.yaml".into(),
            "files",
        )
    }

    fn mode(r: &Record) -> bool {
        match r {
            Record::Mesh(m) => m.registry_only,
            other => panic!("not a mesh record: {other:?}"),
        }
    }

    #[test]
    fn a_change_is_one_retraction_and_one_insertion() {
        let mut s = state();
        let r = s
            .update("outboundTrafficPolicy: {mode: ALLOW_ANY}\n", None)
            .unwrap();
        assert_eq!(r.changes.len(), 1);
        assert!(!mode(&r.changes[0].0));
        let r = s
            .update("outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n", None)
            .unwrap();
        let diffs: Vec<(bool, isize)> = r.changes.iter().map(|(r, d)| (mode(r), *d)).collect();
        assert_eq!(diffs, vec![(false, -1), (true, 1)]);
        assert_eq!(r.described.len(), 1);
        assert_eq!(r.described[0].op, ChangeOp::Update);
    }

    #[test]
    fn the_same_bytes_or_the_same_settings_change_nothing() {
        let mut s = state();
        s.update("connectTimeout: 1s\n", None).unwrap();
        assert!(s.update("connectTimeout: 1s\n", None).is_none());
        // Other bytes, same settings: a report (analysis may differ), no change.
        let r = s.update("connectTimeout: 1000ms\n", None).unwrap();
        assert!(r.changes.is_empty());
    }

    #[test]
    fn an_invalid_config_keeps_the_last_valid_one_and_says_why() {
        let mut s = state();
        s.update("connectTimeout: 1s\n", None).unwrap();
        let r = s.update("connectTimeout: later\n", None).unwrap();
        assert!(r.changes.is_empty());
        assert_eq!(r.errors.len(), 1);
        assert!(
            r.errors[0].contains("mesh.connectTimeout"),
            "{:?}",
            r.errors
        );
        assert!(r.errors[0].starts_with("mesh.yaml: "), "{:?}", r.errors);
        // The fix clears the error and takes effect.
        let r = s.update("connectTimeout: 2s\n", None).unwrap();
        assert!(r.errors.is_empty());
        assert_eq!(r.changes.len(), 2);
    }

    #[test]
    fn removal_retracts_what_was_in_effect() {
        let mut s = state();
        s.update("connectTimeout: 1s\n", None).unwrap();
        let r = s.remove().unwrap();
        assert_eq!(r.changes.len(), 1);
        assert_eq!(r.changes[0].1, -1);
        assert!(s.remove().is_none());
    }
}
