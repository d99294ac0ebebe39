//! The converters' tests, a file for each kind as the converters have, and the helpers they
//! share (also those of `config::tests`): an object parsed with the default mesh config, the
//! fields of its findings at a level, its first record as a kind.

mod destination_rule;
mod gateway;
mod gateway_api;
mod kube;
mod load_balancer;
mod route_actions;
mod security;
mod service_entry;
mod sidecar;
mod virtual_service;

use crate::config::{parse_document, Level, Parsed};
use dataflows::model::{ConfigKey, Kind, MeshConfig, Record};

pub(in crate::config) fn mesh() -> MeshConfig {
    MeshConfig::default()
}

pub(in crate::config) fn parse(doc: &str) -> Parsed {
    parse_document(doc, &MeshConfig::default())
        .unwrap_or_else(|e| panic!("rejected: {e:?}"))
        .expect("an object")
}

fn fields(p: &Parsed, level: Level) -> Vec<String> {
    p.findings
        .iter()
        .filter(|f| f.level == level)
        .map(|f| f.field.clone())
        .collect()
}

fn vs(p: &Parsed) -> &dataflows::model::VirtualService {
    match &p.records[0] {
        Record::VirtualService(v) => v,
        other => panic!("{other:?}"),
    }
}

pub(in crate::config) const VS: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: ns}\nspec:\n  hosts: [reviews]\n";

fn dr(p: &Parsed) -> &dataflows::model::DestinationRule {
    match &p.records[0] {
        Record::DestinationRule(d) => d,
        other => panic!("{other:?}"),
    }
}

const DR: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: ns}\nspec:\n  host: reviews\n";
