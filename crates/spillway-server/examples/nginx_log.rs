//! Writes a synthetic nginx access log (`combined` with `$request_time` appended) for
//! `spillway replay`'s benchmark: `cargo run --release -p spillway-server --example nginx_log
//! -- LINES > access.log`. 2,000 requests a second from 500 clients to five paths, durations of
//! 1 to 200 ms; a fixed seed, so the same count gives the same file.

use std::io::{BufWriter, Write};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn main() -> std::io::Result<()> {
    let lines: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let paths = [
        "/api/orders?id=",
        "/api/search?q=",
        "/api/cart",
        "/static/app.js",
        "/api/checkout",
    ];
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    // xorshift64*: reproducible without a dependency.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    // 2026-12-04T00:00:00Z, and 2,000 requests a second.
    let start = 1_796_342_400u64;
    for i in 0..lines {
        let r = next();
        let second = start + i / 2_000;
        let of_day = second % 86_400;
        let day = 4 + (second - start) / 86_400;
        let path = paths[(r % 5) as usize];
        let arg = if path.ends_with('=') {
            (r >> 8) % 1000
        } else {
            0
        };
        let arg = if path.ends_with('=') {
            arg.to_string()
        } else {
            String::new()
        };
        let millis = 1 + (r >> 20) % 200;
        let status = if (r >> 40) % 100 == 0 { 503 } else { 200 };
        writeln!(
            out,
            "10.{}.{}.{} - - [{:02}/{}/2026:{:02}:{:02}:{:02} +0000] \"GET {path}{arg} HTTP/1.1\" {status} {} \"-\" \"bench/1.0\" {}.{:03}",
            (r >> 44) % 2,
            (r >> 48) % 250,
            (r >> 56) % 250 + 1,
            day,
            MONTHS[11],
            of_day / 3_600,
            of_day / 60 % 60,
            of_day % 60,
            100 + (r >> 30) % 5_000,
            millis / 1000,
            millis % 1000,
        )?;
    }
    out.flush()
}
