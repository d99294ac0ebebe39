//! A FAKE Kubernetes API server on loopback, for testing meshflow's Kubernetes source through
//! the real `kube` client (a kubeconfig pointing at it, `serve --kube --kubeconfig F`). It is
//! not a Kubernetes API server: no etcd, no admission, no validation of objects, no
//! defaulting, no RBAC beyond one bearer token, no HTTP/2, no protobuf, no server-side apply.
//!
//! What it covers, in the API server's JSON wire format:
//! - API discovery: `/api`, `/api/v1`, `/apis` (an `APIGroupList`, never the aggregated v2
//!   form), `/apis/GROUP`, `/apis/GROUP/VERSION` (`APIResourceList` with verbs and `/status`
//!   subresources) for the core group, `discovery.k8s.io/v1`, and `networking.istio.io` and
//!   `security.istio.io` at the versions a test chooses ([`FakeKube::serve_istio_versions`],
//!   [`FakeKube::serve_security_versions`]), `gateway.networking.k8s.io` when a test installs
//!   its CRDs ([`FakeKube::serve_gateway_api_versions`]), and `/version`.
//! - Lists of Namespaces, Services, Pods, ConfigMaps, Secrets, EndpointSlices, the six Istio
//!   networking kinds, the three security kinds and the Gateway API's Gateway, HTTPRoute and
//!   ReferenceGrant, cluster-wide or `namespaces/NS/`, with `labelSelector` (`=`, `==`,
//!   `!=`, existence; a set-based selector is answered 400), `fieldSelector` of
//!   `metadata.name=NAME` only (any other is answered 400), `metadata.resourceVersion`, and `limit` +
//!   `continue` pagination over a consistent snapshot (pages are cut at `limit` or at the
//!   fake's own page size, [`FakeKube::set_max_page`], whichever is smaller). Items of
//!   built-in kinds come without `apiVersion`/`kind`, as the real server sends them.
//! - Watches (`?watch=1`): newline-delimited `{"type":…,"object":…}` events `ADDED`,
//!   `MODIFIED`, `DELETED`, `BOOKMARK` (on request, when the watch allowed bookmarks) and
//!   `ERROR`; resuming from a `resourceVersion` replays the logged events after it;
//!   resourceVersion `0`/none starts with synthetic `ADDED` events for what exists.
//! - Expiry: [`FakeKube::expire_watches`] compacts the history, ends every open watch with an
//!   `ERROR` event carrying a 410 `Expired` Status, and answers later watches from an older
//!   resourceVersion the same way (or with HTTP 410, [`FakeKube::set_gone_as_http`]); a
//!   `continue` of a compacted snapshot gets HTTP 410.
//! - Faults: [`FakeKube::drop_connections`] aborts every open watch connection mid-stream
//!   (a truncated chunked body, as a dead load balancer leaves it); [`FakeKube::set_quiet`]
//!   makes events reach the log but not the open watches (a client that missed them);
//!   [`FakeKube::fail_lists`] answers a type's lists with 500; [`FakeKube::forbid`] answers
//!   every request naming a type (a path segment equal to its plural) with 403 Forbidden,
//!   as RBAC would.
//!
//! - HTTPS ([`FakeKube::start_tls`]): a self-signed certificate the kubeconfig trusts, so
//!   the client's TLS path is exercised as in a cluster.
//!
//! - Status: a JSON merge patch (`application/merge-patch+json`, RFC 7386) of an Istio
//!   object's `status` subresource (`PATCH /apis/{networking,security}.istio.io/V/namespaces/NS/PLURAL/
//!   NAME/status`) replaces what the patch names in the object's `status`, bumps its
//!   resourceVersion and sends `MODIFIED` to the watches, as the API server does;
//!   [`FakeKube::status_of`] reads it and [`FakeKube::status_patches`] counts the patches.
//!   [`FakeKube::apply`] keeps the status (as an update of the main resource does).
//!
//! - Writes of Leases (`coordination.k8s.io/v1`) and Events (`events.k8s.io/v1`), what a
//!   status writer among replicas needs: GET of one object (404 `NotFound` when absent),
//!   POST to create (409 `AlreadyExists` if it exists), PUT to update, a compare-and-swap on
//!   `metadata.resourceVersion` (409 `Conflict` with the API server's message when it is not
//!   the current one; none is an unconditional update). Each write bumps the
//!   resourceVersion and reaches the watches. [`FakeKube::object`] and
//!   [`FakeKube::objects`] read them.
//!
//! Everything is driven by the test, which applies and deletes objects as a script of
//! events; [`FakeKube::requests`] tells what the client asked. Other writes from clients
//! (other PATCHes, POST and PUT of other kinds, DELETE) are answered 405. GET of one object
//! works for every kind.

mod http;
mod store;
mod tls;

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use store::{status, Store};

