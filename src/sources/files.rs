//! The file-directory source: reads every `*.yaml`/`*.yml` file under a directory (dot
//! files and dot directories are skipped), and on each change of the directory re-reads
//! files whose bytes changed. The watcher re-reads only the files it was told about (a
//! directory event, or an unknown directory, makes it list everything again), and a file
//! whose metadata is unchanged since a read made when it had been stable for two seconds
//! is not read again; the records of changed files are diffed file by file (unless an
//! object is defined in two files), so a change costs what the changed files hold, not
//! what the directory holds. It keeps, per object, the last valid version: a document
//! that turns invalid keeps its previous version in effect, and a file with a document
//! too broken to identify keeps every object it held before.

use super::objects::{Object, ObjectSet};
use super::{Sink, Source};
use crate::config::{parse_file_reusing, DocError, Document, FileContents, Invalid, Level, Parsed};
use crate::input::SourceName;
use dataflows::model::{ConfigKey, MeshConfig, Record};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

#[derive(Default)]
struct FileState {
    /// What the file's metadata said when it was read, if it had been stable for
    /// [`STABLE_AFTER`] by then: while the metadata still says the same, the bytes are too.
    stable: Option<FileMeta>,
    hash: u64,
    /// The objects of this file in effect: the last valid version of each.
    objects: BTreeMap<ConfigKey, Vec<Record>>,
    errors: Vec<DocError>,
    /// What the analysis of the file's valid objects says (`file:line: level: …`).
    findings: Vec<(Level, String)>,
    /// Documents of kinds meshflow does not serve: line, kind.
    unserved: Vec<(usize, String)>,
    /// The line each valid object starts at.
    lines: BTreeMap<ConfigKey, usize>,
    /// What each document of the file's last read held, by the hash of its text: a
    /// document read again unchanged is not parsed again ([`Memo`]).
    memos: HashMap<u64, Memo>,
}

/// What a document read before held, enough to stand for its reading when its text comes
/// back unchanged: an object's key (its records are the file's `objects` entry) and
/// findings, or a kind not served, or nothing meshflow uses. Documents that failed are not
/// kept, nor objects defined twice in the file (their entry may be the other copy's).
#[derive(Clone, Debug)]
enum Memo {
    Object {
        key: ConfigKey,
        findings: Vec<crate::config::Finding>,
    },
    Unserved(String),
    Other,
}

/// The state of a watched directory, diffed on every rescan.
pub struct FileSource {
    dir: PathBuf,
    mesh: MeshConfig,
    files: BTreeMap<PathBuf, FileState>,
    /// The objects in effect (what has been emitted), with the file each comes from.
    objects: ObjectSet,
    /// Objects defined in more than one file: the later files' copies are ignored.
    duplicates: Vec<String>,
    /// Links to directories already read, found by the last full rescan.
    loops: Vec<String>,
    /// Per object, the number of files defining it (to know when a rescan may be applied
    /// file by file: when no object is defined twice).
    defined_in: HashMap<ConfigKey, usize>,
    /// The directories listed by the last full rescan.
    dirs: std::collections::HashSet<PathBuf>,
    /// Where the last valid versions of objects whose files are now invalid are kept across
    /// restarts (`serve --state-file`), and what was last written there.
    state: Option<StateFile>,
}

/// The objects held over from an earlier valid version, by file: what a restart needs to
/// keep them in effect while their files stay invalid.
type HeldOver = BTreeMap<PathBuf, BTreeMap<ConfigKey, Vec<Record>>>;

struct StateFile {
    path: PathBuf,
    /// Read at start, taken file by file on the first read of each file.
    restored: HeldOver,
    written: HeldOver,
}

/// The result of one rescan: the record changes since the previous one, the objects behind
/// them, and every problem currently found in the directory.
pub use super::Report as Rescan;

/// Largest config file read (a Kubernetes object is at most 1.5 MiB in etcd).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A file not modified for this long before it was read is not re-read while its metadata
/// is unchanged. Younger files are always re-read: file timestamps come from a coarse clock,
/// so two writes close together may leave the same metadata (the "racy git" problem).
const STABLE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Identity, size and change times of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileMeta {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn file_meta(path: &Path) -> Option<FileMeta> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(FileMeta {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    })
}

