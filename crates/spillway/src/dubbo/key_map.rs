//! The capped key map shared by the per-key Dubbo limits: lookups under a read lock, inserts under
//! a write lock, and lossless eviction when full.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Keys to shared per-key state, at most `max_keys` of them.
///
/// A new key past the cap first evicts the keys nobody holds: those whose state is referenced by
/// the map alone (no permit, no waiter, no handle, no caller between its lookup and its use), so
/// eviction never loses a count. If every key is held, the new key is refused.
#[derive(Debug)]
pub(super) struct KeyMap<T> {
    max_keys: usize,
    keys: RwLock<HashMap<Arc<str>, Arc<T>>>,
}

/// The map is full of held keys and this one is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeysFull;

impl<T> KeyMap<T> {
    pub(super) fn new(max_keys: usize) -> Self {
        Self {
            max_keys,
            keys: RwLock::new(HashMap::new()),
        }
    }

    /// The state of `key`, made by `make` if the key is new.
    pub(super) fn get_or_insert(
        &self,
        key: &str,
        make: impl FnOnce() -> T,
    ) -> Result<Arc<T>, KeysFull> {
        if let Some(state) = self.read().get(key) {
            return Ok(state.clone());
        }
        let mut keys = self.write();
        if let Some(state) = keys.get(key) {
            return Ok(state.clone());
        }
        if keys.len() >= self.max_keys {
            keys.retain(|_, state| Arc::strong_count(state) > 1);
        }
        if keys.len() >= self.max_keys {
            return Err(KeysFull);
        }
        let state = Arc::new(make());
        keys.insert(Arc::from(key), state.clone());
        Ok(state)
    }

    /// Reads `key`'s state, if the key is tracked.
    pub(super) fn with<R>(&self, key: &str, read: impl FnOnce(&T) -> R) -> Option<R> {
        self.read().get(key).map(|state| read(state))
    }

    /// Keys tracked.
    pub(super) fn len(&self) -> usize {
        self.read().len()
    }

    pub(super) fn max_keys(&self) -> usize {
        self.max_keys
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<Arc<str>, Arc<T>>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<Arc<str>, Arc<T>>> {
        self.keys.write().unwrap_or_else(|e| e.into_inner())
    }
}
