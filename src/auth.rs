//! Mutual challenge-response authentication with a shared secret (HMAC-SHA256,
//! RFC 2104 over FIPS 180-4, via the `hmac` and `sha2` crates).
//!
//! Before any other message each side sends a fresh 32-byte random nonce; each
//! proves it holds the secret by returning `HMAC(secret, label || nonce_peer ||
//! nonce_own)`, with a different label per direction so a proof cannot be reflected
//! back. Fresh nonces on both sides make a recorded handshake useless for replay.
//! A side without a secret uses the empty key, so two sides without a secret agree
//! and a side with a secret never accepts one without it.
//!
//! ## Messages after the handshake ([`Session`])
//!
//! Every frame after `Welcome`, in both directions, carries a 32-byte tag:
//! `HMAC-SHA256(k_dir, counter || body)` (RFC 2104), where `counter` is the 64-bit
//! little-endian number of frames sent before it in that direction (from 0, never
//! sent: both sides count) and `k_dir` is a per-direction key derived with HKDF-SHA256
//! (RFC 5869): `PRK = HMAC(salt = nonce_agent || nonce_listener, IKM = secret)`,
//! `k_dir = HKDF-Expand(PRK, info = "plugpull v1 agent to listener" or
//! "plugpull v1 listener to agent", 32)`. A peer without the secret can neither forge
//! a message, nor replay one from another connection (fresh nonces give fresh keys),
//! nor reflect one back (keys differ per direction), nor drop or reorder one unseen
//! (the counter of every later frame no longer matches).

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

/// Why a secret file with permission bits `mode` is refused: readable or writable by
/// others (not its owner or group), or `None`.
fn open_mode(mode: u32) -> Option<&'static str> {
    match (mode & 0o004 != 0, mode & 0o002 != 0) {
        (_, true) => Some("is writable by everyone"),
        (true, false) => Some("is readable by everyone"),
        (false, false) => None,
    }
}

impl Secret {
    /// A secret from bytes; surrounding ASCII whitespace is trimmed.
    pub fn new(bytes: &[u8]) -> Self {
        Secret(bytes.trim_ascii().to_vec())
    }

    /// Loads the secret from `path` if given, else from `PLUGPULL_SECRET`, else none.
    ///
    /// Errors: the file cannot be read; anyone but its owner and group may read or
    /// write it (mode bits `0o006`: 600, or 640 for the listener's group, are what
    /// the docs set; as libpq refuses a `.pgpass` others can read); it is empty.
    pub fn load(path: Option<&std::path::Path>) -> Result<Self, String> {
        match path {
            Some(p) => {
                let mode = std::fs::metadata(p)
                    .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))
                    .map_err(|e| format!("cannot read secret file {}: {e}", p.display()))?;
                if let Some(why) = open_mode(mode) {
                    return Err(format!(
                        "secret file {} {why} (mode {:04o}): `chmod 600 {0}` (640 for the listener's group)",
                        p.display(),
                        mode & 0o7777
                    ));
                }
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

/// Bytes of the tag a [`Session`] appends to every frame body.
pub const TAG_LEN: usize = 32;

/// HKDF-SHA256 (RFC 5869) with a 32-byte output: extract with `salt`, expand with `info`.
pub fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[u8]) -> [u8; 32] {
    let mut ex =
        <Hmac<Sha256> as Mac>::new_from_slice(salt).expect("HMAC takes keys of any length");
    ex.update(ikm);
    let prk = ex.finalize().into_bytes();
    let mut t = <Hmac<Sha256> as Mac>::new_from_slice(&prk).expect("HMAC takes keys of any length");
    t.update(info);
    t.update(&[1]);
    t.finalize().into_bytes().into()
}

/// One direction of a session: its key and the number of frames it has tagged or checked.
#[derive(Clone)]
pub struct Direction {
    mac: Hmac<Sha256>,
    counter: u64,
}

impl std::fmt::Debug for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Direction(<key>, counter {})", self.counter)
    }
}

impl Direction {
    fn new(key: &[u8; 32]) -> Direction {
        Direction {
            mac: <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length"),
            counter: 0,
        }
    }

    fn tag(&self, body: &[u8]) -> Hmac<Sha256> {
        let mut m = self.mac.clone();
        m.update(&self.counter.to_le_bytes());
        m.update(body);
        m
    }

    /// Appends the tag of `frame[from..]` (the body) to `frame` and counts the frame.
    pub fn seal(&mut self, frame: &mut Vec<u8>, from: usize) {
        let t = self.tag(&frame[from..]).finalize().into_bytes();
        frame.extend_from_slice(&t);
        self.counter += 1;
    }

    /// Checks the tag at the end of `body` in constant time, counts the frame, and
    /// returns the body without its tag.
    ///
    /// Errors: [`MacError`] when the body is shorter than a tag or the tag does not
    /// match (forged, altered, replayed, reordered, or a frame before it was dropped).
    pub fn open<'a>(&mut self, body: &'a [u8]) -> Result<&'a [u8], MacError> {
        if body.len() < TAG_LEN {
            return Err(MacError {
                frame: self.counter,
            });
        }
        let (msg, tag) = body.split_at(body.len() - TAG_LEN);
        self.tag(msg).verify_slice(tag).map_err(|_| MacError {
            frame: self.counter,
        })?;
        self.counter += 1;
        Ok(msg)
    }

    /// Frames tagged or checked so far.
    pub fn counter(&self) -> u64 {
        self.counter
    }
}

