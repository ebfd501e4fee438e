//! A tiny HTTP/1.1 client for the examples: one request per connection, prints the answer.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `GET path` and returns the status line and the headers spillway sets.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let mut lines = response.lines();
    let status = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<&str> = lines
        .take_while(|line| !line.is_empty())
        .filter(|line| {
            let name = line.to_ascii_lowercase();
            name.starts_with("retry-after") || name.starts_with("ratelimit")
        })
        .collect();
    Ok(format!("{status} {}", headers.join("; ")))
}
