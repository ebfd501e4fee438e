//! The configuration parser and checker on any text: never a panic; a file it accepts gives
//! warnings without a panic too, and an error names at least one problem.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match spillway_server::checked::parse(text, "fuzz.toml") {
        Ok(config) => {
            let _ = spillway_server::config::warnings(&config, text, "fuzz.toml");
        }
        Err(err) => {
            assert!(!err.problems().is_empty());
            assert!(!err.to_string().is_empty());
        }
    }
});
