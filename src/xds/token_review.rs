//! Per-workload authentication by Kubernetes service-account token: the bearer token a
//! stream presents (as Istio's agent sends its pod's projected token) is checked with the
//! API server's TokenReview (`authentication.k8s.io/v1`), for the configured audiences
//! (Istio's default is `istio-ca`). A token the API server authenticates as
//! `system:serviceaccount:NS:SA`, for one of those audiences, proves that namespace and
//! service account; anything else is refused.

use super::identity::{Denied, Identity};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use std::time::Duration;

/// How long a review may take before the stream is refused (the API server is slow or gone).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest token sent for review: projected tokens are about a kilobyte.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Checks tokens with one cluster's TokenReview API.
#[derive(Clone)]
pub struct TokenReviewer {
    client: kube::Client,
    audiences: Vec<String>,
}

impl std::fmt::Debug for TokenReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewer")
            .field("audiences", &self.audiences)
            .finish_non_exhaustive()
    }
}

impl TokenReviewer {
    pub fn new(client: kube::Client, audiences: Vec<String>) -> TokenReviewer {
        TokenReviewer { client, audiences }
    }

    /// The identity `token` proves, or why it proves none.
    pub async fn review(&self, token: &str) -> Result<Identity, Denied> {
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(Denied::Unauthenticated(
                "the bearer token is empty or too long".into(),
            ));
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: Some(self.audiences.clone()),
            },
            ..Default::default()
        };
        let api: kube::Api<TokenReview> = kube::Api::all(self.client.clone());
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            api.create(&kube::api::PostParams::default(), &review),
        )
        .await
        .map_err(|_| Denied::Unauthenticated("the token review timed out".into()))?
        .map_err(|e| {
            tracing::warn!(error = %e, "TokenReview failed");
            Denied::Unauthenticated(format!("the token could not be reviewed: {e}"))
        })?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Denied::Unauthenticated(format!(
                "the token is not valid: {}",
                status.error.unwrap_or_else(|| "not authenticated".into())
            )));
        }
        // The API server returns the audiences the token is valid for among those asked.
        let audiences = status.audiences.unwrap_or_default();
        if !self.audiences.is_empty() && !audiences.iter().any(|a| self.audiences.contains(a)) {
            return Err(Denied::Unauthenticated(format!(
                "the token is not issued for audience {}",
                self.audiences.join(" or ")
            )));
        }
        let username = status.user.and_then(|u| u.username).unwrap_or_default();
        service_account_identity(&username)
    }
}

/// `system:serviceaccount:NS:SA` as an identity; any other user is not a workload.
pub fn service_account_identity(username: &str) -> Result<Identity, Denied> {
    let rest = username.strip_prefix("system:serviceaccount:");
    match rest.and_then(|r| r.split_once(':')) {
        Some((ns, sa)) if !ns.is_empty() && !sa.is_empty() && !sa.contains(':') => Ok(Identity {
            namespace: ns.to_string(),
            service_account: sa.to_string(),
            by: format!("service-account token ({username})"),
        }),
        _ => Err(Denied::PermissionDenied(format!(
            "the token is of {username:?}, not of a service account"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_of_service_accounts_only() {
        let id = service_account_identity("system:serviceaccount:default:sleep").unwrap();
        assert_eq!(
            (id.namespace.as_str(), id.service_account.as_str()),
            ("default", "sleep")
        );
        for bad in [
            "admin",
            "system:serviceaccount:default",
            "system:serviceaccount::x",
            "system:serviceaccount:a:b:c",
        ] {
            assert!(service_account_identity(bad).is_err(), "{bad}");
        }
    }
}
