//! The FCM message: what a registration token and a tag may be, and the exact JSON body.
//!
//! Every message is data-only, so `FirebaseMessagingService.onMessageReceived` runs whether
//! the app is in the foreground or not and the app draws its own notification. The bodies
//! are exactly the spec's (members in this order, strings JSON-escaped):
//!
//! ```text
//! alert:  {"message":{"token":"<t>","data":{"zerobyte_tag":"<tag>","zerobyte_notify":"alert","zerobyte_alert":"<text>"},"android":{"priority":"high","ttl":"604800s"}}}
//! silent: {"message":{"token":"<t>","data":{"zerobyte_tag":"<tag>","zerobyte_notify":"silent"},"android":{"priority":"normal","ttl":"3600s"}}}
//! ```

use bytes::Bytes;
use serde::Serialize;

use super::error::MessageError;

/// Longest alert text, in characters (the spec's rule for a registration's `alert`).
pub const MAX_ALERT_CHARS: usize = 160;
/// `android.ttl` of an alert: 7 days.
const ALERT_TTL: &str = "604800s";
/// `android.ttl` of a silent push: 1 hour.
const SILENT_TTL: &str = "3600s";

/// Whether `s` can be an FCM registration token: 32 to 1024 of `A-Z a-z 0-9 _ : -`.
pub fn is_valid_registration_token(s: &str) -> bool {
    (32..=1024).contains(&s.len()) && s.bytes().all(is_token_byte)
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-')
}

/// Whether `s` is a valid tag: 1 to 64 of `A-Z a-z 0-9 _ -`.
pub(crate) fn is_valid_tag(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// What kind of push (`X-Relay-Notify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notify {
    /// A visible notification: `high` priority, 7 days, `zerobyte_alert` = this text (the
    /// registration's `alert`, else `New message`; at most [`MAX_ALERT_CHARS`]).
    Alert(String),
    /// A background wake-up: `normal` priority, 1 hour, no `zerobyte_alert`.
    Silent,
}

impl Notify {
    /// `zerobyte_notify`'s value, also a bounded log and metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Notify::Alert(_) => "alert",
            Notify::Silent => "silent",
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    message: Message<'a>,
}

#[derive(Serialize)]
struct Message<'a> {
    token: &'a str,
    data: Data<'a>,
    android: Android,
}

#[derive(Serialize)]
struct Data<'a> {
    zerobyte_tag: &'a str,
    zerobyte_notify: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    zerobyte_alert: Option<&'a str>,
}

#[derive(Serialize)]
struct Android {
    priority: &'static str,
    ttl: &'static str,
}

/// The `messages:send` body for one push, after checking its parts. Errors never quote
/// the registration token.
pub(crate) fn body(token: &str, tag: &str, notify: &Notify) -> Result<Bytes, MessageError> {
    if !is_valid_registration_token(token) {
        return Err(MessageError::InvalidToken {
            len: token.len(),
            bad_char: !token.bytes().all(is_token_byte),
        });
    }
    if !is_valid_tag(tag) {
        return Err(MessageError::InvalidTag);
    }
    let (priority, ttl, alert) = match notify {
        Notify::Alert(text) => {
            let len = text.chars().count();
            if len > MAX_ALERT_CHARS {
                return Err(MessageError::AlertTooLong { len });
            }
            ("high", ALERT_TTL, Some(text.as_str()))
        }
        Notify::Silent => ("normal", SILENT_TTL, None),
    };
    let body = Body {
        message: Message {
            token,
            data: Data {
                zerobyte_tag: tag,
                zerobyte_notify: notify.as_str(),
                zerobyte_alert: alert,
            },
            android: Android { priority, ttl },
        },
    };
    // Plain structs of strings always serialize.
    Ok(Bytes::from(serde_json::to_vec(&body).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> String {
        "cAbC-12_:".repeat(5)
    }

    fn text(b: Result<Bytes, MessageError>) -> String {
        String::from_utf8(b.unwrap().to_vec()).unwrap()
    }

    #[test]
    fn token_validator_bounds_and_charset() {
        assert!(!is_valid_registration_token(&"a".repeat(31)));
        assert!(is_valid_registration_token(&"a".repeat(32)));
        assert!(is_valid_registration_token(&"Zz09_:-".repeat(146)));
        assert!(is_valid_registration_token(&"a".repeat(1024)));
        assert!(!is_valid_registration_token(&"a".repeat(1025)));
        assert!(!is_valid_registration_token(""));
        for bad in [' ', '.', '/', '+', '=', '\n', 'é', '%', '"'] {
            let s = format!("{}{}", "a".repeat(40), bad);
            assert!(!is_valid_registration_token(&s), "{bad:?}");
        }
    }

    #[test]
    fn errors_never_quote_the_token() {
        let secret = format!("{}/SECRETPART", "q".repeat(40));
        let e = body(&secret, "t", &Notify::Silent).unwrap_err();
        assert_eq!(
            e,
            MessageError::InvalidToken {
                len: 51,
                bad_char: true
            }
        );
        let shown = format!("{e} {e:?}");
        assert!(
            !shown.contains("SECRETPART") && !shown.contains("qqqq"),
            "{shown}"
        );
    }

    #[test]
    fn tag_validator() {
        assert!(is_valid_tag("Zq3k8r2mT1u0wQ"));
        assert!(is_valid_tag("a"));
        assert!(is_valid_tag(&"_-".repeat(32)));
        assert!(!is_valid_tag(""));
        assert!(!is_valid_tag(&"a".repeat(65)));
        assert!(!is_valid_tag("a:b"));
        assert!(!is_valid_tag("a b"));
    }

    #[test]
    fn alert_json_is_byte_exact() {
        let t = token();
        assert_eq!(
            text(body(
                &t,
                "Zq3k8r2mT1u0wQ",
                &Notify::Alert("New message".into())
            )),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"zerobyte_tag":"Zq3k8r2mT1u0wQ","zerobyte_notify":"alert","zerobyte_alert":"New message"}},"android":{{"priority":"high","ttl":"604800s"}}}}}}"#
            )
        );
    }

    #[test]
    fn silent_json_is_byte_exact() {
        let t = token();
        assert_eq!(
            text(body(&t, "Zq3k8r2mT1u0wQ", &Notify::Silent)),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"zerobyte_tag":"Zq3k8r2mT1u0wQ","zerobyte_notify":"silent"}},"android":{{"priority":"normal","ttl":"3600s"}}}}}}"#
            )
        );
    }

    #[test]
    fn alert_text_is_escaped_and_bounded() {
        let alert = "Say \"hi\"\\\n\t\u{1}é😀</script>";
        let json = text(body(&token(), "t", &Notify::Alert(alert.into())));
        assert!(
            json.contains(r#""zerobyte_alert":"Say \"hi\"\\\n\t\u0001é😀</script>""#),
            "{json}"
        );
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["message"]["data"]["zerobyte_alert"], alert);

        assert!(body(&token(), "t", &Notify::Alert("é".repeat(160))).is_ok());
        assert_eq!(
            body(&token(), "t", &Notify::Alert("é".repeat(161))).unwrap_err(),
            MessageError::AlertTooLong { len: 161 }
        );
        assert_eq!(
            body(&token(), "bad tag", &Notify::Silent).unwrap_err(),
            MessageError::InvalidTag
        );
        assert_eq!(
            body(&token(), "", &Notify::Silent).unwrap_err(),
            MessageError::InvalidTag
        );
    }
}
