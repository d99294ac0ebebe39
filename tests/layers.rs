//! The architecture as a test: which top-level modules of `src/` may import which, and no
//! import circle among them nor among the files of `src/bench/`. It reads the sources as
//! text (every `crate::…` and `super::…` path outside comments), so a new import that breaks
//! the direction sources → runtime → hub ← xds, hub ← debug fails here, naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each top-level module may import of this crate. `serve` and `main` wire
/// everything; `bench` drives a server from outside and may use any lower layer; `demo`
/// runs `serve` and drives it as a user would (debug client, simulated proxies).
const ALLOWED: &[(&str, &[&str])] = &[
    ("engine", &[]),
    ("input", &[]),
    ("config", &[]),
    ("async_runtime", &[]),
    ("ca", &[]),
    ("sources", &["input", "config"]),
    ("hub", &["input", "engine", "ca"]),
    ("runtime", &["hub", "input", "engine"]),
    ("xds", &["hub", "input", "engine"]),
    ("debug", &["hub", "input", "engine"]),
    (
        "bench",
        &[
            "engine",
            "input",
            "config",
            "sources",
            "xds",
            "async_runtime",
        ],
    ),
    (
        "demo",
        &["serve", "debug", "bench", "engine", "async_runtime"],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (doc links name modules they do not import).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read source");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every name that follows `prefix` (`crate::` or `super::`), single or in a `{…}` group.
fn referenced(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                out.insert(ident(item.trim()));
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// A cycle in `graph`, if any, as the path around it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn top_level_modules_import_only_lower_layers_and_never_in_a_circle() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src()).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a module name");
        let deps = referenced(&code(f), "crate::");
        for d in &deps {
            if *d == top {
                continue;
            }
            graph.entry(top.clone()).or_default().insert(d.clone());
            if let Some(ok) = allowed.get(top.as_str()) {
                if !ok.contains(d.as_str()) {
                    wrong.push(format!("{} imports crate::{d}", rel.display()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        cycle(&graph),
        None,
        "an import circle among top-level modules"
    );
    // The check itself sees imports: the hub is imported by the runtime, xds and debug.
    for m in ["runtime", "xds", "debug"] {
        assert!(graph[m].contains("hub"), "{m} → hub not seen: {graph:?}");
    }
}

#[test]
fn bench_files_import_each_other_without_a_circle() {
    let dir = src().join("bench");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&dir).expect("under src/bench");
        let name = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a file name");
        if name == "mod" {
            continue; // declares the files; imports none of them back
        }
        let code = code(f);
        let mut deps = referenced(&code, "super::");
        deps.extend(referenced(
            &code.replace("crate::bench::", "super::"),
            "super::",
        ));
        deps.retain(|d| *d != name && *d != "mod");
        graph.insert(name, deps);
    }
    assert!(graph.len() > 3, "src/bench files found: {graph:?}");
    assert_eq!(cycle(&graph), None, "an import circle inside src/bench");
}
