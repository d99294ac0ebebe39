//! Envoy's `jwt_authn` filter for the RequestAuthentications selecting a workload, as
//! Istio builds it: one provider per JWT rule (`origins-I`), the verified payload in the
//! filter's dynamic metadata under `payload` (where AuthorizationPolicy's
//! `requestPrincipals` and `request.auth.*` look), and one requirement on every path: a
//! token that is present must be valid for some rule, a missing one passes (an
//! AuthorizationPolicy with `requestPrincipals` is what requires one).

use crate::model::{JwtRule, DEFAULT_SPACE_DELIMITED_CLAIMS};
use envoy_types::pb::envoy::config::core::v3::{data_source, DataSource};
use envoy_types::pb::envoy::config::route::v3::{route_match::PathSpecifier, RouteMatch};
use envoy_types::pb::envoy::extensions::filters::http::jwt_authn::v3::{
    jwt_provider, jwt_requirement::RequiresType, requirement_rule::RequirementType,
    JwtAuthentication, JwtClaimToHeader, JwtHeader, JwtProvider, JwtRequirement,
    JwtRequirementAndList, JwtRequirementOrList, RequirementRule,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpFilter,
};
use prost::Message;

pub use crate::translate::claims::{JWT_AUTHN, PAYLOAD_KEY};

/// What a rule verifies with while meshflow holds none of its keys, so that a token of it
/// is refused (Envoy answers 401) and none is accepted unverified: one P-256 public key
/// whose private key nobody holds. Envoy refuses a key set without a valid key (the whole
/// listener is NACKed, and with it every policy of the workload), so the set cannot be
/// empty; the same key joins every key set served ([`served_keys`]), so that one whose keys
/// Envoy cannot read is a set that verifies nothing, never a NACK. The point is a hash,
/// not a key pair's:
/// `x` = SHA-256("meshflow: a key set without a private key" ‖ 0x01) (the first counter
/// byte, from 0, that gives a point of the curve), `y` its even square root; no one knows
/// its discrete logarithm.
pub const NO_KEYS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","alg":"ES256","use":"sig","kid":"meshflow-no-keys","x":"jlCW6o8gRTWZo8BTLYTsHqRCrzKxyy7sHURCbd0NAME","y":"XUMnoFm_vmRUoMiJCcSut3t4uW8GVEvRdJApjdVAbwA"}]}"#;

/// The key set Envoy is given for `keys` (`None`: meshflow holds none): the set with
/// [`NO_KEYS`]' key added. Something that is not a key set verifies nothing.
fn served_keys(keys: Option<&str>) -> String {
    use serde_json::Value;
    let parsed = keys.and_then(|k| serde_json::from_str::<Value>(k).ok());
    let (Some(mut set), Ok(Value::Object(mut none))) =
        (parsed, serde_json::from_str::<Value>(NO_KEYS))
    else {
        return NO_KEYS.to_string();
    };
    let unusable = none
        .get_mut("keys")
        .and_then(|k| k.as_array_mut())
        .and_then(|k| k.pop());
    match (set.get_mut("keys").and_then(|k| k.as_array_mut()), unusable) {
        (Some(list), Some(key)) => {
            list.push(key);
            set.to_string()
        }
        _ => NO_KEYS.to_string(),
    }
}

