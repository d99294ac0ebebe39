//! The command line itself, run as the built binary: `validate` taking its directory as an
//! argument or a flag and printing each problem once, `--version` naming the git commit, and
//! the shell completion scripts. (The debug commands are tested against a running server in
//! `debug/api.rs`.)

mod support;

#[path = "../build/git_commit.rs"]
mod git_commit;

use std::path::Path;
use std::process::{Command, Output};
use support::{write_config, TestDir};

/// Runs the built binary without the caller's RUST_LOG, so its default logging is tested.
fn meshflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(args)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .output()
        .expect("run meshflow")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A directory with four known problems in four files (three errors, one warning) and one
/// valid Service.
fn write_problems(dir: &Path) {
    write_config(
        dir,
        "service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n",
    );
    write_config(
        dir,
        "weights.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: weights, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews}\n      weight: 60\n    - destination: {host: reviews}\n      weight: 60\n",
    );
    write_config(dir, "syntax.yaml", "kind: Service\nmetadata: [unclosed\n");
    write_config(
        dir,
        "lb.yaml",
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: lb, namespace: default}\nspec:\n  host: reviews\n  trafficPolicy: {loadBalancer: {simple: SOMETIMES}}\n",
    );
    write_config(
        dir,
        "cors.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: cors, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - redirect: {uri: /moved}\n    fault: {abort: {http2Error: CANCEL}}\n",
    );
}

const PROBLEM_FILES: [&str; 4] = ["weights.yaml", "syntax.yaml", "lb.yaml", "cors.yaml"];

/// `validate DIR` and `validate --config-dir DIR` are the same check; both at once, or
/// neither, is refused with a message naming the arguments.
#[test]
fn validate_takes_the_directory_as_argument_or_flag() {
    let dir = TestDir::new("cli-validate-positional");
    let config = dir.subdir("config");
    write_problems(&config);
    let path = config.to_str().expect("utf-8 path");

    let positional = meshflow(&["validate", path]);
    let flag = meshflow(&["validate", "--config-dir", path]);
    assert_eq!(positional.status.code(), Some(1), "{positional:?}");
    assert_eq!(text(&positional.stdout), text(&flag.stdout));
    assert!(
        text(&positional.stdout).contains("weights add up to 120"),
        "{}",
        text(&positional.stdout)
    );

    let good = dir.subdir("good");
    write_config(
        &good,
        "service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n",
    );
    let ok = meshflow(&["validate", good.to_str().unwrap()]);
    assert!(ok.status.success(), "{ok:?}");
    assert!(text(&ok.stdout).starts_with("ok: 1 records"), "{ok:?}");

    let both = meshflow(&["validate", path, "--config-dir", path]);
    assert_eq!(both.status.code(), Some(2), "{both:?}");
    let err = text(&both.stderr);
    assert!(
        err.contains("[DIR]") && err.contains("--config-dir"),
        "the error names both: {err}"
    );
    let neither = meshflow(&["validate"]);
    assert_eq!(neither.status.code(), Some(2), "{neither:?}");
    assert!(text(&neither.stderr).contains("<DIR>"), "{neither:?}");
}

