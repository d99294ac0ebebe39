//! Kubernetes Secrets holding TLS material, as gateways use them (`credentialName`):
//! `kubernetes.io/tls` (`tls.crt`, `tls.key`, optional `ca.crt`) or Istio's generic form
//! (`cert`, `key`, `cacert`), and CA-only Secrets (the `NAME-cacert` companion of a MUTUAL
//! server). `data` is base64, `stringData` plain (and wins, as the API server merges it).
//!
//! A Secret that cannot be served (not PEM, a key that does not match its certificate) is
//! still a record, carrying why: the gateway naming it then fails closed with an error that
//! says so. Key material is never put in a message; a Secret is shown by its certificate's
//! SHA-256 fingerprint.
//!
//! ConfigMaps are read here too, for the one thing meshflow takes from them: the CA bundle
//! (`ca.crt`) a BackendTLSPolicy names.

use super::findings::{Finding, Level};
use super::Invalid;
use base64::Engine;
use dataflows::model::{ConfigKey, Record, TlsIdentity, TlsSecret};
use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use tokio_rustls::rustls::crypto::ring::sign::any_supported_type;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::sign::CertifiedKey;

/// The Secret's keys: `data` decoded, `stringData` over it.
fn entries(value: &Value) -> Result<BTreeMap<String, Vec<u8>>, Invalid> {
    let mut out = BTreeMap::new();
    if let Some(Value::Mapping(data)) = value.get("data") {
        for (k, v) in data {
            let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
                continue;
            };
            let clean: String = v.chars().filter(|c| !c.is_whitespace()).collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(clean)
                .map_err(|_| Invalid::field(format!("data.{k}"), "is not base64"))?;
            out.insert(k.to_string(), bytes);
        }
    }
    if let Some(Value::Mapping(data)) = value.get("stringData") {
        for (k, v) in data {
            if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                out.insert(k.to_string(), v.as_bytes().to_vec());
            }
        }
    }
    Ok(out)
}

/// The first of `names` present.
fn pick<'a>(entries: &'a BTreeMap<String, Vec<u8>>, names: &[&str]) -> Option<(&'a str, &'a [u8])> {
    names
        .iter()
        .find_map(|n| entries.get_key_value(*n))
        .map(|(k, v)| (k.as_str(), v.as_slice()))
}

/// SHA-256 of DER, hex.
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The certificates of a PEM bundle, or why there are none.
fn certificates(key: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{key} is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} holds no PEM certificate"));
    }
    for c in &certs {
        x509_parser::parse_x509_certificate(c)
            .map_err(|e| format!("{key} holds a certificate that does not parse: {e}"))?;
    }
    Ok(certs)
}

/// How long before its end a certificate read is reported as expiring.
const EXPIRY_NOTICE_S: i64 = 30 * 24 * 3600;

/// What to say of a certificate at `field` (SHA-256 `fp`) valid until `not_after` (seconds
/// since the Unix epoch; `until` as the certificate writes it), read at `now`: expired, or
/// expiring within [`EXPIRY_NOTICE_S`]; nothing otherwise.
pub fn expiry_finding(
    field: &str,
    fp: &str,
    (not_after, until): (i64, &str),
    now: i64,
) -> Option<Finding> {
    let message = if not_after <= now {
        format!("the certificate (sha256:{fp}) expired on {until}: clients refuse it")
    } else if not_after - now <= EXPIRY_NOTICE_S {
        let days = (not_after - now) / (24 * 3600);
        format!("the certificate (sha256:{fp}) expires on {until}, in {days} days: renew it")
    } else {
        return None;
    };
    Some(Finding {
        level: Level::Expiring,
        field: field.to_string(),
        message,
    })
}

/// Each certificate of the PEM bundle at `key` that has expired or expires soon, as read
/// now (a Secret is checked when it is read: by `validate`, and on each change `serve` sees).
fn expiries(key: &str, pem: &[u8], findings: &mut Vec<Finding>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    for c in CertificateDer::pem_slice_iter(pem).flatten() {
        if let Ok((_, x509)) = x509_parser::parse_x509_certificate(&c) {
            let end = x509.validity().not_after;
            let until = end.to_string();
            findings.extend(expiry_finding(
                &format!("data.{key}"),
                &fingerprint(&c),
                (end.timestamp(), &until),
                now,
            ));
        }
    }
}

