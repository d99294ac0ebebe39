//! The workload CA: the mesh's root and the certificate of each workload identity
//! (`spiffe://TRUST_DOMAIN/ns/NS/sa/SA`), which proxies take over SDS as `default` for
//! `ISTIO_MUTUAL` and for their inbound mTLS.
//!
//! The signing certificate and key are Istio's plug-in CA idea (`serve --ca-cert --ca-key`,
//! as the `cacerts` Secret gives istiod): the certificate file may carry the chain up to the
//! root after the signing certificate, and its last certificate is the root proxies trust.
//! Without them a root is generated at start (said in the log), so every restart has a new
//! root, and every proxy is sent a new `ROOTCA` and `default`.
//!
//! Keys are made at random, so they are made here, where streams send them, never in the
//! dataflow: the dataflow carries a stand-in naming the identity
//! (`dataflows::translate::secret::workload_stand_in`), and [`WorkloadCa::substitute`]
//! replaces it by the issued certificate and key, one per identity (proxies of one identity
//! share it), renewed once half of its lifetime has passed. No key is logged, recorded in the history or shown
//! on the debug port: they hold the stand-in.
//!
//! Rotation: a certificate is valid for [`LEAF_VALIDITY`] (24 h, as Istio's) unless `serve
//! --workload-cert-ttl` says otherwise; once half of that has passed it is due
//! ([`WorkloadCa::rotate_due`]): the next substitution issues a new one, and serve has the
//! hub push it to the proxies of that identity, so a stolen certificate is good for a day
//! at most.

use dataflows::model::Body;
use dataflows::translate::secret;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// How long an issued workload certificate is valid by default (Istio's 24 h).
pub const LEAF_VALIDITY: Duration = Duration::from_secs(24 * 3600);
/// How long a generated root is valid.
const ROOT_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Clocks of proxies may be behind meshflow's.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);

/// Most identities whose certificates are kept; past it the cache starts over (proxies
/// keep what they were sent; a later stream is issued a new certificate).
const MAX_CACHED: usize = 100_000;

pub struct WorkloadCa {
    issuer: Issuer<'static, KeyPair>,
    /// Appended to every leaf: the signing certificate and any intermediates (not the root).
    chain_pem: String,
    /// What proxies verify peers against (SDS `ROOTCA`).
    root_pem: String,
    /// Whether the root was generated at start (no `--ca-cert`).
    pub generated: bool,
    /// Identity → the encoded `default` secret (certificate chain and key) and when it was
    /// issued.
    issued: Mutex<HashMap<String, (Body, std::time::Instant)>>,
    /// How long a workload certificate is valid; it is renewed after half of it.
    validity: Duration,
}

impl std::fmt::Debug for WorkloadCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("WorkloadCa")
            .field("generated", &self.generated)
            .finish_non_exhaustive()
    }
}

fn offset(d: Duration, later: bool) -> time::OffsetDateTime {
    let now = time::OffsetDateTime::now_utc();
    let d = time::Duration::try_from(d).unwrap_or(time::Duration::ZERO);
    if later {
        now + d
    } else {
        now - d
    }
}

/// The PEM blocks of certificates in `pem`, each re-encoded alone.
fn certificates(pem: &str) -> Result<Vec<String>, String> {
    use base64::Engine;
    use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|d| {
            let d = d.map_err(|e| format!("not a PEM certificate file: {e}"))?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(d.as_ref());
            let lines: Vec<String> = b64
                .as_bytes()
                .chunks(64)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            Ok(format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                lines.join("\n")
            ))
        })
        .collect()
}

