//! The file-directory source (`meshflow::sources::files`) on real temporary directories:
//! what each kind of edit turns into, record by record. A source must turn an unchanged
//! directory into no change at all, an edit into exactly the records it touches, and an
//! invalid edit into an error that leaves the last valid version in effect.

use dataflows::model::{ConfigKey, Kind, MeshConfig, Record, VirtualService};
use meshflow::sources::files::{watch, FileSource, Rescan};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// Routing config for `reviews`: a Service, a VirtualService (70/30 split) and a
/// DestinationRule. Every document starts with its `apiVersion:` line.
const ROUTING: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: default
spec:
  ports:
  - name: http
    port: 9080
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: default
spec:
  hosts:
  - reviews
  http:
  - route:
    - destination:
        host: reviews
        subset: v1
      weight: 70
    - destination:
        host: reviews
        subset: v2
      weight: 30
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: default
spec:
  host: reviews
  subsets:
  - name: v1
    labels:
      version: v1
  - name: v2
    labels:
      version: v2
";

/// The same objects as [`ROUTING`], with comments, blank lines, another indentation, flow
/// style, reordered keys and the documents in another order.
const ROUTING_REFORMATTED: &str = "\
# reviews routing, reformatted
---
# the destination rule first this time
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {namespace: default, name: reviews}   # flow style
spec:
    subsets:
    -   labels: {version: v1}
        name: v1

    -   name: v2
        labels:
            version: v2   # trailing comment
    host: reviews
---


apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
    namespace: default
    name: reviews
spec:
    http:
    -   route:
        -   weight: 70
            destination: {host: reviews, subset: v1}
        -   weight: 30
            destination: {subset: v2, host: reviews}
    hosts: [reviews]
---
kind: Service
apiVersion: v1
metadata:
  namespace: default
  name: reviews
spec:
  ports: [{port: 9080, name: http}]
# end
";

/// Workloads of `reviews`: two Pods and an EndpointSlice with their two addresses.
const WORKLOADS: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v1
  namespace: default
  labels: {app: reviews, version: v1}
status:
  podIP: 10.0.0.1
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v2
  namespace: default
  labels: {app: reviews, version: v2}
status:
  podIP: 10.0.0.2
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-abc12
  namespace: default
  labels:
    kubernetes.io/service-name: reviews
addressType: IPv4
ports:
- name: http
  port: 9080
endpoints:
- addresses: [10.0.0.1]
- addresses: [10.0.0.2]
";

/// A file with one Service, `ratings`.
const RATINGS: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: ratings
  namespace: default
spec:
  ports:
  - name: http
    port: 9080
";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A fresh, empty directory for one test under cargo's per-target temp dir.
fn test_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("file_source")
        .join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, text).unwrap();
}

/// Writes through a dot-file and a rename, as editors and `kubectl cp`-style tools do, so a
/// watcher never reads a half-written file.
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    write(&tmp, text);
    fs::rename(&tmp, path).unwrap();
}

fn source(dir: &Path) -> FileSource {
    FileSource::new(dir, MeshConfig::default())
}

/// A stable, readable identity of a record (what it is, not its whole content).
fn describe(r: &Record) -> String {
    match r {
        Record::Service(s) => format!("Service {}", s.hostname),
        Record::Endpoint(h, e) => format!("Endpoint {h} {}:{} ({})", e.ip, e.port, e.origin),
        Record::Workload(w) => format!("Workload {} {}", w.origin, w.ip),
        Record::VirtualService(v) => format!("VirtualService {}", v.key),
        Record::DestinationRule(d) => format!("DestinationRule {}", d.key),
        Record::Gateway(g) => format!("Gateway {}", g.key),
        Record::Sidecar(s) => format!("Sidecar {}", s.key),
        Record::Proxy(p) => format!("Proxy {}", p.id),
        Record::Secret(s) => format!("Secret {}", s.key),
        Record::Selection(h, s) => format!("Selection {h} ({})", s.origin),
        Record::Security(p) => format!("Security {}", p.key),
        Record::MtlsHold(h) => format!("MtlsHold {} {}", h.ip, h.workload),
        Record::GatewayApi(o) => format!("GatewayApi {}", o.key()),
        Record::Mesh(m) => format!("Mesh {:?}", m.origin),
    }
}

/// Changes as sorted `(description, diff)` pairs.
fn summary(changes: &[(Record, isize)]) -> Vec<(String, isize)> {
    let mut out: Vec<(String, isize)> = changes.iter().map(|(r, d)| (describe(r), *d)).collect();
    out.sort();
    out
}

fn sorted(mut changes: Vec<(Record, isize)>) -> Vec<(Record, isize)> {
    changes.sort();
    changes
}

/// 1-based number of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in text"))
        + 1
}

/// The line of the `apiVersion:` that opens the document of `kind`.
fn doc_line(text: &str, kind: &str) -> usize {
    line_of(text, &format!("kind: {kind}")) - 1
}

