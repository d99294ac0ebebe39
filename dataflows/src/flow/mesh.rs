//! The mesh settings in effect, and the mesh defaults applied to the records that take them.
//! In: the mesh settings records (the engine's built-in ones, a mesh config's). Out: one
//! record keyed by `()`, joined wherever a mesh default completes a record, so a change of
//! the mesh config recomputes what depends on it and nothing else; records whose completed
//! form does not change (they set the field themselves) produce no change downstream.

use super::Coll;
use crate::model::*;

/// The settings in effect, under the unit key every stage joins on.
pub(super) type Mesh<'s> = Coll<'s, ((), MeshSettings)>;

/// The highest layer present (the engine always inserts the built-in one).
pub(super) fn in_effect<'s>(input: Coll<'s, MeshSettings>, mesh: &MeshConfig) -> Mesh<'s> {
    let mesh = mesh.clone();
    input.map(|m| ((), m)).reduce(move |_, vals, out| {
        let chosen = MeshSettings::in_effect(vals.iter().map(|(m, _)| *m), &mesh);
        out.push((chosen, 1isize));
    })
}

/// `records` as the settings in effect complete them.
pub(super) fn complete<'s, K, V>(
    records: Coll<'s, (K, V)>,
    mesh: &Mesh<'s>,
    f: fn(&MeshSettings, V) -> V,
) -> Coll<'s, (K, V)>
where
    K: differential_dataflow::ExchangeData + std::hash::Hash,
    V: differential_dataflow::ExchangeData + std::hash::Hash,
{
    records
        .map(|kv| ((), kv))
        .join_map(mesh.clone(), move |_, (k, v), m| {
            (k.clone(), f(m, v.clone()))
        })
}
