//! The FCM push module: the service account's JSON key (`FCM_SERVICE_ACCOUNT_FILE` or
//! `FCM_SERVICE_ACCOUNT`, exactly one; neither leaves the module unloaded), the API's base
//! URL (`FCM_URL`) and extra trusted roots (`FCM_CA_FILE`). The key is parsed and signs once
//! here, so a bad key stops start-up; no message ever quotes it.

use super::reader::Reader;
use super::vars::*;
use crate::push::fcm::{ServiceAccount, Settings};

/// What a service account key is, for messages: where an operator finds one.
const KEY_HELP: &str = "it must be a service account's JSON key (Firebase console: Project settings, Service accounts, Generate new private key)";

pub(super) fn read(r: &mut Reader<'_>) -> Option<Settings> {
    let url = base_url(r);
    let ca_file = r.ca_file(&FCM_CA_FILE);
    let file = r.set(&FCM_SERVICE_ACCOUNT_FILE);
    let text = r.set(&FCM_SERVICE_ACCOUNT);
    let (origin, json) = match (file, text) {
        (None, None) => return None,
        (Some(_), Some(_)) => {
            r.problem(
                "FCM_SERVICE_ACCOUNT and FCM_SERVICE_ACCOUNT_FILE are both set: set exactly one"
                    .into(),
            );
            return None;
        }
        (Some(path), None) => match std::fs::read_to_string(&path) {
            Ok(text) => (format!("FCM_SERVICE_ACCOUNT_FILE={path}"), text),
            Err(e) => {
                r.problem(format!(
                    "FCM_SERVICE_ACCOUNT_FILE={path} cannot be read: {e}"
                ));
                return None;
            }
        },
        (None, Some(text)) => (FCM_SERVICE_ACCOUNT.name.to_owned(), text),
    };
    match ServiceAccount::from_json(&json) {
        Ok(account) => Some(Settings {
            account,
            url,
            ca_file,
        }),
        Err(e) => {
            r.problem(format!("{origin} is not valid: {e}; {KEY_HELP}"));
            None
        }
    }
}

