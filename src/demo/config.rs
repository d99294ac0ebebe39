//! The bundled bookinfo example, compiled into the binary (so `meshflow demo` runs from any
//! directory), and the scratch directory it is written to: the demo edits its copy, never the
//! repository's files.
//!
//! The copy differs from `examples/bookinfo/config` only where one machine running other
//! things needs it to: the Gateway's port (8080) becomes a free port; the workloads' port in
//! the EndpointSlices (9080, on the pods' loopback addresses `127.0.1.x`) becomes a free port
//! too, so the demo runs next to the example's own `fake_pods.py` or a test using the same
//! addresses; the `sleep` Sidecar's egress listener binds a loopback address of its own
//! (`127.0.x.y`, chosen free) instead of `127.0.0.1`, keeping its port, 9080 (an explicit
//! egress listener only carries the services of its port, and every bookinfo service is on
//! 9080). In a cluster each pod has a loopback of its own; on one machine a second demo, or
//! anything on `127.0.0.1:9080`, would otherwise share it, and Envoy binds with
//! `SO_REUSEPORT`, so two Envoys would silently split the connections. The reviews
//! VirtualService moves into a file of its own, `reviews.yaml`, holding the split the demo
//! starts from (`examples/bookinfo/reviews-split.yaml`), so the walk's edit is one file.

use serde::Deserialize;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The files of `examples/bookinfo/config`, as `(file name, text)`.
const EXAMPLE: &[(&str, &str)] = &[
    (
        "destination-rules.yaml",
        include_str!("../../examples/bookinfo/config/destination-rules.yaml"),
    ),
    (
        "endpointslices.yaml",
        include_str!("../../examples/bookinfo/config/endpointslices.yaml"),
    ),
    (
        "gateway.yaml",
        include_str!("../../examples/bookinfo/config/gateway.yaml"),
    ),
    (
        "pods.yaml",
        include_str!("../../examples/bookinfo/config/pods.yaml"),
    ),
    (
        "services.yaml",
        include_str!("../../examples/bookinfo/config/services.yaml"),
    ),
    (
        "sidecar-sleep.yaml",
        include_str!("../../examples/bookinfo/config/sidecar-sleep.yaml"),
    ),
    (
        "virtual-services.yaml",
        include_str!("../../examples/bookinfo/config/virtual-services.yaml"),
    ),
];

/// The Envoy bootstraps of the example (identities and metadata of the two proxies).
pub const GATEWAY_BOOTSTRAP: &str = include_str!("../../examples/bookinfo/envoy-gateway.yaml");
pub const SIDECAR_BOOTSTRAP: &str = include_str!("../../examples/bookinfo/envoy-sidecar.yaml");

/// The reviews VirtualService the demo starts from, and the one its walk writes.
pub const REVIEWS_SPLIT: &str = include_str!("../../examples/bookinfo/reviews-split.yaml");
pub const REVIEWS_V3: &str = include_str!("../../examples/bookinfo/reviews-v3.yaml");

/// The file of the copy that holds the reviews VirtualService.
pub const REVIEWS_FILE: &str = "reviews.yaml";

/// The port every bookinfo service (and the sleep Sidecar's egress listener) has.
pub const SERVICE_PORT: u16 = 9080;

/// The addresses chosen for this run.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// The Gateway's server port (the gateway Envoy's listener on 127.0.0.1).
    pub gateway_port: u16,
    /// The port every workload listens on, at its pod address.
    pub workload_port: u16,
    /// Where the sleep sidecar's egress listener binds (port `SERVICE_PORT`).
    pub sidecar_ip: Ipv4Addr,
}

/// A directory under the system's temporary directory, removed (with everything in it)
/// when dropped, on every path out of the demo.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    pub fn create() -> Result<ScratchDir, String> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path = base.join(format!("meshflow-demo-{}-{nanos}", std::process::id()));
        // `create_dir`, not `create_dir_all`: never adopt (and later delete) a directory
        // that something else made.
        std::fs::create_dir(&path)
            .map_err(|e| format!("creating the scratch directory {}: {e}", path.display()))?;
        Ok(ScratchDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!(
                "meshflow demo: could not remove {}: {e}",
                self.path.display()
            );
        }
    }
}

/// One bookinfo pod that serves (a Pod of the example with a `version` label).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// `reviews-v2`.
    pub name: String,
    /// The `app` label: the service it backs.
    pub app: String,
    /// The `version` label.
    pub version: String,
    pub ip: Ipv4Addr,
}

impl Pod {
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.ip, port))
    }
}

