//! Who may speak for which proxy. A stream's workload identity (namespace and service
//! account) comes only from what it authenticated: the SPIFFE identity of its client
//! certificate (`spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT`, under mTLS) or a
//! Kubernetes service-account token checked with TokenReview ([`super::token_review`]). The
//! node's claims may only repeat it ([`bind`]): a NAMESPACE or SERVICE_ACCOUNT that differs is
//! refused, one left out is taken from the identity.
//!
//! A stream with no such identity (plaintext, TLS without client certificates, the shared
//! `--token-file`) is served its config but no key material ([`Trust::keys`]) unless the
//! operator says otherwise (`serve --insecure-serve-keys`): otherwise any client could claim
//! any identity and take its certificate and key.

pub use super::identity::{Denied, Identity};
use super::token_review::TokenReviewer;
use dataflows::model::Proxy;
use std::path::PathBuf;

/// Authentication settings of the xDS server.
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// Check client certificate identities (set when mTLS is on).
    pub require_spiffe: bool,
    pub trust_domain: String,
    /// A file holding the token clients must send as `authorization: Bearer TOKEN`; re-read
    /// for each new stream, so rotating it needs no restart. It admits a client, it proves
    /// no identity.
    pub token_file: Option<PathBuf>,
    /// Review the bearer token of each stream with the Kubernetes API (per-workload
    /// identity); a stream without a valid one is refused unless its certificate proves it.
    pub token_review: Option<TokenReviewer>,
    /// Serve certificates, keys and `kubernetes://` Secrets to streams that proved no
    /// identity (`--insecure-serve-keys`: the demo, trusted single-user setups).
    pub insecure_serve_keys: bool,
}

/// What a stream may be given, from what it proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trust {
    pub identity: Option<Identity>,
    /// Certificates, keys and `kubernetes://` Secrets may be sent.
    pub keys: bool,
}

/// A SPIFFE workload identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpiffeId {
    pub trust_domain: String,
    pub namespace: String,
    pub service_account: String,
}

/// Parses `spiffe://TD/ns/NS/sa/SA`.
pub fn parse_spiffe(uri: &str) -> Option<SpiffeId> {
    let rest = uri.strip_prefix("spiffe://")?;
    let mut parts = rest.split('/');
    let td = parts.next()?;
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some("ns"), Some(ns), Some("sa"), Some(sa), None)
            if !td.is_empty() && !ns.is_empty() && !sa.is_empty() =>
        {
            Some(SpiffeId {
                trust_domain: td.into(),
                namespace: ns.into(),
                service_account: sa.into(),
            })
        }
        _ => None,
    }
}

/// The SPIFFE identities in a DER certificate's URI SANs.
pub fn spiffe_ids(cert_der: &[u8]) -> Vec<SpiffeId> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert_der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| {
            if let GeneralName::URI(u) = n {
                parse_spiffe(u)
            } else {
                None
            }
        })
        .collect()
}

/// Binds a proxy's claims to the identity its stream proved: the namespace must be the
/// identity's, a SERVICE_ACCOUNT given must be the identity's, and one not given becomes
/// it. Without an identity the claims stand (and no key material is served on them).
pub fn bind(identity: Option<&Identity>, proxy: &mut Proxy) -> Result<(), Denied> {
    let Some(id) = identity else {
        return Ok(());
    };
    if proxy.namespace != id.namespace {
        return Err(Denied::PermissionDenied(format!(
            "node {:?} claims namespace {:?}, but its {} is of namespace {:?}",
            proxy.id, proxy.namespace, id.by, id.namespace
        )));
    }
    match &proxy.service_account {
        Some(sa) if *sa != id.service_account => Err(Denied::PermissionDenied(format!(
            "node {:?} claims SERVICE_ACCOUNT {sa:?}, but its {} is of service account {:?}",
            proxy.id, id.by, id.service_account
        ))),
        _ => {
            proxy.service_account = Some(id.service_account.clone());
            Ok(())
        }
    }
}

