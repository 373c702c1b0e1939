//! How the relay closes a mailbox socket (the watch socket and the signal socket).

use axum::extract::ws::{CloseFrame, Message, WebSocket};

/// How the relay closes a mailbox socket: the code, its one reason, its metric label. The
/// watch socket closes with the first three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Close {
    /// 1000: the mailbox was erased.
    Normal,
    /// 1001: the relay is stopping (or lost its fan-out).
    GoingAway,
    /// 1003: a message the protocol does not take.
    Unsupported,
    /// 1008: the side sends faster than its frame bucket.
    Policy,
    /// 1009: the frame is larger than the signal socket's `MAX_FRAME`.
    TooBig,
    /// 1011: the relay could not recover what the fan-out may have lost (the store did
    /// not answer).
    Internal,
    /// 4000: a newer socket took this side.
    Replaced,
}

impl Close {
    /// Every close, in the order the metrics register them.
    pub const ALL: [Close; 7] = [
        Close::Normal,
        Close::GoingAway,
        Close::Unsupported,
        Close::Policy,
        Close::TooBig,
        Close::Internal,
        Close::Replaced,
    ];

    /// The close code.
    pub fn code(self) -> u16 {
        match self {
            Close::Normal => 1000,
            Close::GoingAway => 1001,
            Close::Unsupported => 1003,
            Close::Policy => 1008,
            Close::TooBig => 1009,
            Close::Internal => 1011,
            Close::Replaced => 4000,
        }
    }

    /// The label: the code in decimal.
    pub fn as_str(self) -> &'static str {
        match self {
            Close::Normal => "1000",
            Close::GoingAway => "1001",
            Close::Unsupported => "1003",
            Close::Policy => "1008",
            Close::TooBig => "1009",
            Close::Internal => "1011",
            Close::Replaced => "4000",
        }
    }

    /// The reason sent with the code.
    pub fn reason(self) -> &'static str {
        match self {
            Close::Normal => "erased",
            Close::GoingAway => "going away",
            Close::Unsupported => "unsupported",
            Close::Policy => "too many frames",
            Close::TooBig => "frame too large",
            Close::Internal => "store unavailable",
            Close::Replaced => "replaced",
        }
    }

    /// Sends the close frame (a socket already gone is no error).
    pub async fn send(self, socket: &mut WebSocket) {
        let _ = socket
            .send(Message::Close(Some(CloseFrame {
                code: self.code(),
                reason: self.reason().into(),
            })))
            .await;
    }
}
