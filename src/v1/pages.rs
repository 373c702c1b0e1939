//! Hosted pages: `GET`/`HEAD /pair`, `/privacy` and `/.well-known/apple-app-site-association`
//! (DESIGN.md, "Hosted pages").
//!
//! A daemon's pairing QR encodes `<relay origin>/pair#<base64url payload>`. The payload rides
//! in the fragment, which browsers never send, so this server never sees it: the page's inline
//! script decodes it on the phone, shows the daemon's name and host, and links to
//! `cronstable://pair#<the same fragment>`. The pages load nothing from anywhere; every byte
//! is in the HTML (`pages/*.html`, compiled in), and a Content-Security-Policy that allows
//! exactly their inline script and style by SHA-256 enforces that. Editing an inline
//! `<script>` or `<style>` changes its hash: the `csp_hashes_match_the_inline_elements` test
//! recomputes them and names the new value.
//!
//! The router has no fallback of its own and no state, so it merges into any `Router<S>`.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, MethodRouter};
use axum::Router;

/// The pairing landing page.
const PAIR_HTML: &str = include_str!("pages/pair.html");
/// What the relay sees, keeps, and never sees.
const PRIVACY_HTML: &str = include_str!("pages/privacy.html");

// The CSP hash sources: base64 of the SHA-256 of each inline element's text, exactly as
// written between its tags. Each is written once, here; the policies below splice them in.

/// `pair.html`'s inline `<script>`.
macro_rules! pair_script_sha256 {
    () => {
        "z5soh3SvpIQy8qro6byv6CefA3x4livLXR6QaYVvfEQ="
    };
}
/// `pair.html`'s inline `<style>`.
macro_rules! pair_style_sha256 {
    () => {
        "nAkAToE1tqEcDvBt67BgLqIN/s0GtOxilJqQ6LOYjlw="
    };
}
/// `privacy.html`'s inline `<style>` (the page has no script).
macro_rules! privacy_style_sha256 {
    () => {
        "6Zxwgzc57X6WlRJIXMEQ6pjrdDUM3UU8st7Q3Rj+Bm4="
    };
}

/// `/pair`'s policy: its one inline script and one inline style, nothing else.
pub(crate) const PAIR_CSP: &str = concat!(
    "default-src 'none'; script-src 'sha256-",
    pair_script_sha256!(),
    "'; style-src 'sha256-",
    pair_style_sha256!(),
    "'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
);
/// `/privacy`'s policy: its inline style, no script at all.
pub(crate) const PRIVACY_CSP: &str = concat!(
    "default-src 'none'; script-src 'none'; style-src 'sha256-",
    privacy_style_sha256!(),
    "'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
);

/// The pages are the same bytes until the next release.
const CACHE_STATIC: &str = "public, max-age=3600";
/// What the association file's one component says.
const AASA_COMMENT: &str = "cronstable pairing links: the payload rides in the fragment";

/// The hosted pages' routes, to merge into the public router:
/// `router.merge(v1::pages::routes(config.aasa_app_ids.clone()))`.
///
/// `aasa_app_ids` is `RELAY_AASA_APP_IDS` (or `<APNS_TEAM_ID>.<APNS_TOPIC>`); `None` or an
/// empty list answers the association path 404 `{"v":1,"error":"not found"}` for every
/// method, as for any unknown path. Other methods on a served path are 405 with
/// `Allow: GET, HEAD`. `HEAD` answers `GET`'s status and headers without the body (axum).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(
    aasa_app_ids: Option<Vec<String>>,
) -> Router<S> {
    let aasa: MethodRouter<S> = match aasa_app_ids.filter(|ids| !ids.is_empty()) {
        Some(ids) => {
            let body = Bytes::from(aasa_json(&ids));
            get(move || {
                let body = body.clone();
                async move { aasa(body) }
            })
            .fallback(method_not_allowed)
        }
        None => any(not_found),
    };
    Router::new()
        .route(
            "/pair",
            get(|| async { html(PAIR_HTML, PAIR_CSP) }).fallback(method_not_allowed),
        )
        .route(
            "/privacy",
            get(|| async { html(PRIVACY_HTML, PRIVACY_CSP) }).fallback(method_not_allowed),
        )
        .route("/.well-known/apple-app-site-association", aasa)
}

/// The association file: `/pair` opens the app as a universal link.
fn aasa_json(app_ids: &[String]) -> String {
    serde_json::json!({
        "applinks": {
            "details": [{
                "appIDs": app_ids,
                "components": [{"/": "/pair", "comment": AASA_COMMENT}],
            }],
        },
    })
    .to_string()
}

