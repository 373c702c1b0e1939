//! APNs request bodies. The alert of protocol v1 and signed pushes: the still-sealed
//! ciphertext inside an alert that makes iOS run the app's Notification Service Extension.
//!
//! Field order and names are fixed by DESIGN.md:
//! `{"aps":{"alert":{"title":T,"body":B},"mutable-content":1,"interruption-level":L,"sound":"default"},"v":1,"suite":S,"ciphertext":C}`,
//! with `sound` only for time-sensitive alerts. The stub title and body are shown only if
//! the extension never runs.
//!
//! A mailbox wake-up ([`wake`]) is the spec's: an alert
//! `{"aps":{"alert":{"body":"<alert>"},"mutable-content":1,"sound":"default"},"zerobyte":{"tag":"<tag>"}}`,
//! or a silent `{"aps":{"content-available":1},"zerobyte":{"tag":"<tag>"}}`.

use bytes::Bytes;

use crate::push::{Kind, Notification, Payload, Priority};

/// The interruption level of an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `time-sensitive`: breaks through scheduled summaries, with sound.
    TimeSensitive,
    /// `passive`: delivered quietly, without sound.
    Passive,
}

impl Level {
    /// The `interruption-level` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::TimeSensitive => "time-sensitive",
            Level::Passive => "passive",
        }
    }
}

/// Apple's limit on a notification body.
pub const APNS_MAX_BODY_BYTES: usize = 4096;

/// Appends `s` as a JSON string. Suites and base64 ciphertexts never need escaping, so
/// they take the copy-only path; anything else is escaped by serde_json.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
    }
}