fn the_vs(changes: &[(Record, isize)], diff: isize) -> VirtualService {
    let found: Vec<&VirtualService> = changes
        .iter()
        .filter(|(_, d)| *d == diff)
        .filter_map(|(r, _)| {
            if let Record::VirtualService(v) = r {
                Some(v)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one VirtualService with diff {diff} in {:#?}",
        summary(changes)
    );
    found[0].clone()
}

fn weights(vs: &VirtualService) -> Vec<u32> {
    vs.http[0].route.iter().map(|d| d.weight).collect()
}

/// Every record currently in effect, as the sum of all rescans so far.
#[derive(Default)]
struct Net(BTreeMap<Record, isize>);

impl Net {
    fn apply(&mut self, changes: &[(Record, isize)]) {
        for (r, d) in changes {
            *self.0.entry(r.clone()).or_default() += d;
        }
        self.0.retain(|_, d| *d != 0);
        for (r, d) in &self.0 {
            assert!(*d == 1, "{} is in effect {d} times", describe(r));
        }
    }

    /// The descriptions of the records in effect, sorted.
    fn summary(&self) -> Vec<String> {
        let mut out: Vec<String> = self.0.keys().map(describe).collect();
        out.sort();
        out
    }
}

fn assert_no_errors(scan: &Rescan) {
    assert!(
        scan.errors.is_empty(),
        "unexpected errors: {:#?}",
        scan.errors
    );
}

// ---------------------------------------------------------------------------------------------
// (a) the initial read
// ---------------------------------------------------------------------------------------------

/// The first rescan of a directory inserts every record of every object in it, each exactly
/// once (+1), and nothing else: Services, VirtualServices, DestinationRules, Pods (as
/// workloads) and EndpointSlices (one record per address and port). A second rescan of the
/// untouched directory yields nothing.
#[test]
fn initial_read_inserts_all_records() {
    let dir = test_dir("initial_read");
    write(&dir.join("routing.yaml"), ROUTING);
    write(&dir.join("workloads.yml"), WORKLOADS);
    let mut src = source(&dir);
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert!(
        scan.changes.iter().all(|(_, d)| *d == 1),
        "{:#?}",
        summary(&scan.changes)
    );
    let names: Vec<String> = summary(&scan.changes).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        vec![
            "DestinationRule DestinationRule/default/reviews",
            "Endpoint reviews.default.svc.cluster.local 10.0.0.1:9080 (EndpointSlice/default/reviews-abc12)",
            "Endpoint reviews.default.svc.cluster.local 10.0.0.2:9080 (EndpointSlice/default/reviews-abc12)",
            "Service reviews.default.svc.cluster.local",
            "VirtualService VirtualService/default/reviews",
            "Workload Pod/default/reviews-v1 10.0.0.1",
            "Workload Pod/default/reviews-v2 10.0.0.2",
        ]
    );
    // The records carry the content, not just the identity.
    let vs = the_vs(&scan.changes, 1);
    assert_eq!(vs.hosts, vec!["reviews.default.svc.cluster.local"]);
    assert_eq!(weights(&vs), vec![70, 30]);

    let again = src.rescan();
    assert!(again.changes.is_empty(), "{:#?}", summary(&again.changes));
    assert_no_errors(&again);
}

// ---------------------------------------------------------------------------------------------
// (b) rewrites that change nothing
// ---------------------------------------------------------------------------------------------

/// Rewriting a file with identical bytes, or with only comments, whitespace, line endings,
/// indentation, flow/block style, key order and document order changed, yields no change
/// and no error: the source compares records, not bytes.
#[test]
fn rewrite_without_semantic_change_yields_nothing() {
    let dir = test_dir("rewrite_no_change");
    let file = dir.join("routing.yaml");
    write(&file, ROUTING);
    write(&dir.join("workloads.yaml"), WORKLOADS);
    let mut src = source(&dir);
    let first = src.rescan();
    assert_no_errors(&first);
    assert_eq!(first.changes.len(), 7);

    // Identical bytes, rewritten (a new inode via rename, and in place).
    write_atomic(&file, ROUTING);
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "identical rewrite: {:#?}",
        summary(&scan.changes)
    );
    assert_no_errors(&scan);
    write(&file, ROUTING);
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "identical in-place rewrite: {:#?}",
        summary(&scan.changes)
    );

    // Only a comment added at the end, and trailing blank lines.
    write(&file, &format!("{ROUTING}# a comment\n\n\n"));
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "comment added: {:#?}",
        summary(&scan.changes)
    );
    assert_no_errors(&scan);

    // Windows line endings.
    write(&file, &ROUTING.replace('\n', "\r\n"));
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "CRLF line endings: {:#?}",
        summary(&scan.changes)
    );
    assert_no_errors(&scan);

    // Comments, whitespace, style, key order and document order all changed.
    write(&file, ROUTING_REFORMATTED);
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "reformatted: {:#?}",
        summary(&scan.changes)
    );
    assert_no_errors(&scan);

    // And back.
    write(&file, ROUTING);
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "back to the original: {:#?}",
        summary(&scan.changes)
    );
    assert_no_errors(&scan);
}

/// `--- # comment` is a YAML document separator followed by a comment (common in generated
/// manifests). A file written that way from the start yields all its objects, without error;
/// adding such comments to a file's separators later is a comment-only change: no change, no
/// error.
#[test]
fn comment_after_document_separator_is_only_a_comment() {
    let commented = ROUTING.replace("---\n", "--- # next object\n");
    let dir = test_dir("separator_comment");
    let file = dir.join("routing.yaml");
    write(&file, &commented);
    let scan = source(&dir).rescan();
    assert_no_errors(&scan);
    assert_eq!(
        scan.changes.len(),
        3,
        "written with `--- # comment` from the start: {:#?}",
        summary(&scan.changes)
    );

    write(&file, ROUTING);
    let mut src = source(&dir);
    assert_eq!(src.rescan().changes.len(), 3);
    write(&file, &commented);
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "comments after ---: {:#?}",
        summary(&scan.changes)
    );
    assert_no_errors(&scan);
}

// ---------------------------------------------------------------------------------------------
// (c) an edit of one field
// ---------------------------------------------------------------------------------------------

/// Editing one field of a VirtualService (its weights) yields exactly two changes: the
/// retraction of the old VirtualService record and the insertion of the new one. The
/// Service and DestinationRule in the same file, and the other file, are untouched.
#[test]
fn one_field_edit_is_one_retraction_and_one_insertion() {
    let dir = test_dir("one_field_edit");
    let file = dir.join("routing.yaml");
    write(&file, ROUTING);
    write(&dir.join("workloads.yaml"), WORKLOADS);
    let mut src = source(&dir);
    let first = src.rescan();
    let old_vs = the_vs(&first.changes, 1);

    write(
        &file,
        &ROUTING
            .replace("weight: 70", "weight: 80")
            .replace("weight: 30", "weight: 20"),
    );
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(scan.changes.len(), 2, "{:#?}", summary(&scan.changes));
    let new_vs = the_vs(&scan.changes, 1);
    assert_eq!(
        the_vs(&scan.changes, -1),
        old_vs,
        "the retraction is exactly the record inserted before"
    );
    assert_eq!(weights(&new_vs), vec![80, 20]);
    assert_eq!(
        VirtualService {
            http: old_vs.http.clone(),
            ..new_vs.clone()
        },
        old_vs,
        "only the routes differ"
    );
}