/// Four problems are four lines (and a summary): none is also logged on stderr.
#[test]
fn validate_prints_each_problem_once() {
    let dir = TestDir::new("cli-validate-once");
    let config = dir.subdir("config");
    write_problems(&config);
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");

    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        PROBLEM_FILES.len() + 1,
        "one line per problem and a summary:\n{stdout}"
    );
    assert_eq!(lines.last(), Some(&"3 error(s), 1 warning(s)"), "{stdout}");
    for file in PROBLEM_FILES {
        let everywhere = stdout
            .lines()
            .chain(stderr.lines())
            .filter(|l| l.contains(file))
            .count();
        assert_eq!(
            everywhere, 1,
            "{file}: one line in all\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
    assert!(!stdout.contains("service.yaml"), "{stdout}");
    // An object's own finding carries its code, as cross-object ones do.
    let cors = lines
        .iter()
        .find(|l| l.contains("cors.yaml"))
        .expect("the cors.yaml line");
    assert!(
        cors.contains(": warning: ") && cors.ends_with(" [MF0001 FieldNotSupported]"),
        "{cors}"
    );
}

/// A kind meshflow does not serve (Telemetry) is said once by `validate`, with its code,
/// and does not fail the check.
#[test]
fn validate_names_kinds_not_served_with_a_code() {
    let dir = TestDir::new("cli-validate-kinds");
    let config = dir.subdir("config");
    write_config(
        &config,
        "telemetry.yaml",
        "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: default, namespace: istio-system}\nspec: {}\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    let said: Vec<&str> = stdout.lines().filter(|l| l.contains("Telemetry")).collect();
    assert_eq!(said.len(), 1, "{stdout}");
    assert!(said[0].ends_with(" [MF0001 FieldNotSupported]"), "{stdout}");
    assert_eq!(out.status.code(), Some(0), "{stdout}");
}

/// Issue 36's example (a mesh-wide STRICT PeerAuthentication, a DENY AuthorizationPolicy
/// selecting `app: ratings`), both translated: no finding. A CUSTOM AuthorizationPolicy
/// naming a provider the mesh config lacks makes `validate` fail, naming it and its field
/// (MF0021: what its rules match is denied); with the ratings Pod in the config nothing
/// else is said (every policy is enforced on the proxy the Pod describes: no MF0017). A
/// PERMISSIVE namespace policy is no error.
#[test]
fn validate_fails_on_a_custom_policy_without_its_provider() {
    let dir = TestDir::new("cli-validate-security");
    let config = dir.subdir("config");
    write_config(
        &config,
        "security.yaml",
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec:\n  mtls: {mode: STRICT}\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ratings-deny, namespace: default}\nspec:\n  selector: {matchLabels: {app: ratings}}\n  action: DENY\n  rules: [{}]\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ratings-ext, namespace: default}\nspec:\n  selector: {matchLabels: {app: ratings}}\n  action: CUSTOM\n  provider: {name: ext}\n  rules: [{}]\n---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: open, namespace: other}\nspec:\n  mtls: {mode: PERMISSIVE}\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let line =
        |needle: &str| -> Vec<&str> { stdout.lines().filter(|l| l.contains(needle)).collect() };
    // PeerAuthentication is translated: no finding.
    assert!(
        line("PeerAuthentication istio-system/default").is_empty(),
        "{stdout}"
    );
    // Translated: no error, but no Pod matches its selector yet (MF0020, a warning).
    let deny = line("AuthorizationPolicy default/ratings-deny");
    assert!(
        deny.len() == 1 && deny[0].contains("warning: ") && deny[0].contains("MF0020"),
        "{stdout}"
    );
    let authz: Vec<&str> = line("AuthorizationPolicy default/ratings-ext")
        .into_iter()
        .filter(|l| !l.contains("MF0020"))
        .collect();
    assert!(
        authz.len() == 1
            && authz[0].contains("error: ")
            && authz[0].contains("MF0021")
            && authz[0].contains("spec.provider.name")
            && authz[0].contains("denied"),
        "{stdout}"
    );
    assert!(line("other/open").is_empty(), "{stdout}");
    assert!(stdout.contains("1 error(s)"), "{stdout}");

    // The ratings Pod: each policy is enforced on its proxy (no MF0017); MF0021 stays.
    write_config(
        &config,
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ratings-1, namespace: default, labels: {app: ratings}}\nspec: {containers: [{name: c, image: i}]}\nstatus: {podIP: 10.1.0.5}\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let applied: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("MF0017 SecurityPolicyNotEnforced"))
        .collect();
    assert!(applied.is_empty(), "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.contains("MF0021")).count(),
        1,
        "{stdout}"
    );
    assert!(!stdout.contains("MF0020"), "the Pod matches: {stdout}");
}

