//! Names that live for the whole process, so that a block can name its rule and resource
//! without touching a shared reference count.

use std::collections::HashSet;
use std::sync::Mutex;

/// Returns a `'static` copy of `name`, the same one for equal names.
///
/// Used for resource names (at most the registry cap per instance) and rule ids: sets that stay
/// small, so keeping each distinct name for the life of the process costs little. Names that
/// come from outside without a bound (the name refused by a full registry) are never interned.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(&existing) = names.get(name) {
        return existing;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
