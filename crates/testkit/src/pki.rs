//! Throwaway key material for tests: a CA and a server certificate for 127.0.0.1 and
//! localhost signed by it, and APNs-style ES256 auth keys.

use std::path::PathBuf;

/// A throwaway CA and a server certificate for 127.0.0.1 and localhost signed by it.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA certificate, PEM: what a client trusts (`APNS_CA_FILE`, `FCM_CA_FILE`).
    pub ca_pem: String,
    /// The server certificate, PEM.
    pub cert_pem: String,
    /// The server key, PEM.
    pub key_pem: String,
}

/// Makes a fresh [`TestPki`].
pub fn generate_pki() -> anyhow::Result<TestPki> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sealrelay test CA");
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(TestPki {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A fresh APNs-style auth key: the `.p8` PEM (PKCS#8, P-256) and its public half (SPKI PEM).
pub fn generate_auth_key() -> anyhow::Result<(String, String)> {
    let k = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    Ok((k.serialize_pem(), k.public_key_pem()))
}

/// The public half (SPKI PEM) of an auth key given as PKCS#8 PEM.
pub fn public_key_pem(private_pem: &str) -> anyhow::Result<String> {
    Ok(rcgen::KeyPair::from_pem(private_pem)?.public_key_pem())
}

/// A [`TestPki`] with the CA also written to a file, kept as long as this value lives.
#[derive(Debug)]
pub struct Pki {
    /// The CA file, for `APNS_CA_FILE` and friends.
    pub ca_file: PathBuf,
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The server certificate, PEM.
    pub cert_pem: String,
    /// The server key, PEM.
    pub key_pem: String,
    _dir: tempfile::TempDir,
}

impl Pki {
    /// Generates a PKI and writes its CA to a temporary file.
    pub fn new() -> Self {
        let p = generate_pki().expect("generate a test PKI");
        let dir = tempfile::tempdir().expect("temporary directory");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &p.ca_pem).expect("write the CA");
        Self {
            ca_file,
            ca_pem: p.ca_pem,
            cert_pem: p.cert_pem,
            key_pem: p.key_pem,
            _dir: dir,
        }
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

/// An APNs auth key: the `.p8` PEM and its public half.
#[derive(Debug, Clone)]
pub struct AuthKey {
    /// PKCS#8 PEM, what the relay is given as `APNS_AUTH_KEY`.
    pub private_pem: String,
    /// SPKI PEM, what the mock verifies provider tokens with.
    pub public_pem: String,
}

impl AuthKey {
    /// A fresh key.
    pub fn new() -> Self {
        let (private_pem, public_pem) = generate_auth_key().expect("generate an auth key");
        Self {
            private_pem,
            public_pem,
        }
    }
}

impl Default for AuthKey {
    fn default() -> Self {
        Self::new()
    }
}
