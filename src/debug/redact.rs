//! Secrets as people see them: the private key replaced by `[redacted]` and the
//! certificate chain by the SHA-256 fingerprint of its leaf (`sha256:…`), as Envoy's own
//! config dump redacts keys. Every body the debug port shows (config dumps, CSDS, history
//! diffs, `proxy-config`) passes through here; proxies get the real body over xDS only.

use dataflows::model::{Body, ResourceType};
use envoy_types::pb::envoy::config::core::v3::{data_source::Specifier, DataSource};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{secret, Secret};
use prost::Message;
use std::borrow::Cow;

/// What stands in for a private key.
pub const REDACTED: &str = "[redacted]";

fn shown(text: &str) -> DataSource {
    DataSource {
        specifier: Some(Specifier::InlineString(text.to_string())),
        ..Default::default()
    }
}

/// `sha256:HEX` of the first certificate of an inline PEM chain.
fn fingerprint(source: &Option<DataSource>) -> Option<String> {
    use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};
    let pem = match source.as_ref()?.specifier.as_ref()? {
        Specifier::InlineString(s) => s.as_bytes().to_vec(),
        Specifier::InlineBytes(b) => b.clone(),
        // A file name or environment variable is no secret.
        _ => return None,
    };
    let der = CertificateDer::pem_slice_iter(&pem).next()?.ok()?;
    // The digest the source shows the Secret by (`config::secret`, which this layer may not
    // import).
    let digest = ring::digest::digest(&ring::digest::SHA256, &der);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("sha256:{hex}"))
}

/// An encoded resource of type `type_url`, redacted if it is a Secret (an undecodable
/// Secret is emptied: what it held is not shown either).
pub fn bytes<'a>(type_url: &str, bytes: &'a [u8]) -> Cow<'a, [u8]> {
    if type_url != ResourceType::Secret.type_url() {
        return Cow::Borrowed(bytes);
    }
    let Ok(mut s) = Secret::decode(bytes) else {
        return Cow::Owned(Vec::new());
    };
    if let Some(secret::Type::TlsCertificate(c)) = &mut s.r#type {
        let inline = |d: &Option<DataSource>| {
            matches!(
                d.as_ref().and_then(|d| d.specifier.as_ref()),
                Some(Specifier::InlineString(_) | Specifier::InlineBytes(_))
            )
        };
        // A chain is public, but long: shown by fingerprint. Redacting twice keeps the
        // fingerprint (it is no PEM any more).
        if inline(&c.certificate_chain) {
            if let Some(fp) = fingerprint(&c.certificate_chain) {
                c.certificate_chain = Some(shown(&fp));
            }
        }
        if c.private_key.is_some() {
            c.private_key = Some(shown(REDACTED));
        }
        c.password = None;
    }
    Cow::Owned(s.encode_to_vec())
}

/// A body as [`bytes`] redacts it.
pub fn body(t: ResourceType, b: Body) -> Body {
    match bytes(t.type_url(), &b.0) {
        Cow::Borrowed(_) => b,
        Cow::Owned(v) => Body(v.into()),
    }
}
