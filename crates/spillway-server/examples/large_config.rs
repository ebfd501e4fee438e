//! Writes a large, valid configuration for `spillway check`'s benchmark (`bench/check`, the
//! figure in docs/config.md): `cargo run --release -p spillway-server --example large_config >
//! big.toml` (add a size in bytes to change the default, just under the 4 MiB cap). An
//! upstream, 1,024 routes, and flow rules spread over their resources until the size is
//! reached: most reject at a QPS, every 5th for one caller, every 7th warms up, and every 11th
//! of the first few thousand paces (at most 4 a resource, the binary's cap). The same size
//! gives the same file.

use std::io::{BufWriter, Write};

/// The largest file spillway reads is 4 MiB: stay below it by one rule's length at most.
const DEFAULT_BYTES: usize = (4 << 20) - 256;

/// At most 64 flow rules a resource (the binary's cap): room for 65,536.
const ROUTES: usize = 1024;

fn main() -> std::io::Result<()> {
    let bytes: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_BYTES);
    let mut text = String::with_capacity(bytes + 256);
    text.push_str("[listener]\norigin_header = \"x-caller\"\n\n");
    text.push_str("[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n");
    for route in 0..ROUTES {
        text.push_str(&format!(
            "[[route]]\nresource = \"api-{route}\"\npath = \"/api/{route}/*\"\nupstream = \"app\"\n\n"
        ));
    }
    let mut rules = 0_usize;
    loop {
        let rule = rule(rules);
        if text.len() + rule.len() > bytes {
            break;
        }
        text.push_str(&rule);
        rules += 1;
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    out.write_all(text.as_bytes())?;
    out.flush()?;
    eprintln!("{rules} flow rules, {} bytes", text.len());
    Ok(())
}

/// The `index`th flow rule.
fn rule(index: usize) -> String {
    let resource = index % ROUTES;
    let count = 50 + index % 950;
    let mut rule = format!(
        "[[flow]]\nid = \"rule-{index}\"\nresource = \"api-{resource}\"\ncount = {count}\n"
    );
    if index % 5 == 0 {
        rule.push_str(&format!("limit_app = \"caller-{}\"\n", index % 97));
    }
    if index % 7 == 0 {
        rule.push_str("behavior = { type = \"warm_up\", period = \"10s\" }\n");
    } else if index % 11 == 0 && index < 11 * 4 * ROUTES {
        // At most 4 queueing rules a resource (the binary's own cap).
        rule.push_str("behavior = { type = \"throttle\", max_queueing_time = \"500ms\" }\n");
    }
    rule.push('\n');
    rule
}
