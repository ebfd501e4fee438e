//! A closed-loop HTTP/1.1 client that sends an exact number of requests, for `bench/per_request`:
//! COUNT GET requests to URL over CONNECTIONS kept-alive connections, each connection sending
//! its next request when the last answer has been read. Exits non-zero unless every answer is
//! a 200.
//!
//! ```text
//! fixed_count URL COUNT CONNECTIONS
//! ```

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: fixed_count URL COUNT CONNECTIONS";
    let (Some(url), Some(count), Some(connections)) = (
        args.get(1).and_then(|u| u.parse::<http::Uri>().ok()),
        args.get(2).and_then(|c| c.parse::<u64>().ok()),
        args.get(3).and_then(|c| c.parse::<u64>().ok()),
    ) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    if connections == 0 || count < connections {
        eprintln!("{usage} (at least one connection, and a request for each)");
        std::process::exit(2);
    }
    let tasks: Vec<_> = (0..connections)
        .map(|index| {
            // The first connections take the remainder.
            let share = count / connections + u64::from(index < count % connections);
            tokio::spawn(connection(url.clone(), share))
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        ok += task.await.expect("a connection task panicked");
    }
    if ok != count {
        eprintln!("{ok} of {count} requests answered 200");
        std::process::exit(1);
    }
}

/// Sends `count` requests one after the other on one connection; returns the 200s.
async fn connection(url: http::Uri, count: u64) -> u64 {
    let authority = url
        .authority()
        .map_or("127.0.0.1:80", |a| a.as_str())
        .to_owned();
    let stream = match tokio::net::TcpStream::connect(&authority).await {
        Ok(stream) => stream,
        Err(err) => {
            eprintln!("connect {authority}: {err}");
            return 0;
        }
    };
    let Ok((mut sender, conn)) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await
    else {
        return 0;
    };
    tokio::spawn(conn);
    let mut ok = 0;
    for _ in 0..count {
        let request = http::Request::get(url.clone())
            .header(http::header::HOST, authority.as_str())
            .body(Empty::<Bytes>::new())
            .expect("a GET with a parsed URI is a valid request");
        let Ok(response) = sender.send_request(request).await else {
            break;
        };
        let status = response.status();
        if response.into_body().collect().await.is_err() {
            break;
        }
        ok += u64::from(status == http::StatusCode::OK);
    }
    ok
}
