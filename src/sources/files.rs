//! The file-directory source: reads every `*.yaml`/`*.yml` file under a directory (dot
//! files and dot directories are skipped), and on each change of the directory re-reads
//! files whose bytes changed. It keeps, per object, the last valid version: a document
//! that turns invalid keeps its previous version in effect, and a file with a document
//! too broken to identify keeps every object it held before.

use crate::model::{parse_file, DocError, Invalid};
use crate::runtime::changes::{describe, InputChange};
use dataflows::model::{ConfigKey, MeshConfig, Record};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

#[derive(Default)]
struct FileState {
    hash: u64,
    /// The objects of this file in effect: the last valid version of each.
    objects: BTreeMap<ConfigKey, Vec<Record>>,
    errors: Vec<DocError>,
}

/// The state of a watched directory, diffed on every rescan.
pub struct FileSource {
    dir: PathBuf,
    mesh: MeshConfig,
    files: BTreeMap<PathBuf, FileState>,
    /// The records currently emitted, with multiplicity.
    emitted: BTreeMap<Record, isize>,
    /// Objects defined in more than one file: the later files' copies are ignored.
    duplicates: Vec<String>,
    /// The file each object in effect comes from.
    owners: HashMap<ConfigKey, PathBuf>,
}

/// The result of one rescan.
#[derive(Debug, Default)]
pub struct Rescan {
    pub changes: Vec<(Record, isize)>,
    /// The objects behind `changes`: kind/namespace/name, insert/update/delete, file.
    pub described: Vec<InputChange>,
    /// Every problem currently found in the directory.
    pub errors: Vec<String>,
}