impl WorkloadCa {
    /// A CA with a root generated now, named after `organization`.
    pub fn generate(organization: &str) -> Result<WorkloadCa, String> {
        let key = KeyPair::generate().map_err(|e| format!("generating the CA key: {e}"))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| format!("the CA certificate: {e}"))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
        params
            .distinguished_name
            .push(DnType::CommonName, "meshflow generated root");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = offset(CLOCK_SKEW, false);
        params.not_after = offset(ROOT_VALIDITY, true);
        let root_pem = params
            .self_signed(&key)
            .map_err(|e| format!("signing the CA certificate: {e}"))?
            .pem();
        Ok(WorkloadCa {
            issuer: Issuer::new(params, key),
            chain_pem: String::new(),
            root_pem,
            generated: true,
            issued: Mutex::default(),
            validity: LEAF_VALIDITY,
        })
    }

    /// A CA from a signing certificate (optionally followed by its chain up to the root)
    /// and its private key (PKCS#8 PEM).
    pub fn load(cert: &Path, key: &Path) -> Result<WorkloadCa, String> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))
        };
        let (cert_text, key_text) = (read(cert)?, read(key)?);
        let certs = certificates(&cert_text).map_err(|e| format!("{}: {e}", cert.display()))?;
        let Some(signing) = certs.first() else {
            return Err(format!("{}: holds no certificate", cert.display()));
        };
        let key_pair = KeyPair::from_pem(&key_text)
            .map_err(|e| format!("{}: not a PKCS#8 private key: {e}", key.display()))?;
        // A key that does not go with the certificate would sign certificates no proxy
        // accepts: refused at start rather than found out connection by connection.
        let der = rustls_pem_der(signing)?;
        let (_, x509) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        if &*x509.public_key().subject_public_key.data != key_pair.public_key_raw() {
            return Err(format!(
                "{} is not the key of the first certificate of {}",
                key.display(),
                cert.display()
            ));
        }
        if !x509.is_ca() {
            return Err(format!(
                "{}: its first certificate is not a CA certificate (basicConstraints CA:TRUE)",
                cert.display()
            ));
        }
        let issuer = Issuer::from_ca_cert_pem(signing, key_pair)
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        let root_pem = certs.last().cloned().unwrap_or_default();
        let chain_pem = if certs.len() > 1 {
            certs[..certs.len() - 1].concat()
        } else {
            String::new()
        };
        Ok(WorkloadCa {
            issuer,
            chain_pem,
            root_pem,
            generated: false,
            issued: Mutex::default(),
            validity: LEAF_VALIDITY,
        })
    }

    /// The CA with workload certificates valid for `validity` (at least a second).
    pub fn with_validity(mut self, validity: Duration) -> WorkloadCa {
        self.validity = validity.max(Duration::from_secs(1));
        self
    }

    /// How long a workload certificate is valid.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// The identities whose certificate has lived half of its validity: forgotten here, so
    /// the next substitution issues a new one. Serve pushes it to their proxies.
    pub fn rotate_due(&self) -> Vec<String> {
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let half = self.validity / 2;
        let due: Vec<String> = issued
            .iter()
            .filter(|(_, (_, at))| at.elapsed() >= half)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            issued.remove(id);
        }
        due
    }

    /// The root certificate proxies verify peers with (PEM; public).
    pub fn root_pem(&self) -> &str {
        &self.root_pem
    }

    /// A new certificate and key for `identity` (a SPIFFE URI): (chain PEM, key PEM).
    pub fn issue(&self, identity: &str) -> Result<(String, String), String> {
        let uri = rcgen::string::Ia5String::try_from(identity)
            .map_err(|e| format!("identity {identity:?}: {e}"))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| format!("a certificate for {identity}: {e}"))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = offset(CLOCK_SKEW, false);
        params.not_after = offset(self.validity, true);
        let key = KeyPair::generate().map_err(|e| format!("a key for {identity}: {e}"))?;
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("signing a certificate for {identity}: {e}"))?;
        Ok((
            format!("{}{}", leaf.pem(), self.chain_pem),
            key.serialize_pem(),
        ))
    }

    /// The body to send for a stored Secret body: a `default` stand-in becomes the
    /// identity's issued certificate (issued once, then kept); any other body is itself.
    /// `None` if issuing fails (logged; the resource is not sent).
    pub fn substitute(&self, body: &Body) -> Option<Body> {
        let Some(identity) = secret::stand_in_identity(&body.0) else {
            return Some(body.clone());
        };
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        // A certificate past half its life is renewed here too (a proxy that reconnects
        // before serve's next rotation round).
        match issued.get(&identity) {
            Some((b, at)) if at.elapsed() < self.validity / 2 => return Some(b.clone()),
            _ => {}
        }
        match self.issue(&identity) {
            Ok((chain, key)) => {
                if issued.len() >= MAX_CACHED {
                    issued.clear();
                }
                let b = Body(secret::workload_certificate(&chain, &key).into());
                issued.insert(identity.clone(), (b.clone(), std::time::Instant::now()));
                tracing::debug!(%identity, "workload certificate issued");
                Some(b)
            }
            Err(e) => {
                tracing::error!(%identity, error = %e, "cannot issue a workload certificate");
                None
            }
        }
    }
}

