//! Kubernetes objects as the file source reads them, for tests that need a Service whose
//! endpoints they place by hand (no selector: an EndpointSlice of their own).

/// A Service of one port and its hand-managed EndpointSlice.
pub struct HandService<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The port's name (`http`, `grpc`, `web`: what its protocol is read from).
    pub port_name: &'a str,
    pub port: u16,
    /// Where the endpoints listen.
    pub target: u16,
    /// More fields of the Service port, each followed by `, ` (`appProtocol: tcp, `).
    pub port_extra: &'a str,
    /// More lines of the Service spec, each indented by two spaces and ending in a newline.
    pub spec_extra: &'a str,
}

impl HandService<'_> {
    /// `name` of `default` on `port` (port name `web`), its endpoints on `target`.
    pub fn web(name: &str, port: u16, target: u16) -> HandService<'_> {
        HandService {
            namespace: "default",
            name,
            port_name: "web",
            port,
            target,
            port_extra: "",
            spec_extra: "",
        }
    }

    /// The Service and an EndpointSlice of one ready endpoint per address of `ips` (all of
    /// one family: the slice's `addressType` is IPv6 when the first is).
    pub fn with_endpoints(&self, ips: &[&str]) -> String {
        let HandService {
            namespace,
            name,
            port_name,
            port,
            target,
            port_extra,
            spec_extra,
        } = self;
        let endpoints: String = ips
            .iter()
            .map(|ip| format!("- addresses: [\"{ip}\"]\n  conditions: {{ready: true}}\n"))
            .collect();
        let family = if ips.first().is_some_and(|ip| ip.contains(':')) {
            "IPv6"
        } else {
            "IPv4"
        };
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}}}
spec:
{spec_extra}  ports: [{{name: {port_name}, port: {port}, targetPort: {target}, {port_extra}protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-abcde
  namespace: {namespace}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: {family}
ports: [{{name: {port_name}, port: {target}, protocol: TCP}}]
endpoints:
{endpoints}"
        )
    }
}