/// `meta` if the file had not changed for [`STABLE_AFTER`] at `read_at_ns`.
fn stable_meta(meta: Option<FileMeta>, read_at_ns: i128) -> Option<FileMeta> {
    let m = meta?;
    let newest = m.mtime_ns.max(m.ctime_ns);
    (read_at_ns - newest >= STABLE_AFTER.as_nanos() as i128).then_some(m)
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

fn hash_bytes(b: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(b)
}

/// The memos of a file just read, from its documents' hashes by starting line: what each
/// valid, unique object, kind not served or other document held. Documents in error, and
/// objects defined twice in the file, get none (they are read again next time).
fn memos_of(parsed: &FileContents, hashes: &[(usize, u64)]) -> HashMap<u64, Memo> {
    let mut count: HashMap<&ConfigKey, usize> = HashMap::new();
    for (_, p) in &parsed.objects {
        *count.entry(&p.key).or_default() += 1;
    }
    let objects: HashMap<usize, &Parsed> = parsed.objects.iter().map(|(l, p)| (*l, p)).collect();
    let unserved: HashMap<usize, &String> = parsed.unserved.iter().map(|(l, k)| (*l, k)).collect();
    let failed: std::collections::HashSet<usize> = parsed.errors.iter().map(|e| e.line).collect();
    // A List's items all start at its line: such a document is read again whole.
    let mut at_line: HashMap<usize, usize> = HashMap::new();
    let lines = parsed.objects.iter().map(|(l, _)| *l);
    let lines = lines.chain(parsed.unserved.iter().map(|(l, _)| *l));
    for l in lines.chain(parsed.errors.iter().map(|e| e.line)) {
        *at_line.entry(l).or_default() += 1;
    }
    let mut memos = HashMap::new();
    for (line, h) in hashes {
        if at_line.get(line).copied().unwrap_or(0) > 1 {
            continue;
        }
        let memo = if let Some(p) = objects.get(line) {
            if count.get(&p.key).copied().unwrap_or(0) > 1 {
                continue;
            }
            Memo::Object {
                key: p.key.clone(),
                findings: p.findings.clone(),
            }
        } else if let Some(kind) = unserved.get(line) {
            Memo::Unserved((*kind).clone())
        } else if failed.contains(line) {
            continue;
        } else {
            Memo::Other
        };
        memos.insert(*h, memo);
    }
    memos
}

/// What one listing of the directory found.
#[derive(Default)]
struct Listing {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    /// Each real directory (device, inode) once: a symlink to a directory already listed (a
    /// loop such as `a -> .`, or a second link) is not followed again.
    seen: std::collections::HashSet<(u64, u64)>,
    /// One line per link not followed.
    loops: Vec<String>,
}

fn yaml_files(dir: &Path, listing: &mut Listing) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    if !listing.seen.insert((meta.dev(), meta.ino())) {
        listing.loops.push(format!(
            "{}: a link to a directory already read (a symlink loop, or a second link); not followed",
            dir.display()
        ));
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    listing.dirs.push(dir.to_path_buf());
    let mut entries: Vec<_> = entries.flatten().collect();
    // Sorted, so the first link to a directory is the one followed, on every rescan.
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
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
            yaml_files(&path, listing);
        } else if matches!(
            path.extension().and_then(|x| x.to_str()),
            Some("yaml" | "yml")
        ) {
            listing.files.push(path);
        }
    }
}

impl FileSource {
    pub fn new(dir: impl Into<PathBuf>, mesh: MeshConfig) -> Self {
        FileSource {
            dir: dir.into(),
            mesh,
            files: BTreeMap::new(),
            objects: ObjectSet::default(),
            duplicates: Vec::new(),
            loops: Vec::new(),
            defined_in: HashMap::new(),
            dirs: Default::default(),
            state: None,
        }
    }

