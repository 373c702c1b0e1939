//! A proxied WebSocket's two ends joined: frames copied both ways (text, binary, pings,
//! pongs, and the close frame with its code and reason), until either end closes. A broken
//! hop closes the client with 1001 (going away).

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame as TCloseFrame;
use tokio_tungstenite::tungstenite::Message as TMessage;

/// The client's frame as the home's socket takes it.
fn upstream(m: Message) -> TMessage {
    match m {
        Message::Text(t) => TMessage::Text(t.as_str().into()),
        Message::Binary(b) => TMessage::Binary(b),
        Message::Ping(b) => TMessage::Ping(b),
        Message::Pong(b) => TMessage::Pong(b),
        Message::Close(c) => TMessage::Close(c.map(|c| TCloseFrame {
            code: CloseCode::from(c.code),
            reason: c.reason.as_str().into(),
        })),
    }
}

/// The home's frame as the client's socket takes it (`None`: a raw frame, not relayed).
fn downstream(m: TMessage) -> Option<Message> {
    Some(match m {
        TMessage::Text(t) => Message::Text(Utf8Bytes::from(t.as_str())),
        TMessage::Binary(b) => Message::Binary(b),
        TMessage::Ping(b) => Message::Ping(b),
        TMessage::Pong(b) => Message::Pong(b),
        TMessage::Close(c) => Message::Close(c.map(|c| CloseFrame {
            code: u16::from(c.code),
            reason: Utf8Bytes::from(c.reason.as_str()),
        })),
        TMessage::Frame(_) => return None,
    })
}

/// Copies frames between `client` and `home` until one side closes.
pub async fn join<S>(client: WebSocket, home: tokio_tungstenite::WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut client_tx, mut client_rx) = client.split();
    let (mut home_tx, mut home_rx) = home.split();
    let up = async {
        while let Some(Ok(m)) = client_rx.next().await {
            let close = matches!(m, Message::Close(_));
            if home_tx.send(upstream(m)).await.is_err() || close {
                break;
            }
        }
        let _ = home_tx.close().await;
    };
    let down = async {
        let mut closed = false;
        while let Some(next) = home_rx.next().await {
            let Ok(m) = next else { break };
            let close = matches!(m, TMessage::Close(_));
            if let Some(m) = downstream(m) {
                if client_tx.send(m).await.is_err() {
                    return;
                }
            }
            if close {
                closed = true;
                break;
            }
        }
        if !closed {
            // The hop broke without a close from the home: going away.
            let _ = client_tx
                .send(Message::Close(Some(CloseFrame {
                    code: 1001,
                    reason: Utf8Bytes::from_static("the home region went away"),
                })))
                .await;
        }
        let _ = client_tx.close().await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
