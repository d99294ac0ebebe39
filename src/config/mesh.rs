//! Istio's mesh config: the `mesh` and `meshNetworks` keys of the `istio` ConfigMap (or
//! the files they are mounted as), read into the dataflow's [`MeshSettings`] with the field
//! names and defaults of Istio's MeshConfig. Every field meshflow does not act on is reported
//! by name (the same rule as for networking objects); a value meshflow cannot accept
//! rejects the whole config, naming the field, so the last valid one stays in effect.

use super::convert::{export_to, locality_lb_setting, parse_duration_ms, retries};
use super::findings::{typed_with_ignored, Finding, IGNORED};
use super::{istio, Invalid};
use dataflows::model::{
    ConfigKey, InboundMtls, MeshConfig, MeshLayer, MeshSettings, PathNormalization,
};
use serde::Deserialize;
use serde_yaml_ng::Value;
use std::collections::BTreeMap;

/// The fields of MeshConfig meshflow reads; every other one is reported as ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct MeshConfigSpec {
    root_namespace: Option<String>,
    trust_domain: Option<String>,
    outbound_traffic_policy: Option<OutboundTrafficPolicy>,
    connect_timeout: Option<String>,
    default_http_retry_policy: Option<istio::HttpRetry>,
    default_service_export_to: Option<Vec<String>>,
    default_virtual_service_export_to: Option<Vec<String>>,
    default_destination_rule_export_to: Option<Vec<String>>,
    enable_auto_mtls: Option<bool>,
    locality_lb_setting: Option<istio::LocalityLbSetting>,
    protocol_detection_timeout: Option<String>,
    default_config: Option<ProxyConfigSpec>,
    trust_domain_aliases: Option<Vec<String>>,
    #[serde(rename = "meshMTLS")]
    mesh_mtls: Option<MeshMtlsSpec>,
    extension_providers: Option<Vec<super::ext_authz::ExtensionProviderSpec>>,
    path_normalization: Option<PathNormalizationSpec>,
}

/// `pathNormalization`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PathNormalizationSpec {
    normalization: Option<String>,
}

/// `meshMTLS`: the TLS of the mesh's mutual TLS, as sidecars' inbound chains take it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct MeshMtlsSpec {
    min_protocol_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    ecdh_curves: Option<Vec<String>>,
}

/// The TLS 1.2 cipher suites Envoy (BoringSSL) accepts by name: a name outside it would
/// make every sidecar refuse its inbound listener, so the mesh config is refused instead.
const CIPHER_SUITES: [&str; 20] = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-PSK-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-PSK-AES128-CBC-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES256-SHA",
    "ECDHE-PSK-AES256-CBC-SHA",
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-SHA",
    "PSK-AES128-CBC-SHA",
    "AES256-SHA",
    "PSK-AES256-CBC-SHA",
    "DES-CBC3-SHA",
];

/// The key exchange groups Envoy accepts by name in `ecdh_curves`.
const ECDH_CURVES: [&str; 5] = ["X25519", "P-256", "P-384", "P-521", "X25519MLKEM768"];

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OutboundTrafficPolicy {
    mode: Option<String>,
}

/// `defaultConfig`: the proxies' own settings; only `discoveryAddress` is named here (to
/// say it is not used), the rest are reported as ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ProxyConfigSpec {
    discovery_address: Option<String>,
}

/// `meshNetworks`: parsed so its content is reported, not acted on.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct MeshNetworksSpec {
    networks: BTreeMap<String, Value>,
}

/// Settings the command line sets over any mesh config.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeshOverrides {
    pub root_namespace: Option<String>,
}

/// A mesh config read: the settings it puts in effect and what it says about its fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedMesh {
    pub settings: MeshSettings,
    pub findings: Vec<Finding>,
}

/// The identity of the mesh config in inputs, history and errors.
pub fn mesh_config_key(namespace: &str, name: &str) -> ConfigKey {
    ConfigKey::new(dataflows::model::Kind::MeshConfig, namespace, name)
}

