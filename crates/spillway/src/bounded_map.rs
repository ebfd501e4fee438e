//! An append-only, capped map from names to values with lock-free reads and stable references.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Slots in the first table (a power of two).
const FIRST_TABLE: usize = 8;

/// Names to values, at most `capacity` of them, never removed while the map lives.
///
/// Values sit in an append-only [`boxcar::Vec`], so a reference to one is valid for as long as
/// the map. Names are found through an open-addressing table of positions (`position + 1`, 0 for
/// an empty slot), kept at most half full, with names hashed by foldhash (fast, and seeded per
/// process against collision flooding). A read is a few loads: no lock, no reference count, no
/// write. Inserts are rare (once per name) and serialise on a mutex. A table that would pass
/// half full is replaced by one twice its size, filled before it is published; the old tables
/// stay allocated until the map is dropped, so that a reader still probing one needs no
/// reference on it (together they take at most as much again as the current one).
pub(crate) struct BoundedMap<V> {
    values: boxcar::Vec<(Arc<str>, V)>,
    tables: boxcar::Vec<Box<[AtomicUsize]>>,
    /// The index in `tables` of the table in use (meaningful once `tables` has one).
    current: AtomicUsize,
    hasher: foldhash::fast::RandomState,
    insert: Mutex<()>,
    capacity: usize,
}

/// The map is at capacity: the name was not inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