/// What only the objects together show (a subset no DestinationRule defines, a host no
/// service defines, two VirtualServices for one host) is found as `serve` finds it, each
/// line with the object's file and line and its code, and fails the check.
#[test]
fn validate_reports_what_serve_finds_across_objects() {
    let dir = TestDir::new("cli-validate-across");
    let config = dir.subdir("config");
    write_config(
        &config,
        "service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n",
    );
    write_config(
        &config,
        "routes.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: one, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v9}\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: two, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: ratings}\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let routes = config.join("routes.yaml");
    let at = |line: usize| {
        format!(
            "{}:{line}: error: VirtualService default/",
            routes.display()
        )
    };
    let has = |prefix: &str, what: &str, code: &str| {
        stdout
            .lines()
            .any(|l| l.starts_with(prefix) && l.contains(what) && l.ends_with(code))
    };
    assert!(
        has(
            &at(1),
            "subset \"v9\"",
            "[MF0004 ReferencedResourceNotFound]"
        ),
        "{stdout}"
    );
    assert!(
        has(
            &at(10),
            "host ratings.default.svc.cluster.local is defined by no",
            "]"
        ),
        "{stdout}"
    );
    for line in [1, 10] {
        assert!(
            has(
                &at(line),
                "also routed for the mesh",
                "[MF0007 ConflictingMeshGatewayVirtualServiceHosts]"
            ),
            "{stdout}"
        );
    }
    assert_eq!(
        stdout.lines().last(),
        Some("4 error(s), 0 warning(s)"),
        "{stdout}"
    );
}

/// A subset that only a wildcard DestinationRule, or the later of two merged rules,
/// defines is defined: `validate` finds no MF0004. Two rules of one namespace for one host
/// are merged as Istio merges them: a warning (MF0012) names the later, and the check passes.
#[test]
fn validate_counts_subsets_of_wildcard_and_merged_rules_and_warns_of_the_merge() {
    let dir = TestDir::new("cli-validate-dr-merge");
    let config = dir.subdir("config");
    write_config(
        &config,
        "service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n",
    );
    write_config(
        &config,
        "rules.yaml",
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: all, namespace: istio-system}\nspec:\n  host: '*.svc.cluster.local'\n  subsets: [{name: wild, labels: {version: v1}}]\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a, namespace: default}\nspec:\n  host: reviews\n  subsets: [{name: v1, labels: {version: v1}}]\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: b, namespace: default}\nspec:\n  host: reviews\n  subsets: [{name: v2, labels: {version: v2}}]\n",
    );
    write_config(
        &config,
        "routes.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v2}\n      weight: 50\n    - destination: {host: reviews, subset: wild}\n      weight: 50\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("MF0004"), "{stdout}");
    let rules = config.join("rules.yaml");
    assert!(
        stdout.lines().any(|l| l.starts_with(&format!(
            "{}:15: warning: DestinationRule default/b: ",
            rules.display()
        )) && l.contains("merged into a")
            && l.ends_with("[MF0012 MergedDestinationRules]")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.ends_with("1 warning(s)")),
        "{stdout}"
    );
}

/// A rule after a catch-all and a match an earlier one takes are warnings `validate` prints
/// with their file, line and field (`MF0023`, `MF0024`); the check passes; reordered, it is
/// silent.
#[test]
fn validate_warns_of_shadowed_virtual_service_rules() {
    let dir = TestDir::new("cli-validate-shadowed");
    let config = dir.subdir("config");
    write_config(
        &config,
        "service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n",
    );
    let routes = |rules: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: r, namespace: default}}\nspec:\n  hosts: [reviews]\n  http:\n{rules}"
        )
    };
    let api = "  - match: [{uri: {prefix: /api}}]\n    route: [{destination: {host: reviews}}]\n";
    let v1 = "  - match: [{uri: {prefix: /api/v1}}]\n    route: [{destination: {host: reviews}}]\n";
    let rest = "  - route: [{destination: {host: reviews}}]\n";
    write_config(
        &config,
        "routes.yaml",
        &routes(&format!("{api}{v1}{rest}{api}")),
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "warnings only: {stdout}");
    let has = |what: &str, code: &str| {
        stdout.lines().any(|l| {
            l.contains("warning: VirtualService default/r: ")
                && l.contains(what)
                && l.ends_with(code)
        })
    };
    assert!(
        has(
            "spec.http[1].match[0]: never taken: spec.http[0].match[0]",
            "[MF0024 VirtualServiceIneffectiveMatch]"
        ),
        "{stdout}"
    );
    assert!(
        has(
            "spec.http[3]: never reached: spec.http[2] before it has no match",
            "[MF0023 VirtualServiceUnreachableRule]"
        ),
        "{stdout}"
    );
    write_config(&config, "routes.yaml", &routes(&format!("{v1}{api}{rest}")));
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains("MF0023") && !stdout.contains("MF0024"),
        "reordered: {stdout}"
    );
}