/// Reads a MeshConfig (the `mesh` key's YAML; empty means Istio's defaults) and the
/// optional `meshNetworks` YAML. `base` gives the root namespace when neither the config
/// nor `overrides` set one.
pub fn parse_mesh(
    mesh_yaml: &str,
    networks_yaml: Option<&str>,
    origin: ConfigKey,
    base: &MeshConfig,
    overrides: &MeshOverrides,
) -> Result<ParsedMesh, Invalid> {
    let (spec, ignored): (MeshConfigSpec, _) = typed_with_ignored(document(mesh_yaml)?, "mesh")?;
    let mut findings: Vec<Finding> = ignored
        .iter()
        .map(|p| Finding::warning(p.to_string(), IGNORED))
        .collect();
    let mut settings = MeshSettings::builtin(base);
    settings.layer = MeshLayer::Configured;
    settings.origin = Some(origin);
    if let Some(ns) = &spec.root_namespace {
        if ns.is_empty() {
            return Err(Invalid::field("mesh.rootNamespace", "must not be empty"));
        }
        settings.root_namespace = ns.clone();
    }
    if let Some(ns) = &overrides.root_namespace {
        settings.root_namespace = ns.clone();
    }
    if let Some(td) = &spec.trust_domain {
        settings.trust_domain = trust_domain(td, "mesh.trustDomain")?;
    }
    settings.inbound_mtls = inbound_mtls(&spec, &settings.trust_domain, &mut findings)?;
    settings.ext_authz = super::ext_authz::providers(
        spec.extension_providers.as_deref().unwrap_or_default(),
        &mut findings,
    );
    settings.path_normalization = match spec
        .path_normalization
        .as_ref()
        .and_then(|p| p.normalization.as_deref())
    {
        None | Some("DEFAULT") | Some("BASE") => PathNormalization::Base,
        Some("NONE") => PathNormalization::None,
        Some("MERGE_SLASHES") => PathNormalization::MergeSlashes,
        Some("DECODE_AND_MERGE_SLASHES") => PathNormalization::DecodeAndMergeSlashes,
        Some(other) => {
            return Err(Invalid::field(
                "mesh.pathNormalization.normalization",
                format!(
                    "unknown normalization {other:?} (DEFAULT, NONE, BASE, MERGE_SLASHES, \
                     DECODE_AND_MERGE_SLASHES)"
                ),
            ))
        }
    };
    settings.registry_only = match spec
        .outbound_traffic_policy
        .as_ref()
        .and_then(|o| o.mode.as_deref())
    {
        None | Some("ALLOW_ANY") => false,
        Some("REGISTRY_ONLY") => true,
        Some(other) => {
            return Err(Invalid::field(
                "mesh.outboundTrafficPolicy.mode",
                format!("unknown mode {other:?} (ALLOW_ANY, REGISTRY_ONLY)"),
            ))
        }
    };
    if let Some(t) = &spec.connect_timeout {
        let ms = parse_duration_ms(t, "mesh.connectTimeout")?;
        if ms == 0 {
            // Envoy refuses a cluster whose connect timeout is zero.
            return Err(Invalid::field(
                "mesh.connectTimeout",
                "must be greater than 0",
            ));
        }
        settings.connect_timeout_ms = ms;
    }
    if let Some(t) = &spec.protocol_detection_timeout {
        let ms = parse_duration_ms(t, "mesh.protocolDetectionTimeout")?;
        settings.protocol_detection_timeout_ms = Some(ms);
    }
    settings.default_retries = spec
        .default_http_retry_policy
        .as_ref()
        .map(|r| retries(r, "mesh.defaultHttpRetryPolicy"))
        .transpose()?;
    for (field, value, out) in [
        (
            "mesh.defaultServiceExportTo",
            &spec.default_service_export_to,
            &mut settings.service_export_to,
        ),
        (
            "mesh.defaultVirtualServiceExportTo",
            &spec.default_virtual_service_export_to,
            &mut settings.virtual_service_export_to,
        ),
        (
            "mesh.defaultDestinationRuleExportTo",
            &spec.default_destination_rule_export_to,
            &mut settings.destination_rule_export_to,
        ),
    ] {
        if let Some(v) = value {
            *out = export_to(v, field)?;
        }
    }
    settings.auto_mtls = spec.enable_auto_mtls.unwrap_or(true);
    settings.locality_lb = spec
        .locality_lb_setting
        .as_ref()
        .map(|l| locality_lb_setting(l, "mesh.localityLbSetting", true, &mut findings))
        .transpose()?;
    findings.extend(unused_fields(&spec));
    if let Some(text) = networks_yaml {
        findings.extend(mesh_networks(text)?);
    }
    Ok(ParsedMesh { settings, findings })
}

