//! What several of the server's test files share.

#![allow(dead_code)] // each test file uses what it needs

pub(crate) mod child;
pub(crate) mod h2_frames;
pub(crate) mod server;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

/// A response body fed through a channel, a frame of data a message, ended when its sender
/// is dropped.
pub(crate) struct Channel(pub(crate) tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|bytes| bytes.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }
}

/// An HTTP/1.1 upstream on a loopback port that answers each request with `answer`, on every
/// connection, until the test's runtime ends.
pub(crate) async fn upstream<F, A>(answer: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> A + Clone + Send + Sync + 'static,
    A: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            // Each write at once: with Nagle's algorithm a small write waits for the peer's
            // acknowledgement of the last, which it may delay by up to 40 ms of real time,
            // through which a paused clock runs on from timer to timer.
            let _ = stream.set_nodelay(true);
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let answered = answer(request);
                    async move { Ok::<_, Infallible>(answered.await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A WebSocket upstream on a loopback port that echoes every message, on every connection,
/// until the test's runtime ends; each write sent at once (no Nagle's delay, through which a
/// paused clock would run on).
pub(crate) async fn websocket_echo() -> SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_close() || socket.send(message).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}
