//! Ed25519 for signed pushes and signed reads (ring), key files for `sealrelay keygen`,
//! the read `Authorization: Signature` header, and the freshness window.
//!
//! - A push's `signature` is Ed25519 over [`SignedPush::signing_bytes`], sent as 64 bytes
//!   of base64url without padding; anything else is 401 `bad_signature`
//!   ([`decode_signature`], [`verify_push`]).
//! - A signer's public key is enrolled as standard base64 (with padding) of its 32 bytes
//!   ([`PublicKey::from_base64`]).
//! - A private key lives in a PKCS#8 PEM file (`-----BEGIN PRIVATE KEY-----`): `keygen`
//!   writes PKCS#8 v2 (with the public key); v1 files, as `openssl genpkey -algorithm
//!   ed25519` writes them, load too ([`PrivateKey`]).
//! - A read is signed over `<METHOD>\n<path and query>\n<ts>` and carried as
//!   `Authorization: Signature keyId="<signerKeyId>",ts="<ms>",sig="<base64url>"`
//!   ([`ReadAuthorization`], [`read_authorization`]).
//! - `issuedAtMs` and `ts` must lie in `[now - 5 min, now + 30 s]`, both ends included
//!   ([`check_fresh`]).

mod fresh;
mod keys;
mod private;
mod read;

pub use fresh::*;
pub use keys::*;
pub use private::*;
pub use read::*;

#[cfg(test)]
mod tests;
