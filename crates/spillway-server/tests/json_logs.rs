//! `spillway serve` logging one JSON object a line (`[log] format = "json"`, or
//! `--log-format json`): every line parses, and an audit line keeps its fields as fields.

#![cfg(unix)]

mod support;
use support::child;

use child::{free_port, serve, serve_with, wait_for_line, DEADLINE};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;

/// The next line that holds `needle`, each line before it parsed as JSON too.
fn json_line(lines: &mpsc::Receiver<String>, needle: &str) -> Value {
    loop {
        let line = lines
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("no `{needle}` in the log"));
        let value: Value =
            serde_json::from_str(&line).unwrap_or_else(|err| panic!("{err}: {line}"));
        if line.contains(needle) {
            return value;
        }
    }
}

fn post_reload(admin_port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", admin_port)).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream
        .write_all(
            b"POST /api/reload HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
              X-Spillway-Actor: ops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn the_file_asks_for_json_and_audit_fields_stay_fields() {
    let (port, admin_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let (_child, lines) = serve(
        dir.path(),
        &format!(
            "[log]\nformat = \"json\"\n[listener]\nlisten = \"127.0.0.1:{port}\"\n\
             [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n"
        ),
        None,
    );
    let listening = json_line(&lines, "spillway listening");
    assert_eq!(listening["level"], "INFO", "{listening}");
    assert_eq!(listening["message"], "spillway listening", "{listening}");
    assert_eq!(
        listening["proxy"],
        format!("127.0.0.1:{port}"),
        "the event's fields beside the message: {listening}"
    );
    assert!(listening["timestamp"].is_string(), "{listening}");

    let answer = post_reload(admin_port);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let audit = json_line(&lines, "spillway::audit");
    assert_eq!(audit["target"], "spillway::audit", "{audit}");
    assert_eq!(audit["action"], "POST /api/reload", "{audit}");
    assert_eq!(audit["outcome"], "applied", "{audit}");
    assert_eq!(audit["actor"], "ops", "{audit}");
    assert!(
        audit["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{audit}"
    );
}

/// `[listener]` and `[admin]` on free ports.
fn listeners() -> String {
    format!(
        "[listener]\nlisten = \"127.0.0.1:{}\"\n[admin]\nlisten = \"127.0.0.1:{}\"\n",
        free_port(),
        free_port()
    )
}

#[test]
fn the_flag_overrides_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_child, lines) = serve_with(
        dir.path(),
        &format!("[log]\nformat = \"text\"\n{}", listeners()),
        None,
        &["--log-format", "json"],
    );
    let listening = json_line(&lines, "spillway listening");
    assert_eq!(listening["message"], "spillway listening");
    // And text, as by default, without the flag.
    let dir = tempfile::tempdir().unwrap();
    let (_child, lines) = serve(dir.path(), &listeners(), None);
    let line = wait_for_line(&lines, "spillway listening");
    assert!(serde_json::from_str::<Value>(&line).is_err(), "{line}");
}