    /// Keeps the last valid version of objects whose files are invalid across restarts in
    /// `path` (JSON, rewritten when that set changes). An unreadable state file is an error,
    /// not a silent loss.
    pub fn with_state_file(mut self, path: impl Into<PathBuf>) -> Result<Self, String> {
        let path = path.into();
        let restored: HeldOver = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Vec<(PathBuf, ConfigKey, Vec<Record>)>>(&bytes)
                .map_err(|e| format!("state file {}: {e}", path.display()))?
                .into_iter()
                .fold(HeldOver::new(), |mut m, (file, key, records)| {
                    m.entry(file).or_default().insert(key, records);
                    m
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HeldOver::new(),
            Err(e) => return Err(format!("state file {}: {e}", path.display())),
        };
        self.state = Some(StateFile {
            path,
            written: restored.clone(),
            restored,
        });
        Ok(self)
    }

    /// What is held over now: objects of each file that its current errors name (or all of
    /// a file's objects when a document could not even be identified).
    fn held_over(&self) -> HeldOver {
        let mut out = HeldOver::new();
        for (path, f) in &self.files {
            let unidentified = f.errors.iter().any(|e| e.invalid.object.is_none());
            let named: std::collections::BTreeSet<&ConfigKey> = f
                .errors
                .iter()
                .filter_map(|e| e.invalid.object.as_ref())
                .collect();
            let kept: BTreeMap<ConfigKey, Vec<Record>> = f
                .objects
                .iter()
                .filter(|(k, _)| unidentified || named.contains(k))
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect();
            if !kept.is_empty() {
                out.insert(path.clone(), kept);
            }
        }
        out
    }

    /// Rewrites the state file if what is held over changed (write, then rename: a crash
    /// leaves the old file or the new one, never half of one). It may hold the private keys
    /// of held-over Secrets: see [`write_private`].
    fn save_state(&mut self) {
        if self.state.is_none() {
            return;
        }
        let now = self.held_over();
        let Some(state) = self.state.as_mut() else {
            return;
        };
        if now == state.written {
            return;
        }
        let rows: Vec<(&PathBuf, &ConfigKey, &Vec<Record>)> = now
            .iter()
            .flat_map(|(f, objs)| objs.iter().map(move |(k, r)| (f, k, r)))
            .collect();
        let written = serde_json::to_vec(&rows)
            .map_err(|e| e.to_string())
            .and_then(|b| write_private(&state.path, &b));
        match written {
            Ok(()) => state.written = now,
            Err(e) => tracing::warn!(
                file = %state.path.display(),
                error = %e,
                "could not write the state file: a restart now would lose held-over objects"
            ),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Re-reads the directory and returns the record changes since the previous rescan.
    pub fn rescan(&mut self) -> Rescan {
        let mut listing = Listing::default();
        yaml_files(&self.dir, &mut listing);
        let mut paths = listing.files;
        paths.sort();
        self.dirs = listing.dirs.into_iter().collect();
        self.loops = listing.loops;
        let mut old_files = std::mem::take(&mut self.files);
        let mut next: BTreeMap<PathBuf, FileState> = BTreeMap::new();
        // Files whose objects may have changed, with their objects before.
        let mut changed: Vec<(PathBuf, BTreeMap<ConfigKey, Vec<Record>>)> = Vec::new();
        for path in paths {
            let old = old_files.remove(&path);
            self.read_one(path, old, &mut next, &mut changed);
        }
        // What is left of the previous files is gone.
        for (path, old) in old_files {
            changed.push((path, old.objects));
        }
        self.files = next;
        self.finish(changed)
    }

    /// Re-reads only `paths` (what a file watcher reported) and returns the record changes
    /// since the previous rescan: the same as [`FileSource::rescan`] when every other file is
    /// unchanged. `None` (nothing done) when the paths call for a full rescan: a directory
    /// appeared, vanished or was renamed, or a path lies outside the directory.
    pub fn rescan_paths(&mut self, paths: &[PathBuf]) -> Option<Rescan> {
        let mut wanted: Vec<PathBuf> = Vec::new();
        for path in paths {
            let rel = path.strip_prefix(&self.dir).ok()?;
            let exists = std::fs::metadata(path);
            match exists {
                Ok(m) if m.is_dir() => return None,
                Err(_) if self.dirs.contains(path) => return None,
                _ => {}
            }
            let hidden = rel
                .components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
            let yaml = matches!(
                path.extension().and_then(|x| x.to_str()),
                Some("yaml" | "yml")
            );
            if hidden || !yaml {
                continue;
            }
            // Under a directory we have not listed (created since): list it all.
            if !path.parent().is_some_and(|d| self.dirs.contains(d)) {
                return None;
            }
            wanted.push(path.clone());
        }
        wanted.sort();
        wanted.dedup();
        let mut next: BTreeMap<PathBuf, FileState> = BTreeMap::new();
        let mut changed: Vec<(PathBuf, BTreeMap<ConfigKey, Vec<Record>>)> = Vec::new();
        for path in wanted {
            let old = self.files.remove(&path);
            if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                self.read_one(path, old, &mut next, &mut changed);
            } else if let Some(old) = old {
                changed.push((path, old.objects));
            }
        }
        self.files.extend(next);
        Some(self.finish(changed))
    }

    /// Reads one file into `next`; if its objects may have changed, records what they were
    /// in `changed`.
    fn read_one(
        &mut self,
        path: PathBuf,
        old: Option<FileState>,
        next: &mut BTreeMap<PathBuf, FileState>,
        changed: &mut Vec<(PathBuf, BTreeMap<ConfigKey, Vec<Record>>)>,
    ) {
        let meta = file_meta(&path);
        let old = match old {
            // Stable and untouched since it was read: the same bytes.
            Some(o) if o.stable.is_some() && o.stable == meta => {
                next.insert(path, o);
                return;
            }
            other => other,
        };
        if let Some(len) = meta.map(|m| m.len).filter(|l| *l > MAX_FILE_BYTES) {
            // Not read at all; what the file held before stays in effect.
            let objects = old.map(|o| o.objects).unwrap_or_default();
            let invalid = Invalid::field(
                "",
                format!("the file is {len} bytes, more than {MAX_FILE_BYTES}; not read"),
            );
            let errors = vec![DocError {
                file: path.clone(),
                line: 1,
                invalid,
            }];
            let state = FileState {
                stable: None,
                hash: 0,
                objects,
                errors,
                ..Default::default()
            };
            next.insert(path, state);
            return;
        }
        let read_at = now_ns();
        let Ok(bytes) = std::fs::read(&path) else {
            // Vanished between listing and reading, or unreadable: keep what it held
            // until a rescan can read it or sees it gone.
            if let Some(old) = old {
                next.insert(path, old);
            }
            return;
        };
        let hash = hash_bytes(&bytes);
        let stable = stable_meta(meta, read_at);
        let old = match old {
            Some(mut o) if o.hash == hash => {
                o.stable = stable;
                next.insert(path, o);
                return;
            }
            other => other,
        };
        let text = String::from_utf8_lossy(&bytes);
        // Documents whose text the last read had are taken from it; the rest are read.
        let mut hashes: Vec<(usize, u64)> = Vec::new();
        let parsed = parse_file_reusing(&path, &text, &self.mesh, |line, doc| {
            let h = hash_bytes(doc.as_bytes());
            hashes.push((line, h));
            let o = old.as_ref()?;
            Some(match o.memos.get(&h)? {
                Memo::Object { key, findings } => Document::Object(Parsed {
                    key: key.clone(),
                    records: o.objects.get(key)?.clone(),
                    findings: findings.clone(),
                }),
                Memo::Unserved(kind) => Document::Unserved(kind.clone()),
                Memo::Other => Document::Other,
            })
        });
        let memos = memos_of(&parsed, &hashes);
        let mut objects: BTreeMap<ConfigKey, Vec<Record>> = BTreeMap::new();
        let mut parsed = parsed;
        let mut findings = Vec::new();
        let mut lines = BTreeMap::new();
        for (line, p) in parsed.objects {
            lines.entry(p.key.clone()).or_insert(line);
            for (level, text) in p.finding_lines() {
                findings.push((level, format!("{}:{line}: {text}", path.display())));
            }
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
        // On a file's first read since start, what the state file held over for it stands
        // for its earlier version.
        let old_objects = match old {
            Some(o) => o.objects,
            None => self
                .state
                .as_mut()
                .and_then(|s| s.restored.remove(&path))
                .unwrap_or_default(),
        };
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
            super::log_rejection(e);
        }
        for (level, line) in &findings {
            super::log_finding(*level, line);
        }
        changed.push((path.clone(), old_objects));
        next.insert(
            path,
            FileState {
                stable,
                hash,
                objects,
                errors: parsed.errors,
                findings,
                unserved: parsed.unserved,
                lines,
                memos,
            },
        );
    }

    /// Turns the files whose objects may have changed into record changes.
    fn finish(&mut self, changed: Vec<(PathBuf, BTreeMap<ConfigKey, Vec<Record>>)>) -> Rescan {
        let rescan = self.diff(changed);
        self.save_state();
        rescan
    }

    /// The record changes of [`FileSource::finish`].
    fn diff(&mut self, changed: Vec<(PathBuf, BTreeMap<ConfigKey, Vec<Record>>)>) -> Rescan {
        if changed.is_empty() {
            return Rescan {
                changes: Vec::new(),
                described: Vec::new(),
                errors: self.errors(),
                analysis: self.analysis_lines(),
                seen: None,
            };
        }
        for (path, before) in &changed {
            for key in before.keys() {
                if let Some(n) = self.defined_in.get_mut(key) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.defined_in.remove(key);
                    }
                }
            }
            if let Some(now) = self.files.get(path) {
                for key in now.objects.keys() {
                    *self.defined_in.entry(key.clone()).or_default() += 1;
                }
            }
        }
        // File by file, unless an object is (or was) defined in more than one file.
        let twice = |key: &ConfigKey| self.defined_in.get(key).copied().unwrap_or(0) > 1;
        let file_by_file = self.duplicates.is_empty()
            && changed.iter().all(|(path, before)| {
                before.keys().all(|k| !twice(k))
                    && self
                        .files
                        .get(path)
                        .is_none_or(|now| now.objects.keys().all(|k| !twice(k)))
            });
        let diff = if file_by_file {
            // Every removal before any insertion, so an object moving between files (a
            // rename) ends with its new file.
            let mut updates: Vec<(ConfigKey, Option<Object>)> = Vec::new();
            for (_, before) in &changed {
                updates.extend(before.keys().map(|k| (k.clone(), None)));
            }
            for (path, _) in &changed {
                if let Some(now) = self.files.get(path) {
                    updates.extend(
                        now.objects
                            .iter()
                            .map(|(k, records)| (k.clone(), Some(object(path, records)))),
                    );
                }
            }
            self.objects.update(updates)
        } else {
            let all = self.union();
            self.objects.replace_all(all)
        };
        Rescan {
            changes: diff.changes,
            described: diff.described,
            errors: self.errors(),
            analysis: self.analysis_lines(),
            seen: None,
        }
    }

