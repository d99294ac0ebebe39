//! TLS settings shared by kinds: a DestinationRule's upstream `tls`, a server's `tls`
//! (Gateway servers, Sidecar `ingress` listeners), and the Secrets certificates come from.

use super::ConfigKey;
use serde::{Deserialize, Serialize};

/// A DestinationRule's `tls` in a mode meshflow generates: files the proxy reads itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UpstreamTls {
    /// `MUTUAL`: the client certificate and key presented.
    pub client_cert: Option<(String, String)>,
    /// Verify the server against this CA bundle; `None` with `insecure_skip_verify` false:
    /// against the system's bundle ([`ClusterDefaults::system_ca_bundle`]).
    ///
    /// [`ClusterDefaults::system_ca_bundle`]: super::ClusterDefaults::system_ca_bundle
    pub ca: Option<String>,
    pub crl: Option<String>,
    pub sni: Option<String>,
    /// Names the server's certificate must carry (DNS or URI SANs, exact).
    pub subject_alt_names: Vec<String>,
    pub insecure_skip_verify: bool,
    /// `ISTIO_MUTUAL`: the proxy's own workload certificate (SDS `default`), verified
    /// against the mesh's root (SDS `ROOTCA`); the files above are unused.
    #[serde(default)]
    pub istio_mutual: bool,
    /// `credentialName` of `SIMPLE`/`MUTUAL`: the client certificate (MUTUAL) and the CA
    /// come from this Secret of the proxy's own namespace over SDS, in place of files.
    #[serde(default)]
    pub credential: Option<String>,
    /// Where this `tls` is in the rule (`spec.trafficPolicy.tls`), for errors that name it.
    #[serde(default)]
    pub field: String,
    /// Mode `MUTUAL` (a client certificate is presented: from files, or the Secret's).
    #[serde(default)]
    pub mutual: bool,
    /// A BackendTLSPolicy's CA bundle (PEM, from a ConfigMap), given to the proxy inline in
    /// place of a file or a Secret.
    #[serde(default)]
    pub ca_pem: Option<String>,
    /// Why this TLS cannot be originated (a BackendTLSPolicy with no valid CA): its
    /// clusters fail closed, never plaintext.
    #[serde(default)]
    pub unusable: Option<String>,
}

/// A gateway server's `tls` in a mode meshflow generates (also a Sidecar `ingress`
/// listener's: SIMPLE, MUTUAL or OPTIONAL_MUTUAL with files).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServerTls {
    pub mode: ServerTlsMode,
    /// `None` only for PASSTHROUGH, AUTO_PASSTHROUGH and ISTIO_MUTUAL (the workload
    /// certificate).
    pub credential: Option<Credential>,
    /// `minProtocolVersion`/`maxProtocolVersion` as Envoy's `TlsProtocol` numbers
    /// (`TLSV1_2` is 3).
    pub min_version: Option<i32>,
    pub max_version: Option<i32>,
    pub cipher_suites: Vec<String>,
    /// MUTUAL: names a client certificate must carry (exact).
    pub subject_alt_names: Vec<String>,
    /// A server of protocol TLS (not HTTPS) that terminates: the decrypted stream is TCP,
    /// routed by the `tcp[]` routes of the VirtualServices bound to the gateway.
    #[serde(default)]
    pub tcp: bool,
    /// The hostnames (`*` for none) of the other HTTPS listeners on this one's port, of a
    /// Gateway API Gateway: a request on this server's connection for a host one of them
    /// serves better is answered 421 (Misdirected Request), as the spec asks.
    #[serde(default)]
    pub misdirected: Vec<String>,
    /// A Gateway API TLS listener that terminates (`tcp`): besides the `tcp[]` routes
    /// (TCPRoutes), it takes the `tls[]` routes (TLSRoutes) of its VirtualServices, each
    /// match on a chain of its own SNI names that terminates and passes the decrypted stream
    /// on. Istio's own TLS servers route `tls[]` only when they pass TLS through.
    #[serde(default)]
    pub sni_routes: bool,
    /// A Gateway API HTTPS listener's frontend validation: the CA bundle client
    /// certificates are verified against (mode MUTUAL, or OPTIONAL_MUTUAL for the spec's
    /// `AllowInsecureFallback`), in place of the credential's own CA.
    #[serde(default)]
    pub client_ca: Option<ClientCa>,
}

