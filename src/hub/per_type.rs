//! [`PerType`]: one value per xDS resource type, indexed by the type itself, so per-type
//! state is never an array reached through a position helper.

use dataflows::model::ResourceType;
use std::ops::{Index, IndexMut};

/// One `T` for each of CDS, EDS, LDS, RDS and SDS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerType<T>([T; ResourceType::COUNT]);

impl<T> PerType<T> {
    /// Every type with its value, in [`ResourceType::ALL`] (push) order.
    pub fn iter(&self) -> impl Iterator<Item = (ResourceType, &T)> {
        ResourceType::ALL.into_iter().zip(self.0.iter())
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut()
    }
}

impl<T> Index<ResourceType> for PerType<T> {
    type Output = T;
    fn index(&self, t: ResourceType) -> &T {
        &self.0[t.index()]
    }
}

impl<T> IndexMut<ResourceType> for PerType<T> {
    fn index_mut(&mut self, t: ResourceType) -> &mut T {
        &mut self.0[t.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::PerType;
    use dataflows::model::ResourceType;

    #[test]
    fn each_type_has_its_own_slot() {
        let mut p: PerType<u32> = PerType::default();
        for (i, t) in ResourceType::ALL.into_iter().enumerate() {
            p[t] += i as u32 + 1;
        }
        let seen: Vec<(ResourceType, u32)> = p.iter().map(|(t, v)| (t, *v)).collect();
        assert_eq!(
            seen,
            vec![
                (ResourceType::Cluster, 1),
                (ResourceType::Endpoint, 2),
                (ResourceType::Listener, 3),
                (ResourceType::Route, 4),
                (ResourceType::Secret, 5)
            ]
        );
    }
}