    /// The objects of all files; an object defined twice keeps its first definition, and
    /// the later copies are reported.
    fn union(&mut self) -> HashMap<ConfigKey, Object> {
        let mut all: HashMap<ConfigKey, Object> = HashMap::new();
        let mut duplicates = Vec::new();
        for (path, state) in &self.files {
            for (key, records) in &state.objects {
                if let Some(first) = all.get(key) {
                    duplicates.push(format!(
                        "{}: {} {}/{} is also defined in {}; this copy is ignored",
                        path.display(),
                        key.kind,
                        key.namespace,
                        key.name,
                        first.origin
                    ));
                    continue;
                }
                all.insert(key.clone(), object(path, records));
            }
        }
        self.duplicates = duplicates;
        all
    }

    /// Every current problem: rejected documents and duplicate objects.
    pub fn errors(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .files
            .values()
            .flat_map(|f| f.errors.iter().map(|e| e.to_string()))
            .collect();
        out.extend(self.duplicates.iter().cloned());
        out.extend(self.loops.iter().cloned());
        out
    }
}

impl FileSource {
    /// What analysis says of the objects in effect: fields not translated, parts of objects
    /// not generated (errors first), and each kind not served once, with where it is.
    /// Where an object of the directory is defined (`file:line`), for messages about it.
    pub fn location(&self, key: &ConfigKey) -> Option<String> {
        self.files.iter().find_map(|(path, f)| {
            f.lines
                .get(key)
                .map(|line| format!("{}:{line}", path.display()))
        })
    }

