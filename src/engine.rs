//! How configs are computed: meshflow's incremental dataflow, or a baseline it is measured
//! against. One type for `serve --engine`, the runtime, the hub and `meshflow bench`.
//! Imports nothing of this crate.

/// The engine that computes (and decides how to push) every proxy's config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum EngineKind {
    /// The incremental dataflow: only what changed is computed and pushed.
    #[value(name = "meshflow", alias = "dataflow", alias = "incremental")]
    Meshflow,
    /// The baseline: every change recomputes and pushes every proxy's whole config over
    /// State-of-the-World, as Istio did before incremental pushes.
    #[value(name = "full-push", alias = "baseline")]
    FullPush,
    /// The second baseline: Istio 1.22+'s push algorithm (scoped pushes, incremental EDS,
    /// whole LDS/RDS resent over Delta) with meshflow's translation
    /// (`runtime::istio_style`).
    #[value(name = "istio-style", alias = "istio")]
    IstioStyle,
}

impl EngineKind {
    /// Every engine, in the order reports list them.
    pub const ALL: [EngineKind; 3] = [
        EngineKind::Meshflow,
        EngineKind::IstioStyle,
        EngineKind::FullPush,
    ];

    /// Parses a name or alias, as `--engine` takes it.
    pub fn parse(s: &str) -> Result<EngineKind, String> {
        <EngineKind as clap::ValueEnum>::from_str(s, false).map_err(|_| {
            let names: Vec<&str> = EngineKind::ALL.iter().map(|e| e.name()).collect();
            format!("unknown engine {s:?} (one of {})", names.join(", "))
        })
    }

    /// The canonical name (`--engine` value, report column).
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Meshflow => "meshflow",
            EngineKind::FullPush => "full-push",
            EngineKind::IstioStyle => "istio-style",
        }
    }

    /// Whether the engine records what each resource was built from (`explain`): only the
    /// dataflow does; the baselines recompute without provenance.
    pub fn computes_provenance(self) -> bool {
        self == EngineKind::Meshflow
    }

    /// Whether a proxy is pushed its whole config after every epoch.
    pub fn pushes_everything(self) -> bool {
        self == EngineKind::FullPush
    }
}

#[cfg(test)]
mod tests {
    use super::EngineKind;

    #[test]
    fn names_and_aliases_parse() {
        for e in EngineKind::ALL {
            assert_eq!(EngineKind::parse(e.name()), Ok(e));
        }
        assert_eq!(EngineKind::parse("dataflow"), Ok(EngineKind::Meshflow));
        assert_eq!(EngineKind::parse("baseline"), Ok(EngineKind::FullPush));
        assert_eq!(EngineKind::parse("istio"), Ok(EngineKind::IstioStyle));
        assert!(EngineKind::parse("fast")
            .unwrap_err()
            .contains("meshflow, istio-style, full-push"));
    }
}
