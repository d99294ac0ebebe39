//! Istio's names: of the clusters it generates (`outbound|PORT|SUBSET|HOST`,
//! `inbound|PORT||`, the two fallbacks) and of workload identities (SPIFFE). They live in
//! the model so records can name a cluster without `translate`, which re-exports them.

/// Istio's outbound cluster name: `outbound|PORT|SUBSET|HOST`.
pub fn outbound_cluster_name(port: u16, subset: Option<&str>, host: &str) -> String {
    format!("outbound|{}|{}|{}", port, subset.unwrap_or(""), host)
}

/// The parts of an outbound cluster name `outbound|PORT|SUBSET|HOST`: (PORT, SUBSET, HOST)
/// as written; `None` for another name.
pub fn outbound_cluster_parts(name: &str) -> Option<(&str, &str, &str)> {
    let mut parts = name.splitn(4, '|');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("outbound"), Some(port), Some(subset), Some(host)) => Some((port, subset, host)),
        _ => None,
    }
}

/// The host of an outbound cluster name ("" for another name).
pub fn outbound_cluster_host(name: &str) -> &str {
    outbound_cluster_parts(name).map_or("", |(_, _, host)| host)
}

/// Istio's inbound cluster name: `inbound|PORT||`.
pub fn inbound_cluster_name(port: u16) -> String {
    format!("inbound|{port}||")
}

pub const PASSTHROUGH_CLUSTER: &str = "PassthroughCluster";
pub const BLACKHOLE_CLUSTER: &str = "BlackHoleCluster";

/// The SPIFFE identity of workloads of `namespace` running as `service_account` in
/// `trust_domain`.
pub fn spiffe_id(trust_domain: &str, namespace: &str, service_account: &str) -> String {
    format!("spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}")
}

/// The SDS name prefix of a certificate and key a proxy reads from its own files
/// (`file-cert:CERT~KEY`, Istio's; see `translate::secret::file_secret`).
pub const FILE_CERT_PREFIX: &str = "file-cert:";
/// The SDS name prefix of a CA bundle a proxy reads from its own file (`file-root:CA`,
/// Istio's; `file-root:CA~CRL` with a CRL).
pub const FILE_ROOT_PREFIX: &str = "file-root:";

/// The files behind a [`FILE_CERT_PREFIX`] or [`FILE_ROOT_PREFIX`] SDS name, read in one place
/// for the builder of the secret, the simulation and the xDS server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileSecret<'a> {
    /// `file-cert:CERT~KEY`.
    Cert { cert: &'a str, key: &'a str },
    /// `file-root:CA`, or `file-root:CA~CRL`.
    Root { ca: &'a str, crl: Option<&'a str> },
}

impl<'a> FileSecret<'a> {
    /// `None` for any other name.
    pub fn parse(name: &'a str) -> Option<Self> {
        if let Some(rest) = name.strip_prefix(FILE_CERT_PREFIX) {
            let (cert, key) = rest.split_once('~')?;
            return Some(FileSecret::Cert { cert, key });
        }
        let rest = name.strip_prefix(FILE_ROOT_PREFIX)?;
        Some(match rest.split_once('~') {
            Some((ca, crl)) => FileSecret::Root { ca, crl: Some(crl) },
            None => FileSecret::Root {
                ca: rest,
                crl: None,
            },
        })
    }
}