    pub fn analysis(&self) -> Vec<(Level, String)> {
        let mut out: Vec<(Level, String)> = self
            .files
            .values()
            .flat_map(|f| f.findings.iter().cloned())
            .collect();
        let mut unserved: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (path, f) in &self.files {
            for (line, kind) in &f.unserved {
                unserved
                    .entry(kind)
                    .or_default()
                    .push(format!("{}:{line}", path.display()));
            }
        }
        for (kind, places) in unserved {
            out.push((
                Level::Warning,
                format!(
                    "warning: kind {kind} is not served by meshflow; {} object(s) ignored: {}",
                    places.len(),
                    places.join(", ")
                ),
            ));
        }
        out.sort_by_key(|(level, _)| *level);
        out
    }

    fn analysis_lines(&self) -> Vec<String> {
        self.analysis().into_iter().map(|(_, l)| l).collect()
    }
}

/// How long a burst of file events may take to settle before the directory is re-read.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(5);

impl Source for FileSource {
    fn name(&self) -> SourceName {
        "files"
    }

    fn run(self: Box<Self>, mut sink: Sink) -> Result<(), String> {
        let dir = self.dir.display().to_string();
        watch(*self, SETTLE, |scan| sink.send(scan))
            .map_err(|e| format!("watching the config directory {dir}: {e}"))
    }
}