/// A frame failed authentication; `frame` is its number in its direction (from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacError {
    /// Number of the frame in its direction.
    pub frame: u64,
}

impl std::fmt::Display for MacError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "message {} after the handshake failed authentication (forged, altered, replayed, reordered, or one before it was dropped)",
            self.frame
        )
    }
}

impl std::error::Error for MacError {}

/// The keys of one authenticated connection, from one side's point of view.
#[derive(Clone, Debug)]
pub struct Session {
    /// Tags frames this side sends.
    pub send: Direction,
    /// Checks frames this side receives.
    pub recv: Direction,
}

impl Secret {
    fn keys(
        &self,
        agent_nonce: &[u8; NONCE_LEN],
        listener_nonce: &[u8; NONCE_LEN],
    ) -> ([u8; 32], [u8; 32]) {
        let mut salt = [0u8; 2 * NONCE_LEN];
        salt[..NONCE_LEN].copy_from_slice(agent_nonce);
        salt[NONCE_LEN..].copy_from_slice(listener_nonce);
        (
            hkdf_sha256(&salt, &self.0, b"plugpull v1 agent to listener"),
            hkdf_sha256(&salt, &self.0, b"plugpull v1 listener to agent"),
        )
    }

    /// The agent's (or verifier's) session after a handshake with these nonces.
    pub fn agent_session(
        &self,
        agent_nonce: &[u8; NONCE_LEN],
        listener_nonce: &[u8; NONCE_LEN],
    ) -> Session {
        let (a2l, l2a) = self.keys(agent_nonce, listener_nonce);
        Session {
            send: Direction::new(&a2l),
            recv: Direction::new(&l2a),
        }
    }

    /// The listener's session after a handshake with these nonces.
    pub fn listener_session(
        &self,
        agent_nonce: &[u8; NONCE_LEN],
        listener_nonce: &[u8; NONCE_LEN],
    ) -> Session {
        let (a2l, l2a) = self.keys(agent_nonce, listener_nonce);
        Session {
            send: Direction::new(&l2a),
            recv: Direction::new(&a2l),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_others_may_read_or_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("plugpull-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s");
        std::fs::write(&p, "k\n").unwrap();
        let with_mode = |m: u32| {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
            Secret::load(Some(&p)).map(|s| s.is_none())
        };
        let shown = p.display();
        assert_eq!(with_mode(0o600), Ok(false));
        assert_eq!(with_mode(0o640), Ok(false));
        assert_eq!(
            with_mode(0o644),
            Err(format!(
                "secret file {shown} is readable by everyone (mode 0644): `chmod 600 {shown}` (640 for the listener's group)"
            ))
        );
        assert_eq!(
            with_mode(0o602),
            Err(format!(
                "secret file {shown} is writable by everyone (mode 0602): `chmod 600 {shown}` (640 for the listener's group)"
            ))
        );
        assert_eq!(
            with_mode(0o606).unwrap_err(),
            format!(
                "secret file {shown} is writable by everyone (mode 0606): `chmod 600 {shown}` (640 for the listener's group)"
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hkdf_matches_rfc_5869_test_case_1() {
        let ikm = [0x0bu8; 22];
        let salt: Vec<u8> = (0x00..=0x0c).collect();
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        let okm = hkdf_sha256(&salt, &ikm, &info);
        // The first 32 of the 42 bytes of OKM in RFC 5869 A.1.
        let want = "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf";
        let got: String = okm.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn sessions_accept_their_peer_in_order_and_nothing_else() {
        let s = Secret::new(b"k");
        let (a, l) = ([1u8; 32], [2u8; 32]);
        let mut agent = s.agent_session(&a, &l);
        let mut listener = s.listener_session(&a, &l);
        let mut f1 = b"one".to_vec();
        agent.send.seal(&mut f1, 0);
        let mut f2 = b"two".to_vec();
        agent.send.seal(&mut f2, 0);
        // Reordered or dropped: the second frame is refused as the first.
        assert_eq!(listener.clone().recv.open(&f2), Err(MacError { frame: 0 }));
        assert_eq!(listener.recv.open(&f1).unwrap(), b"one");
        // Replayed: refused.
        assert_eq!(listener.clone().recv.open(&f1), Err(MacError { frame: 1 }));
        assert_eq!(listener.recv.open(&f2).unwrap(), b"two");
        // Reflected: the agent's own frame is not a listener frame.
        let mut g = b"x".to_vec();
        agent.send.seal(&mut g, 0);
        assert!(agent.recv.open(&g).is_err());
        // Without the secret: refused; other nonces: refused.
        let mut forged = b"Confirmed".to_vec();
        Secret::default()
            .listener_session(&a, &l)
            .send
            .seal(&mut forged, 0);
        assert!(s.agent_session(&a, &l).recv.open(&forged).is_err());
        let mut h = b"h".to_vec();
        s.listener_session(&a, &[3u8; 32]).send.seal(&mut h, 0);
        assert!(s.agent_session(&a, &l).recv.open(&h).is_err());
        // Altered: one flipped bit.
        let mut k = b"abc".to_vec();
        s.listener_session(&a, &l).send.seal(&mut k, 0);
        k[1] ^= 1;
        assert!(s.agent_session(&a, &l).recv.open(&k).is_err());
    }

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
