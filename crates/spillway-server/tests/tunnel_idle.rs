//! A WebSocket tunnel that carries no byte for `tunnel_idle_timeout` is closed and gives its
//! places back: found by an attack, 300 tunnels that sent nothing held the connection cap, and
//! every other client out, for as long as their owner liked. On tokio's paused clock.

mod support;

use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use support::server::Served;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(start_paused = true)]
async fn a_tunnel_idle_for_its_timeout_is_closed_and_one_in_use_is_not() {
    let upstream = support::websocket_echo().await;
    let text = format!(
        "[listener]\nlisten = \"127.0.0.1:0\"\ntunnel_idle_timeout = \"30s\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nresource = \"chat\"\npath = \"/\"\nupstream = \"app\"\n"
    );
    let served = Served::start(&text).await;
    let open = || async {
        let stream = tokio::net::TcpStream::connect(served.proxy).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let url = format!("ws://{}/chat", served.proxy);
        tokio_tungstenite::client_async(url, stream)
            .await
            .unwrap()
            .0
    };
    let (mut busy, mut silent) = (open().await, open().await);
    let resource = served.spillway.resource("chat").unwrap();
    assert_eq!(resource.stats().concurrency, 2);
    let started = tokio::time::Instant::now();
    // One message every 20 s for 100 s: never idle for 30 s, so never closed.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(20)).await;
        busy.send(Message::text("hello")).await.unwrap();
        assert_eq!(busy.next().await.unwrap().unwrap(), Message::text("hello"));
    }
    // The silent one was closed at 30 s: its stream ends (no close frame: the connection is
    // cut), and its place came back.
    let ended = tokio::time::timeout(Duration::from_secs(60), silent.next()).await;
    assert!(
        matches!(ended, Ok(None | Some(Err(_)))),
        "{ended:?} after {:?}",
        started.elapsed()
    );
    assert_eq!(resource.stats().concurrency, 1);
    // Then the busy one goes silent too.
    let ended = tokio::time::timeout(Duration::from_secs(60), busy.next()).await;
    assert!(matches!(ended, Ok(None | Some(Err(_)))), "{ended:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(130),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(resource.stats().concurrency, 0);
    let metrics = served.handle.render_metrics().unwrap();
    let line = r#"spillway_tunnel_idle_closes_total{listener="proxy"} 2"#;
    assert!(metrics.contains(line), "{line} not in\n{metrics}");
    served.shutdown().await;
}
