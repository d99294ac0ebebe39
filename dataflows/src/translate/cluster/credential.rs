//! DestinationRule `tls.credentialName` (modes SIMPLE and MUTUAL) on a client proxy: it
//! takes the certificates from the Secret of that name in its own namespace (Istio's rule:
//! "this secret must exist in the namespace of the proxy using the certificates"), served
//! over SDS under Istio's names: `kubernetes://NAME` for the client certificate and key
//! (MUTUAL), `kubernetes://NAME-cacert` for the CA the server is verified with (the
//! Secret's own `ca.crt`/`cacert`, else the `NAME-cacert` Secret's). A proxy that cannot be
//! served what its cluster needs (the Secret is missing from its namespace, unusable, or
//! lacks the certificate or the CA) gets that cluster failed closed, and an error names the
//! rule, the field and the Secret. Re-exported as `crate::client_tls::ClientSecrets`.

use crate::model::{
    ConfigError, ConfigKey, DestinationRule, ErrorCode, Resource, TlsSecret, UpstreamTls,
};
use crate::translate::secret;

/// The Secrets a client proxy may take certificates from: those of its own namespace.
/// The default (no namespace, no Secrets) serves nothing: every `credentialName` cluster
/// built with it fails closed.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientSecrets<'a> {
    pub namespace: &'a str,
    pub secrets: &'a [&'a TlsSecret],
}