// ---------------------------------------------------------------------------------------------
// (d) deleting and adding files
// ---------------------------------------------------------------------------------------------

/// Deleting a file retracts exactly the records of its objects (each -1) and nothing of the
/// other files; adding a file back inserts exactly its records; renaming a file changes
/// nothing; adding a new file inserts only its own, deleting it retracts only its own.
#[test]
fn delete_retracts_its_objects_and_add_inserts() {
    let dir = test_dir("delete_add");
    write(&dir.join("routing.yaml"), ROUTING);
    let workloads = dir.join("workloads.yaml");
    write(&workloads, WORKLOADS);
    let mut src = source(&dir);
    let first = src.rescan();
    let from_workloads: Vec<(Record, isize)> = first
        .changes
        .iter()
        .filter(|(r, _)| matches!(r, Record::Workload(_) | Record::Endpoint(..)))
        .cloned()
        .collect();
    assert_eq!(from_workloads.len(), 4);

    fs::remove_file(&workloads).unwrap();
    let scan = src.rescan();
    assert_no_errors(&scan);
    let expected: Vec<(Record, isize)> = from_workloads
        .iter()
        .map(|(r, _)| (r.clone(), -1))
        .collect();
    assert_eq!(
        sorted(scan.changes),
        sorted(expected),
        "deleting workloads.yaml"
    );

    write(&workloads, WORKLOADS);
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(
        sorted(scan.changes),
        sorted(from_workloads),
        "adding workloads.yaml back"
    );

    // A rename (here into a subdirectory) moves no object in or out of effect.
    fs::create_dir_all(dir.join("moved")).unwrap();
    fs::rename(&workloads, dir.join("moved/workloads.yaml")).unwrap();
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert!(
        scan.changes.is_empty(),
        "renaming a file: {:#?}",
        summary(&scan.changes)
    );

    write(&dir.join("ratings.yaml"), RATINGS);
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(
        summary(&scan.changes),
        vec![("Service ratings.default.svc.cluster.local".to_string(), 1)]
    );

    fs::remove_file(dir.join("ratings.yaml")).unwrap();
    let scan = src.rescan();
    assert_eq!(
        summary(&scan.changes),
        vec![("Service ratings.default.svc.cluster.local".to_string(), -1)]
    );
}

// ---------------------------------------------------------------------------------------------
// (e) an object that turns invalid
// ---------------------------------------------------------------------------------------------

/// A VirtualService edited so its weights add up to 110 is rejected with an error naming
/// `file:line` (the line its document starts on), the object (`VirtualService
/// default/reviews`) and the field (`spec.http[0].route`). The other documents of the same
/// file still apply (the DestinationRule edited in the same write changes), the last valid
/// VirtualService stays in effect (no retraction), also across further edits of the file while
/// it is still invalid. Fixing it applies the fixed version (-last valid, +fixed) and clears
/// the error.
#[test]
fn invalid_document_is_reported_and_last_valid_version_stays() {
    let dir = test_dir("invalid_document");
    let file = dir.join("routing.yaml");
    write(&file, ROUTING);
    let mut src = source(&dir);
    let first = src.rescan();
    assert_no_errors(&first);
    let valid_vs = the_vs(&first.changes, 1);

    // Break the VirtualService and, in the same write, add a subset to the DestinationRule.
    let broken = ROUTING.replace("weight: 30", "weight: 40").replace(
        "      version: v2\n",
        "      version: v2\n  - name: v3\n    labels:\n      version: v3\n",
    );
    write(&file, &broken);
    let scan = src.rescan();
    assert_eq!(scan.errors.len(), 1, "{:#?}", scan.errors);
    let err = &scan.errors[0];
    let at = format!(
        "{}:{}:",
        file.display(),
        doc_line(&broken, "VirtualService")
    );
    assert!(
        err.starts_with(&at),
        "error should start with {at:?}: {err}"
    );
    assert!(
        err.contains("VirtualService"),
        "error should name the kind: {err}"
    );
    assert!(
        err.contains("default/reviews"),
        "error should name namespace/name: {err}"
    );
    assert!(
        err.contains("spec.http[0].route"),
        "error should name the field: {err}"
    );
    assert!(err.contains("110"), "error should say what is wrong: {err}");
    let s = summary(&scan.changes);
    assert_eq!(
        s,
        vec![
            (
                "DestinationRule DestinationRule/default/reviews".to_string(),
                -1
            ),
            (
                "DestinationRule DestinationRule/default/reviews".to_string(),
                1
            ),
        ],
        "only the DestinationRule changes; the last valid VirtualService stays"
    );

    // Another edit of the file while the VirtualService is still invalid: still no retraction.
    write(&file, &broken.replace("port: 9080", "port: 9081"));
    let scan = src.rescan();
    assert_eq!(scan.errors.len(), 1, "{:#?}", scan.errors);
    assert_eq!(
        summary(&scan.changes),
        vec![
            ("Service reviews.default.svc.cluster.local".to_string(), -1),
            ("Service reviews.default.svc.cluster.local".to_string(), 1),
        ]
    );

    // Fix it with other weights: the new version replaces the last valid one.
    let fixed = broken
        .replace("port: 9080", "port: 9081")
        .replace("weight: 70", "weight: 60");
    write(&file, &fixed);
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(scan.changes.len(), 2, "{:#?}", summary(&scan.changes));
    assert_eq!(the_vs(&scan.changes, -1), valid_vs);
    assert_eq!(weights(&the_vs(&scan.changes, 1)), vec![60, 40]);
}

