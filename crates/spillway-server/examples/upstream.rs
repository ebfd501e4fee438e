//! A minimal HTTP upstream for load tests: answers every request at once with `ok`.
//!
//! `cargo run --release -p spillway-server --example upstream -- 127.0.0.1:18081`
//!
//! With `--split`, it writes each response's head and body in two separate writes, as Python's
//! `http.server` and many small servers do (with `TCP_NODELAY`, so two segments): a proxy that
//! leaves Nagle's algorithm on toward its clients then waits for their delayed ACK, about 40 ms
//! a request. It speaks just enough HTTP/1.1 for GET requests on kept-alive connections.
//!
//! `cargo run --release -p spillway-server --example upstream -- 127.0.0.1:18083 --split`

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: upstream [ADDRESS] [--split]\n\n\
             Answers every request at once with `ok` (default address 127.0.0.1:18081).\n\
             --split  write each response's head and body in two writes"
        );
        return Ok(());
    }
    if let Some(unknown) = args.iter().find(|a| a.starts_with('-') && *a != "--split") {
        return Err(format!("unknown option `{unknown}` (see --help)").into());
    }
    let split = args.iter().any(|a| a == "--split");
    let addresses: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if addresses.len() > 1 {
        return Err("one address at most (see --help)".into());
    }
    let addr = addresses
        .first()
        .map_or_else(|| "127.0.0.1:18081".to_owned(), |a| (*a).clone());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "upstream on http://{}{}",
        listener.local_addr()?,
        if split {
            " (head and body in two writes)"
        } else {
            ""
        }
    );
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        if split {
            tokio::spawn(split_writes(stream));
            continue;
        }
        tokio::spawn(async move {
            let service = service_fn(|_request| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Answers each request head (GET, no body) on `stream` with a head, then a body, in two
/// writes, until the client closes.
async fn split_writes(mut stream: tokio::net::TcpStream) {
    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-type: text/plain\r\n\r\n";
    let mut buffer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // Every complete head in the buffer gets its answer.
        while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            buffer.drain(..end + 4);
            if stream.write_all(HEAD).await.is_err() || stream.write_all(b"ok\n").await.is_err() {
                return;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
    }
}