fn html(body: &'static str, csp: &'static str) -> Response {
    let mut resp = Response::new(Body::from(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    common_headers(h);
    resp
}

fn aasa(body: Bytes) -> Response {
    let mut resp = Response::new(Body::from(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    common_headers(h);
    resp
}

fn common_headers(h: &mut axum::http::HeaderMap) {
    const HEADERS: [(HeaderName, &str); 3] = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, CACHE_STATIC),
    ];
    for (name, value) in HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
}

fn json_error(status: StatusCode, body: &'static str) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

async fn not_found() -> Response {
    json_error(StatusCode::NOT_FOUND, r#"{"v":1,"error":"not found"}"#)
}

async fn method_not_allowed() -> Response {
    let mut resp = json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        r#"{"v":1,"error":"method not allowed"}"#,
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use axum::http::{Method, Request};
    use tower::ServiceExt;

    const PATHS: [&str; 3] = [
        "/pair",
        "/privacy",
        "/.well-known/apple-app-site-association",
    ];

    fn app() -> Router {
        routes(Some(vec![
            "ABCDE12345.com.example.app".to_string(),
            "ABCDE12345.com.example.other".to_string(),
        ]))
    }

    async fn send(
        router: Router,
        method: Method,
        uri: &str,
    ) -> (StatusCode, axum::http::HeaderMap, Bytes) {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let resp = router.oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, headers, body)
    }

    fn header<'a>(h: &'a axum::http::HeaderMap, name: &str) -> &'a str {
        h.get(name)
            .unwrap_or_else(|| panic!("missing header {name}"))
            .to_str()
            .unwrap()
    }

    fn assert_page_headers(h: &axum::http::HeaderMap, csp: &str) {
        assert_eq!(header(h, "content-type"), "text/html; charset=utf-8");
        assert_eq!(header(h, "content-security-policy"), csp);
        assert_eq!(header(h, "x-content-type-options"), "nosniff");
        assert_eq!(header(h, "referrer-policy"), "no-referrer");
        assert_eq!(header(h, "cache-control"), "public, max-age=3600");
    }

    #[tokio::test]
    async fn pages_answer_get_with_their_html_and_headers() {
        for (path, html, csp) in [
            ("/pair", PAIR_HTML, PAIR_CSP),
            ("/privacy", PRIVACY_HTML, PRIVACY_CSP),
            ("/pair?utm=x", PAIR_HTML, PAIR_CSP),
        ] {
            let (status, h, body) = send(app(), Method::GET, path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_page_headers(&h, csp);
            assert_eq!(body, html.as_bytes(), "{path}");
        }
    }

    #[tokio::test]
    async fn head_answers_the_same_headers_without_a_body() {
        for (path, csp) in [("/pair", PAIR_CSP), ("/privacy", PRIVACY_CSP)] {
            let (status, h, body) = send(app(), Method::HEAD, path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_page_headers(&h, csp);
            assert!(body.is_empty(), "{path}: HEAD has a body");
        }
        let (status, h, body) = send(
            app(),
            Method::HEAD,
            "/.well-known/apple-app-site-association",
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&h, "content-type"), "application/json");
        assert!(body.is_empty());
    }

    #[tokio::test]
    async fn other_methods_are_405_with_allow() {
        for path in PATHS {
            for method in [
                Method::POST,
                Method::PUT,
                Method::DELETE,
                Method::PATCH,
                Method::OPTIONS,
                Method::from_bytes(b"BREW").unwrap(),
            ] {
                let (status, h, body) = send(app(), method.clone(), path).await;
                assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
                assert_eq!(header(&h, "allow"), "GET, HEAD");
                assert_eq!(header(&h, "content-type"), "application/json");
                assert_eq!(body, r#"{"v":1,"error":"method not allowed"}"#.as_bytes());
            }
        }
    }

    #[tokio::test]
    async fn aasa_lists_the_app_ids_and_the_pair_component() {
        let (status, h, body) = send(
            app(),
            Method::GET,
            "/.well-known/apple-app-site-association",
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&h, "content-type"), "application/json");
        assert_eq!(header(&h, "x-content-type-options"), "nosniff");
        assert_eq!(header(&h, "cache-control"), "public, max-age=3600");
        assert!(h.get("content-security-policy").is_none());
        let got: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            got,
            serde_json::json!({"applinks": {"details": [{
                "appIDs": ["ABCDE12345.com.example.app", "ABCDE12345.com.example.other"],
                "components": [{"/": "/pair", "comment": AASA_COMMENT}],
            }]}})
        );
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            r#"{"applinks":{"details":[{"appIDs":["ABCDE12345.com.example.app","ABCDE12345.com.example.other"],"components":[{"/":"/pair","comment":"cronstable pairing links: the payload rides in the fragment"}]}]}}"#
        );
    }

    #[tokio::test]
    async fn aasa_without_app_ids_is_not_found() {
        for ids in [None, Some(vec![])] {
            for method in [Method::GET, Method::HEAD, Method::POST] {
                let router: Router = routes(ids.clone());
                let (status, h, body) = send(
                    router,
                    method.clone(),
                    "/.well-known/apple-app-site-association",
                )
                .await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{method} {ids:?}");
                assert_eq!(header(&h, "content-type"), "application/json");
                if method != Method::HEAD {
                    assert_eq!(body, r#"{"v":1,"error":"not found"}"#.as_bytes());
                }
            }
            // The pages do not depend on the association file.
            let (status, _, _) = send(routes(ids.clone()), Method::GET, "/pair").await;
            assert_eq!(status, StatusCode::OK);
        }
    }

    #[tokio::test]
    async fn merges_into_a_router_with_state_and_a_fallback() {
        #[derive(Clone)]
        struct AppState(#[allow(dead_code)] u8);
        let router: Router = Router::new()
            .route("/", get(|| async { "root" }))
            .merge(routes::<AppState>(None))
            .fallback(|| async { (StatusCode::IM_A_TEAPOT, "elsewhere") })
            .with_state(AppState(7));
        let (status, _, _) = send(router.clone(), Method::GET, "/privacy").await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, _) = send(router, Method::GET, "/pair/").await;
        assert_eq!(
            status,
            StatusCode::IM_A_TEAPOT,
            "only the exact paths are taken"
        );
    }

    // ---- the CSP hashes -------------------------------------------------------------

    /// Standard base64 with padding, as CSP hash sources are written.
    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn sha256_source(text: &str) -> String {
        base64(ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref())
    }

    /// The text of every `<tag>…</tag>` element, which must be written without attributes.
    fn inline<'a>(html: &'a str, tag: &str) -> Vec<&'a str> {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        assert_eq!(
            html.matches(&format!("<{tag}")).count(),
            html.matches(&open).count(),
            "a <{tag}> with attributes (src=, nonce=, …) is not allowed"
        );
        let mut out = Vec::new();
        let mut rest = html;
        while let Some(start) = rest.find(&open) {
            let after = &rest[start + open.len()..];
            let end = after.find(&close).expect("unclosed element");
            out.push(&after[..end]);
            rest = &after[end + close.len()..];
        }
        out
    }

    #[test]
    fn base64_encoder_matches_rfc_4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
        // SHA-256 of "" as CSP writes it.
        assert_eq!(
            sha256_source(""),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
    }

    #[test]
    fn csp_hashes_match_the_inline_elements() {
        for (page, html, scripts, styles) in [
            (
                "pair.html",
                PAIR_HTML,
                vec![pair_script_sha256!()],
                vec![pair_style_sha256!()],
            ),
            (
                "privacy.html",
                PRIVACY_HTML,
                vec![],
                vec![privacy_style_sha256!()],
            ),
        ] {
            let got: Vec<String> = inline(html, "script")
                .into_iter()
                .map(sha256_source)
                .collect();
            assert_eq!(
                got, scripts,
                "{page}: update its script hash constant and CSP"
            );
            let got: Vec<String> = inline(html, "style")
                .into_iter()
                .map(sha256_source)
                .collect();
            assert_eq!(
                got, styles,
                "{page}: update its style hash constant and CSP"
            );
        }
        let pair = sha256_source(inline(PAIR_HTML, "script")[0]);
        let style = sha256_source(inline(PAIR_HTML, "style")[0]);
        assert_eq!(
            PAIR_CSP,
            format!(
                "default-src 'none'; script-src 'sha256-{pair}'; style-src 'sha256-{style}'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
            )
        );
        let style = sha256_source(inline(PRIVACY_HTML, "style")[0]);
        assert_eq!(
            PRIVACY_CSP,
            format!(
                "default-src 'none'; script-src 'none'; style-src 'sha256-{style}'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
            )
        );
    }

    #[test]
    fn pages_load_nothing_and_need_nothing_the_csp_blocks() {
        for (page, html) in [("pair.html", PAIR_HTML), ("privacy.html", PRIVACY_HTML)] {
            let lower = html.to_ascii_lowercase();
            for banned in [
                " src=",
                "<link",
                "@import",
                "<iframe",
                "<object",
                "<embed",
                "<img",
                "<form",
                "<base",
                " style=",
                "javascript:",
                "http-equiv=\"content-security",
            ] {
                assert!(!lower.contains(banned), "{page} contains {banned:?}");
            }
            for style in inline(html, "style") {
                assert!(
                    !style.contains("url("),
                    "{page}: a style that loads a resource"
                );
            }
            // No inline event handlers (onclick=, onerror=, ...): the CSP blocks them.
            let handler = lower.match_indices(" on").any(|(i, _)| {
                let word: String = lower[i + 3..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphabetic())
                    .collect();
                !word.is_empty() && lower[i + 3 + word.len()..].starts_with('=')
            });
            assert!(!handler, "{page} has an inline event handler");
        }
        // The pairing script writes text only.
        let script = inline(PAIR_HTML, "script")[0];
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "console.",
            "eval(",
            "Function(",
        ] {
            assert!(!script.contains(banned), "pair.html's script uses {banned}");
        }
        assert!(script.contains("textContent"));
    }
}