/// An object whose first version is invalid never enters the mesh: nothing is inserted for
/// it, the error names it, and once fixed it is inserted.
#[test]
fn object_invalid_from_the_start_is_inserted_once_fixed() {
    let dir = test_dir("invalid_from_start");
    let file = dir.join("routing.yaml");
    let broken = ROUTING.replace("weight: 30", "weight: 40");
    write(&file, &broken);
    let mut src = source(&dir);
    let scan = src.rescan();
    assert_eq!(scan.errors.len(), 1, "{:#?}", scan.errors);
    assert!(
        scan.errors[0].contains("default/reviews"),
        "{}",
        scan.errors[0]
    );
    assert_eq!(
        summary(&scan.changes),
        vec![
            (
                "DestinationRule DestinationRule/default/reviews".to_string(),
                1
            ),
            ("Service reviews.default.svc.cluster.local".to_string(), 1),
        ]
    );
    write(&file, ROUTING);
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(
        summary(&scan.changes),
        vec![(
            "VirtualService VirtualService/default/reviews".to_string(),
            1
        )]
    );
}

// ---------------------------------------------------------------------------------------------
// (f) a file that stops being YAML
// ---------------------------------------------------------------------------------------------

/// A file that becomes unparseable (a truncated flow mapping, then plain garbage) keeps every
/// object it held in effect (no change at all) and reports an error naming the file and a
/// line. Restoring the original content yields no change and clears the error; restoring an
/// edited version yields exactly that edit.
#[test]
fn unparseable_file_keeps_previous_objects() {
    let dir = test_dir("unparseable");
    let file = dir.join("routing.yaml");
    write(&file, ROUTING);
    write(&dir.join("workloads.yaml"), WORKLOADS);
    let mut src = source(&dir);
    let first = src.rescan();
    assert_no_errors(&first);

    // A half-edited file: the Service document's flow mapping is never closed.
    let half = ROUTING.replacen(
        "metadata:\n  name: reviews\n  namespace: default\n",
        "metadata: {name: reviews,\n",
        1,
    );
    write(&file, &half);
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "broken YAML must not retract anything: {:#?}",
        summary(&scan.changes)
    );
    assert_eq!(scan.errors.len(), 1, "{:#?}", scan.errors);
    assert!(
        scan.errors[0].starts_with(&format!("{}:1:", file.display())),
        "{}",
        scan.errors[0]
    );

    // Garbage.
    write(&file, "{{{ this: is: not yaml\n  - [\n");
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "garbage must not retract anything: {:#?}",
        summary(&scan.changes)
    );
    assert_eq!(scan.errors.len(), 1, "{:#?}", scan.errors);
    assert!(
        scan.errors[0].starts_with(&format!("{}:", file.display())),
        "{}",
        scan.errors[0]
    );

    // Restored: nothing changed, no error.
    write(&file, ROUTING);
    let scan = src.rescan();
    assert!(scan.changes.is_empty(), "{:#?}", summary(&scan.changes));
    assert_no_errors(&scan);

    // Broken again, then restored with an edit: exactly the edit.
    write(&file, "\t:\n");
    assert!(src.rescan().changes.is_empty());
    write(&file, &ROUTING.replace("port: 9080", "port: 9081"));
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(
        summary(&scan.changes),
        vec![
            ("Service reviews.default.svc.cluster.local".to_string(), -1),
            ("Service reviews.default.svc.cluster.local".to_string(), 1),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// (g) one object in two files
// ---------------------------------------------------------------------------------------------

/// The same object (kind/namespace/name) defined in two files is applied once (the copy in
/// the first file by path order) and reported naming both files; when the first file is
/// deleted, the other copy takes over (-first, +second) and the report goes away. Two
/// identical copies are applied once, not twice.
#[test]
fn same_object_in_two_files_is_applied_once_and_reported() {
    let dir = test_dir("duplicates");
    let a = dir.join("a.yaml");
    let b = dir.join("b.yaml");
    write(&a, ROUTING);
    write(
        &b,
        &ROUTING
            .replace("weight: 70", "weight: 50")
            .replace("weight: 30", "weight: 50"),
    );
    let mut src = source(&dir);
    let scan = src.rescan();
    assert!(
        scan.changes.iter().all(|(_, d)| *d == 1),
        "{:#?}",
        summary(&scan.changes)
    );
    assert_eq!(
        summary(&scan.changes),
        vec![
            (
                "DestinationRule DestinationRule/default/reviews".to_string(),
                1
            ),
            ("Service reviews.default.svc.cluster.local".to_string(), 1),
            (
                "VirtualService VirtualService/default/reviews".to_string(),
                1
            ),
        ]
    );
    assert_eq!(
        weights(&the_vs(&scan.changes, 1)),
        vec![70, 30],
        "the first file's copy wins"
    );
    let vs_errors: Vec<&String> = scan
        .errors
        .iter()
        .filter(|e| e.contains("VirtualService"))
        .collect();
    assert_eq!(vs_errors.len(), 1, "{:#?}", scan.errors);
    let e = vs_errors[0];
    assert!(
        e.contains("default/reviews") && e.contains("a.yaml") && e.contains("b.yaml"),
        "{e}"
    );
    assert_eq!(
        scan.errors.len(),
        3,
        "one report per duplicated object: {:#?}",
        scan.errors
    );

    // The first copy goes away: the second takes over.
    fs::remove_file(&a).unwrap();
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(scan.changes.len(), 2, "{:#?}", summary(&scan.changes));
    assert_eq!(weights(&the_vs(&scan.changes, -1)), vec![70, 30]);
    assert_eq!(weights(&the_vs(&scan.changes, 1)), vec![50, 50]);

    // Identical copies: once.
    write(
        &a,
        &ROUTING
            .replace("weight: 70", "weight: 50")
            .replace("weight: 30", "weight: 50"),
    );
    let scan = src.rescan();
    assert!(
        scan.changes.is_empty(),
        "an identical second copy adds nothing: {:#?}",
        summary(&scan.changes)
    );
    assert_eq!(scan.errors.len(), 3, "{:#?}", scan.errors);
    let mut net = Net::default();
    net.apply(&source(&dir).rescan().changes); // asserts multiplicity 1
    assert_eq!(net.0.len(), 3);
}

/// The same object defined twice in one file is the same mistake as in two files: one copy
/// is applied and the duplicate is reported with the file and the object.
#[test]
fn same_object_twice_in_one_file_is_reported() {
    let dir = test_dir("duplicates_one_file");
    let file = dir.join("routing.yaml");
    let second = ROUTING
        .replace("weight: 70", "weight: 50")
        .replace("weight: 30", "weight: 50");
    write(&file, &format!("{ROUTING}---\n{second}"));
    let mut src = source(&dir);
    let scan = src.rescan();
    assert_eq!(
        scan.changes.len(),
        3,
        "each object applied once: {:#?}",
        summary(&scan.changes)
    );
    assert!(scan.changes.iter().all(|(_, d)| *d == 1));
    let vs_errors: Vec<&String> = scan
        .errors
        .iter()
        .filter(|e| e.contains("VirtualService"))
        .collect();
    assert_eq!(
        vs_errors.len(),
        1,
        "the duplicate VirtualService must be reported: {:#?}",
        scan.errors
    );
    assert!(
        vs_errors[0].contains("routing.yaml") && vs_errors[0].contains("default/reviews"),
        "{}",
        vs_errors[0]
    );
}

// ---------------------------------------------------------------------------------------------
// (h) which files are read
// ---------------------------------------------------------------------------------------------

/// Only `*.yaml`/`*.yml` files are read, recursively: files in nested directories are read,
/// while dot files (`.hidden.yaml`, editor locks `.#x.yaml`), files in dot directories
/// (`.git/`, `.tmp/`), editor backups and swap files (`x.yaml~`, `x.yaml.swp`, `#x.yaml#`),
/// temp files (`x.yaml.tmp`) and other extensions are ignored. Creating and deleting ignored
/// files produces no change.
#[test]
fn dot_and_temp_files_are_ignored_and_nested_directories_read() {
    let dir = test_dir("which_files");
    write(&dir.join("routing.yaml"), ROUTING);
    write(&dir.join("nested/deeper/workloads.yml"), WORKLOADS);
    write(&dir.join("nested/ratings.yaml"), RATINGS);
    let other = RATINGS.replace("ratings", "ignored");
    for name in [
        ".hidden.yaml",
        ".#routing.yaml",
        ".routing.yaml.swp",
        "routing.yaml~",
        "routing.yaml.swp",
        "#routing.yaml#",
        "routing.yaml.tmp",
        "routing.yaml.bak",
        "README.md",
        "notes.txt",
        ".git/config.yaml",
        ".tmp/x.yaml",
        "nested/.cache/y.yaml",
        "nested/.z.yml",
    ] {
        write(&dir.join(name), &other);
    }
    let mut src = source(&dir);
    let scan = src.rescan();
    assert_no_errors(&scan);
    let names: Vec<String> = summary(&scan.changes).into_iter().map(|(n, _)| n).collect();
    assert!(
        !names.iter().any(|n| n.contains("ignored")),
        "an ignored file was read: {names:#?}"
    );
    assert!(
        names.contains(&"Service ratings.default.svc.cluster.local".to_string()),
        "{names:#?}"
    );
    assert!(
        names.contains(&"Workload Pod/default/reviews-v1 10.0.0.1".to_string()),
        "{names:#?}"
    );
    assert_eq!(scan.changes.len(), 8, "{names:#?}");

    // Churn in ignored files: nothing.
    write(&dir.join(".routing.yaml.swp"), ROUTING);
    write(&dir.join("routing.yaml~"), "garbage: [");
    fs::remove_file(dir.join(".hidden.yaml")).unwrap();
    write(&dir.join(".tmp/new.yaml"), &other);
    let scan = src.rescan();
    assert!(scan.changes.is_empty(), "{:#?}", summary(&scan.changes));
    assert_no_errors(&scan);

    // A new nested directory is read on the next rescan.
    write(
        &dir.join("later/a/b/c.yaml"),
        &RATINGS.replace("ratings", "details"),
    );
    let scan = src.rescan();
    assert_eq!(
        summary(&scan.changes),
        vec![("Service details.default.svc.cluster.local".to_string(), 1)]
    );
}

/// A Kubernetes ConfigMap volume (files as symlinks into `..data`, itself a symlink to a
/// timestamped dot directory) is read once per file, not twice, and an atomic update (the
/// `..data` symlink swapped to a new directory) yields exactly the edit.
#[test]
fn configmap_volume_layout_is_read_once_and_swaps_atomically() {
    use std::os::unix::fs::symlink;
    let dir = test_dir("configmap");
    write(&dir.join("..2026_11_01_00_00_00.1/routing.yaml"), ROUTING);
    symlink("..2026_11_01_00_00_00.1", dir.join("..data")).unwrap();
    symlink("..data/routing.yaml", dir.join("routing.yaml")).unwrap();
    let mut src = source(&dir);
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(scan.changes.len(), 3, "{:#?}", summary(&scan.changes));

    // kubelet's atomic update: new timestamped dir, new ..data symlink renamed over the old.
    write(
        &dir.join("..2026_11_01_00_05_00.2/routing.yaml"),
        &ROUTING.replace("port: 9080", "port: 9081"),
    );
    symlink("..2026_11_01_00_05_00.2", dir.join("..data_tmp")).unwrap();
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    fs::remove_dir_all(dir.join("..2026_11_01_00_00_00.1")).unwrap();
    let scan = src.rescan();
    assert_no_errors(&scan);
    assert_eq!(
        summary(&scan.changes),
        vec![
            ("Service reviews.default.svc.cluster.local".to_string(), -1),
            ("Service reviews.default.svc.cluster.local".to_string(), 1),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// (i) watching a real directory
// ---------------------------------------------------------------------------------------------

const WATCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Receives rescans until the records in effect equal `want` (as described records), or
/// panics after [`WATCH_TIMEOUT`]. Returns the errors of the last rescan.
fn wait_for(rx: &mpsc::Receiver<Rescan>, net: &mut Net, want: &[&str], what: &str) -> Vec<String> {
    let deadline = Instant::now() + WATCH_TIMEOUT;
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    let mut errors = Vec::new();
    while net.summary() != want {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(scan) => {
                net.apply(&scan.changes);
                errors = scan.errors;
            }
            Err(_) => panic!(
                "{what}: not delivered within {WATCH_TIMEOUT:?}; in effect: {:#?}",
                net.summary()
            ),
        }
    }
    errors
}

/// `watch` on a real directory delivers the initial read, then every later edit through its
/// callback within a few seconds: an edit in place, an added file in a directory created
/// after the watch started, a deletion, and an invalid edit (delivered as an error, with no
/// retraction). Returning false from the callback stops it: `watch` returns `Ok(())`.
#[test]
fn watch_delivers_edits_made_after_it_starts() {
    let dir = test_dir("watch");
    let routing = dir.join("routing.yaml");
    write(&routing, ROUTING);
    let (tx, rx) = mpsc::channel::<Rescan>();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_cb = stop.clone();
    let (done_tx, done_rx) = mpsc::channel();
    let src = source(&dir);
    std::thread::spawn(move || {
        let result = watch(src, Duration::from_millis(50), move |scan| {
            if stop_cb.load(Ordering::SeqCst) {
                return false;
            }
            tx.send(scan).is_ok()
        });
        let _ = done_tx.send(result.map_err(|e| e.to_string()));
    });

    let mut net = Net::default();
    let svc = "Service reviews.default.svc.cluster.local";
    let dr = "DestinationRule DestinationRule/default/reviews";
    let vs = "VirtualService VirtualService/default/reviews";
    wait_for(&rx, &mut net, &[svc, dr, vs], "initial read");
    // The watcher is set up before the initial read, but give the OS a moment anyway.
    std::thread::sleep(Duration::from_millis(100));

    // An edit: the new VirtualService replaces the old one.
    let before_edit = Instant::now();
    write_atomic(
        &routing,
        &ROUTING
            .replace("weight: 70", "weight: 10")
            .replace("weight: 30", "weight: 90"),
    );
    let deadline = Instant::now() + WATCH_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let scan = rx
            .recv_timeout(left)
            .expect("the edit was not delivered in time");
        // The report says when its first event was seen: after the edit began, and at
        // least the settle time (50 ms) before the report, which waited for quiet.
        let seen = scan
            .seen
            .expect("a report of an edit says when it was seen");
        assert!(seen >= before_edit, "seen before the edit was made");
        assert!(
            Instant::now().duration_since(seen) >= Duration::from_millis(50),
            "the report came within the settle time of its first event"
        );
        net.apply(&scan.changes);
        let current: Vec<&VirtualService> = net
            .0
            .keys()
            .filter_map(|r| {
                if let Record::VirtualService(v) = r {
                    Some(v)
                } else {
                    None
                }
            })
            .collect();
        if current.len() == 1 && weights(current[0]) == vec![10, 90] {
            break;
        }
    }
    assert_eq!(net.summary().len(), 3);

    // A file in a directory that did not exist when the watch started.
    write_atomic(&dir.join("team/ratings/ratings.yaml"), RATINGS);
    let ratings = "Service ratings.default.svc.cluster.local";
    wait_for(
        &rx,
        &mut net,
        &[svc, dr, vs, ratings],
        "a file in a new nested directory",
    );

    // A deletion.
    fs::remove_file(&routing).unwrap();
    wait_for(&rx, &mut net, &[ratings], "a deletion");

    // An invalid edit is delivered as an error, and retracts nothing.
    let ratings_file = dir.join("team/ratings/ratings.yaml");
    write_atomic(&ratings_file, &RATINGS.replace("port: 9080", "port: 99999"));
    let deadline = Instant::now() + WATCH_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let scan = rx
            .recv_timeout(left)
            .expect("the invalid edit was not delivered in time");
        net.apply(&scan.changes);
        if !scan.errors.is_empty() {
            assert!(
                scan.errors[0].contains("ratings.yaml") && scan.errors[0].contains("spec.ports[0]"),
                "{:?}",
                scan.errors
            );
            break;
        }
    }
    assert_eq!(net.summary(), vec![ratings.to_string()]);

    // Stop: the next delivery returns false and `watch` returns.
    stop.store(true, Ordering::SeqCst);
    write_atomic(&ratings_file, RATINGS);
    match done_rx.recv_timeout(WATCH_TIMEOUT) {
        Ok(result) => assert_eq!(result, Ok(())),
        Err(_) => panic!("watch did not return after the callback returned false"),
    }
}

/// A `ConfigKey` is what errors and duplicates are reported by; make sure the fixture's
/// objects have the keys the other tests describe them with.
#[test]
fn fixture_keys_are_as_described() {
    let out =
        meshflow::config::parse_file(Path::new("routing.yaml"), ROUTING, &MeshConfig::default());
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let keys: Vec<ConfigKey> = out.objects.iter().map(|(_, p)| p.key.clone()).collect();
    assert_eq!(
        keys,
        vec![
            ConfigKey::new(Kind::Service, "default", "reviews"),
            ConfigKey::new(Kind::VirtualService, "default", "reviews"),
            ConfigKey::new(Kind::DestinationRule, "default", "reviews"),
        ]
    );
    let reformatted = meshflow::config::parse_file(
        Path::new("r.yaml"),
        ROUTING_REFORMATTED,
        &MeshConfig::default(),
    );
    assert!(reformatted.errors.is_empty(), "{:?}", reformatted.errors);
    assert_eq!(reformatted.objects.len(), 3);
}

// ---------------------------------------------------------------------------------------------
// What each rescan says changed, for the debug history
// ---------------------------------------------------------------------------------------------

/// Every rescan describes its changes per object: kind/namespace/name, insert, update or
/// delete, and the file it came from (the file it was in, for a delete); a rename
/// describes nothing, like it changes nothing.
#[test]
fn rescans_describe_their_objects() {
    use meshflow::input::ChangeOp;
    let dir = test_dir("described");
    let ratings = dir.join("ratings.yaml");
    let mut src = source(&dir);
    assert!(src.rescan().described.is_empty());
    let ops = |scan: &Rescan| -> Vec<(String, String, String, ChangeOp, String)> {
        scan.described
            .iter()
            .map(|c| {
                let file = Path::new(&c.source)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (
                    c.kind.clone(),
                    c.namespace.clone(),
                    c.name.clone(),
                    c.op,
                    file,
                )
            })
            .collect()
    };
    let one = |op| {
        vec![(
            "Service".to_string(),
            "default".to_string(),
            "ratings".to_string(),
            op,
            "ratings.yaml".to_string(),
        )]
    };
    write(&ratings, RATINGS);
    assert_eq!(ops(&src.rescan()), one(ChangeOp::Insert));
    write(&ratings, &RATINGS.replace("9080", "9081"));
    assert_eq!(ops(&src.rescan()), one(ChangeOp::Update));
    write(
        &ratings,
        &format!("# a comment\n{}", RATINGS.replace("9080", "9081")),
    );
    assert!(
        src.rescan().described.is_empty(),
        "same content, nothing described"
    );
    fs::create_dir_all(dir.join("moved")).unwrap();
    let moved = dir.join("moved/ratings.yaml");
    fs::rename(&ratings, &moved).unwrap();
    assert!(
        src.rescan().described.is_empty(),
        "a rename describes nothing"
    );
    fs::remove_file(&moved).unwrap();
    assert_eq!(ops(&src.rescan()), one(ChangeOp::Delete));
}

/// An apiVersion typo in a live object's file is an error naming file:line and the field,
/// and the object's last valid version stays in effect: nothing is retracted.
#[test]
fn api_version_typo_keeps_the_last_valid_version() {
    let dir = test_dir("api_version_typo");
    let file = dir.join("routing.yaml");
    write(&file, ROUTING);
    let mut src = source(&dir);
    assert_no_errors(&src.rescan());
    for typo in ["networking.istio.i0/v1", "networking.istio.io"] {
        let broken = ROUTING.replace(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService",
            &format!("apiVersion: {typo}\nkind: VirtualService"),
        );
        assert_ne!(broken, ROUTING, "the fixture has a v1 VirtualService");
        write(&file, &broken);
        let scan = src.rescan();
        assert!(scan.changes.is_empty(), "{typo}: {:#?}", scan.changes);
        assert_eq!(scan.errors.len(), 1, "{typo}: {:#?}", scan.errors);
        let err = &scan.errors[0];
        assert!(
            err.starts_with(&format!("{}:", file.display()))
                && err.contains("VirtualService default/reviews: apiVersion:"),
            "{err}"
        );
        write(&file, ROUTING);
        assert_no_errors(&src.rescan());
    }
}

/// Two links to the directory itself (`a -> .`, `b -> .`): each real directory is read
/// once, so the objects are read once (no duplicate-object errors) and the rescan ends at
/// once; each link not followed is reported once, and removing them clears the report.
#[test]
fn symlink_loops_are_followed_once_and_reported() {
    let dir = test_dir("symlink_loops");
    write(&dir.join("routing.yaml"), ROUTING);
    let mut src = source(&dir);
    let clean = src.rescan();
    assert_no_errors(&clean);
    for link in ["a", "b"] {
        std::os::unix::fs::symlink(".", dir.join(link)).expect("symlink");
    }
    let started = std::time::Instant::now();
    let looped = src.rescan();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(looped.changes.is_empty(), "{:#?}", looped.changes);
    assert_eq!(looped.errors.len(), 2, "{:#?}", looped.errors);
    assert!(looped.errors.iter().all(|e| e.contains("not followed")));
    // A fresh source over the looped directory reads each object once.
    let fresh = source(&dir).rescan();
    assert_eq!(fresh.changes, clean.changes);
    for link in ["a", "b"] {
        std::fs::remove_file(dir.join(link)).expect("unlink");
    }
    assert_no_errors(&src.rescan());
}

/// A file over 16 MiB is not read: an error names it, and what it held stays in effect.
#[test]
fn oversized_file_is_not_read_and_keeps_its_objects() {
    let dir = test_dir("oversized_file");
    let file = dir.join("routing.yaml");
    write(&file, ROUTING);
    let mut src = source(&dir);
    assert_no_errors(&src.rescan());
    let mut huge = String::from(ROUTING);
    huge.push_str(&format!("# {}\n", "x".repeat(17 * 1024 * 1024)));
    write(&file, &huge);
    let scan = src.rescan();
    assert!(scan.changes.is_empty(), "{:#?}", scan.changes);
    assert_eq!(scan.errors.len(), 1, "{:#?}", scan.errors);
    assert!(
        scan.errors[0].starts_with(&format!("{}:1:", file.display()))
            && scan.errors[0].contains("not read"),
        "{}",
        scan.errors[0]
    );
    write(&file, ROUTING);
    let back = src.rescan();
    assert!(back.changes.is_empty(), "{:#?}", back.changes);
    assert_no_errors(&back);
}

/// With a state file, the last valid version of an object whose file turned invalid
/// survives a restart: a new source (the process after `kill -9`) starts with it in effect
/// and the error still reported. Without one, the restart starts without it (the error
/// says why). Fixing the file clears the state.
#[test]
fn last_valid_version_survives_a_restart_with_a_state_file() {
    let dir = test_dir("state_file");
    let config = dir.join("config");
    let state = dir.join("meshflow-state.json");
    let file = config.join("routing.yaml");
    write(&file, ROUTING);
    let mut before = source(&config).with_state_file(&state).expect("state");
    let first = before.rescan();
    assert_no_errors(&first);
    let valid_vs = the_vs(&first.changes, 1);
    write(&file, &ROUTING.replace("weight: 30", "weight: 40"));
    let broken = before.rescan();
    assert!(broken.changes.is_empty(), "{:#?}", broken.changes);
    assert_eq!(broken.errors.len(), 1);
    drop(before); // the process is gone

    let mut after = source(&config).with_state_file(&state).expect("state");
    let restarted = after.rescan();
    assert_eq!(
        the_vs(&restarted.changes, 1),
        valid_vs,
        "the last valid version"
    );
    assert_eq!(restarted.errors, broken.errors);
    let forgetful = source(&config).rescan();
    assert!(
        !forgetful
            .changes
            .iter()
            .any(|(r, _)| matches!(r, Record::VirtualService(_))),
        "without a state file the invalid object is out"
    );
    assert_eq!(forgetful.errors, broken.errors);

    write(&file, ROUTING);
    assert_no_errors(&after.rescan());
    let mut fixed = source(&config).with_state_file(&state).expect("state");
    let scan = fixed.rescan();
    assert_eq!(the_vs(&scan.changes, 1), valid_vs);
    assert_eq!(std::fs::read_to_string(&state).expect("state"), "[]");
}

/// A file rewritten again and again with documents added, removed, reordered, edited and
/// duplicated (the file source takes unchanged documents from its last read rather than
/// parsing them again) ends in the same records and errors as a fresh source reading the
/// final text at once.
#[test]
fn rereads_reusing_unchanged_documents_match_a_fresh_read() {
    let service = |name: &str, port: u32| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\n\
             spec:\n  ports: [{{name: http, port: {port}}}]\n  selector: {{app: {name}}}\n"
        )
    };
    let pool: Vec<String> = vec![
        service("a", 80),
        service("a", 81),
        service("b", 80),
        service("b", 82),
        service("c", 80),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n".to_string(),
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec: {}\n"
            .to_string(),
    ];
    let dir = test_dir("memo_reuse");
    let file = dir.join("mesh.yaml");
    write(&file, &pool[0]);
    let mut src = source(&dir);
    let mut net = Net::default();
    let first = src.rescan();
    net.apply(&first.changes);
    // A small deterministic generator: the same sequence on every run.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    for step in 0..60 {
        let docs: Vec<&str> = (0..1 + next(5))
            .map(|_| pool[next(pool.len())].as_str())
            .collect();
        let text = docs.join("---\n");
        write(&file, &text);
        let scan = src.rescan();
        net.apply(&scan.changes);
        let fresh_dir = test_dir("memo_reuse_fresh");
        write(&fresh_dir.join("mesh.yaml"), &text);
        let fresh = source(&fresh_dir).rescan();
        let mut fresh_net = Net::default();
        fresh_net.apply(&fresh.changes);
        assert_eq!(
            net.0.keys().collect::<Vec<_>>(),
            fresh_net.0.keys().collect::<Vec<_>>(),
            "step {step}: records differ from a fresh read of\n{text}"
        );
        let strip = |errors: &[String]| -> Vec<String> {
            errors
                .iter()
                .map(|e| {
                    e.replace(&fresh_dir.display().to_string(), "DIR")
                        .replace(&dir.display().to_string(), "DIR")
                })
                .collect()
        };
        assert_eq!(
            strip(&scan.errors),
            strip(&fresh.errors),
            "step {step}: errors differ"
        );
        assert_eq!(
            strip(&scan.analysis),
            strip(&fresh.analysis),
            "step {step}: analysis differs"
        );
    }
}