impl<V> BoundedMap<V> {
    /// An empty map that holds at most `capacity` names.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            values: boxcar::Vec::new(),
            tables: boxcar::Vec::new(),
            current: AtomicUsize::new(0),
            hasher: foldhash::fast::RandomState::default(),
            insert: Mutex::new(()),
            capacity,
        }
    }

    /// The position of `name`, if it is in the map.
    #[inline]
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        // Acquire: the table's slots were filled before it was published.
        let table = self.tables.get(self.current.load(Ordering::Acquire))?;
        let mask = table.len() - 1;
        let mut slot = self.hasher.hash_one(name) as usize & mask;
        loop {
            // Acquire: a position is stored after its value was pushed.
            match table[slot].load(Ordering::Acquire) {
                0 => return None,
                stored => {
                    let position = stored - 1;
                    if self
                        .values
                        .get(position)
                        .is_some_and(|(key, _)| **key == *name)
                    {
                        return Some(position);
                    }
                }
            }
            // At most half full: an empty slot ends every probe.
            slot = (slot + 1) & mask;
        }
    }

    /// The entry at `position` (from [`position`](Self::position) or an insert).
    #[inline]
    pub(crate) fn at(&self, position: usize) -> &(Arc<str>, V) {
        &self.values[position]
    }

    /// The entry of `name`, if it is in the map.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&(Arc<str>, V)> {
        self.position(name).map(|position| self.at(position))
    }

    /// The position of `name`, inserting `make(name)` first if it is new and the map has room.
    pub(crate) fn position_or_insert_with(
        &self,
        name: &str,
        make: impl FnOnce(&Arc<str>) -> V,
    ) -> Result<usize, Full> {
        self.position_or_insert_within(name, make, self.capacity)
    }

    /// The position of `name`, inserting `make(name)` first if it is new, even past the
    /// capacity: for the few names that must have their own entry whatever else came first
    /// (the caller bounds how many).
    pub(crate) fn position_or_insert_beyond_capacity(
        &self,
        name: &str,
        make: impl FnOnce(&Arc<str>) -> V,
    ) -> usize {
        match self.position_or_insert_within(name, make, usize::MAX) {
            Ok(position) => position,
            Err(Full) => unreachable!("no map holds usize::MAX names"),
        }
    }

    /// The position of `name`, inserting `make(name)` first if it is new and fewer than
    /// `limit` names are in.
    fn position_or_insert_within(
        &self,
        name: &str,
        make: impl FnOnce(&Arc<str>) -> V,
        limit: usize,
    ) -> Result<usize, Full> {
        if let Some(position) = self.position(name) {
            return Ok(position);
        }
        // A poisoned lock only means another insert panicked before or after publishing a
        // table or a slot, each one store: carrying on is sound.
        let _guard = self.insert.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(position) = self.position(name) {
            return Ok(position);
        }
        if self.values.count() >= limit {
            return Err(Full);
        }
        let key: Arc<str> = Arc::from(name);
        let value = make(&key);
        let position = self.values.push((key, value));
        let table = self
            .tables
            .get(self.current.load(Ordering::Relaxed))
            .filter(|table| (position + 1) * 2 <= table.len());
        match table {
            Some(table) => self.place(table, name, position),
            None => {
                // The first table, or a bigger one with every name so far (this one included).
                let size = FIRST_TABLE.max(((position + 1) * 2).next_power_of_two());
                let table: Box<[AtomicUsize]> = (0..size).map(|_| AtomicUsize::new(0)).collect();
                for (position, (key, _)) in self.values.iter() {
                    self.place(&table, key, position);
                }
                let index = self.tables.push(table);
                self.current.store(index, Ordering::Release);
            }
        }
        Ok(position)
    }

    /// Stores `position` in the first free slot of `name`'s probe.
    fn place(&self, table: &[AtomicUsize], name: &str, position: usize) {
        let mask = table.len() - 1;
        let mut slot = self.hasher.hash_one(name) as usize & mask;
        while table[slot].load(Ordering::Relaxed) != 0 {
            slot = (slot + 1) & mask;
        }
        table[slot].store(position + 1, Ordering::Release);
    }

    /// The entry of `name`, inserting `make(name)` first if it is new and the map has room.
    pub(crate) fn get_or_insert_with(
        &self,
        name: &str,
        make: impl FnOnce(&Arc<str>) -> V,
    ) -> Result<&(Arc<str>, V), Full> {
        self.position_or_insert_with(name, make)
            .map(|position| self.at(position))
    }

    /// Every entry, in insertion order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(Arc<str>, V)> {
        self.values.iter().map(|(_, entry)| entry)
    }

    /// How many names the map holds.
    pub(crate) fn len(&self) -> usize {
        self.values.count()
    }

    /// The most names the map holds.
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

    #[test]
    fn finds_every_name_as_the_table_grows() {
        let map = BoundedMap::new(10_000);
        for i in 0..5_000 {
            let name = format!("name-{i}");
            assert_eq!(map.position(&name), None);
            assert_eq!(map.position_or_insert_with(&name, |_| i), Ok(i));
            // Every name so far is still found, at its position, after any growth.
            if i % 499 == 0 {
                for j in 0..=i {
                    assert_eq!(map.position(&format!("name-{j}")), Some(j), "name-{j}");
                }
            }
        }
        assert_eq!(map.get("name-4321").map(|e| e.1), Some(4321));
        assert_eq!(map.get("name-5000"), None);
        assert_eq!(map.len(), 5_000);
    }

    #[test]
    fn racing_inserts_and_reads_agree_on_one_position_per_name() {
        let map = BoundedMap::new(1_000);
        let positions: Vec<Vec<usize>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|worker| {
                    let map = &map;
                    s.spawn(move || {
                        // Each thread inserts the same 600 names, in a different order, and
                        // reads each back at once.
                        let mut seen = vec![0; 600];
                        for k in 0..600 {
                            let i = (k * 7 + worker * 151) % 600;
                            let name = format!("shared-{i}");
                            let position = map.position_or_insert_with(&name, |_| i).unwrap();
                            assert_eq!(map.position(&name), Some(position));
                            assert_eq!(map.at(position).1, i);
                            seen[i] = position;
                        }
                        seen
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(positions.windows(2).all(|pair| pair[0] == pair[1]));
        assert_eq!(map.len(), 600);
    }
}
