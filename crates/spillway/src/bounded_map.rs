//! An append-only, capped map from names to values with lock-free reads and stable references.

use arc_swap::ArcSwap;
use std::collections::HashMap;

/// Names are hashed with foldhash (fast, and seeded per process against collision flooding).
type Index = HashMap<Arc<str>, usize, foldhash::fast::RandomState>;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Names to values, at most `capacity` of them, never removed while the map lives.
///
/// Reads load an immutable index through [`ArcSwap`] (no lock, no shared write) and return a
/// reference into an append-only [`boxcar::Vec`], valid for as long as the map. Inserts are rare
/// (once per name) and serialise on a mutex, copying the index.
pub(crate) struct BoundedMap<V> {
    index: ArcSwap<Index>,
    values: boxcar::Vec<(Arc<str>, V)>,
    insert: Mutex<()>,
    capacity: usize,
}

/// The map holds `capacity` names already and this one is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

impl<V> BoundedMap<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            index: ArcSwap::from_pointee(Index::default()),
            values: boxcar::Vec::new(),
            insert: Mutex::new(()),
            capacity,
        }
    }

    /// The position of `name`, if present.
    #[inline]
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        self.index.load().get(name).copied()
    }

    /// The entry at `position` (from [`position`](Self::position) or an insert).
    #[inline]
    pub(crate) fn at(&self, position: usize) -> &(Arc<str>, V) {
        &self.values[position]
    }

    /// The entry for `name`, if present.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&(Arc<str>, V)> {
        self.position(name).map(|position| self.at(position))
    }

    /// The position of `name`, inserting `make(name)` if absent and the map is not full.
    pub(crate) fn position_or_insert_with(
        &self,
        name: &str,
        make: impl FnOnce(&Arc<str>) -> V,
    ) -> Result<usize, Full> {
        if let Some(position) = self.position(name) {
            return Ok(position);
        }
        // A poisoned lock only means another insert panicked; the index it guards is an ArcSwap
        // that was either swapped or not, so carrying on is sound.
        let _guard = self.insert.lock().unwrap_or_else(|e| e.into_inner());
        let index = self.index.load_full();
        if let Some(&position) = index.get(name) {
            return Ok(position);
        }
        if index.len() >= self.capacity {
            return Err(Full);
        }
        let key: Arc<str> = Arc::from(name);
        let value = make(&key);
        let position = self.values.push((key.clone(), value));
        let mut next = Index::clone(&index);
        next.insert(key, position);
        self.index.store(Arc::new(next));
        Ok(position)
    }

    /// The entry for `name`, inserting `make(name)` if absent and the map is not full.
    pub(crate) fn get_or_insert_with(
        &self,
        name: &str,
        make: impl FnOnce(&Arc<str>) -> V,
    ) -> Result<&(Arc<str>, V), Full> {
        self.position_or_insert_with(name, make)
            .map(|position| self.at(position))
    }

    /// Entries, in insertion order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(Arc<str>, V)> {
        self.values.iter().map(|(_, entry)| entry)
    }

    pub(crate) fn len(&self) -> usize {
        self.values.count()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}

impl<V> fmt::Debug for BoundedMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundedMap")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(all(test, not(spillway_loom)))]
mod tests {
    use super::*;

    #[test]
    fn inserts_once_and_stops_at_capacity() {
        let map = BoundedMap::new(2);
        assert_eq!(map.get_or_insert_with("a", |_| 1).unwrap().1, 1);
        assert_eq!(map.get_or_insert_with("a", |_| 99).unwrap().1, 1);
        assert_eq!(map.get_or_insert_with("b", |_| 2).unwrap().1, 2);
        assert_eq!(map.get_or_insert_with("c", |_| 3), Err(Full));
        assert_eq!(map.get("b").map(|e| e.1), Some(2));
        assert_eq!(map.len(), 2);
        let names: Vec<_> = map.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(names, ["a", "b"]);
    }
}