/// The alert body for one sealed ciphertext.
pub fn alert(title: &str, body: &str, priority: Level, suite: &str, ciphertext: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + title.len() + body.len() + ciphertext.len());
    out.extend_from_slice(br#"{"aps":{"alert":{"title":"#);
    push_json_str(&mut out, title);
    out.extend_from_slice(br#","body":"#);
    push_json_str(&mut out, body);
    out.extend_from_slice(br#"},"mutable-content":1,"interruption-level":"#);
    push_json_str(&mut out, priority.as_str());
    if priority == Level::TimeSensitive {
        out.extend_from_slice(br#","sound":"default""#);
    }
    out.extend_from_slice(br#"},"v":1,"suite":"#);
    push_json_str(&mut out, suite);
    out.extend_from_slice(br#","ciphertext":"#);
    push_json_str(&mut out, ciphertext);
    out.push(b'}');
    out
}

/// The exact body of a mailbox wake-up: an alert showing `alert`, or silent for `None`.
pub fn wake(tag: &str, alert: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + tag.len() + alert.map_or(0, str::len));
    match alert {
        Some(text) => {
            out.extend_from_slice(br#"{"aps":{"alert":{"body":"#);
            push_json_str(&mut out, text);
            out.extend_from_slice(
                br#"},"mutable-content":1,"sound":"default"},"zerobyte":{"tag":"#,
            );
        }
        None => out.extend_from_slice(br#"{"aps":{"content-available":1},"zerobyte":{"tag":"#),
    }
    push_json_str(&mut out, tag);
    out.extend_from_slice(b"}}");
    out
}

/// The largest body any accepted envelope can produce with this cap and stub: a
/// time-sensitive alert (it carries `sound`) with the longest suite and a full ciphertext.
/// Base64 needs no JSON escaping, so the ciphertext's length is its byte count.
pub fn largest_body_len(max_ciphertext_chars: usize, title: &str, body: &str) -> usize {
    let ciphertext = "A".repeat(max_ciphertext_chars);
    alert(
        title,
        body,
        Level::TimeSensitive,
        &"a".repeat(16),
        &ciphertext,
    )
    .len()
}

/// The largest ciphertext cap whose largest body still fits in [`APNS_MAX_BODY_BYTES`].
pub fn max_ciphertext_for(title: &str, body: &str) -> usize {
    let overhead = largest_body_len(0, title, body);
    // Keep the cap a multiple of 4: base64 lengths are.
    (APNS_MAX_BODY_BYTES.saturating_sub(overhead)) / 4 * 4
}

/// `apns-push-type` of a notification kind (data is delivered as a background push).
pub fn push_type(kind: Kind) -> &'static str {
    match kind {
        Kind::Alert => "alert",
        Kind::Background | Kind::Data => "background",
    }
}

/// `apns-priority` of a priority.
pub fn priority(p: Priority) -> u8 {
    match p {
        Priority::High => 10,
        Priority::Normal => 5,
    }
}

/// The APNs body of a notification: a sealed alert with its interruption level (a
/// high-priority one is time-sensitive), a mailbox wake-up, or a body rendered before.
pub fn render(n: &Notification) -> Bytes {
    match &n.payload {
        Payload::Sealed {
            title,
            body,
            suite,
            ciphertext,
        } => {
            let level = match n.priority {
                Priority::High => Level::TimeSensitive,
                Priority::Normal => Level::Passive,
            };
            Bytes::from(alert(title, body, level, suite, ciphertext))
        }
        Payload::Wake { tag, alert } => Bytes::from(wake(tag, alert.as_deref())),
        Payload::Rendered(b) => b.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Serialize;

    /// The body as serde_json writes the same structure: the reference `render` must
    /// match byte for byte.
    fn reference(
        title: &str,
        body: &str,
        priority: Level,
        suite: &str,
        ciphertext: &str,
    ) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            aps: Aps<'a>,
            v: u8,
            suite: &'a str,
            ciphertext: &'a str,
        }
        #[derive(Serialize)]
        struct Aps<'a> {
            alert: Alert<'a>,
            #[serde(rename = "mutable-content")]
            mutable_content: u8,
            #[serde(rename = "interruption-level")]
            interruption_level: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            sound: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct Alert<'a> {
            title: &'a str,
            body: &'a str,
        }
        serde_json::to_vec(&Body {
            aps: Aps {
                alert: Alert { title, body },
                mutable_content: 1,
                interruption_level: priority.as_str(),
                sound: (priority == Level::TimeSensitive).then_some("default"),
            },
            v: 1,
            suite,
            ciphertext,
        })
        .unwrap()
    }

    proptest! {
        #[test]
        fn render_matches_serde_json(
            title in any::<String>(),
            body in "(?s).{0,40}",
            passive in any::<bool>(),
            suite in "[a-z0-9\\\\\"-]{1,16}",
            ciphertext in "[A-Za-z0-9+/=\u{0}-\u{1f}]{0,200}",
        ) {
            let p = if passive { Level::Passive } else { Level::TimeSensitive };
            prop_assert_eq!(
                alert(&title, &body, p, &suite, &ciphertext),
                reference(&title, &body, p, &suite, &ciphertext)
            );
        }
    }

    fn build(level: Level, ciphertext_len: usize, title: &str, body: &str) -> Vec<u8> {
        alert(title, body, level, "x25519", &"Q".repeat(ciphertext_len))
    }

    #[test]
    fn time_sensitive_body_is_exact() {
        let b = build(Level::TimeSensitive, 68, "T", "B");
        let expected = format!(
            r#"{{"aps":{{"alert":{{"title":"T","body":"B"}},"mutable-content":1,"interruption-level":"time-sensitive","sound":"default"}},"v":1,"suite":"x25519","ciphertext":"{}"}}"#,
            "Q".repeat(68)
        );
        assert_eq!(String::from_utf8(b).unwrap(), expected);
    }

    #[test]
    fn passive_body_has_no_sound() {
        let b = String::from_utf8(build(Level::Passive, 68, "T", "B")).unwrap();
        assert!(b.contains(r#""interruption-level":"passive"}"#), "{b}");
        assert!(!b.contains("sound"));
    }

    #[test]
    fn stub_text_is_json_escaped() {
        let b = build(Level::Passive, 68, "a \"quoted\" title", "line\nbreak");
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["aps"]["alert"]["title"], "a \"quoted\" title");
        assert_eq!(v["aps"]["alert"]["body"], "line\nbreak");
    }

    #[test]
    fn the_specs_wake_payloads() {
        assert_eq!(
            String::from_utf8(wake("Zq3k8r2mT1u0wQ", Some("New message"))).unwrap(),
            r#"{"aps":{"alert":{"body":"New message"},"mutable-content":1,"sound":"default"},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
        );
        assert_eq!(
            String::from_utf8(wake("Zq3k8r2mT1u0wQ", None)).unwrap(),
            r#"{"aps":{"content-available":1},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
        );
        let v: serde_json::Value =
            serde_json::from_slice(&wake("t", Some("a \"quoted\"\nline"))).unwrap();
        assert_eq!(v["aps"]["alert"]["body"], "a \"quoted\"\nline");
    }

    #[test]
    fn the_default_cap_fits_apple_limit() {
        let largest = largest_body_len(3800, "cronstable", "New alert");
        assert!(largest <= APNS_MAX_BODY_BYTES, "{largest}");
        let real = build(Level::TimeSensitive, 3800, "cronstable", "New alert").len();
        assert!(real <= largest);
        assert!(max_ciphertext_for("cronstable", "New alert") >= 3800);
        assert!(largest_body_len(max_ciphertext_for("t", "b"), "t", "b") <= APNS_MAX_BODY_BYTES);
    }
}