impl AuthConfig {
    /// The identity a stream proved, from its client certificate (under mTLS) or its
    /// bearer token (with TokenReview); `None` where the server checks neither.
    pub async fn authenticate(
        &self,
        leaf_der: Option<&[u8]>,
        authorization: Option<&str>,
    ) -> Result<Option<Identity>, Denied> {
        if self.require_spiffe {
            return self.certificate_identity(leaf_der).map(Some);
        }
        if let Some(reviewer) = &self.token_review {
            // A client certificate of the mesh (TLS with a client CA is checked above; here
            // none is required) is not looked at: only the token proves.
            let Some(token) = authorization.and_then(|a| a.strip_prefix("Bearer ")) else {
                return Err(Denied::Unauthenticated(
                    "a service-account token is required (authorization: Bearer …)".into(),
                ));
            };
            return reviewer.review(token.trim()).await.map(Some);
        }
        Ok(None)
    }

    /// What a stream that proved `identity` may be given.
    pub fn trust(&self, identity: Option<Identity>) -> Trust {
        Trust {
            keys: identity.is_some() || self.insecure_serve_keys,
            identity,
        }
    }

    /// Checks the shared bearer token of a new stream (`--token-file`).
    pub fn check_token(&self, authorization: Option<&str>) -> Result<(), Denied> {
        let Some(path) = &self.token_file else {
            return Ok(());
        };
        let expected = std::fs::read_to_string(path).map_err(|e| {
            Denied::Unauthenticated(format!("the server cannot read its token file: {e}"))
        })?;
        let expected = expected.trim();
        match authorization.and_then(|a| a.strip_prefix("Bearer ")) {
            Some(t) if !expected.is_empty() && t.trim() == expected => Ok(()),
            Some(_) => Err(Denied::Unauthenticated(
                "the bearer token is not valid".into(),
            )),
            None => Err(Denied::Unauthenticated(
                "a bearer token is required (authorization: Bearer …)".into(),
            )),
        }
    }

    /// The one SPIFFE identity of the trust domain the client certificate carries.
    fn certificate_identity(&self, leaf_der: Option<&[u8]>) -> Result<Identity, Denied> {
        let Some(der) = leaf_der else {
            return Err(Denied::Unauthenticated(
                "a client certificate is required".into(),
            ));
        };
        let ids = spiffe_ids(der);
        if ids.is_empty() {
            return Err(Denied::Unauthenticated(
                "the client certificate has no SPIFFE URI SAN".into(),
            ));
        }
        let mine: Vec<&SpiffeId> = ids
            .iter()
            .filter(|id| id.trust_domain == self.trust_domain)
            .collect();
        if let [id] = mine.as_slice() {
            return Ok(Identity {
                namespace: id.namespace.clone(),
                service_account: id.service_account.clone(),
                by: format!(
                    "client certificate (spiffe://{}/ns/{}/sa/{})",
                    id.trust_domain, id.namespace, id.service_account
                ),
            });
        }
        let shown: Vec<String> = ids
            .iter()
            .map(|i| {
                format!(
                    "spiffe://{}/ns/{}/sa/{}",
                    i.trust_domain, i.namespace, i.service_account
                )
            })
            .collect();
        Err(Denied::PermissionDenied(format!(
            "the client certificate must carry one identity of trust domain {:?}; it carries {}",
            self.trust_domain,
            shown.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_spiffe_ids() {
        assert_eq!(
            parse_spiffe("spiffe://cluster.local/ns/default/sa/bookinfo"),
            Some(SpiffeId {
                trust_domain: "cluster.local".into(),
                namespace: "default".into(),
                service_account: "bookinfo".into()
            })
        );
        for bad in [
            "spiffe://cluster.local/ns/default",
            "https://x/ns/a/sa/b",
            "spiffe:///ns/a/sa/b",
            "spiffe://td/ns/a/sa/b/extra",
        ] {
            assert_eq!(parse_spiffe(bad), None, "{bad}");
        }
    }

    #[test]
    fn token_checks() {
        let dir = std::env::temp_dir().join(format!("meshflow-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let auth = AuthConfig {
            token_file: Some(file.clone()),
            ..Default::default()
        };
        assert!(auth.check_token(Some("Bearer s3cret")).is_ok());
        assert!(matches!(
            auth.check_token(Some("Bearer nope")),
            Err(Denied::Unauthenticated(_))
        ));
        assert!(matches!(
            auth.check_token(None),
            Err(Denied::Unauthenticated(_))
        ));
        std::fs::write(&file, "rotated").unwrap();
        assert!(
            auth.check_token(Some("Bearer rotated")).is_ok(),
            "re-read on each stream"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
