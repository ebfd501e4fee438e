//! `PUT /api/rules` bodies: any bytes, read and checked exactly as the admin API reads them,
//! without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let _ = spillway_server::admin::check_rules_body(body);
});