fn provider(rule: &JwtRule) -> JwtProvider {
    let mut claims: Vec<String> = DEFAULT_SPACE_DELIMITED_CLAIMS
        .iter()
        .map(|c| c.to_string())
        .chain(rule.space_delimited_claims.iter().cloned())
        .collect();
    claims.sort();
    claims.dedup();
    JwtProvider {
        issuer: rule.issuer.clone(),
        audiences: rule.audiences.clone(),
        forward: rule.forward_original_token,
        forward_payload_header: rule.output_payload_to_header.clone(),
        payload_in_metadata: PAYLOAD_KEY.into(),
        normalize_payload_in_metadata: Some(jwt_provider::NormalizePayload {
            space_delimited_claims: claims,
        }),
        claim_to_headers: rule
            .output_claim_to_headers
            .iter()
            .map(|(header, claim)| JwtClaimToHeader {
                header_name: header.clone(),
                claim_name: claim.clone(),
                ..Default::default()
            })
            .collect(),
        from_headers: rule
            .from_headers
            .iter()
            .map(|h| JwtHeader {
                name: h.name.clone(),
                value_prefix: h.prefix.clone(),
            })
            .collect(),
        from_params: rule.from_params.clone(),
        from_cookies: rule.from_cookies.clone(),
        jwks_source_specifier: Some(jwt_provider::JwksSourceSpecifier::LocalJwks(DataSource {
            specifier: Some(data_source::Specifier::InlineString(served_keys(
                rule.jwks.keys(),
            ))),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn requires(t: RequiresType) -> JwtRequirement {
    JwtRequirement {
        requires_type: Some(t),
    }
}

/// Istio's requirement over providers `names`: with one, the provider or no token; with
/// several, any one provider (tokens of several rules in one place), or, for every
/// provider, its token valid or absent. Providers of rules with `presence: REQUIRED`
/// (`required`) must verify besides, which Istio does not read yet: meshflow refuses
/// more, never less.
fn requirement(names: &[String], required: &[String]) -> JwtRequirement {
    if required.is_empty() {
        return any_valid(names);
    }
    // `presence: REQUIRED`: each such rule's token must be there and valid, the others
    // valid or absent. (Not the same provider twice under one AND: Envoy takes the token
    // off the request once verified, so a second check would find none.)
    let each: Vec<JwtRequirement> = names
        .iter()
        .map(|n| {
            if required.contains(n) {
                requires(RequiresType::ProviderName(n.clone()))
            } else {
                or_missing(n)
            }
        })
        .collect();
    match <[JwtRequirement; 1]>::try_from(each) {
        Ok([one]) => one,
        Err(each) => requires(RequiresType::RequiresAll(JwtRequirementAndList {
            requirements: each,
        })),
    }
}

/// A provider's token valid, or no token.
fn or_missing(n: &str) -> JwtRequirement {
    requires(RequiresType::RequiresAny(JwtRequirementOrList {
        requirements: vec![
            requires(RequiresType::ProviderName(n.to_string())),
            requires(RequiresType::AllowMissing(Default::default())),
        ],
    }))
}

/// Istio's requirement (see [`requirement`]).
fn any_valid(names: &[String]) -> JwtRequirement {
    if let [one] = names {
        return or_missing(one);
    }
    let mut any: Vec<JwtRequirement> = names
        .iter()
        .map(|n| requires(RequiresType::ProviderName(n.clone())))
        .collect();
    any.push(requires(RequiresType::RequiresAll(JwtRequirementAndList {
        requirements: names.iter().map(|n| or_missing(n)).collect(),
    })));
    requires(RequiresType::RequiresAny(JwtRequirementOrList {
        requirements: any,
    }))
}

/// The `jwt_authn` filter verifying `rules` (in [`crate::model::InboundSecurity::jwt`]'s
/// order); `None` without rules. The providers map is written in name order by hand: prost
/// keeps maps in a hash map, whose order would change the bytes from one build to the next.
pub fn jwt_filter(rules: &[JwtRule]) -> Option<HttpFilter> {
    use prost::encoding::{encode_key, encode_varint, WireType};
    if rules.is_empty() {
        return None;
    }
    let names: Vec<String> = (0..rules.len()).map(|i| format!("origins-{i}")).collect();
    let required: Vec<String> = names
        .iter()
        .zip(rules)
        .filter(|(_, r)| r.required)
        .map(|(n, _)| n.clone())
        .collect();
    let head = JwtAuthentication {
        rules: vec![RequirementRule {
            r#match: Some(RouteMatch {
                path_specifier: Some(PathSpecifier::Prefix("/".into())),
                ..Default::default()
            }),
            requirement_type: Some(RequirementType::Requires(requirement(&names, &required))),
        }],
        bypass_cors_preflight: true,
        ..Default::default()
    };
    let mut value = head.encode_to_vec();
    let mut sorted: Vec<(&String, &JwtRule)> = names.iter().zip(rules).collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    for (name, rule) in sorted {
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, name, &mut entry);
        // A verified token clears the route cache, on sidecars too (Istio: gateways only),
        // so routes on its claims (`@request.auth.claims` conditions) see it everywhere, and
        // a `withoutHeaders` claim route never matches a token not verified yet.
        let provider = JwtProvider {
            clear_route_cache: true,
            ..provider(rule)
        };
        prost::encoding::message::encode(2, &provider, &mut entry);
        // `providers` is field 1 of JwtAuthentication.
        encode_key(1, WireType::LengthDelimited, &mut value);
        encode_varint(entry.len() as u64, &mut value);
        value.extend_from_slice(&entry);
    }
    Some(HttpFilter {
        name: JWT_AUTHN.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(
            envoy_types::pb::google::protobuf::Any {
                type_url:
                    "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"
                        .into(),
                value,
            },
        )),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Jwks, TokenHeader};

    fn rule(issuer: &str, jwks: Jwks) -> JwtRule {
        JwtRule {
            issuer: issuer.into(),
            audiences: vec![],
            jwks,
            from_headers: vec![TokenHeader {
                name: "x-jwt".into(),
                prefix: "Bearer ".into(),
            }],
            from_params: vec![],
            from_cookies: vec![],
            forward_original_token: false,
            output_payload_to_header: String::new(),
            output_claim_to_headers: vec![("x-sub".into(), "sub".into())],
            timeout_ms: 5000,
            space_delimited_claims: vec!["roles".into()],
            required: false,
        }
    }

    /// The filter decodes as Envoy reads it: every provider by name, keys inline (none
    /// while a `jwksUri` is not fetched), Istio's requirement for one and for several rules.
    #[test]
    fn providers_and_requirements_as_istio_builds_them() {
        let keys = r#"{"keys":[{"kty":"EC"}]}"#;
        let one = jwt_filter(&[rule("a", Jwks::Inline(keys.into()))]).expect("a filter");
        let Some(http_filter::ConfigType::TypedConfig(any)) = one.config_type else {
            panic!("typed config")
        };
        let cfg = JwtAuthentication::decode(&any.value[..]).expect("decodes");
        let p = &cfg.providers["origins-0"];
        assert_eq!(p.issuer, "a");
        assert_eq!(p.payload_in_metadata, "payload");
        assert_eq!(p.from_headers[0].value_prefix, "Bearer ");
        assert_eq!(p.claim_to_headers[0].claim_name, "sub");
        assert_eq!(
            p.normalize_payload_in_metadata
                .as_ref()
                .map(|n| n.space_delimited_claims.clone()),
            Some(vec!["permission".into(), "roles".into(), "scope".into()])
        );
        let Some(jwt_provider::JwksSourceSpecifier::LocalJwks(d)) = &p.jwks_source_specifier else {
            panic!("local keys")
        };
        let Some(data_source::Specifier::InlineString(served)) = &d.specifier else {
            panic!("inline keys")
        };
        assert!(
            served.starts_with(r#"{"keys":[{"kty":"EC"},{"#) && served.contains("meshflow-no-keys"),
            "the rule's keys, and the unusable one: {served}"
        );
        let Some(RequirementType::Requires(r)) = &cfg.rules[0].requirement_type else {
            panic!("a requirement")
        };
        let Some(RequiresType::RequiresAny(or)) = &r.requires_type else {
            panic!("any")
        };
        assert_eq!(or.requirements.len(), 2, "the provider or no token");

        let unfetched = Jwks::Uri {
            uri: "https://idp/keys".into(),
            keys: None,
            problem: None,
        };
        let rules: Vec<JwtRule> = (0..11)
            .map(|i| rule(&format!("i{i:02}"), unfetched.clone()))
            .collect();
        let many = jwt_filter(&rules).expect("a filter");
        let Some(http_filter::ConfigType::TypedConfig(any)) = many.config_type else {
            panic!("typed config")
        };
        assert_eq!(
            jwt_filter(&rules).map(|f| f.config_type),
            Some(Some(http_filter::ConfigType::TypedConfig(any.clone()))),
            "the same bytes every time"
        );
        let cfg = JwtAuthentication::decode(&any.value[..]).expect("decodes");
        assert_eq!(cfg.providers.len(), 11);
        assert_eq!(cfg.providers["origins-10"].issuer, "i10");
        let Some(jwt_provider::JwksSourceSpecifier::LocalJwks(d)) =
            &cfg.providers["origins-3"].jwks_source_specifier
        else {
            panic!("local keys")
        };
        assert_eq!(
            d.specifier,
            Some(data_source::Specifier::InlineString(NO_KEYS.into()))
        );
        let Some(RequirementType::Requires(r)) = &cfg.rules[0].requirement_type else {
            panic!("a requirement")
        };
        let Some(RequiresType::RequiresAny(or)) = &r.requires_type else {
            panic!("any")
        };
        assert_eq!(
            or.requirements.len(),
            12,
            "each provider, or all valid-or-absent"
        );
        assert!(matches!(
            or.requirements[11].requires_type,
            Some(RequiresType::RequiresAll(_))
        ));
        assert!(jwt_filter(&[]).is_none());
        // `presence: REQUIRED`: the rule's provider alone.
        let mut must = rule("a", Jwks::Inline(keys.into()));
        must.required = true;
        let Some(http_filter::ConfigType::TypedConfig(any)) =
            jwt_filter(&[must]).and_then(|f| f.config_type)
        else {
            panic!("typed config")
        };
        let cfg = JwtAuthentication::decode(&any.value[..]).expect("decodes");
        let Some(RequirementType::Requires(r)) = &cfg.rules[0].requirement_type else {
            panic!("a requirement")
        };
        assert_eq!(
            r.requires_type,
            Some(RequiresType::ProviderName("origins-0".into())),
            "the provider, no token not allowed"
        );
        assert_eq!(served_keys(Some("not json")), NO_KEYS);
        assert_eq!(served_keys(Some(r#"{"keys":{}}"#)), NO_KEYS);
    }
}