/// A trust domain as it goes into SPIFFE identities (a URI's authority).
fn trust_domain(td: &str, field: &str) -> Result<String, Invalid> {
    let ok = !td.is_empty()
        && td.len() <= 255
        && td
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if !ok {
        return Err(Invalid::field(
            field,
            format!("{td:?} is not a trust domain (letters, digits, '-', '.', '_')"),
        ));
    }
    Ok(td.to_string())
}

/// What the sidecars' inbound mTLS accepts: identities of the trust domain and its
/// `trustDomainAliases` (deduplicated, in order), and `meshMTLS`'s TLS. Istio raises
/// `minProtocolVersion` below TLS 1.2 to 1.2 (said as a warning); names Envoy would refuse
/// refuse the config.
fn inbound_mtls(
    spec: &MeshConfigSpec,
    td: &str,
    findings: &mut Vec<Finding>,
) -> Result<InboundMtls, Invalid> {
    let mut trust_domains = vec![td.to_string()];
    for (i, alias) in spec.trust_domain_aliases.iter().flatten().enumerate() {
        let alias = trust_domain(alias, &format!("mesh.trustDomainAliases[{i}]"))?;
        if !trust_domains.contains(&alias) {
            trust_domains.push(alias);
        }
    }
    let mtls = spec.mesh_mtls.as_ref();
    let min_tls13 = match mtls.and_then(|m| m.min_protocol_version.as_deref()) {
        None | Some("TLS_AUTO") | Some("TLSV1_2") => false,
        Some("TLSV1_3") => true,
        Some(v @ ("TLSV1_0" | "TLSV1_1")) => {
            findings.push(Finding::warning(
                "mesh.meshMTLS.minProtocolVersion",
                format!(
                    "{v} is below what the mesh's mTLS speaks: TLS 1.2 is the minimum, as in Istio"
                ),
            ));
            false
        }
        Some(other) => {
            return Err(Invalid::field(
                "mesh.meshMTLS.minProtocolVersion",
                format!("{other:?} is not TLS_AUTO, TLSV1_0, TLSV1_1, TLSV1_2 or TLSV1_3"),
            ))
        }
    };
    let named = |list: Option<&Vec<String>>, known: &[&str], field: &str| {
        let list = list.cloned().unwrap_or_default();
        match list.iter().position(|c| !known.contains(&c.as_str())) {
            Some(i) => Err(Invalid::field(
                format!("{field}[{i}]"),
                format!(
                    "{:?} is not one Envoy accepts ({})",
                    list[i],
                    known.join(", ")
                ),
            )),
            None => Ok(list),
        }
    };
    Ok(InboundMtls {
        trust_domains,
        min_tls13,
        cipher_suites: named(
            mtls.and_then(|m| m.cipher_suites.as_ref()),
            &CIPHER_SUITES,
            "mesh.meshMTLS.cipherSuites",
        )?,
        ecdh_curves: named(
            mtls.and_then(|m| m.ecdh_curves.as_ref()),
            &ECDH_CURVES,
            "mesh.meshMTLS.ecdhCurves",
        )?,
    })
}

/// The fields Istio acts on that meshflow reads and cannot act on: said, never silent.
fn unused_fields(spec: &MeshConfigSpec) -> Vec<Finding> {
    let mut out = Vec::new();
    if spec
        .default_config
        .as_ref()
        .is_some_and(|d| d.discovery_address.is_some())
    {
        out.push(Finding::warning(
            "mesh.defaultConfig.discoveryAddress",
            "not used: proxies read it from their own bootstrap",
        ));
    }
    out
}

/// `meshNetworks`: parsed and reported; multi-network routing is not generated.
fn mesh_networks(text: &str) -> Result<Vec<Finding>, Invalid> {
    let (spec, ignored): (MeshNetworksSpec, _) =
        typed_with_ignored(document(text)?, "meshNetworks")?;
    let mut out: Vec<Finding> = ignored
        .iter()
        .map(|p| Finding::warning(p.to_string(), IGNORED))
        .collect();
    if !spec.networks.is_empty() {
        let names: Vec<&str> = spec.networks.keys().map(String::as_str).collect();
        out.push(Finding::warning(
            "meshNetworks.networks",
            format!(
                "{} network(s) ({}): multi-network is not supported by meshflow yet; every \
                 endpoint is treated as reachable directly",
                names.len(),
                names.join(", ")
            ),
        ));
    }
    Ok(out)
}

