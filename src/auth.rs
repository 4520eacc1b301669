//! Mutual challenge-response authentication with a shared secret (HMAC-SHA256,
//! RFC 2104 over FIPS 180-4, via the `hmac` and `sha2` crates).
//!
//! Before any other message each side sends a fresh 32-byte random nonce; each
//! proves it holds the secret by returning `HMAC(secret, label || nonce_peer ||
//! nonce_own)`, with a different label per direction so a proof cannot be reflected
//! back. Fresh nonces on both sides make a recorded handshake useless for replay.
//! A side without a secret uses the empty key, so two sides without a secret agree
//! and a side with a secret never accepts one without it.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Length of nonces and proofs, in bytes.
pub const NONCE_LEN: usize = 32;

/// A shared secret: raw bytes (a file's contents with surrounding whitespace trimmed,
/// or the `PLUGPULL_SECRET` environment variable). Empty = no secret.
#[derive(Clone, Default)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "Secret(none)"
        } else {
            "Secret(<redacted>)"
        })
    }
}

/// Name of the environment variable that carries the secret when no file is given.
pub const SECRET_ENV: &str = "PLUGPULL_SECRET";

impl Secret {
    /// A secret from bytes; surrounding ASCII whitespace is trimmed.
    pub fn new(bytes: &[u8]) -> Self {
        Secret(bytes.trim_ascii().to_vec())
    }

    /// Loads the secret from `path` if given, else from `PLUGPULL_SECRET`, else none.
    ///
    /// Errors: the file cannot be read, or it is empty.
    pub fn load(path: Option<&std::path::Path>) -> Result<Self, String> {
        match path {
            Some(p) => {
                let bytes = std::fs::read(p)
                    .map_err(|e| format!("cannot read secret file {}: {e}", p.display()))?;
                let s = Secret::new(&bytes);
                if s.is_none() {
                    return Err(format!("secret file {} is empty", p.display()));
                }
                Ok(s)
            }
            None => Ok(std::env::var_os(SECRET_ENV)
                .map(|v| Secret::new(v.as_encoded_bytes()))
                .unwrap_or_default()),
        }
    }

    /// True when there is no secret (the empty key is used).
    pub fn is_none(&self) -> bool {
        self.0.is_empty()
    }

    fn mac(&self, label: &[u8], a: &[u8; NONCE_LEN], b: &[u8; NONCE_LEN]) -> Hmac<Sha256> {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(label);
        m.update(a);
        m.update(b);
        m
    }

    /// The listener's proof: `HMAC(secret, "plugpull listener" || client_nonce || listener_nonce)`.
    pub fn listener_proof(
        &self,
        client_nonce: &[u8; NONCE_LEN],
        listener_nonce: &[u8; NONCE_LEN],
    ) -> [u8; 32] {
        self.mac(b"plugpull listener", client_nonce, listener_nonce)
            .finalize()
            .into_bytes()
            .into()
    }

    /// The agent's proof: `HMAC(secret, "plugpull agent" || listener_nonce || client_nonce)`.
    pub fn agent_proof(
        &self,
        listener_nonce: &[u8; NONCE_LEN],
        client_nonce: &[u8; NONCE_LEN],
    ) -> [u8; 32] {
        self.mac(b"plugpull agent", listener_nonce, client_nonce)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks a listener proof in constant time.
    pub fn check_listener_proof(
        &self,
        client_nonce: &[u8; NONCE_LEN],
        listener_nonce: &[u8; NONCE_LEN],
        proof: &[u8; 32],
    ) -> bool {
        self.mac(b"plugpull listener", client_nonce, listener_nonce)
            .verify_slice(proof)
            .is_ok()
    }

    /// Checks an agent proof in constant time.
    pub fn check_agent_proof(
        &self,
        listener_nonce: &[u8; NONCE_LEN],
        client_nonce: &[u8; NONCE_LEN],
        proof: &[u8; 32],
    ) -> bool {
        self.mac(b"plugpull agent", listener_nonce, client_nonce)
            .verify_slice(proof)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_check_only_with_the_same_secret_and_direction() {
        let s = Secret::new(b"  hunter2\n");
        let (c, l) = ([1u8; 32], [2u8; 32]);
        let lp = s.listener_proof(&c, &l);
        assert!(s.check_listener_proof(&c, &l, &lp));
        assert!(!Secret::new(b"other").check_listener_proof(&c, &l, &lp));
        assert!(!Secret::default().check_listener_proof(&c, &l, &lp));
        // A listener proof is not an agent proof (no reflection).
        assert!(!s.check_agent_proof(&l, &c, &lp));
        let ap = s.agent_proof(&l, &c);
        assert!(s.check_agent_proof(&l, &c, &ap));
        // A new nonce makes an old proof worthless (no replay).
        assert!(!s.check_agent_proof(&[3u8; 32], &c, &ap));
    }

    #[test]
    fn no_secret_agrees_with_no_secret() {
        let n = Secret::default();
        let p = n.agent_proof(&[0; 32], &[1; 32]);
        assert!(n.check_agent_proof(&[0; 32], &[1; 32], &p));
        assert!(!Secret::new(b"x").check_agent_proof(&[0; 32], &[1; 32], &p));
    }
}