/// The CA bundle of a Gateway API Gateway's frontend validation, as its HTTPS listeners
/// on one port verify clients against it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientCa {
    /// The SDS name it is served under.
    pub sds_name: String,
    pub pem: String,
    /// `AllowInsecureFallback`: a certificate the CAs did not sign is let in too (as is
    /// none, the mode being OPTIONAL_MUTUAL).
    pub accept_untrusted: bool,
}

/// How a gateway server treats TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ServerTlsMode {
    /// Terminate with the server's certificate.
    Simple,
    /// Terminate, and require a client certificate signed by the server's CA bundle.
    Mutual,
    /// Route by SNI (VirtualService `tls[]` routes) without terminating.
    Passthrough,
    /// Terminate with the gateway's own workload certificate (SDS `default`), and require a
    /// client certificate the mesh's root signed (SDS `ROOTCA`).
    IstioMutual,
    /// As `Mutual`, but a client may present no certificate; one it presents is verified.
    OptionalMutual,
    /// Pass through to the cluster the client names in its SNI,
    /// `outbound_.PORT_.SUBSET_.HOST` (Istio's cross-network gateway).
    AutoPassthrough,
}

/// Where a terminating server's certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Credential {
    /// `credentialName`: a Secret in the gateway workload's namespace, served over SDS.
    Secret(String),
    /// A Gateway API `certificateRef` to a Secret of another namespace that a ReferenceGrant
    /// there lets the Gateway name: served over SDS as `kubernetes-gateway://NAMESPACE/NAME`
    /// (Istio's name for it).
    Granted { namespace: String, name: String },
    /// `serverCertificate`/`privateKey`/`caCertificates`: files the proxy reads itself.
    Files {
        cert: String,
        key: String,
        ca: Option<String>,
    },
}

impl Credential {
    /// The Secret it names, as (namespace, name), for a gateway workload in `workload_ns`: a
    /// `credentialName` is of the workload's namespace, a granted certificate of its own;
    /// `None` for files.
    pub fn secret<'a>(&'a self, workload_ns: &'a str) -> Option<(&'a str, &'a str)> {
        match self {
            Credential::Secret(name) => Some((workload_ns, name)),
            Credential::Granted { namespace, name } => Some((namespace, name)),
            Credential::Files { .. } => None,
        }
    }
}

/// A TLS Secret (`kubernetes.io/tls` with `tls.crt`/`tls.key`/`ca.crt`, or Istio's generic
/// form with `cert`/`key`/`cacert`), validated by the source: PEM that parses and a key
/// that matches the certificate, or the reason it cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TlsSecret {
    pub key: ConfigKey,
    /// The certificate chain and key (`None`: a CA-only Secret, or an invalid one).
    pub identity: Option<TlsIdentity>,
    /// The CA bundle (PEM) clients are verified against.
    pub ca: Option<String>,
    /// Why the Secret cannot be served (not PEM, key does not match...).
    pub problem: Option<String>,
}

impl TlsSecret {
    /// The certificate and key a server presents from this Secret, or why it has none to
    /// present (what a gateway's filter chain and a listener's status both say).
    pub fn serving_identity(&self) -> Result<&TlsIdentity, String> {
        if let Some(p) = &self.problem {
            return Err(format!("cannot be served: {p}"));
        }
        self.identity.as_ref().ok_or_else(|| {
            "holds no certificate and key (tls.crt and tls.key, or cert and key)".to_string()
        })
    }
}

/// A certificate chain with its private key.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TlsIdentity {
    pub cert_chain: String,
    pub private_key: String,
    /// SHA-256 of the leaf certificate's DER, hex: how the Secret is shown anywhere.
    pub fingerprint: String,
}

/// Key material never reaches a log or a debug answer through `{:?}`.
impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsIdentity(sha256:{}, key redacted)", self.fingerprint)
    }
}