/// The serving pods of the example's `pods.yaml` (the client `sleep` and the gateway's pod
/// have no `version` label and serve nothing).
pub fn pods() -> Result<Vec<Pod>, String> {
    #[derive(Deserialize)]
    struct Meta {
        name: String,
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
    }
    #[derive(Deserialize)]
    struct Status {
        #[serde(rename = "podIP")]
        pod_ip: Option<String>,
    }
    #[derive(Deserialize)]
    struct Doc {
        metadata: Meta,
        status: Option<Status>,
    }
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(example_file("pods.yaml")?) {
        let doc = Doc::deserialize(doc).map_err(|e| format!("the bundled pods.yaml: {e}"))?;
        let (Some(app), Some(version)) = (
            doc.metadata.labels.get("app"),
            doc.metadata.labels.get("version"),
        ) else {
            continue;
        };
        let ip = doc
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| format!("the bundled pod {} has no podIP", doc.metadata.name))?;
        let ip = ip
            .parse()
            .map_err(|e| format!("the bundled pod {}: podIP {ip}: {e}", doc.metadata.name))?;
        out.push(Pod {
            name: doc.metadata.name,
            app: app.clone(),
            version: version.clone(),
            ip,
        });
    }
    Ok(out)
}

fn example_file(name: &str) -> Result<&'static str, String> {
    EXAMPLE
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
        .ok_or_else(|| format!("the bundled example has no {name}"))
}

/// Writes the example's config into `dir` with this run's ports (see the module's doc).
pub fn write(dir: &Path, layout: Layout) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (name, text) in EXAMPLE {
        let text = match *name {
            "gateway.yaml" => replace(
                name,
                text,
                "      number: 8080\n",
                &format!("      number: {}\n", layout.gateway_port),
            )?,
            "endpointslices.yaml" => replace(
                name,
                text,
                &format!("  port: {SERVICE_PORT}\n"),
                &format!("  port: {}\n", layout.workload_port),
            )?,
            "sidecar-sleep.yaml" => replace(
                name,
                text,
                "    bind: 127.0.0.1\n",
                &format!("    bind: {}\n", layout.sidecar_ip),
            )?,
            "virtual-services.yaml" => without_reviews(text)?,
            _ => text.to_string(),
        };
        write_file(&dir.join(name), &text)?;
    }
    write_file(&dir.join(REVIEWS_FILE), REVIEWS_SPLIT)
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Replaces a file of the watched copy at once: written beside it under a dot name (which
/// the file source ignores), then renamed over it, so the source never reads it truncated
/// or half written (an empty reviews.yaml would delete the VirtualService for an epoch).
pub fn replace_file(path: &Path, text: &str) -> Result<(), String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staged = path.with_file_name(format!(".{name}.new"));
    write_file(&staged, text)?;
    std::fs::rename(&staged, path)
        .map_err(|e| format!("renaming {} to {}: {e}", staged.display(), path.display()))
}

/// `text` with every `from` replaced; an error if there is none (the bundled file changed
/// under the demo).
fn replace(file: &str, text: &str, from: &str, to: &str) -> Result<String, String> {
    if !text.contains(from) {
        return Err(format!(
            "the bundled {file} no longer contains {from:?}; update src/demo/config.rs"
        ));
    }
    Ok(text.replace(from, to))
}

/// `virtual-services.yaml` without its reviews VirtualService (which `reviews.yaml` holds).
fn without_reviews(text: &str) -> Result<String, String> {
    let docs: Vec<&str> = text.split("\n---\n").collect();
    let kept: Vec<&str> = docs
        .iter()
        .copied()
        .filter(|d| !d.contains("\n  name: reviews\n"))
        .collect();
    if kept.len() + 1 != docs.len() {
        return Err(
            "the bundled virtual-services.yaml no longer has one reviews VirtualService; \
             update src/demo/config.rs"
                .into(),
        );
    }
    Ok(kept.join("\n---\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the example is bundled: one added to `examples/bookinfo/config` without
    /// a line in `EXAMPLE` would be missing from the demo.
    #[test]
    fn every_example_file_is_bundled() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo/config");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("the example's config directory")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let bundled: Vec<&str> = EXAMPLE.iter().map(|(n, _)| *n).collect();
        assert_eq!(on_disk, bundled);
    }

    #[test]
    fn the_copy_rewrites_ports_and_moves_reviews_to_its_own_file() {
        let dir = ScratchDir::create().expect("scratch");
        let layout = Layout {
            gateway_port: 18123,
            workload_port: 18124,
            sidecar_ip: Ipv4Addr::new(127, 0, 9, 9),
        };
        write(dir.path(), layout).expect("write");
        let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).expect(n);
        assert!(read("gateway.yaml").contains("number: 18123\n"));
        assert!(!read("endpointslices.yaml").contains("port: 9080"));
        assert_eq!(
            read("endpointslices.yaml").matches("port: 18124").count(),
            4
        );
        assert!(read("sidecar-sleep.yaml").contains("bind: 127.0.9.9\n"));
        assert!(!read("virtual-services.yaml").contains("name: reviews\n"));
        assert!(read("virtual-services.yaml").contains("name: ratings\n"));
        assert_eq!(read(REVIEWS_FILE), REVIEWS_SPLIT);
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists(), "the scratch directory is removed on drop");
    }

    #[test]
    fn the_serving_pods_are_the_examples_six() {
        let pods = pods().expect("pods");
        let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "details-v1",
                "ratings-v1",
                "reviews-v1",
                "reviews-v2",
                "reviews-v3",
                "productpage-v1"
            ]
        );
        assert!(pods.iter().all(|p| p.ip.octets()[..3] == [127, 0, 1]));
    }
}