fn hash_bytes(b: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(b)
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        // Follow symlinks: Kubernetes ConfigMap volumes are directories of symlinks.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            yaml_files(&path, out);
        } else if matches!(
            path.extension().and_then(|x| x.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

impl FileSource {
    pub fn new(dir: impl Into<PathBuf>, mesh: MeshConfig) -> Self {
        FileSource {
            dir: dir.into(),
            mesh,
            files: BTreeMap::new(),
            emitted: BTreeMap::new(),
            duplicates: Vec::new(),
            owners: HashMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Re-reads the directory and returns the record changes since the previous rescan.
    pub fn rescan(&mut self) -> Rescan {
        let mut paths = Vec::new();
        yaml_files(&self.dir, &mut paths);
        paths.sort();
        let mut next: BTreeMap<PathBuf, FileState> = BTreeMap::new();
        for path in paths {
            let Ok(bytes) = std::fs::read(&path) else {
                // Vanished between listing and reading, or unreadable: keep what it held
                // until a rescan can read it or sees it gone.
                if let Some(old) = self.files.remove(&path) {
                    next.insert(path, old);
                }
                continue;
            };
            let hash = hash_bytes(&bytes);
            let old = self.files.remove(&path);
            if let Some(old) = old.as_ref().filter(|o| o.hash == hash) {
                next.insert(
                    path,
                    FileState {
                        hash,
                        objects: old.objects.clone(),
                        errors: old.errors.clone(),
                    },
                );
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            let parsed = parse_file(&path, &text, &self.mesh);
            let mut objects: BTreeMap<ConfigKey, Vec<Record>> = BTreeMap::new();
            let mut parsed = parsed;
            for (line, p) in parsed.objects {
                if objects.contains_key(&p.key) {
                    parsed.errors.push(DocError {
                        file: path.clone(),
                        line,
                        invalid: Invalid {
                            object: Some(p.key),
                            field: String::new(),
                            message: "defined twice in this file; this copy is ignored".into(),
                        },
                    });
                    continue;
                }
                objects.insert(p.key, p.records);
            }
            let old_objects = old.map(|o| o.objects).unwrap_or_default();
            let unidentified = parsed.errors.iter().any(|e| e.invalid.object.is_none());
            // The last valid version of an invalid object stays in effect.
            for key in parsed
                .errors
                .iter()
                .filter_map(|e| e.invalid.object.as_ref())
            {
                if let Some(prev) = old_objects.get(key) {
                    objects.entry(key.clone()).or_insert_with(|| prev.clone());
                }
            }
            if unidentified {
                // A document we cannot identify may be any of the file's previous objects.
                for (key, prev) in &old_objects {
                    objects.entry(key.clone()).or_insert_with(|| prev.clone());
                }
            }
            for e in &parsed.errors {
                tracing::warn!(error = %e, "rejected config");
            }
            next.insert(
                path,
                FileState {
                    hash,
                    objects,
                    errors: parsed.errors,
                },
            );
        }
        self.files = next;

        // The union of all files; an object defined twice keeps its first definition.
        let mut owner: HashMap<&ConfigKey, &Path> = HashMap::new();
        let mut wanted: BTreeMap<Record, isize> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for (path, state) in &self.files {
            for (key, records) in &state.objects {
                if let Some(first) = owner.get(key) {
                    duplicates.push(format!(
                        "{}: {:?} {}/{} is also defined in {}; this copy is ignored",
                        path.display(),
                        key.kind,
                        key.namespace,
                        key.name,
                        first.display()
                    ));
                    continue;
                }
                owner.insert(key, path);
                for r in records {
                    *wanted.entry(r.clone()).or_default() += 1;
                }
            }
        }
        self.duplicates = duplicates;
        let owners: HashMap<ConfigKey, PathBuf> = owner
            .into_iter()
            .map(|(k, p)| (k.clone(), p.to_path_buf()))
            .collect();
        let mut changes = Vec::new();
        for (r, n) in &wanted {
            let had = self.emitted.get(r).copied().unwrap_or(0);
            if *n != had {
                changes.push((r.clone(), n - had));
            }
        }
        for (r, had) in &self.emitted {
            if !wanted.contains_key(r) {
                changes.push((r.clone(), -had));
            }
        }
        self.emitted = wanted;
        let described = describe(
            &changes,
            |k| self.owners.contains_key(k),
            |k| owners.contains_key(k),
            |k| {
                owners
                    .get(k)
                    .or_else(|| self.owners.get(k))
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            },
        );
        self.owners = owners;
        Rescan {
            changes,
            described,
            errors: self.errors(),
        }
    }

    /// Every current problem: rejected documents and duplicate objects.
    pub fn errors(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .files
            .values()
            .flat_map(|f| f.errors.iter().map(|e| e.to_string()))
            .collect();
        out.extend(self.duplicates.iter().cloned());
        out
    }
}

/// Watches the directory and calls `on_change` with every non-empty rescan, starting with
/// the initial read. Runs until `on_change` returns false. Rescans are coalesced: events
/// arriving within `settle` of each other cause one rescan.
pub fn watch(
    mut source: FileSource,
    settle: std::time::Duration,
    mut on_change: impl FnMut(Rescan) -> bool,
) -> notify::Result<()> {
    use notify::{RecursiveMode, Watcher};
    let (tx, rx) = std::sync::mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |ev| {
        let _ = tx.send(ev);
    })?;
    watcher.watch(source.dir(), RecursiveMode::Recursive)?;
    let mut errors_before: Vec<String> = Vec::new();
    let mut first = true;
    loop {
        let scan = source.rescan();
        if first || !scan.changes.is_empty() || scan.errors != errors_before {
            errors_before = scan.errors.clone();
            first = false;
            if !on_change(scan) {
                return Ok(());
            }
        }
        // Wait for the next event that can change content, then let a burst settle. Our
        // own reads raise open/read/close events; counting them would rescan forever.
        loop {
            match rx.recv() {
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "file watch error");
                    break;
                }
                Ok(Ok(ev)) if changes_content(&ev) => break,
                Ok(Ok(_)) => {}
                Err(_) => return Ok(()),
            }
        }
        while rx.recv_timeout(settle).is_ok() {}
    }
}

/// Whether a watch event may mean different bytes: not our own opens, reads and closes
/// after reading.
fn changes_content(ev: &notify::Event) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match ev.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}
