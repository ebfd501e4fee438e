//! Route patterns: any pattern text and any path, matched without a panic. The input is the
//! pattern and the path, split at the first newline.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_server::Pattern;

fuzz_target!(|input: &str| {
    let (pattern, path) = input.split_once('\n').unwrap_or((input, "/"));
    if let Ok(pattern) = Pattern::parse(pattern) {
        let _ = pattern.matches(path);
    }
});
