//! The TLS client configuration every outbound connection uses (APNs, and later FCM, the
//! ICE provider, the smoke test, trace export): rustls with the ring provider, Mozilla's
//! roots, plus the PEM certificates of an optional extra CA file (test mocks, egress
//! proxies).

use std::path::Path;
use std::sync::Arc;

/// Builds the client configuration; `var` names the variable the CA file came from, for
/// error messages. The connector sets ALPN.
pub fn client_config(ca_file: Option<&Path>, var: &str) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let shown = path.display();
        let mut n = 0;
        for cert in CertificateDer::pem_file_iter(path)
            .map_err(|e| anyhow::anyhow!("{var}={shown}: {e}"))?
        {
            let cert = cert.map_err(|e| anyhow::anyhow!("{var}={shown}: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("{var}={shown}: {e}"))?;
            n += 1;
        }
        anyhow::ensure!(n > 0, "{var}={shown} holds no certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A pooled client over [`client_config`] for a base URL that may be https or http (test
/// mocks), speaking HTTP/1.1 or HTTP/2 as ALPN decides: the ICE provider's API and trace
/// export. (APNs and FCM tune their own HTTP/2 connections.)
pub fn http_client<B>(
    ca_file: Option<&Path>,
    var: &str,
) -> anyhow::Result<
    hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        B,
    >,
>
where
    B: hyper::body::Body + Send,
    B::Data: Send,
{
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(client_config(ca_file, var)?)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
    )
}

/// An `Authorization` header value for `scheme token`, marked sensitive so HTTP/2's HPACK
/// never indexes it and no debug print of the request shows it; `None` when the token has
/// bytes a header cannot carry.
pub fn authorization(scheme: &str, token: &str) -> Option<hyper::header::HeaderValue> {
    let mut text = String::with_capacity(scheme.len() + 1 + token.len());
    text.push_str(scheme);
    text.push(' ');
    text.push_str(token);
    let mut value = hyper::header::HeaderValue::try_from(text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod authorization_tests {
    use super::authorization;

    #[test]
    fn a_credential_header_is_sensitive_and_a_bad_token_is_refused() {
        let v = authorization("Bearer", "ya29.token").unwrap();
        assert!(v.is_sensitive());
        assert_eq!(v.as_bytes(), b"Bearer ya29.token");
        assert!(format!("{v:?}").contains("Sensitive"));
        assert!(!format!("{v:?}").contains("ya29"));
        assert!(authorization("Bearer", "bad\ntoken").is_none());
    }
}
