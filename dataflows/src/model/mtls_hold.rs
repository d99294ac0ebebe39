//! A workload whose PeerAuthentications changed what its clients send it (mTLS or
//! plaintext, on some port), held half-way while the change reaches both sides in an order
//! that drops no request ([`MtlsHold`]).
//!
//! Flipped all at once, a DISABLE → STRICT change races: a client already sending mTLS
//! meets a server still accepting only plaintext, or the server refuses plaintext from a
//! client not yet told to send mTLS. Held, the flip goes in three steps: the server accepts
//! both on the ports that flip (PERMISSIVE) while clients keep what they sent; once the
//! server acknowledged that, clients are sent the new choice; once they acknowledged it,
//! the hold is retracted and the server takes its policies' mode. The runtime's transition
//! controller writes these records from what proxies acknowledged; the engines only read
//! them, so the dataflow, the naive recompute and the simulation serve the same step.

use super::*;
use serde::{Deserialize, Serialize};

/// One workload's PeerAuthentication change, part-way through.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MtlsHold {
    /// The workload's address, as [`Workload::ip`].
    pub ip: String,
    /// The workload's object (its Pod or WorkloadEntry), as [`Workload::origin`].
    pub workload: ConfigKey,
    /// What its clients were sent before the change ([`Workload::peer`]: where mTLS is
    /// disabled, `None` when nowhere).
    pub from: Option<PeerModes>,
    /// What its PeerAuthentications give now.
    pub to: Option<PeerModes>,
    /// Its sidecar acknowledged accepting both on the ports that flip: clients are sent
    /// `to`.
    pub clients_moved: bool,
}

impl MtlsHold {
    /// What the workload's clients are sent while the hold stands.
    pub fn client_view(&self) -> Option<&PeerModes> {
        if self.clients_moved {
            self.to.as_ref()
        } else {
            self.from.as_ref()
        }
    }

    /// Whether clients send plaintext on workload port `port` (`None`: the ports no
    /// `portLevelMtls` names) under `view`.
    fn plaintext(view: Option<&PeerModes>, port: Option<u16>) -> bool {
        view.is_some_and(|m| match port {
            Some(p) => m.mode_for(p) == MtlsMode::Disable,
            None => m.mode == MtlsMode::Disable,
        })
    }

    /// Whether what clients send on `port` differs between before and after.
    fn flips(&self, port: Option<u16>) -> bool {
        Self::plaintext(self.from.as_ref(), port) != Self::plaintext(self.to.as_ref(), port)
    }

    /// The workload's inbound side while held: every port whose clients' choice flips
    /// accepts mTLS and plaintext alike (PERMISSIVE); the others keep their mode.
    pub fn bridge(&self, mut sec: InboundSecurity) -> InboundSecurity {
        let restrictive = |m: MtlsMode| matches!(m, MtlsMode::Strict | MtlsMode::Disable);
        let named: std::collections::BTreeSet<u16> = sec
            .ports
            .keys()
            .chain(self.from.iter().flat_map(|m| m.ports.keys()))
            .chain(self.to.iter().flat_map(|m| m.ports.keys()))
            .copied()
            .collect();
        let default = sec.mode.unwrap_or_default();
        for port in named {
            let mode = sec.ports.get(&port).copied().unwrap_or(default);
            if self.flips(Some(port)) && restrictive(mode) {
                sec.ports.insert(port, MtlsMode::Permissive);
            } else if !sec.ports.contains_key(&port) && self.flips(None) && restrictive(default) {
                // The default flips below; a port that does not flip keeps its mode.
                sec.ports.insert(port, default);
            }
        }
        if self.flips(None) && restrictive(default) {
            sec.mode = Some(MtlsMode::Permissive);
        }
        sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modes(mode: MtlsMode, ports: &[(u16, MtlsMode)]) -> PeerModes {
        PeerModes {
            mode,
            ports: ports.iter().copied().collect(),
        }
    }

    fn hold(from: Option<PeerModes>, to: Option<PeerModes>) -> MtlsHold {
        MtlsHold {
            ip: "10.0.0.1".into(),
            workload: ConfigKey::new(Kind::Pod, "default", "a"),
            from,
            to,
            clients_moved: false,
        }
    }

    fn server(mode: MtlsMode, ports: &[(u16, MtlsMode)]) -> InboundSecurity {
        InboundSecurity {
            mode: Some(mode),
            ports: ports.iter().copied().collect(),
            ..InboundSecurity::default()
        }
    }

    #[test]
    fn a_flip_to_strict_is_bridged_where_clients_sent_plaintext() {
        use MtlsMode::*;
        let h = hold(Some(modes(Disable, &[])), None);
        let bridged = h.bridge(server(Strict, &[]));
        assert_eq!(bridged.mode, Some(Permissive));
        assert!(bridged.is_open(), "both accepted on every port");
        assert_eq!(h.client_view(), h.from.as_ref(), "clients keep plaintext");
        let moved = MtlsHold {
            clients_moved: true,
            ..h
        };
        assert_eq!(moved.client_view(), None, "then they send mTLS");
    }

    #[test]
    fn only_the_ports_that_flip_are_bridged() {
        use MtlsMode::*;
        // Port 8080 goes from DISABLE to STRICT; 9090 stays STRICT, 7070 stays DISABLE.
        let from = modes(Strict, &[(8080, Disable), (7070, Disable)]);
        let to = modes(Strict, &[(7070, Disable)]);
        let h = hold(Some(from), Some(to));
        let bridged = h.bridge(server(Strict, &[(7070, Disable)]));
        assert_eq!(bridged.mode, Some(Strict));
        assert_eq!(bridged.ports.get(&8080), Some(&Permissive));
        assert_eq!(bridged.ports.get(&7070), Some(&Disable));
        assert_eq!(bridged.ports.get(&9090), None);
    }

    #[test]
    fn a_default_flip_leaves_a_port_that_keeps_its_choice() {
        use MtlsMode::*;
        // The workload goes DISABLE → STRICT, but port 8080 was and stays DISABLE.
        let from = modes(Disable, &[(8080, Disable)]);
        let to = modes(Strict, &[(8080, Disable)]);
        let h = hold(Some(from), Some(to));
        let bridged = h.bridge(server(Strict, &[(8080, Disable)]));
        assert_eq!(bridged.mode, Some(Permissive));
        assert_eq!(bridged.ports.get(&8080), Some(&Disable));
        // And a port named only before keeps the server's mode for it.
        let from = modes(Strict, &[(8080, Strict)]);
        let h = hold(Some(from), None);
        assert_eq!(h.bridge(server(Strict, &[])), server(Strict, &[]));
    }

    #[test]
    fn a_flip_to_disable_is_bridged_too() {
        use MtlsMode::*;
        let h = hold(None, Some(modes(Disable, &[])));
        assert_eq!(h.bridge(server(Disable, &[])).mode, Some(Permissive));
        assert_eq!(
            h.client_view(),
            None,
            "clients keep mTLS until the server accepts both"
        );
    }
}
