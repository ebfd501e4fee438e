//! Names that live for the whole process, so that a block can name its rule and resource
//! without touching a shared reference count.

use std::collections::HashMap;
use std::sync::Mutex;

/// Every interned name, at its number: read without a lock, so that a path that may only read
/// (a refusal) can turn a number it holds in an atomic word back into the name.
static BY_NUMBER: boxcar::Vec<&'static str> = boxcar::Vec::new();

/// A name interned for the life of the process, and its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interned {
    pub(crate) name: &'static str,
    pub(crate) number: u32,
}

/// Returns a `'static` copy of `name`, the same one for equal names.
///
/// Used for resource names (at most the registry cap per instance) and rule ids: sets that stay
/// small, so keeping each distinct name for the life of the process costs little. Names that
/// come from outside without a bound (the name refused by a full registry) are never interned.
pub(crate) fn intern(name: &str) -> &'static str {
    intern_numbered(name).name
}

/// [`intern`], with the name's number for [`name_of`].
pub(crate) fn intern_numbered(name: &str) -> Interned {
    static NAMES: Mutex<Option<HashMap<&'static str, u32>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashMap::new);
    if let Some((&name, &number)) = names.get_key_value(name) {
        return Interned { name, number };
    }
    let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    // Numbers are handed out under the lock, so that they follow the table's order; past
    // `u32::MAX` names (never reached: each is a distinct rule id or resource name) the number
    // saturates and names nothing.
    let number = u32::try_from(BY_NUMBER.push(name)).unwrap_or(u32::MAX);
    names.insert(name, number);
    Interned { name, number }
}

/// The name interned as `number`, if any.
#[inline]
pub(crate) fn name_of(number: u32) -> Option<&'static str> {
    BY_NUMBER.get(number as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_share_one_copy_and_one_number() {
        let a = intern_numbered("intern-test-a");
        let b = intern_numbered(&String::from("intern-test-a"));
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.name, b.name));
        assert_eq!(intern("intern-test-a"), a.name);
        let c = intern_numbered("intern-test-c");
        assert_ne!(a.number, c.number);
        assert_eq!(name_of(a.number), Some("intern-test-a"));
        assert_eq!(name_of(c.number), Some("intern-test-c"));
        assert_eq!(name_of(u32::MAX), None);
    }
}