/// One YAML document; empty text is an empty config (Istio's defaults). Bounded as the
/// config files' documents are: their size and their `[`/`{` nesting, checked before the
/// YAML parser (whose time grows with the square of the nesting) sees them.
fn document(text: &str) -> Result<Value, Invalid> {
    if text.len() > super::MAX_DOCUMENT_BYTES {
        return Err(Invalid::field(
            "",
            format!(
                "the mesh config is {} bytes, more than {}",
                text.len(),
                super::MAX_DOCUMENT_BYTES
            ),
        ));
    }
    super::check_nesting(text)?;
    let value: Value =
        serde_yaml_ng::from_str(text).map_err(|e| Invalid::field("", e.to_string()))?;
    Ok(match value {
        Value::Null => Value::Mapping(Default::default()),
        v => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Level;

    /// A mesh config nesting far past the limit is refused at once, naming why (a deep
    /// document kept the YAML parser busy for seconds, growing with the square of it).
    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let deep = format!(
            "defaultConfig: {}{}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let started = std::time::Instant::now();
        let err = parse(&deep).expect_err("refused");
        assert!(err.to_string().contains("nests 100000 levels"), "{err}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let networks = format!("networks: {}", "{a: ".repeat(1000));
        let err = parse_mesh(
            "",
            Some(&networks),
            mesh_config_key("", "mesh"),
            &MeshConfig::default(),
            &Default::default(),
        )
        .expect_err("meshNetworks too");
        assert!(err.to_string().contains("levels"), "{err}");
    }

    fn parse(text: &str) -> Result<ParsedMesh, Invalid> {
        parse_mesh(
            text,
            None,
            mesh_config_key("", "mesh"),
            &MeshConfig::default(),
            &MeshOverrides::default(),
        )
    }

    fn fields(p: &ParsedMesh) -> Vec<&str> {
        p.findings.iter().map(|f| f.field.as_str()).collect()
    }

    #[test]
    fn empty_config_is_istios_defaults_configured() {
        let p = parse("").unwrap();
        let mut builtin = MeshSettings::builtin(&MeshConfig::default());
        builtin.layer = MeshLayer::Configured;
        builtin.origin = Some(mesh_config_key("", "mesh"));
        assert_eq!(p.settings, builtin);
        // Auto mTLS is Istio's default, and meshflow's.
        assert!(p.settings.auto_mtls);
        assert_eq!(fields(&p), Vec::<&str>::new());
    }

    /// `pathNormalization.normalization` in Istio's names (`DEFAULT` is `BASE`); an unknown
    /// one refuses the config, naming the field.
    #[test]
    fn path_normalization_is_read() {
        for (text, want) in [
            ("", PathNormalization::Base),
            (
                "pathNormalization: {normalization: DEFAULT}",
                PathNormalization::Base,
            ),
            (
                "pathNormalization: {normalization: NONE}",
                PathNormalization::None,
            ),
            (
                "pathNormalization: {normalization: MERGE_SLASHES}",
                PathNormalization::MergeSlashes,
            ),
            (
                "pathNormalization: {normalization: DECODE_AND_MERGE_SLASHES}",
                PathNormalization::DecodeAndMergeSlashes,
            ),
        ] {
            let p = parse(text).unwrap();
            assert_eq!(p.settings.path_normalization, want, "{text}");
            assert_eq!(fields(&p), Vec::<&str>::new(), "{text}: nothing ignored");
        }
        let err = parse("pathNormalization: {normalization: SOMETIMES}").expect_err("refused");
        assert!(
            err.to_string()
                .contains("mesh.pathNormalization.normalization"),
            "{err}"
        );
    }

    #[test]
    fn read_fields_take_effect() {
        let p = parse(
            "rootNamespace: mesh-root\noutboundTrafficPolicy: {mode: REGISTRY_ONLY}\n\
             connectTimeout: 2.5s\ndefaultHttpRetryPolicy: {attempts: 4, perTryTimeout: 250ms, \
             retryOn: 5xx}\ndefaultServiceExportTo: ['.']\ndefaultVirtualServiceExportTo: ['*']\n\
             defaultDestinationRuleExportTo: ['~']\nenableAutoMtls: false\n",
        )
        .unwrap();
        let s = &p.settings;
        assert_eq!(s.root_namespace, "mesh-root");
        assert!(s.registry_only);
        assert_eq!(s.connect_timeout_ms, 2500);
        let r = s.default_retries.as_ref().unwrap();
        assert_eq!(
            (r.attempts, r.per_try_timeout_ms, r.retry_on.as_deref()),
            (4, Some(250), Some("5xx"))
        );
        assert_eq!(s.service_export_to, vec!["."]);
        assert_eq!(s.virtual_service_export_to, vec!["*"]);
        assert_eq!(s.destination_rule_export_to, vec!["~"]);
        assert!(!s.auto_mtls, "enableAutoMtls: false is read");
        assert!(p.findings.is_empty(), "{:?}", p.findings);
    }

    #[test]
    fn a_trust_domain_is_read_and_checked() {
        assert_eq!(parse("").unwrap().settings.trust_domain, "cluster.local");
        assert_eq!(
            parse("trustDomain: corp.example\n")
                .unwrap()
                .settings
                .trust_domain,
            "corp.example"
        );
        let e = parse("trustDomain: \"a/b\"\n").unwrap_err();
        assert!(e.to_string().contains("mesh.trustDomain"), "{e}");
    }

    /// `trustDomainAliases` join the trust domain in what inbound mTLS accepts (once each);
    /// `meshMTLS` sets its TLS; a name Envoy would refuse refuses the config, naming the
    /// field and the entry; a version below TLS 1.2 is raised to it, with a warning.
    #[test]
    fn trust_domain_aliases_and_mesh_mtls_are_read_and_checked() {
        let p = parse(
            "trustDomain: corp.example\ntrustDomainAliases: [old.example, corp.example]\n\
             meshMTLS:\n  minProtocolVersion: TLSV1_3\n  \
             cipherSuites: [ECDHE-RSA-AES256-GCM-SHA384]\n  ecdhCurves: [X25519, P-256]\n",
        )
        .unwrap();
        let m = &p.settings.inbound_mtls;
        assert_eq!(m.trust_domains, ["corp.example", "old.example"]);
        assert!(m.min_tls13);
        assert_eq!(m.cipher_suites, ["ECDHE-RSA-AES256-GCM-SHA384"]);
        assert_eq!(m.ecdh_curves, ["X25519", "P-256"]);
        assert!(p.findings.is_empty(), "{:?}", p.findings);
        assert_eq!(
            parse("").unwrap().settings.inbound_mtls.trust_domains,
            ["cluster.local"]
        );
        let low = parse("meshMTLS: {minProtocolVersion: TLSV1_1}\n").unwrap();
        assert!(!low.settings.inbound_mtls.min_tls13);
        assert_eq!(fields(&low), ["mesh.meshMTLS.minProtocolVersion"]);
        for (text, field) in [
            (
                "meshMTLS: {minProtocolVersion: TLS9}\n",
                "mesh.meshMTLS.minProtocolVersion",
            ),
            (
                "meshMTLS: {cipherSuites: [AES128-GCM-SHA256, RC4-MD5]}\n",
                "mesh.meshMTLS.cipherSuites[1]",
            ),
            (
                "meshMTLS: {ecdhCurves: [P-999]}\n",
                "mesh.meshMTLS.ecdhCurves[0]",
            ),
            (
                "trustDomainAliases: [ok.example, \"a b\"]\n",
                "mesh.trustDomainAliases[1]",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }

    #[test]
    fn the_command_line_overrides_the_root_namespace() {
        let p = parse_mesh(
            "rootNamespace: from-file\n",
            None,
            mesh_config_key("", "mesh"),
            &MeshConfig::default(),
            &MeshOverrides {
                root_namespace: Some("from-flag".into()),
            },
        )
        .unwrap();
        assert_eq!(p.settings.root_namespace, "from-flag");
    }

    #[test]
    fn unread_and_unused_fields_are_named() {
        let p = parse_mesh(
            "enableTracing: true\ntrustDomain: example.org\nlocalityLbSetting: {enabled: true}\n\
             protocolDetectionTimeout: 1s\ndefaultConfig:\n  discoveryAddress: istiod:15012\n  \
             concurrency: 2\nenableAutoMtls: true\n",
            Some("networks:\n  network1: {endpoints: [{fromRegistry: Kubernetes}]}\nextra: 1\n"),
            mesh_config_key("", "mesh"),
            &MeshConfig::default(),
            &MeshOverrides::default(),
        )
        .unwrap();
        let mut f = fields(&p);
        f.sort();
        assert_eq!(
            f,
            vec![
                "mesh.defaultConfig.concurrency",
                "mesh.defaultConfig.discoveryAddress",
                "mesh.enableTracing",
                "meshNetworks.extra",
                "meshNetworks.networks",
            ]
        );
        assert!(p.findings.iter().all(|f| f.level == Level::Warning));
        assert_eq!(p.settings.trust_domain, "example.org");
        assert_eq!(p.settings.protocol_detection_timeout_ms, Some(1_000));
        let networks = p
            .findings
            .iter()
            .find(|f| f.field == "meshNetworks.networks");
        assert!(networks.unwrap().message.contains("network1"));
        assert_eq!(
            p.settings.locality_lb,
            Some(dataflows::model::LocalityLbSetting {
                enabled: Some(true),
                ..Default::default()
            })
        );
    }

    #[test]
    fn locality_lb_setting_is_read_and_validated_as_istio_does() {
        let read = |yaml: &str| {
            parse_mesh(
                yaml,
                None,
                mesh_config_key("", "mesh"),
                &MeshConfig::default(),
                &MeshOverrides::default(),
            )
        };
        let p = read(
            "localityLbSetting:\n  distribute:\n  - from: r1/z1/*\n    to: {r1/z1/*: 80, r2/*: 20}\n",
        )
        .unwrap();
        let l = p.settings.locality_lb.expect("read");
        assert_eq!(l.distribute[0].from, "r1/z1/*");
        assert_eq!(
            l.distribute[0].to,
            vec![("r1/z1/*".to_string(), 80), ("r2/*".to_string(), 20)]
        );
        assert!(
            p.findings.iter().all(|f| !f.field.contains("locality")),
            "{:?}",
            p.findings
        );
        let err =
            read("localityLbSetting:\n  distribute:\n  - from: r1\n    to: {r1: 80, r2: 10}\n")
                .unwrap_err();
        assert_eq!(err.field, "mesh.localityLbSetting.distribute[0].to");
        assert!(err.message.contains("sum to 100"), "{}", err.message);
        let err = read("localityLbSetting:\n  failover: [{from: r1, to: r1}]\n").unwrap_err();
        assert_eq!(err.field, "mesh.localityLbSetting.failover[0]");
    }

    #[test]
    fn invalid_values_name_their_field() {
        for (text, field) in [
            (
                "outboundTrafficPolicy: {mode: SOMETIMES}\n",
                "mesh.outboundTrafficPolicy.mode",
            ),
            ("connectTimeout: soon\n", "mesh.connectTimeout"),
            ("connectTimeout: 0s\n", "mesh.connectTimeout"),
            (
                "defaultHttpRetryPolicy: {attempts: -1}\n",
                "mesh.defaultHttpRetryPolicy.attempts",
            ),
            (
                "defaultServiceExportTo: ['Not A Namespace']\n",
                "mesh.defaultServiceExportTo[0]",
            ),
            ("rootNamespace: ''\n", "mesh.rootNamespace"),
            ("connectTimeout: [1]\n", "mesh.connectTimeout"),
            // Past a protobuf Duration: every Envoy would reject CDS (and RDS) with it.
            ("connectTimeout: 9999999999999999h\n", "mesh.connectTimeout"),
            (
                "defaultHttpRetryPolicy: {attempts: 2, perTryTimeout: 999999999h}\n",
                "mesh.defaultHttpRetryPolicy.perTryTimeout",
            ),
        ] {
            let e = parse(text).expect_err(text);
            assert_eq!(e.field, field, "{text}: {e:?}");
        }
    }
}
