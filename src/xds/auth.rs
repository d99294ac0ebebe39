//! Who may speak for which proxy: the SPIFFE identity of a client certificate
//! (`spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT`) must match the namespace the
//! proxy claims, and an optional bearer token (as istio-agent sends) must match a token file.

use std::path::PathBuf;

/// Authentication settings of the xDS server.
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// Check client certificate identities (set when mTLS is on).
    pub require_spiffe: bool,
    pub trust_domain: String,
    /// A file holding the token clients must send as `authorization: Bearer TOKEN`; re-read
    /// for each new stream, so rotating it needs no restart.
    pub token_file: Option<PathBuf>,
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

/// Why a stream is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No or wrong credentials (maps to UNAUTHENTICATED).
    Unauthenticated(String),
    /// Valid credentials for something else (maps to PERMISSION_DENIED).
    PermissionDenied(String),
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denied::Unauthenticated(m) | Denied::PermissionDenied(m) => f.write_str(m),
        }
    }
}

impl AuthConfig {
    /// Checks the bearer token of a new stream.
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

    /// Checks that the client certificate may speak for a proxy in `namespace`.
    pub fn check_identity(&self, leaf_der: Option<&[u8]>, namespace: &str) -> Result<(), Denied> {
        if !self.require_spiffe {
            return Ok(());
        }
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
        if ids
            .iter()
            .any(|id| id.trust_domain == self.trust_domain && id.namespace == namespace)
        {
            return Ok(());
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
            "identity {} may not speak for a proxy in namespace {namespace:?} (trust domain {:?})",
            shown.join(", "),
            self.trust_domain
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