/// A `kind: List` document holds several objects at one line: each is read, and a rewrite
/// of another document of the file (which reuses the readings of unchanged documents) keeps
/// all of them; an edit of one item changes that item only.
#[test]
fn the_items_of_a_list_are_read_and_kept_across_rewrites() {
    let dir = test_dir("list_items");
    let file = dir.join("exported.yaml");
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: a, namespace: ns}\n  spec: {ports: [{name: http, port: 80}]}\n- apiVersion: v1\n  kind: Service\n  metadata: {name: b, namespace: ns}\n  spec: {ports: [{name: http, port: 80}]}\n";
    let other = "---\napiVersion: v1\nkind: Service\nmetadata: {name: c, namespace: ns}\nspec: {ports: [{name: http, port: 80}]}\n";
    write(&file, &format!("{list}{other}"));
    let mut src = source(&dir);
    let first = src.rescan();
    assert_no_errors(&first);
    let services: Vec<(String, isize)> = summary(&first.changes)
        .into_iter()
        .filter(|(d, _)| d.starts_with("Service "))
        .collect();
    assert_eq!(
        services,
        vec![
            ("Service a.ns.svc.cluster.local".to_string(), 1),
            ("Service b.ns.svc.cluster.local".to_string(), 1),
            ("Service c.ns.svc.cluster.local".to_string(), 1),
        ]
    );
    // The other document changes: the List is reused, both its items stay.
    write(
        &file,
        &format!("{list}{}", other.replace("port: 80", "port: 81")),
    );
    let scan = src.rescan();
    assert_no_errors(&scan);
    let touched: Vec<String> = summary(&scan.changes).into_iter().map(|(d, _)| d).collect();
    assert!(touched.iter().all(|d| d.contains("c.ns")), "{touched:?}");
    // One item changes: only it.
    write(
        &file,
        &format!(
            "{}{}",
            list.replacen("port: 80", "port: 82", 1),
            other.replace("port: 80", "port: 81")
        ),
    );
    let scan = src.rescan();
    assert_no_errors(&scan);
    let touched: Vec<(String, isize)> = summary(&scan.changes);
    assert!(
        !touched.is_empty() && touched.iter().all(|(d, _)| d.contains("a.ns")),
        "{touched:?}"
    );
}
