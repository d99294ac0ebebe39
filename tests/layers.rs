//! The architecture as a test: which top-level modules of `src/` may import which, and no
//! import circle among them nor among the files of `src/bench/`. It reads the sources as
//! text (every `crate::…` and `super::…` path outside comments), so a new import that breaks
//! the direction sources → runtime → hub ← xds, hub ← debug fails here, naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each top-level module may import of this crate. `serve` and `main` wire
/// everything; `bench` drives a server from outside and may use any lower layer (and the
/// debug port's client, to time `proxy-status` as a user runs it); `demo`
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
            "debug",
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

/// What each top-level module of the `dataflows` crate may import of it: records know no
/// Envoy (`model` imports nothing), `translate` turns records into Envoy's protos and
/// imports only `model`; the rules of Istio read records and the resource names; the
/// dataflow (`flow`) and the naive engine compose the rest.
const DATAFLOWS_ALLOWED: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("translate", &["model"]),
    ("rules", &["model", "translate"]),
    ("delegation", &["model"]),
    ("synth", &["model"]),
    ("simulate", &["model"]),
    ("client_tls", &["model", "translate"]),
    ("assemble", &["model", "rules", "translate"]),
    (
        "flow",
        &[
            "assemble",
            "client_tls",
            "delegation",
            "model",
            "rules",
            "translate",
        ],
    ),
    (
        "naive",
        &[
            "assemble",
            "client_tls",
            "delegation",
            "model",
            "rules",
            "translate",
        ],
    ),
    ("driver", &["flow", "model"]),
    ("materialize", &["driver", "model"]),
];

fn dataflows_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dataflows/src")
}

#[test]
fn dataflows_modules_import_only_what_their_layer_may() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = DATAFLOWS_ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let root = dataflows_src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut wrong = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&root).expect("under dataflows/src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a module name");
        if top == "lib" {
            continue;
        }
        for d in referenced(&code(f), "crate::") {
            if d == top {
                continue;
            }
            graph.entry(top.clone()).or_default().insert(d.clone());
            match allowed.get(top.as_str()) {
                Some(ok) if ok.contains(d.as_str()) => {}
                Some(_) => wrong.push(format!("{} imports crate::{d}", rel.display())),
                None => wrong.push(format!("{}: module {top} has no layer rule", rel.display())),
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
        "an import circle among dataflows' modules"
    );
    assert!(
        graph["flow"].contains("translate"),
        "the check sees imports: {graph:?}"
    );
    // The oracle compares the dataflow with the naive engine through the driver: it must
    // not reach into the dataflow's stages.
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("dataflows/tests");
    let mut test_files = Vec::new();
    rust_files(&tests, &mut test_files);
    for f in test_files
        .iter()
        .filter(|f| f.to_string_lossy().contains("oracle"))
    {
        assert!(
            !code(f).contains("dataflows::flow"),
            "{} imports dataflows::flow",
            f.display()
        );
    }
}

/// The module path of a source file under `root` (`a/b.rs` and `a/b/mod.rs` are `[a, b]`).
fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("under root");
    let mut parts: Vec<String> = rel
        .components()
        .filter_map(|c| c.as_os_str().to_str().map(String::from))
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_string();
    }
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts
}

/// The modules a file refers to (`crate::a::b`, `super::c`, `self::d`, groups expanded),
/// as absolute module paths.
fn module_refs(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            let path: String = text[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            let mut base: Vec<String> = here.to_vec();
            match parts.first() {
                Some(&"crate") => {
                    base.clear();
                    parts.remove(0);
                }
                _ => {
                    while let Some(p) = parts.first() {
                        match *p {
                            "super" => {
                                base.pop();
                            }
                            "self" => {}
                            _ => break,
                        }
                        parts.remove(0);
                    }
                }
            }
            let rest = &text[at + path.len()..];
            let mut heads: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
            if rest.starts_with('{') {
                let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
                for item in group.split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() {
                        let mut p = base.clone();
                        p.extend(heads.iter().cloned());
                        p.push(name);
                        out.push(p);
                    }
                }
                continue;
            }
            base.append(&mut heads);
            out.push(base);
        }
    }
    out
}

/// Import circles among the files of one folder, in every folder of `root`.
fn folder_circles(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let modules: Vec<(PathBuf, Vec<String>)> = files
        .iter()
        .map(|f| (f.clone(), module_path(root, f)))
        .collect();
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for (_, m) in &modules {
        if let Some((last, parent)) = m.split_last() {
            children
                .entry(parent.to_vec())
                .or_default()
                .insert(last.clone());
        }
    }
    let mut found = Vec::new();
    for (parent, kids) in &children {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (f, m) in &modules {
            if m.len() <= parent.len() || m[..parent.len()] != parent[..] {
                continue;
            }
            let from = &m[parent.len()];
            for r in module_refs(&code(f), m) {
                if r.len() > parent.len() && r[..parent.len()] == parent[..] {
                    let to = &r[parent.len()];
                    if to != from && kids.contains(to) {
                        graph.entry(from.clone()).or_default().insert(to.clone());
                    }
                }
            }
        }
        if let Some(c) = cycle(&graph) {
            found.push(format!("{}: {}", parent.join("/"), c.join(" -> ")));
        }
    }
    found
}

/// Circles among the files of a folder that are known and not undone yet; any other makes
/// the test fail, and so does one of these once it is gone (then take it off the list).
const KNOWN_FOLDER_CIRCLES: &[&str] = &[];

#[test]
fn no_import_circle_among_the_files_of_a_folder() {
    let mut found = Vec::new();
    for (name, root) in [("src", src()), ("dataflows/src", dataflows_src())] {
        for c in folder_circles(&root) {
            found.push(format!("{name}: {c}"));
        }
    }
    let known = |f: &str| {
        KNOWN_FOLDER_CIRCLES.iter().find(|k| {
            let (prefix, pair) = k.rsplit_once(": ").unwrap_or(("", ""));
            let (a, b) = pair.split_once(" <-> ").unwrap_or(("", ""));
            f.starts_with(&format!("{prefix}: "))
                && f.contains(&format!(" {a} ")) | f.contains(&format!(": {a} "))
                && f.contains(&format!(" {b} ")) | f.ends_with(&format!(" {b}"))
        })
    };
    let unknown: Vec<&String> = found.iter().filter(|f| known(f).is_none()).collect();
    assert!(
        unknown.is_empty(),
        "import circles inside folders:\n{unknown:#?}"
    );
    let gone: Vec<&&str> = KNOWN_FOLDER_CIRCLES
        .iter()
        .filter(|k| !found.iter().any(|f| known(f) == Some(*k)))
        .collect();
    assert!(
        gone.is_empty(),
        "known circles no longer found (take them off the list): {gone:?}"
    );
    // The check itself sees circles: a graph of three files in a ring is one.
    let ring: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .iter()
        .map(|(x, y)| (x.to_string(), BTreeSet::from([y.to_string()])))
        .collect();
    assert!(cycle(&ring).is_some());
}