/// `--version` names the commit the binary was built from: git's HEAD in a checkout.
#[test]
fn version_names_the_git_commit() {
    let out = meshflow(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let from_env = std::env::var("MESHFLOW_COMMIT").ok();
    let (want, _) = git_commit::commit_of(root, from_env.as_deref());
    assert_eq!(
        text(&out.stdout),
        format!("meshflow {} (commit {want})\n", env!("CARGO_PKG_VERSION"))
    );
    if let Some((git, _)) = git_commit::git_commit(root) {
        assert_eq!(git.len(), 12, "{git}");
        assert!(git.bytes().all(|b| b.is_ascii_hexdigit()), "{git}");
        if from_env.is_none() {
            assert_eq!(want, git);
        }
    }
}

/// Outside a checkout the commit comes from a crates tarball's `.cargo_vcs_info.json`, else
/// is "unknown"; a directory inside someone else's checkout is not that checkout; the
/// builder's MESHFLOW_COMMIT wins over all.
#[test]
fn commit_fallbacks_outside_a_checkout() {
    let outside = std::env::temp_dir().join(format!("meshflow-no-git-{}", std::process::id()));
    std::fs::create_dir_all(&outside).unwrap();
    let bare = git_commit::commit_of(&outside, None);
    std::fs::write(
        outside.join(".cargo_vcs_info.json"),
        "{\n  \"git\": {\n    \"sha1\": \"0123456789abcdef0123456789abcdef01234567\"\n  },\n  \"path_in_vcs\": \"\"\n}",
    )
    .unwrap();
    let tarball = git_commit::commit_of(&outside, None);
    let given = git_commit::commit_of(&outside, Some("feedface"));
    let _ = std::fs::remove_dir_all(&outside);
    assert_eq!(bare, ("unknown".to_string(), vec![]));
    assert_eq!(tarball.0, "0123456789ab");
    assert_eq!(given.0, "feedface");
    // Inside the repository but not its top: a tarball unpacked into another repository.
    let nested = TestDir::new("cli-nested-in-git");
    assert_eq!(git_commit::git_commit(nested.path()), None);
    assert_eq!(git_commit::commit_of(nested.path(), None).0, "unknown");
}

/// Each shell's script is produced, is that shell's kind of script, offers every
/// subcommand, and (where the shell is installed) parses.
#[test]
fn completions_for_each_shell() {
    let subcommands = [
        "serve",
        "proxy-status",
        "proxy-config",
        "explain",
        "authz",
        "diff",
        "watch",
        "validate",
        "completions",
    ];
    for (shell, marker) in [
        ("bash", "complete -F _meshflow"),
        ("zsh", "#compdef meshflow"),
        ("fish", "complete -c meshflow"),
    ] {
        let out = meshflow(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for sub in subcommands {
            assert!(script.contains(sub), "{shell}: {sub} not offered");
        }
        let installed = Command::new(shell)
            .args(["-c", "true"])
            .output()
            .is_ok_and(|o| o.status.success());
        if installed && shell != "fish" {
            let parse = Command::new(shell)
                .args(["-n", "-c", &script])
                .output()
                .expect("run the shell");
            assert!(parse.status.success(), "{shell} -n: {parse:?}");
        } else if installed {
            let parse = Command::new("fish")
                .args(["--no-execute", "-c", &script])
                .output()
                .expect("run fish");
            assert!(parse.status.success(), "fish --no-execute: {parse:?}");
        }
    }
    let bad = meshflow(&["completions", "powershell-9"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}

/// `validate` finds what `serve` finds only for connected proxies, for the proxies the
/// files describe (each Pod, as a gateway where a Gateway selects it, else a sidecar): a
/// `credentialName` Secret missing from the namespace of a client pod (MF0010, for that
/// namespace only), and Gateways whose servers clash on a port of the gateway pod they both
/// select (MF0011). Without the pods, neither is said.
#[test]
fn validate_reports_what_serve_finds_for_the_pods_the_files_describe() {
    let dir = TestDir::new("cli-validate-proxies");
    let config = dir.subdir("config");
    write_config(
        &config,
        "mesh.yaml",
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api, namespace: default}\nspec:\n  hosts: [api.example.com]\n  ports: [{number: 443, name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints: [{address: 10.0.0.40}]\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: api, namespace: default}\nspec:\n  host: api.example.com\n  trafficPolicy: {tls: {mode: SIMPLE, credentialName: api-client}}\n---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: web, namespace: istio-system}\nspec:\n  selector: {istio: ingressgateway}\n  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ['*']}]\n---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: db, namespace: istio-system}\nspec:\n  selector: {istio: ingressgateway}\n  servers: [{port: {number: 8080, name: tcp, protocol: TCP}, hosts: ['*']}]\n",
    );
    // The CA the rule's clients in `default` take.
    let (ca, _) = self_signed("ca.example.com");
    write_config(
        &config,
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: api-client-cacert, namespace: default}}\nstringData:\n  ca.crt: |\n{ca}"
        ),
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains("MF0010") && !stdout.contains("MF0011"),
        "{stdout}"
    );
    write_config(
        &config,
        "pods.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: sleep-1, namespace: apps, labels: {app: sleep}}\nstatus: {podIP: 10.0.0.7}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: sleep-2, namespace: default, labels: {app: sleep}}\nstatus: {podIP: 10.0.0.8}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: ingress-1, namespace: istio-system, labels: {istio: ingressgateway}}\nstatus: {podIP: 10.0.0.9}\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines = |code: &str| -> Vec<&str> { stdout.lines().filter(|l| l.contains(code)).collect() };
    let secret = lines("MF0010");
    assert!(
        secret
            .iter()
            .any(|l| l.contains("for proxies in namespace apps")),
        "{stdout}"
    );
    assert!(
        secret.iter().all(|l| !l.contains("namespace default")),
        "the Secret's own namespace is served: {stdout}"
    );
    // On both Gateways of the pair: an error on `db` (its TCP server gets nothing), a
    // warning on `web` (its HTTP server holds the port).
    let clash = lines("MF0011");
    assert_eq!(clash.len(), 2, "{stdout}");
    assert!(
        clash
            .iter()
            .any(|l| l.contains("error: Gateway istio-system/db")),
        "{stdout}"
    );
    assert!(
        clash
            .iter()
            .any(|l| l.contains("warning: Gateway istio-system/web") && l.contains("db")),
        "{stdout}"
    );
}