fn rustls_pem_der(pem: &str) -> Result<Vec<u8>, String> {
    use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map(|d| d.as_ref().to_vec())
        .map_err(|e| format!("not a PEM certificate: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn san_uris(pem: &str) -> Vec<String> {
        let der = rustls_pem_der(pem).unwrap();
        let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
        let sans = x.subject_alternative_name().unwrap().unwrap();
        sans.value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::URI(u) => Some(u.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_stand_in_becomes_a_certificate_of_its_identity_signed_by_the_root() {
        let ca = WorkloadCa::generate("cluster.local").unwrap();
        let id = "spiffe://cluster.local/ns/default/sa/reviews";
        let stand_in = secret::workload_stand_in(id, ca.root_pem());
        let body = ca.substitute(&stand_in.body).unwrap();
        use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{secret as s, Secret};
        use prost::Message;
        let decoded = Secret::decode(&*body.0).unwrap();
        assert_eq!(decoded.name, "default");
        let Some(s::Type::TlsCertificate(c)) = decoded.r#type else {
            panic!("not a certificate: {decoded:?}");
        };
        use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
        let text = |d: Option<envoy_types::pb::envoy::config::core::v3::DataSource>| match d
            .and_then(|d| d.specifier)
        {
            Some(Specifier::InlineString(s)) => s,
            other => panic!("not inline: {other:?}"),
        };
        let chain = text(c.certificate_chain);
        assert!(text(c.private_key).contains("PRIVATE KEY"));
        assert_eq!(san_uris(&chain), vec![id.to_string()]);
        // Signed by the root: verified with webpki, as a peer would.
        let root = rustls_pem_der(ca.root_pem()).unwrap();
        let (_, root_x) = x509_parser::parse_x509_certificate(&root).unwrap();
        let leaf = rustls_pem_der(&chain).unwrap();
        let (_, leaf_x) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        assert!(leaf_x.verify_signature(Some(root_x.public_key())).is_ok());
        // Issued once per identity.
        assert_eq!(ca.substitute(&stand_in.body).unwrap(), body);
        let other = secret::workload_stand_in("spiffe://cluster.local/ns/x/sa/y", ca.root_pem());
        assert_ne!(ca.substitute(&other.body).unwrap(), body);
    }

    #[test]
    fn other_secrets_pass_unchanged() {
        let ca = WorkloadCa::generate("cluster.local").unwrap();
        let root = secret::validation(secret::ROOT_CA, ca.root_pem());
        assert_eq!(ca.substitute(&root.body).unwrap(), root.body);
    }

    #[test]
    fn a_plugged_in_ca_is_checked_against_its_key() {
        let dir = std::env::temp_dir().join(format!("meshflow-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap().pem();
        std::fs::write(dir.join("ca.pem"), &cert).unwrap();
        std::fs::write(dir.join("ca-key.pem"), key.serialize_pem()).unwrap();
        let other = KeyPair::generate().unwrap();
        std::fs::write(dir.join("other-key.pem"), other.serialize_pem()).unwrap();
        let ca = WorkloadCa::load(&dir.join("ca.pem"), &dir.join("ca-key.pem")).unwrap();
        assert!(!ca.generated);
        assert_eq!(ca.root_pem().trim(), cert.trim());
        let e = WorkloadCa::load(&dir.join("ca.pem"), &dir.join("other-key.pem")).unwrap_err();
        assert!(e.contains("is not the key"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