/// The fake API server (see the module documentation). Stops when dropped.
pub struct FakeKube {
    addr: SocketAddr,
    /// The certificate's PEM when it serves HTTPS.
    ca_pem: Option<String>,
    store: Arc<Mutex<Store>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const TOKEN: &str = "fake-kube-token";

impl FakeKube {
    /// Starts serving plain HTTP on a free loopback port, on a thread of its own.
    pub fn start() -> FakeKube {
        Self::start_with(None)
    }

    /// Starts serving HTTPS with a self-signed certificate for 127.0.0.1.
    pub fn start_tls() -> FakeKube {
        let (acceptor, pem) = tls::self_signed();
        let mut fake = Self::start_with(Some(acceptor));
        fake.ca_pem = Some(pem);
        fake
    }

    fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> FakeKube {
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", super::free_port()))
            .unwrap_or_else(|e| panic!("bind the fake API server: {e}"));
        std_listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("set_nonblocking: {e}"));
        let addr = std_listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local_addr: {e}"));
        let store = Arc::new(Mutex::new(Store::new(TOKEN.into())));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = store.clone();
        let thread = std::thread::Builder::new()
            .name("fake-kube-api".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|e| panic!("the fake API server's runtime: {e}"));
                rt.block_on(serve(std_listener, served, tls, stopped));
            })
            .unwrap_or_else(|e| panic!("start the fake API server: {e}"));
        FakeKube {
            addr,
            ca_pem: None,
            store,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes a kubeconfig for this server (the bearer token it requires; with TLS, its
    /// certificate as the cluster's CA, in a file beside the kubeconfig).
    pub fn write_kubeconfig(&self, path: &Path) {
        let cluster = match &self.ca_pem {
            None => format!("server: http://{}", self.addr),
            Some(pem) => {
                let ca = path.with_extension("ca.pem");
                std::fs::write(&ca, pem).unwrap_or_else(|e| panic!("write {}: {e}", ca.display()));
                format!(
                    "server: https://{}\n    certificate-authority: {}",
                    self.addr,
                    ca.display()
                )
            }
        };
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    {cluster}\n\
             users:\n- name: fake\n  user:\n    token: {TOKEN}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
             current-context: fake\n"
        );
        std::fs::write(path, config).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Creates or replaces an object (`ADDED` or `MODIFIED`); returns its resourceVersion.
    pub fn apply(&self, object: Value) -> u64 {
        let (_, key) = http::key_of(&object);
        let mut st = self.store();
        let mut object = object;
        if !key.1.is_empty() {
            object["metadata"]["namespace"] = Value::from(key.1.clone());
        }
        let kind = match st.objects.get(&key) {
            Some(old) => {
                object["metadata"]["uid"] = old["metadata"]["uid"].clone();
                // The status subresource is not written through the main resource.
                match old.get("status") {
                    Some(status) => object["status"] = status.clone(),
                    None => {
                        if let Some(map) = object.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
                "MODIFIED"
            }
            None => {
                object["metadata"]["uid"] = Value::from(format!("uid-{}", st.rv + 1));
                "ADDED"
            }
        };
        st.record(kind, key, object);
        st.rv
    }

    /// Applies every document of YAML text (a fixture written for the file source).
    pub fn apply_yaml(&self, text: &str) {
        use serde::Deserialize;
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let value = serde_json::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("a fixture document is not YAML: {e}\n{text}"));
            if !value.is_null() {
                self.apply(value);
            }
        }
    }

    /// Deletes an object (`DELETED`, carrying its last state); panics if there is none.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) {
        let mut st = self.store();
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        let Some(object) = st.objects.get(&key).cloned() else {
            panic!("the fake holds no {kind} {namespace}/{name}");
        };
        st.record("DELETED", key, object);
    }

    /// The objects of `kind` it holds, by namespace/name.
    pub fn names(&self, kind: &str) -> Vec<String> {
        self.store()
            .objects
            .keys()
            .filter(|k| k.0 == kind)
            .map(|k| format!("{}/{}", k.1, k.2))
            .collect()
    }

    /// Which versions of networking.istio.io it serves, preferred first (none: the group is
    /// not served at all, as on a cluster without Istio's CRDs).
    pub fn serve_istio_versions(&self, versions: &[&'static str]) {
        self.store().istio_versions = versions.to_vec();
    }

    /// Which versions of security.istio.io it serves, preferred first (none: the group is
    /// not served).
    pub fn serve_security_versions(&self, versions: &[&'static str]) {
        self.store().security_versions = versions.to_vec();
    }

    /// Which versions of gateway.networking.k8s.io it serves (none by default: the Gateway
    /// API's CRDs are not installed).
    pub fn serve_gateway_api_versions(&self, versions: &[&'static str]) {
        self.store().gateway_api_versions = versions.to_vec();
    }

    /// The most items one list page holds.
    pub fn set_max_page(&self, n: usize) {
        self.store().max_page = n.max(1);
    }

    /// While quiet, changes are logged but not sent to open watches.
    pub fn set_quiet(&self, quiet: bool) {
        self.store().quiet = quiet;
    }

    /// Answer a watch from a compacted resourceVersion with HTTP 410 instead of a 200
    /// carrying an `ERROR` event.
    pub fn set_gone_as_http(&self, yes: bool) {
        self.store().gone_as_http = yes;
    }

    /// Answers every list of `plural` (`pods`) with 500 until [`FakeKube::heal_lists`].
    pub fn fail_lists(&self, plural: &str) {
        self.store().failing_lists.push(plural.to_string());
    }

    pub fn heal_lists(&self) {
        self.store().failing_lists.clear();
    }

    /// Makes `token` a service-account token of `namespace`/`service_account` issued for
    /// `audiences`, as TokenReview will say.
    pub fn add_sa_token(
        &self,
        token: &str,
        namespace: &str,
        service_account: &str,
        audiences: &[&str],
    ) {
        self.store().sa_tokens.insert(
            token.to_string(),
            (
                namespace.to_string(),
                service_account.to_string(),
                audiences.iter().map(|a| a.to_string()).collect(),
            ),
        );
    }

    /// Answers every request for `plural` (`leases`) with 403 until [`FakeKube::permit_all`].
    pub fn forbid(&self, plural: &str) {
        self.store().forbidden.push(plural.to_string());
    }

    pub fn permit_all(&self) {
        self.store().forbidden.clear();
    }

    /// Compacts the history: every resourceVersion before the current one is too old to
    /// watch from (as etcd compacted at the current revision). Open watches go on (until
    /// they end or are dropped, and come back from an old version).
    pub fn compact(&self) {
        let mut st = self.store();
        st.compacted_below = st.rv;
    }

    /// Compacts the history and ends every open watch with an `ERROR` 410 `Expired` event.
    pub fn expire_watches(&self) {
        self.compact();
        let mut st = self.store();
        let message = format!("too old resource version ({})", st.compacted_below);
        for w in std::mem::take(&mut st.watches) {
            let _ =
                w.tx.send(Ok(store::event("ERROR", &status(410, "Expired", &message))));
        }
    }

    /// Aborts every open watch connection mid-stream.
    pub fn drop_connections(&self) {
        for w in std::mem::take(&mut self.store().watches) {
            let _ =
                w.tx.send(Err(std::io::Error::other("connection dropped by the fake")));
        }
    }

    /// Sends a `BOOKMARK` with the current resourceVersion to every watch that allows them.
    pub fn bookmark(&self) {
        let st = self.store();
        let rv = st.rv.to_string();
        for w in st.watches.iter().filter(|w| w.bookmarks) {
            let object = json!({
                "kind": w.scope.rtype.kind,
                "apiVersion": w.scope.api_version,
                "metadata": {"resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}},
            });
            let _ = w.tx.send(Ok(store::event("BOOKMARK", &object)));
        }
    }

    /// Open watches of `kind` (to wait until a client watches again).
    pub fn open_watches(&self, kind: &str) -> usize {
        let mut st = self.store();
        st.watches.retain(|w| !w.tx.is_closed());
        st.watches
            .iter()
            .filter(|w| w.scope.rtype.key_kind() == kind)
            .count()
    }

    /// The status of an object (`Null` when it has none or there is no such object).
    pub fn status_of(&self, kind: &str, namespace: &str, name: &str) -> Value {
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        self.store()
            .objects
            .get(&key)
            .and_then(|o| o.get("status").cloned())
            .unwrap_or(Value::Null)
    }

    /// One object as stored (`Null` when there is none).
    pub fn object(&self, kind: &str, namespace: &str, name: &str) -> Value {
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        self.store()
            .objects
            .get(&key)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Every object of `kind`, in namespace/name order.
    pub fn objects(&self, kind: &str) -> Vec<Value> {
        self.store()
            .objects
            .iter()
            .filter(|(k, _)| k.0 == kind)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// How many status patches an object was sent (answered or not).
    pub fn status_patches(&self, kind: &str, namespace: &str, name: &str) -> usize {
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        self.store().status_patches.get(&key).copied().unwrap_or(0)
    }

    /// Every request so far, as `METHOD path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.store().requests.clone()
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Ending the watch streams lets their connections close.
        self.store().watches.clear();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    store: Arc<Mutex<Store>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener)
        .unwrap_or_else(|e| panic!("the fake API server's listener: {e}"));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut stopped => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let store = store.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => connection(stream, store).await,
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        connection(stream, store).await;
                    }
                }
            }
        });
    }
}

/// Serves one HTTP/1.1 connection.
async fn connection<IO>(io: IO, store: Arc<Mutex<Store>>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let store = store.clone();
        async move {
            use http_body_util::BodyExt;
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let response = http::handle(&store, hyper::Request::from_parts(parts, bytes));
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    // A watch aborted by `drop_connections` ends here with an error: intended.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await;
}