/// An HTTPS gateway whose Secret does not exist (in the gateway workload's namespace) is an
/// error naming the Gateway, the field and the Secret, and `validate` exits non-zero; once
/// the Secret exists (and holds a certificate and its key), it is clean.
#[test]
fn validate_names_a_missing_gateway_secret() {
    let dir = TestDir::new("cli-validate-secret");
    let config = dir.subdir("config");
    write_config(
        &config,
        "gateway.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ingress-1, namespace: istio-system, labels: {istio: ingressgateway}}\nstatus: {podIP: 10.0.0.9}\n---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: secure, namespace: istio-system}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [web.example.com]\n    tls: {mode: SIMPLE, credentialName: web-cred}\n",
    );
    // The same name in another namespace does not count.
    write_config(
        &config,
        "elsewhere.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: web-cred, namespace: default}\ntype: kubernetes.io/tls\nstringData: {tls.crt: x, tls.key: y}\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let line = stdout
        .lines()
        .find(|l| l.contains("credentialName"))
        .unwrap_or_else(|| panic!("no credentialName error:\n{stdout}"));
    for part in [
        "Gateway",
        "istio-system/secure",
        "spec.servers[0].tls.credentialName",
        "Secret istio-system/web-cred does not exist",
    ] {
        assert!(line.contains(part), "{part:?} in {line}");
    }

    let (cert, key) = self_signed("web.example.com");
    write_config(
        &config,
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: web-cred, namespace: istio-system}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{cert}  tls.key: |\n{key}"
        ),
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("credentialName"), "{stdout}");
    assert!(
        !stdout.contains("PRIVATE KEY") && !text(&out.stderr).contains("PRIVATE KEY"),
        "{stdout}"
    );
}

/// A self-signed certificate for `name` and its key, PEM, each line indented four spaces
/// (a YAML block scalar's lines under `stringData`).
fn self_signed(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let indent = |pem: &str| -> String { pem.lines().map(|l| format!("    {l}\n")).collect() };
    (indent(&cert.pem()), indent(&key.serialize_pem()))
}

