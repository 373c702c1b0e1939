//! `sealrelay keygen [--out FILE]`: a new Ed25519 signer key, written as PKCS#8 v1 PEM (the
//! form OpenSSL writes and reads) with mode 0600, never over an existing file; prints the
//! public key in the enrolment form (standard base64 of 32 bytes).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::signed::sig::PrivateKey;

/// Writes a new key to `out` and returns its public key.
pub fn run(out: &Path) -> anyhow::Result<String> {
    let key = PrivateKey::generate()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot create {}: {e} (keygen never overwrites a key)",
                out.display()
            )
        })?;
    f.write_all(key.to_pem_v1().as_bytes())?;
    f.sync_all()?;
    Ok(key.public_key().to_base64())
}

/// Reads a signer key file (PKCS#8 PEM, v1 or v2).
pub fn load(path: &Path) -> anyhow::Result<PrivateKey> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the key {}: {e}", path.display()))?;
    PrivateKey::from_pem(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_a_private_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        let public = super::run(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let key = super::load(&path).unwrap();
        assert_eq!(key.public_key().to_base64(), public);
        assert_eq!(public.len(), 44);
        let again = super::run(&path).unwrap_err().to_string();
        assert!(again.contains("never overwrites"), "{again}");
        assert_eq!(super::load(&path).unwrap().public_key().to_base64(), public);
    }
}
