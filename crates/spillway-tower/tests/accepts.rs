//! Dubbo `accepts` against real loopback connections: the cap holds, pauses or closes, and a
//! closed connection frees its place. Nothing here waits on time: every step waits on an event.

use spillway::BlockKind;
use spillway_tower::{AcceptLimit, AtCapacity, LimitedListener, LimitedStream};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A guard against a hang if the code under test is broken; never reached when it works.
const HANG: Duration = Duration::from_secs(30);

async fn listener(max: usize, at_capacity: AtCapacity) -> LimitedListener {
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    LimitedListener::new(inner, max).at_capacity(at_capacity)
}

/// Accepts in a loop, sending each accepted stream (after it says hello) to the test.
fn serve(listener: LimitedListener) -> mpsc::UnboundedReceiver<LimitedStream> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(b"hi").await.unwrap();
            if tx.send(stream).is_err() {
                return;
            }
        }
    });
    rx
}

async fn next(rx: &mut mpsc::UnboundedReceiver<LimitedStream>) -> LimitedStream {
    tokio::time::timeout(HANG, rx.recv())
        .await
        .unwrap()
        .unwrap()
}

/// Reads what the server sent until it closes: `"hi"` for a served connection.
async fn greeting(client: &mut TcpStream) -> Vec<u8> {
    let mut buf = [0; 2];
    tokio::time::timeout(HANG, client.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    buf.to_vec()
}

/// Whether the server closed `client` (end of stream or reset) without sending anything.
async fn closed_unserved(client: &mut TcpStream) -> bool {
    let mut buf = [0; 2];
    match tokio::time::timeout(HANG, client.read(&mut buf))
        .await
        .unwrap()
    {
        Ok(n) => n == 0,
        Err(_) => true,
    }
}

async fn until(limit: &AcceptLimit, done: impl Fn(&spillway_tower::AcceptsState) -> bool) {
    tokio::time::timeout(HANG, async {
        while !done(&limit.state()) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_the_cap_and_resumes_when_a_connection_closes() {
    let listener = listener(2, AtCapacity::Pause).await;
    let (addr, limit) = (listener.local_addr().unwrap(), listener.limit());
    let mut accepted = serve(listener);
    // N + k = 2 + 2 clients: the kernel completes every handshake (the backlog), the listener
    // takes only two.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(TcpStream::connect(addr).await.unwrap());
    }
    let first = next(&mut accepted).await;
    let _second = next(&mut accepted).await;
    assert_eq!(greeting(&mut clients[0]).await, b"hi");
    assert_eq!(greeting(&mut clients[1]).await, b"hi");
    until(&limit, |state| state.paused).await;
    let state = limit.state();
    assert_eq!((state.max, state.open, state.refused), (2, 2, 0));
    assert!(
        accepted.try_recv().is_err(),
        "nothing accepted past the cap"
    );

    drop(first); // the connection closes: its client sees the end, and a place frees
    assert!(closed_unserved(&mut clients[0]).await);
    let _third = next(&mut accepted).await;
    assert_eq!(greeting(&mut clients[2]).await, b"hi");
    until(&limit, |state| state.paused).await;
    assert_eq!(limit.state().open, 2);
    assert!(accepted.try_recv().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_accepts_and_closes_at_the_cap_and_reports_each_refusal() {
    let refusals: Arc<Mutex<Vec<(spillway::BlockError, SocketAddr)>>> = Arc::default();
    let listener = listener(2, AtCapacity::Close).await.on_refused({
        let refusals = refusals.clone();
        move |err, peer| refusals.lock().unwrap().push((err.clone(), peer))
    });
    let (addr, limit) = (listener.local_addr().unwrap(), listener.limit());
    let mut accepted = serve(listener);
    let mut clients = Vec::new();
    for _ in 0..2 {
        let mut client = TcpStream::connect(addr).await.unwrap();
        assert_eq!(greeting(&mut client).await, b"hi");
        clients.push(client);
    }
    let first = next(&mut accepted).await;
    let _second = next(&mut accepted).await;
    for _ in 0..2 {
        let mut client = TcpStream::connect(addr).await.unwrap();
        assert!(closed_unserved(&mut client).await, "closed at the cap");
    }
    until(&limit, |state| state.refused == 2).await;
    assert_eq!(limit.state().open, 2);
    {
        let refusals = refusals.lock().unwrap();
        assert_eq!(refusals.len(), 2);
        let (err, _peer) = &refusals[0];
        assert_eq!(err.kind(), BlockKind::Accepts);
        assert_eq!(err.resource(), addr.to_string());
        assert_eq!((err.observed(), err.threshold()), (2.0, 2.0));
    }

    drop(first);
    until(&limit, |state| state.open == 1).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    assert_eq!(
        greeting(&mut client).await,
        b"hi",
        "a freed place is used again"
    );
    let _third = next(&mut accepted).await;
    let state = limit.state();
    assert_eq!((state.open, state.refused), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_paused_accept_holds_no_place() {
    let listener = Arc::new(listener(1, AtCapacity::Pause).await);
    let (addr, limit) = (listener.local_addr().unwrap(), listener.limit());
    let _client = TcpStream::connect(addr).await.unwrap();
    let (held, _) = listener.accept().await.unwrap();
    let paused = {
        let listener = listener.clone();
        tokio::spawn(async move { listener.accept().await.map(drop) })
    };
    until(&limit, |state| state.paused).await;
    paused.abort();
    assert!(paused.await.unwrap_err().is_cancelled());
    let state = limit.state();
    assert_eq!((state.open, state.paused), (1, false));
    drop(held);
    assert_eq!(limit.state().open, 0);
    let mut client = TcpStream::connect(addr).await.unwrap();
    let (mut stream, _) = listener.accept().await.unwrap();
    stream.write_all(b"hi").await.unwrap();
    assert_eq!(greeting(&mut client).await, b"hi");
}

#[tokio::test]
async fn an_accept_waiting_for_a_connection_is_no_open_connection() {
    // One thread: the spawned accept runs, takes its place and waits, before the test goes on.
    let listener = Arc::new(listener(2, AtCapacity::Pause).await);
    let (addr, limit) = (listener.local_addr().unwrap(), listener.limit());
    let waiting = {
        let listener = listener.clone();
        tokio::spawn(async move { listener.accept().await.map(|(stream, _)| stream) })
    };
    tokio::task::yield_now().await;
    assert_eq!(
        limit.state().open,
        0,
        "an accept that waits (as each worker's does at rest) holds no open connection"
    );
    let _client = TcpStream::connect(addr).await.unwrap();
    let stream = waiting.await.unwrap().unwrap();
    assert_eq!(limit.state().open, 1);
    drop(stream);
    assert_eq!(limit.state().open, 0);
}
