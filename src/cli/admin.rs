//! `sealrelay admin ...`: the admin API from the command line, over the Unix socket (the
//! default: `RELAY_ADMIN_SOCKET`'s path, so inside a pod `kubectl exec deploy/sealrelay --
//! sealrelay admin signers list` just works) or, with `--url` and `--token-file`, over the
//! opt-in loopback TCP listener.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::endpoint::{error_text, Endpoint};
use crate::secret::Secret;

/// A client of one relay's admin API.
#[derive(Debug)]
pub struct AdminClient {
    endpoint: Endpoint,
    token: Option<Secret>,
}

/// What an admin command printed and how it ended.
#[derive(Debug)]
pub struct Answer {
    /// What to print on standard output.
    pub text: String,
    /// Whether the relay said yes.
    pub ok: bool,
}

impl AdminClient {
    /// Over the socket at `socket`, or over TCP at `url` with the token in `token_file`.
    pub fn new(
        socket: &Path,
        url: Option<&str>,
        token_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        match (url, token_file) {
            (Some(url), Some(file)) => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
                Ok(Self {
                    endpoint: Endpoint::Url(url.to_owned()),
                    token: Some(Secret::new(text.trim_end_matches(['\n', '\r']))),
                })
            }
            (Some(_), None) => {
                anyhow::bail!("--url needs --token-file (the relay's RELAY_ADMIN_TOKEN_FILE)")
            }
            (None, Some(_)) => anyhow::bail!("--token-file goes with --url"),
            (None, None) => Ok(Self {
                endpoint: Endpoint::Socket(socket.to_owned()),
                token: None,
            }),
        }
    }

    async fn call(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value, String)> {
        let mut headers = Vec::new();
        if let Some(t) = &self.token {
            headers.push(("authorization", format!("Bearer {}", t.expose())));
        }
        let body = match body {
            Some(b) => {
                headers.push(("content-type", "application/json".to_owned()));
                serde_json::to_vec(&b)?
            }
            None => Vec::new(),
        };
        let (status, text) = self.endpoint.call(method, path, &headers, body).await?;
        let v = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok((status, v, text))
    }

    /// Enrols (or updates) a signer.
    pub async fn enroll(
        &self,
        key_id: &str,
        public_key: &str,
        topics: &[String],
    ) -> anyhow::Result<Answer> {
        let (status, v, text) = self
            .call(
                hyper::Method::PUT,
                &format!("/admin/v1/signers/{key_id}"),
                Some(json!({"publicKey": public_key, "topics": topics})),
            )
            .await?;
        Ok(match status {
            201 | 200 => Answer {
                text: format!(
                    "{} {key_id}: topics {}",
                    if status == 201 { "enrolled" } else { "updated" },
                    v["topics"]
                        .as_array()
                        .map(|a| a
                            .iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(", "))
                        .unwrap_or_default()
                ),
                ok: true,
            },
            _ => failed(status, &text),
        })
    }

    /// Lists the signers, as a table or as the API's JSON.
    pub async fn list(&self, as_json: bool) -> anyhow::Result<Answer> {
        let (status, v, text) = self
            .call(hyper::Method::GET, "/admin/v1/signers", None)
            .await?;
        if status != 200 {
            return Ok(failed(status, &text));
        }
        if as_json {
            return Ok(Answer {
                text: serde_json::to_string_pretty(&v)?,
                ok: true,
            });
        }
        let mut out = format!(
            "{:<32} {:<8} {:<44} TOPICS",
            "KEY ID", "STATE", "PUBLIC KEY"
        );
        for s in v["signers"].as_array().into_iter().flatten() {
            let topics: Vec<&str> = s["topics"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            out.push_str(&format!(
                "\n{:<32} {:<8} {:<44} {}",
                s["keyId"].as_str().unwrap_or(""),
                s["state"].as_str().unwrap_or(""),
                s["publicKey"].as_str().unwrap_or(""),
                topics.join(",")
            ));
        }
        Ok(Answer {
            text: out,
            ok: true,
        })
    }

    /// Revokes a signer.
    pub async fn revoke(&self, key_id: &str) -> anyhow::Result<Answer> {
        let (status, _, text) = self
            .call(
                hyper::Method::POST,
                &format!("/admin/v1/signers/{key_id}/revoke"),
                None,
            )
            .await?;
        Ok(match status {
            200 => Answer {
                text: format!("revoked {key_id}"),
                ok: true,
            },
            _ => failed(status, &text),
        })
    }

    /// Any push's receipt, as JSON.
    pub async fn receipt(&self, push_id: &str) -> anyhow::Result<Answer> {
        let (status, v, text) = self
            .call(
                hyper::Method::GET,
                &format!("/admin/v1/pushes/{push_id}"),
                None,
            )
            .await?;
        Ok(match status {
            200 => Answer {
                text: serde_json::to_string_pretty(&v)?,
                ok: true,
            },
            _ => failed(status, &text),
        })
    }
}

fn failed(status: u16, body: &str) -> Answer {
    Answer {
        text: format!("{status} {}", error_text(body)),
        ok: false,
    }
}

/// The public key to enrol: `--public-key` as given, or derived from `--key`'s file.
pub fn public_key(public_key: Option<&str>, key_file: Option<&PathBuf>) -> anyhow::Result<String> {
    match (public_key, key_file) {
        (Some(k), None) => Ok(k.to_owned()),
        (None, Some(f)) => Ok(super::keygen::load(f)?.public_key().to_base64()),
        _ => anyhow::bail!(
            "give the signer's --public-key, or its private --key file to derive it from"
        ),
    }
}