/// The certificate chain and key, checked: both PEM, and the key the certificate's.
fn identity(cert: (&str, &[u8]), key: (&str, &[u8])) -> Result<TlsIdentity, String> {
    let chain = certificates(cert.0, cert.1)?;
    // Never the parser's own message for a key: it may quote what it read.
    let private = PrivateKeyDer::from_pem_slice(key.1)
        .map_err(|_| format!("{} is not a PEM private key", key.0))?;
    let signer = any_supported_type(&private).map_err(|_| {
        format!(
            "{} is not a supported private key (RSA, ECDSA, Ed25519)",
            key.0
        )
    })?;
    let fp = fingerprint(&chain[0]);
    let certified = CertifiedKey::new(chain, signer);
    if let Err(e) = certified.keys_match() {
        use tokio_rustls::rustls::{Error, InconsistentKeys};
        if !matches!(e, Error::InconsistentKeys(InconsistentKeys::Unknown)) {
            return Err(format!(
                "{} does not match the certificate in {} (sha256:{fp})",
                key.0, cert.0
            ));
        }
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok(TlsIdentity {
        cert_chain: text(cert.1),
        private_key: text(key.1),
        fingerprint: fp,
    })
}

/// A ConfigMap's record: the CA bundle of its `ca.crt` (PEM certificates that parse), or
/// why it has none. Every ConfigMap is one (a BackendTLSPolicy naming one without a CA
/// says so); nothing else of a ConfigMap is read.
pub fn ca_config_map(key: &ConfigKey, value: &Value) -> Result<Vec<Record>, Invalid> {
    let ca = value
        .get("data")
        .and_then(|d| d.get(dataflows::rules::backend_tls::CA_KEY))
        .and_then(Value::as_str);
    let (ca, problem) = match ca {
        None => (None, Some("has no ca.crt".to_string())),
        Some("") => (None, Some("has an empty ca.crt".to_string())),
        Some(pem) => match certificates("ca.crt", pem.as_bytes()) {
            Ok(_) => (Some(pem.to_string()), None),
            Err(e) => (None, Some(e)),
        },
    };
    Ok(vec![Record::GatewayApi(
        dataflows::model::GatewayApiObject::ConfigMap(dataflows::model::CaConfigMap {
            key: key.clone(),
            ca,
            problem,
        }),
    )])
}

/// A Secret's record: its TLS material, or why it cannot be served. Secrets with no TLS
/// keys at all are records too (without material), so a gateway naming one says so.
pub fn secret(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>, Invalid> {
    let entries = entries(value)?;
    let cert = pick(&entries, &["tls.crt", "cert"]);
    let private = pick(&entries, &["tls.key", "key"]);
    let ca = pick(&entries, &["ca.crt", "cacert"]);
    for (name, pem) in [cert, ca].into_iter().flatten() {
        expiries(name, pem, findings);
    }
    let mut problem = None;
    let identity = match (cert, private) {
        (Some(c), Some(k)) => identity(c, k).map_err(|e| problem = Some(e)).ok(),
        (Some((c, _)), None) => {
            problem = Some(format!("has {c} but no private key (tls.key or key)"));
            None
        }
        (None, Some((k, _))) => {
            problem = Some(format!("has {k} but no certificate (tls.crt or cert)"));
            None
        }
        (None, None) => None,
    };
    let ca = match ca {
        Some((name, pem)) => match certificates(name, pem) {
            Ok(_) => Some(String::from_utf8_lossy(pem).into_owned()),
            Err(e) => {
                problem.get_or_insert(e);
                None
            }
        },
        None => None,
    };
    if identity.is_none() && ca.is_none() && problem.is_none() {
        let t = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("Opaque");
        problem = Some(format!(
            "holds no TLS material (type {t}: no tls.crt/tls.key, cert/key, ca.crt or cacert)"
        ));
    }
    Ok(vec![Record::Secret(TlsSecret {
        key: key.clone(),
        identity: if problem.is_some() { None } else { identity },
        ca: if problem.is_some() { None } else { ca },
        problem,
    })])
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::Kind;

    fn pair() -> (String, String) {
        let kp = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.example.com".into()])
            .unwrap()
            .self_signed(&kp)
            .unwrap();
        (cert.pem(), kp.serialize_pem())
    }

    fn parse(yaml: &str) -> TlsSecret {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let key = ConfigKey::new(Kind::Secret, "istio-system", "cred");
        match secret(&key, &v, &mut Vec::new()).expect("read").remove(0) {
            Record::Secret(s) => s,
            other => panic!("{other:?}"),
        }
    }

    fn indent(pem: &str) -> String {
        pem.lines().map(|l| format!("    {l}\n")).collect()
    }

    #[test]
    fn string_data_and_base64_data_read_alike() {
        let (cert, key) = pair();
        let plain = parse(&format!(
            "type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(&cert),
            indent(&key)
        ));
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let encoded = parse(&format!(
            "type: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
            b64(&cert),
            b64(&key)
        ));
        assert_eq!(plain.problem, None);
        assert_eq!(plain, encoded);
        let id = plain.identity.unwrap();
        assert_eq!(id.fingerprint.len(), 64);
        assert!(
            !format!("{id:?}").contains("PRIVATE KEY"),
            "Debug redacts the key"
        );
    }

    #[test]
    fn generic_keys_and_ca_only_secrets() {
        let (cert, key) = pair();
        let s = parse(&format!(
            "stringData:\n  cert: |\n{}  key: |\n{}  cacert: |\n{}",
            indent(&cert),
            indent(&key),
            indent(&cert)
        ));
        assert!(s.identity.is_some() && s.ca.is_some(), "{:?}", s.problem);
        let ca_only = parse(&format!("stringData:\n  ca.crt: |\n{}", indent(&cert)));
        assert!(ca_only.identity.is_none() && ca_only.ca.is_some());
        assert_eq!(ca_only.problem, None);
    }

    #[test]
    fn a_key_of_another_certificate_or_no_pem_is_a_problem_naming_it() {
        let (cert, _) = pair();
        let (_, other_key) = pair();
        let s = parse(&format!(
            "stringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(&cert),
            indent(&other_key)
        ));
        let p = s.problem.unwrap();
        assert!(p.contains("tls.key does not match"), "{p}");
        assert!(!p.contains("PRIVATE"), "{p}");
        assert!(s.identity.is_none());
        let s = parse("stringData:\n  tls.crt: hello\n  tls.key: world\n");
        assert!(s
            .problem
            .unwrap()
            .contains("tls.crt holds no PEM certificate"));
        let s = parse("type: Opaque\nstringData:\n  password: x\n");
        assert!(s.problem.unwrap().contains("holds no TLS material"));
    }

    /// A certificate past its end, or within 30 days of it, is reported at its key when the
    /// Secret is read (MF0038, a warning); one further off says nothing.
    #[test]
    fn expired_and_expiring_certificates_are_reported() {
        let day = 24 * 3600;
        let now = 1_800_000_000;
        let expired =
            expiry_finding("data.tls.crt", "ab", (now - day, "then"), now).expect("expired");
        assert_eq!(expired.level, Level::Expiring);
        assert_eq!(expired.field, "data.tls.crt");
        assert!(
            expired.message.contains("expired on then"),
            "{}",
            expired.message
        );
        let soon =
            expiry_finding("data.ca.crt", "ab", (now + 10 * day, "soon"), now).expect("soon");
        assert!(soon.message.contains("in 10 days"), "{}", soon.message);
        assert!(expiry_finding("data.tls.crt", "ab", (now + 40 * day, "later"), now).is_none());
        assert_eq!(
            Level::Expiring.message_code(),
            ("MF0038", "CertificateExpiring")
        );
        // Through a Secret: a certificate that ended yesterday.
        let kp = rcgen::KeyPair::generate().expect("a key");
        let mut params =
            rcgen::CertificateParams::new(vec!["old.example.com".into()]).expect("params");
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let cert = params.self_signed(&kp).expect("a certificate");
        let v: Value = serde_yaml_ng::from_str(&format!(
            "type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(&cert.pem()),
            indent(&kp.serialize_pem())
        ))
        .expect("YAML");
        let key = ConfigKey::new(Kind::Secret, "istio-system", "old");
        let mut findings = Vec::new();
        secret(&key, &v, &mut findings).expect("read");
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].field, "data.tls.crt");
        assert!(
            findings[0].message.contains("expired on"),
            "{}",
            findings[0].message
        );
    }
}
