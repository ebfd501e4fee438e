//! An open-loop HTTP/1.1 load generator for `bench/load`: requests go out at a fixed rate
//! whatever the server does, and a request held back by a slow answer to the one before it on
//! its connection is timed from when it should have gone out (no coordinated omission).
//!
//! ```text
//! open_loop URL RATE CONNECTIONS SECONDS
//! ```
//!
//! Each of CONNECTIONS kept-alive connections sends RATE / CONNECTIONS requests a second on its
//! own schedule, staggered. Prints one JSON object: the offered and achieved rates and the
//! latency percentiles in milliseconds, from the second second on (the first warms up).
//!
//! A request's time is what a punctual sender would have seen: its answer's time from when it
//! was sent, plus how long the answers before it on its connection would have held it back
//! had each request left on schedule (the server's delay, which must count). The sender's own
//! lateness (tokio's timer wakes up to a millisecond or two after the schedule) is not the
//! server's and does not count: measured from the schedule alone, a request after a late one
//! would be charged the timer's delay as if the server had held it back.

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::time::Instant;

struct Totals {
    latencies: Histogram<u64>,
    ok: u64,
    non_2xx: u64,
    errors: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: open_loop URL RATE CONNECTIONS SECONDS";
    let (Some(url), Some(rate), Some(connections), Some(seconds)) = (
        args.get(1).and_then(|u| u.parse::<http::Uri>().ok()),
        args.get(2).and_then(|r| r.parse::<f64>().ok()),
        args.get(3).and_then(|c| c.parse::<u32>().ok()),
        args.get(4).and_then(|s| s.parse::<f64>().ok()),
    ) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    if rate <= 0.0 || connections == 0 || seconds <= 1.0 {
        eprintln!("{usage} (a positive rate, at least one connection, more than 1 s)");
        std::process::exit(2);
    }
    let start = Instant::now() + Duration::from_millis(50);
    let warm = start + Duration::from_secs(1);
    let end = start + Duration::from_secs_f64(seconds);
    let interval = Duration::from_secs_f64(f64::from(connections) / rate);
    let mut tasks = Vec::new();
    for index in 0..connections {
        let url = url.clone();
        let first = start + Duration::from_secs_f64(f64::from(index) / rate);
        tasks.push(tokio::spawn(connection(url, first, interval, warm, end)));
    }
    let mut totals = Totals {
        latencies: Histogram::new(3).expect("3 significant digits is valid"),
        ok: 0,
        non_2xx: 0,
        errors: 0,
    };
    for task in tasks {
        let part = task.await.expect("a connection task panicked");
        totals
            .latencies
            .add(&part.latencies)
            .expect("same histogram bounds");
        totals.ok += part.ok;
        totals.non_2xx += part.non_2xx;
        totals.errors += part.errors;
    }
    let measured = seconds - 1.0;
    let ms = |q: f64| totals.latencies.value_at_quantile(q) as f64 / 1000.0;
    let report = serde_json::json!({
        "url": url.to_string(),
        "offered_rps": rate,
        "achieved_rps": (totals.ok + totals.non_2xx) as f64 / measured,
        "connections": connections,
        "seconds": measured,
        "p50_ms": ms(0.5),
        "p90_ms": ms(0.9),
        "p99_ms": ms(0.99),
        "p999_ms": ms(0.999),
        "max_ms": totals.latencies.max() as f64 / 1000.0,
        "ok": totals.ok,
        "non_2xx": totals.non_2xx,
        "errors": totals.errors,
    });
    println!("{report}");
}

/// One kept-alive connection's schedule: a request every `interval` from `first` until `end`,
/// recorded from `warm` on. A connection that fails is opened again.
async fn connection(
    url: http::Uri,
    first: Instant,
    interval: Duration,
    warm: Instant,
    end: Instant,
) -> Totals {
    let mut totals = Totals {
        latencies: Histogram::new(3).expect("3 significant digits is valid"),
        ok: 0,
        non_2xx: 0,
        errors: 0,
    };
    let authority = url
        .authority()
        .map_or("127.0.0.1:80", |a| a.as_str())
        .to_owned();
    let mut sender: Option<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> = None;
    let mut scheduled = first;
    // When the previous answer would have come, had every request left on schedule.
    let mut punctual_done = first;
    while scheduled < end {
        tokio::time::sleep_until(scheduled).await;
        // A connection the server closed after its last answer (`Connection: close`, or
        // nginx's `keepalive_requests`) is opened again before sending, not counted as an
        // error.
        let usable = match sender.as_mut() {
            Some(client) => client.ready().await.is_ok(),
            None => false,
        };
        if !usable {
            sender = open(&authority).await;
        }
        let Some(client) = sender.as_mut() else {
            totals.errors += 1;
            scheduled += interval;
            continue;
        };
        let sent = Instant::now();
        let request = http::Request::get(url.clone())
            .header(http::header::HOST, authority.as_str())
            .body(Empty::<Bytes>::new())
            .expect("a GET with a valid URI");
        let outcome = match client.send_request(request).await {
            Ok(response) => {
                let status = response.status();
                match response.into_body().collect().await {
                    Ok(_) => Ok(status),
                    Err(err) => Err(err),
                }
            }
            Err(err) => Err(err),
        };
        let answered_in = Instant::now() - sent;
        // Held back by the answers before it, it would have left when the last came.
        let punctual_sent = scheduled.max(punctual_done);
        punctual_done = punctual_sent + answered_in;
        let record = scheduled >= warm;
        match outcome {
            Ok(status) => {
                if record {
                    let micros = (punctual_done - scheduled).as_micros().max(1) as u64;
                    let _ = totals.latencies.record(micros);
                    if status.is_success() {
                        totals.ok += 1;
                    } else {
                        totals.non_2xx += 1;
                    }
                }
            }
            Err(_) => {
                if record {
                    totals.errors += 1;
                }
                sender = None;
            }
        }
        scheduled += interval;
    }
    totals
}

/// A kept-alive HTTP/1.1 connection to `authority`, with `TCP_NODELAY`.
async fn open(authority: &str) -> Option<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(authority).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    Some(sender)
}
