//! The mesh config from the cluster (`serve --kube --mesh-configmap NS/NAME`): the `istio`
//! ConfigMap istiod reads, keys `mesh` and `meshNetworks`, watched (one watch, by name) and
//! read through the same [`MeshState`] as the mesh config file. A change becomes one
//! retraction and one insertion of the settings; an invalid one is reported naming the field
//! and the last valid one stays; a deleted ConfigMap gives Istio's defaults back (with the
//! command line's overrides), as a ConfigMap that was never there does.

use super::super::mesh::MeshState;
use super::super::{Report, Sink, Source};
use super::KubeOptions;
use crate::config::mesh::{mesh_config_key, MeshOverrides};
use crate::input::SourceName;
use dataflows::model::MeshConfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};
use kube::Api;
use tokio_stream::StreamExt;

/// Watches one ConfigMap for the mesh config.
pub struct MeshConfigMapSource {
    options: KubeOptions,
    namespace: String,
    name: String,
    state: MeshState,
}

impl MeshConfigMapSource {
    /// `reference` is `NAMESPACE/NAME`.
    pub fn new(
        options: KubeOptions,
        reference: &str,
        base: MeshConfig,
        overrides: MeshOverrides,
    ) -> Result<Self, String> {
        let (namespace, name) = reference
            .split_once('/')
            .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| {
                format!(
                    "--mesh-configmap {reference:?}: expected NAMESPACE/NAME (istio-system/istio)"
                )
            })?;
        let state = MeshState::new(
            base,
            overrides,
            mesh_config_key(namespace, name),
            format!("ConfigMap {namespace}/{name}"),
            "kubernetes",
        );
        Ok(MeshConfigMapSource {
            options,
            namespace: namespace.to_string(),
            name: name.to_string(),
            state,
        })
    }

    /// The report for the ConfigMap as it is now (`None`: deleted or absent).
    fn read(&mut self, cm: Option<&ConfigMap>) -> Option<Report> {
        match cm.filter(|c| c.metadata.name.as_deref() == Some(self.name.as_str())) {
            Some(cm) => {
                let data = cm.data.clone().unwrap_or_default();
                let mesh = data.get("mesh").map(String::as_str).unwrap_or("");
                self.state
                    .update(mesh, data.get("meshNetworks").map(String::as_str))
            }
            None => self.state.remove(),
        }
    }
}

impl Source for MeshConfigMapSource {
    fn name(&self) -> SourceName {
        "mesh-configmap"
    }

    fn run(mut self: Box<Self>, mut sink: Sink) -> Result<(), String> {
        super::runtime()?.block_on(async move {
            let client = super::client(&self.options).await?;
            let api: Api<ConfigMap> = Api::namespaced(client, &self.namespace);
            let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
            let mut events = std::pin::pin!(watcher::watcher(api, config));
            // The initial list (and every relist) is collected whole, then read once: the
            // ConfigMap it ends with is the one in effect.
            let mut listing: Option<Option<ConfigMap>> = None;
            let mut sent_first = false;
            while let Some(event) = events.next().await {
                let report = match event {
                    Ok(Event::Init) => {
                        listing = Some(None);
                        None
                    }
                    Ok(Event::InitApply(cm)) => {
                        listing = Some(Some(cm));
                        None
                    }
                    Ok(Event::InitDone) => {
                        let cm = listing.take().flatten();
                        let r = self.read(cm.as_ref());
                        if sent_first {
                            r
                        } else {
                            // The first report goes out even when it changes nothing: the
                            // server is not ready before it.
                            sent_first = true;
                            Some(r.unwrap_or_default())
                        }
                    }
                    Ok(Event::Apply(cm)) => self.read(Some(&cm)),
                    Ok(Event::Delete(_)) => self.read(None),
                    Err(e) => {
                        // The watcher retries by itself; the error is routine for a watch.
                        tracing::warn!(configmap = %format!("{}/{}", self.namespace, self.name), error = %e, "mesh ConfigMap watch");
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                        None
                    }
                };
                if let Some(report) = report {
                    if !sink.send(report) {
                        return Ok(());
                    }
                }
            }
            Err("the mesh ConfigMap watch stopped".into())
        })
    }
}
