//! HTTP/2 frames written by hand, for clients that do what no library client does (ignore a
//! GOAWAY, reset a stream mid-body).

/// An HTTP/2 frame: its 9-byte head and `payload`.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut bytes = vec![length[1], length[2], length[3], kind, flags];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A GET of `/slow` on `stream`, its head whole and its end: HPACK's static `:method GET` and
/// `:scheme http`, and `:path` and `:authority` as literals of indexed names.
pub(crate) fn get_slow(stream: u32) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, 5];
    block.extend_from_slice(b"/slow");
    block.extend_from_slice(&[0x01, 1, b'x']);
    frame(0x1, 0x1 | 0x4, stream, &block)
}

/// A POST of `/slow` on `stream` with no length, its head whole and its body to come:
/// HPACK's static `:method POST` and `:scheme http`, and `:path` and `:authority` as literals
/// of indexed names.
pub(crate) fn post_slow(stream: u32) -> Vec<u8> {
    let mut block = vec![0x83, 0x86, 0x04, 5];
    block.extend_from_slice(b"/slow");
    block.extend_from_slice(&[0x01, 1, b'x']);
    frame(0x1, 0x4, stream, &block)
}

/// A stream's reset with CANCEL.
pub(crate) fn cancel(stream: u32) -> Vec<u8> {
    frame(0x3, 0, stream, &0x8u32.to_be_bytes())
}

/// The connection preface and an empty SETTINGS.
pub(crate) fn hello() -> Vec<u8> {
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    bytes
}

/// An HTTP/2 connection to `proxy`, its preface sent, each write sent at once; what the proxy
/// sends is read and dropped until it closes. Its write half.
pub(crate) async fn raw_h2(proxy: std::net::SocketAddr) -> tokio::net::tcp::OwnedWriteHalf {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut read, mut write) = stream.into_split();
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = read.read_to_end(&mut sink).await;
    });
    write.write_all(&hello()).await.unwrap();
    write
}