impl<'a> ClientSecrets<'a> {
    fn find(&self, name: &str) -> Option<&'a TlsSecret> {
        self.secrets
            .iter()
            .copied()
            .find(|s| s.key.namespace == self.namespace && s.key.name == name)
    }

    /// The SDS resources `tls` needs (each with the Secret it comes from), or why this
    /// proxy cannot have them. Nothing for a `tls` without `credentialName`.
    pub fn resolve(&self, tls: &UpstreamTls) -> Result<Vec<(Resource, ConfigKey)>, String> {
        let Some(name) = tls.credential.as_deref() else {
            return Ok(Vec::new());
        };
        let ns = self.namespace;
        let main = self.find(name);
        if let Some(p) = main.and_then(|s| s.problem.as_deref()) {
            return Err(format!("Secret {ns}/{name} cannot be served: {p}"));
        }
        let mut out = Vec::new();
        if tls.mutual {
            let Some(s) = main else {
                return Err(format!(
                    "Secret {ns}/{name} does not exist (a client proxy takes Secrets of its \
                     own namespace only)"
                ));
            };
            let Some(id) = &s.identity else {
                return Err(format!(
                    "Secret {ns}/{name} holds no certificate and key (tls.crt and tls.key, or \
                     cert and key) for MUTUAL"
                ));
            };
            out.push((
                secret::certificate(&secret::certificate_name(name), id),
                s.key.clone(),
            ));
        }
        if tls.insecure_skip_verify {
            return Ok(out);
        }
        let companion = format!("{name}-cacert");
        let ca: (&str, &TlsSecret) = match main.and_then(|s| s.ca.as_deref().map(|ca| (ca, s))) {
            Some(found) => found,
            None => match self.find(&companion) {
                Some(c) if c.problem.is_some() => {
                    return Err(format!(
                        "Secret {ns}/{companion} (the CA) cannot be served: {}",
                        c.problem.as_deref().unwrap_or_default()
                    ))
                }
                Some(c) if c.ca.is_some() => (c.ca.as_deref().unwrap_or_default(), c),
                _ if main.is_none() => {
                    return Err(format!(
                        "Secret {ns}/{name} does not exist, nor does {ns}/{companion} (a \
                         client proxy takes Secrets of its own namespace only)"
                    ))
                }
                _ => {
                    return Err(format!(
                        "Secret {ns}/{name} has no CA certificate (ca.crt or cacert) to verify \
                         the server with, nor does a Secret {ns}/{companion}"
                    ))
                }
            },
        };
        out.push((
            secret::validation(&secret::ca_name(name), ca.0),
            ca.1.key.clone(),
        ));
        Ok(out)
    }

    /// The SDS resources of every `credentialName` of `dr` this proxy can be served, each
    /// with the Secrets and the rule it comes from.
    pub fn resources(&self, dr: &DestinationRule) -> Vec<(Resource, Vec<ConfigKey>)> {
        let mut out: Vec<(Resource, Vec<ConfigKey>)> = dr
            .credential_tls()
            .into_iter()
            .filter_map(|t| self.resolve(t).ok())
            .flatten()
            .map(|(r, from)| (r, vec![from, dr.key.clone()]))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// What is said of every `credentialName` of `dr` this proxy cannot be served.
    pub fn errors(&self, dr: &DestinationRule) -> Vec<ConfigError> {
        let mut out: Vec<ConfigError> = dr
            .credential_tls()
            .into_iter()
            .filter_map(|t| {
                let why = self.resolve(t).err()?;
                Some(ConfigError {
                    object: dr.key.clone(),
                    code: ErrorCode::DestinationRuleSecret,
                    message: format!(
                        "{}.credentialName: {why}; the rule's clusters this tls applies to fail \
                         closed (no endpoints) for proxies in namespace {}",
                        t.field, self.namespace
                    ),
                })
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, TlsIdentity};

    fn secret(name: &str, id: bool, ca: Option<&str>, problem: Option<&str>) -> TlsSecret {
        TlsSecret {
            key: ConfigKey::new(Kind::Secret, "ns", name),
            identity: id.then(|| TlsIdentity {
                cert_chain: "CERT".into(),
                private_key: "KEY".into(),
                fingerprint: "fp".into(),
            }),
            ca: ca.map(String::from),
            problem: problem.map(String::from),
        }
    }

    fn tls(mutual: bool) -> UpstreamTls {
        UpstreamTls {
            credential: Some("client".into()),
            mutual,
            field: "spec.trafficPolicy.tls".into(),
            ..Default::default()
        }
    }

    fn names(r: Result<Vec<(Resource, ConfigKey)>, String>) -> Result<Vec<String>, String> {
        r.map(|v| {
            v.into_iter()
                .map(|(r, k)| format!("{} {}", r.name, k.name))
                .collect()
        })
    }

    #[test]
    fn a_secret_of_the_proxys_namespace_serves_the_certificate_and_the_ca() {
        let full = secret("client", true, Some("CA"), None);
        let companion = secret("client-cacert", false, Some("CA2"), None);
        let list = [&full, &companion];
        let here = ClientSecrets {
            namespace: "ns",
            secrets: &list,
        };
        assert_eq!(
            names(here.resolve(&tls(true))),
            Ok(vec![
                "kubernetes://client client".to_string(),
                "kubernetes://client-cacert client".to_string()
            ])
        );
        // SIMPLE needs the CA only.
        assert_eq!(
            names(here.resolve(&tls(false))),
            Ok(vec!["kubernetes://client-cacert client".to_string()])
        );
        // Another namespace's proxy is served nothing: the error says where it looked.
        let there = ClientSecrets {
            namespace: "other",
            ..here
        };
        let e = there.resolve(&tls(true)).unwrap_err();
        assert!(e.contains("other/client does not exist"), "{e}");
        // The CA from the companion when the Secret has none.
        let no_ca = secret("client", true, None, None);
        let list = [&no_ca, &companion];
        let here = ClientSecrets {
            namespace: "ns",
            secrets: &list,
        };
        assert_eq!(
            names(here.resolve(&tls(false))),
            Ok(vec!["kubernetes://client-cacert client-cacert".to_string()])
        );
        // Neither has a CA: refused; unless the server is not verified.
        let list = [&no_ca];
        let here = ClientSecrets {
            namespace: "ns",
            secrets: &list,
        };
        assert!(here.resolve(&tls(true)).unwrap_err().contains("no CA"));
        let skip = UpstreamTls {
            insecure_skip_verify: true,
            ..tls(true)
        };
        assert_eq!(
            names(here.resolve(&skip)),
            Ok(vec!["kubernetes://client client".to_string()])
        );
        // A CA-only Secret cannot give MUTUAL its certificate; an invalid one serves nothing.
        let ca_only = secret("client", false, Some("CA"), None);
        let list = [&ca_only];
        let here = ClientSecrets {
            namespace: "ns",
            secrets: &list,
        };
        assert!(here
            .resolve(&tls(true))
            .unwrap_err()
            .contains("no certificate"));
        assert!(here.resolve(&tls(false)).is_ok());
        let bad = secret("client", true, Some("CA"), Some("tls.key does not match"));
        let list = [&bad];
        let here = ClientSecrets {
            namespace: "ns",
            secrets: &list,
        };
        assert!(here
            .resolve(&tls(false))
            .unwrap_err()
            .contains("does not match"));
    }
}