/// `FCM_URL`: an http(s) URL with a host, maybe a path (a proxy's prefix), no query; kept
/// without its trailing slashes. Checked even when the module is not loaded: a typo stops
/// start-up instead of waiting for the day a key is added.
fn base_url(r: &mut Reader<'_>) -> String {
    let v = r.value(&FCM_URL).unwrap_or_default();
    let url = v.trim_end_matches('/');
    let ok = !url.contains(char::is_whitespace) && crate::push::fcm::check_base_url(url).is_ok();
    if !ok {
        r.fail(
            &FCM_URL,
            &v,
            "an http:// or https:// URL such as https://fcm.googleapis.com (a path is allowed, a query is not)",
        );
    }
    url.to_owned()
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{errors, load};
    use sealrelay_testkit::mock_fcm::{FIXTURE_RSA_OTHER_PEM, FIXTURE_RSA_PEM};

    fn account(overrides: &[(&str, serde_json::Value)], remove: &[&str]) -> String {
        let mut v = serde_json::json!({
            "type": "service_account",
            "project_id": "demo-project",
            "private_key_id": "0123456789abcdef0123456789abcdef01234567",
            "private_key": FIXTURE_RSA_PEM,
            "client_email": "relay@demo-project.iam.gserviceaccount.com",
            "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": "https://oauth2.googleapis.com/token",
        });
        for (k, val) in overrides {
            v[*k] = val.clone();
        }
        for k in remove {
            v.as_object_mut().unwrap().remove(*k);
        }
        v.to_string()
    }

    /// No 16-character piece of either fixture key's base64 body in `text`.
    fn assert_no_key(text: &str) {
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        for pem in [FIXTURE_RSA_PEM, FIXTURE_RSA_OTHER_PEM] {
            for line in pem.lines().filter(|l| !l.starts_with("-----")) {
                for piece in line.as_bytes().chunks(16).filter(|c| c.len() == 16) {
                    let piece = std::str::from_utf8(piece).unwrap();
                    assert!(!text.contains(piece), "{text}");
                }
            }
        }
    }

    #[test]
    fn neither_key_variable_leaves_the_module_unloaded() {
        let c = load(&[]).unwrap();
        assert!(c.fcm.is_none());
        // Even with the other FCM variables set.
        let c = load(&[("FCM_URL", "http://127.0.0.1:9")]).unwrap();
        assert!(c.fcm.is_none());
        // An empty value is unset.
        let c = load(&[("FCM_SERVICE_ACCOUNT", "  ")]).unwrap();
        assert!(c.fcm.is_none());
    }

    #[test]
    fn the_key_as_text_loads_the_module_with_the_defaults() {
        let c = load(&[("FCM_SERVICE_ACCOUNT", &account(&[], &[]))]).unwrap();
        let s = c.fcm.unwrap();
        assert_eq!(s.account.project_id(), "demo-project");
        assert_eq!(s.account.token_uri(), "https://oauth2.googleapis.com/token");
        assert_eq!(s.url, "https://fcm.googleapis.com");
        assert_eq!(s.url, crate::push::fcm::DEFAULT_URL);
        assert_eq!(s.ca_file, None);
        assert_no_key(&format!("{s:?}"));
        // Pasted into an environment variable with literal \n in the key.
        let flat = FIXTURE_RSA_PEM.replace('\n', "\\n");
        let c = load(&[(
            "FCM_SERVICE_ACCOUNT",
            &account(&[("private_key", flat.into())], &[]),
        )])
        .unwrap();
        assert!(c.fcm.is_some());
    }

    #[test]
    fn the_key_file_loads_the_module() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sa.json");
        std::fs::write(&path, account(&[], &[])).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, sealrelay_testkit::pki::generate_pki().unwrap().ca_pem).unwrap();
        let c = load(&[
            ("FCM_SERVICE_ACCOUNT_FILE", path.to_str().unwrap()),
            ("FCM_URL", "http://127.0.0.1:4000/fcm-proxy//"),
            ("FCM_CA_FILE", ca.to_str().unwrap()),
        ])
        .unwrap();
        let s = c.fcm.unwrap();
        assert_eq!(s.account.project_id(), "demo-project");
        assert_eq!(s.url, "http://127.0.0.1:4000/fcm-proxy");
        assert_eq!(s.ca_file.as_deref(), Some(ca.as_path()));
    }

    #[test]
    fn both_key_variables_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sa.json");
        std::fs::write(&path, account(&[], &[])).unwrap();
        let json = account(&[], &[]);
        let e = errors(&[
            ("FCM_SERVICE_ACCOUNT_FILE", path.to_str().unwrap()),
            ("FCM_SERVICE_ACCOUNT", &json),
        ]);
        assert!(
            e.contains("FCM_SERVICE_ACCOUNT and FCM_SERVICE_ACCOUNT_FILE are both set"),
            "{e}"
        );
        assert_no_key(&e);
    }

    #[test]
    fn an_unreadable_file_names_the_variable_and_the_path() {
        let e = errors(&[("FCM_SERVICE_ACCOUNT_FILE", "/nonexistent/sa.json")]);
        assert!(
            e.contains("FCM_SERVICE_ACCOUNT_FILE=/nonexistent/sa.json cannot be read"),
            "{e}"
        );
    }

    #[test]
    fn bad_keys_name_the_variable_and_the_field_never_the_key() {
        let ec_key = sealrelay_testkit::pki::generate_auth_key().unwrap().0;
        let truncated: String = FIXTURE_RSA_PEM
            .lines()
            .take(8)
            .collect::<Vec<_>>()
            .join("\n")
            + "\n-----END PRIVATE KEY-----\n";
        let full = account(&[], &[]);
        let cases: Vec<(String, &str)> = vec![
            (full[..full.len() / 2].to_owned(), "not valid JSON"),
            ("[1, 2]".to_owned(), "not a JSON object"),
            (
                account(&[("type", "authorized_user".into())], &[]),
                "field `type` is invalid: is \"authorized_user\", expected \"service_account\"",
            ),
            (account(&[], &["type"]), "field `type` is missing"),
            (
                account(&[], &["project_id"]),
                "field `project_id` is missing",
            ),
            (
                account(&[], &["client_email"]),
                "field `client_email` is missing",
            ),
            (
                account(&[], &["private_key"]),
                "field `private_key` is missing",
            ),
            (account(&[], &["token_uri"]), "field `token_uri` is missing"),
            (
                account(&[("private_key", ec_key.into())], &[]),
                "field `private_key` is invalid: not an RSA private key",
            ),
            (
                account(&[("private_key", truncated.into())], &[]),
                "field `private_key` is invalid",
            ),
            (
                account(&[("private_key", "hunter2".into())], &[]),
                "field `private_key` is invalid: not a PEM private key",
            ),
            (
                account(
                    &[("token_uri", "ftp://oauth2.googleapis.com/token".into())],
                    &[],
                ),
                "field `token_uri` is invalid: must start with https:// or http://",
            ),
            (
                account(&[("token_uri", "oauth2.googleapis.com/token".into())], &[]),
                "field `token_uri` is invalid",
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sa.json");
        for (json, expected) in &cases {
            let e = errors(&[("FCM_SERVICE_ACCOUNT", json)]);
            assert!(
                e.starts_with("FCM_SERVICE_ACCOUNT is not valid: ") && e.contains(expected),
                "{expected}: {e}"
            );
            assert!(e.contains("service account's JSON key"), "{e}");
            assert_no_key(&e);
            assert!(!e.contains("hunter2"), "{e}");
            std::fs::write(&path, json).unwrap();
            let e = errors(&[("FCM_SERVICE_ACCOUNT_FILE", path.to_str().unwrap())]);
            assert!(
                e.starts_with(&format!(
                    "FCM_SERVICE_ACCOUNT_FILE={} is not valid: ",
                    path.display()
                )) && e.contains(expected),
                "{expected}: {e}"
            );
            assert_no_key(&e);
        }
    }

    #[test]
    fn fcm_url_and_ca_file_are_checked() {
        for bad in [
            "fcm.googleapis.com",
            "ftp://fcm.googleapis.com",
            "https://",
            "https://fcm.googleapis.com?x=1",
            "https://fcm googleapis.com",
            "",
        ] {
            let e = errors(&[("FCM_URL", bad)]);
            assert!(
                e.contains(&format!(
                    "FCM_URL={bad:?} is not valid: an http:// or https:// URL"
                )),
                "{bad}: {e}"
            );
        }
        for good in [
            "https://fcm.googleapis.com",
            "https://fcm.googleapis.com/",
            "http://127.0.0.1:8443",
            "https://proxy.internal/fcm",
        ] {
            assert!(load(&[("FCM_URL", good)]).is_ok(), "{good}");
        }
        let e = errors(&[
            ("FCM_SERVICE_ACCOUNT", &account(&[], &[])),
            ("FCM_CA_FILE", "/nonexistent/ca.pem"),
        ]);
        assert!(
            e.contains("FCM_CA_FILE=/nonexistent/ca.pem cannot be read"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let e = errors(&[("FCM_CA_FILE", not_pem.to_str().unwrap())]);
        assert!(
            e.contains("FCM_CA_FILE=") && e.contains("holds no PEM certificate"),
            "{e}"
        );
    }
}