/// An object of the file at `path`.
fn object(path: &Path, records: &[Record]) -> Object {
    Object {
        records: records.to_vec(),
        origin: path.display().to_string(),
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
    let mut errors_before: (Vec<String>, Vec<String>) = Default::default();
    let mut first = true;
    // The paths reported since the last rescan; `None`: rescan everything.
    let mut reported: Option<Vec<PathBuf>> = None;
    // When the first event of the burst being read arrived.
    let mut seen: Option<std::time::Instant> = None;
    loop {
        let mut scan = match reported.take() {
            Some(paths) => source
                .rescan_paths(&paths)
                .unwrap_or_else(|| source.rescan()),
            None => source.rescan(),
        };
        scan.seen = seen.take();
        let said = (scan.errors.clone(), scan.analysis.clone());
        if first || !scan.changes.is_empty() || said != errors_before {
            errors_before = said;
            first = false;
            if !on_change(scan) {
                return Ok(());
            }
        }
        // Wait for the next event that can change content, then let a burst settle. Our
        // own reads raise open/read/close events; counting them would rescan forever.
        let mut paths = Some(Vec::new());
        let note = |ev: notify::Result<notify::Event>, paths: &mut Option<Vec<PathBuf>>| match ev {
            Err(e) => {
                tracing::warn!(error = %e, "file watch error");
                *paths = None;
                true
            }
            Ok(ev) if changes_content(&ev) => {
                if ev.paths.is_empty() || ev.need_rescan() {
                    *paths = None;
                } else if let Some(p) = paths.as_mut() {
                    p.extend(ev.paths);
                }
                true
            }
            Ok(_) => false,
        };
        loop {
            match rx.recv() {
                Ok(ev) => {
                    if note(ev, &mut paths) {
                        seen = Some(std::time::Instant::now());
                        break;
                    }
                }
                Err(_) => return Ok(()),
            }
        }
        while let Ok(ev) = rx.recv_timeout(settle) {
            note(ev, &mut paths);
        }
        reported = paths;
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

/// Writes `bytes` to `path` as only its owner may read it (0600): into a new file of a
/// random name beside it, created exclusively and never through a symlink (a link planted
/// at a guessable temporary path is not followed), then renamed over `path`.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| format!("no randomness for a temporary name: {e}"))?;
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{suffix}.tmp"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(|e| format!("{}: {e}", path.display()))
}

/// `O_NOFOLLOW` (Linux): with `create_new` (`O_EXCL`) a symlink at the path already fails,
/// this says so twice.
const fn libc_nofollow() -> i32 {
    0o400000
}

#[cfg(test)]
mod private_write_tests {
    use super::write_private;
    use std::os::unix::fs::PermissionsExt;

    /// The state file is 0600 whatever the umask, replaces the old one, and a symlink
    /// planted at the old fixed temporary name (`state.tmp`) is not followed.
    #[test]
    fn the_state_file_is_private_and_follows_no_link() {
        let dir = std::env::temp_dir().join(format!("meshflow-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("state.tmp")).unwrap();
        let state = dir.join("state");
        std::fs::write(&state, "old").unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&state, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "new");
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && n != "state.tmp")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