/// `kubectl get -o yaml` writes a `kind: List`: `validate` reads its items (before, the
/// whole file was read as nothing and `validate` said `ok`), and names an invalid item with
/// the List's file and line.
#[test]
fn validate_reads_the_items_of_a_list() {
    let dir = TestDir::new("cli-validate-list");
    let config = dir.subdir("config");
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: reviews, namespace: default}\n  spec: {ports: [{name: http, port: 9080}]}\n- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n  metadata: {name: reviews, namespace: default}\n  spec: {hosts: [reviews], http: [{route: [{destination: {host: reviews}}]}]}\n";
    write_config(&config, "exported.yaml", list);
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.starts_with("ok: ") && !stdout.starts_with("ok: 0 "),
        "{stdout}"
    );

    let broken = list.replace("route: [", "timeout: soon, route: [");
    write_config(&config, "exported.yaml", &broken);
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l
                .contains("exported.yaml:1: VirtualService default/reviews: spec.http[0].timeout")),
        "{stdout}"
    );
}

/// A RequestAuthentication is translated: with keys written, no finding. `validate`
/// fetches each `jwksUri` once, as `serve` would: keys served on loopback, no finding; a
/// URI nothing answers on fails the check with MF0018 on the object, naming the rule's field
/// and why.
#[test]
fn validate_fetches_jwks_uris_and_reports_those_it_cannot() {
    let dir = TestDir::new("cli-validate-jwks");
    let config = dir.subdir("config");
    let issuer = support::jwt::Issuer::new("https://idp.example.com", "k1");
    let keys = support::jwt::KeyServer::start(Some(issuer.jwks()));
    let closed = support::free_port();
    let policy = |name: &str, keys: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  jwtRules:\n  - issuer: https://idp.example.com\n    {keys}\n"
        )
    };
    write_config(
        &config,
        "jwt.yaml",
        &[
            policy("inline", &format!("jwks: '{}'", issuer.jwks())),
            policy("fetched", &format!("jwksUri: {}", keys.uri())),
        ]
        .join("---\n"),
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("MF00"), "{stdout}");
    assert_eq!(*keys.requests.lock().unwrap(), 1, "fetched once");

    write_config(
        &config,
        "unreachable.yaml",
        &policy(
            "unreachable",
            &format!("jwksUri: http://127.0.0.1:{closed}/keys\n    timeout: 1s"),
        ),
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("MF0018")).collect();
    assert!(
        lines.len() == 1
            && lines[0].contains("default/unreachable")
            && lines[0].contains("spec.jwtRules[0].jwksUri")
            && lines[0].contains("connecting to"),
        "{stdout}"
    );
}

/// The Gateway API through `validate`: a valid Gateway and HTTPRoute (no gateway pod in the
/// files: meshflow provisions none, so that is no error) pass; a route naming a listener the
/// Gateway lacks and a backend that does not exist fail, each error naming the route, the
/// field and the spec's reason.
#[test]
fn validate_reports_gateway_api_routes_by_field_and_reason() {
    let dir = TestDir::new("cli-validate-gateway-api");
    let config = dir.subdir("config");
    write_config(
        &config,
        "gateway.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  ports: [{name: http, port: 80}]\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: default}\nspec:\n  gatewayClassName: istio\n  listeners: [{name: http, port: 8080, protocol: HTTP}]\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web, namespace: default}\nspec:\n  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: web, port: 80}]}]\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");

    write_config(
        &config,
        "broken.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: broken, namespace: default}\nspec:\n  parentRefs: [{name: gw, sectionName: https}]\n  rules: [{backendRefs: [{name: nowhere, port: 80}]}]\n",
    );
    let out = meshflow(&["validate", config.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for (what, code) in [
        (
            "spec.parentRefs[0]: NoMatchingParent: Gateway default/gw has no listener named \"https\"",
            "[MF0039 GatewayApiRouteNotAccepted]",
        ),
        (
            "spec.rules[0].backendRefs[0]: BackendNotFound",
            "[MF0040 GatewayApiBackendNotResolved]",
        ),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("HTTPRoute default/broken") && l.contains(what) && l.ends_with(code)),
            "{what}: {stdout}"
        );
    }
}
