//! TLS for PostgreSQL connections, by libpq's `sslmode` rules (PostgreSQL docs,
//! "SSL Support", the sslmode table), on rustls:
//!
//! | sslmode     | TLS                                   | server certificate checked        |
//! |-------------|---------------------------------------|-----------------------------------|
//! | disable     | never                                 | —                                 |
//! | allow       | plain first; TLS if the server refuses | chain, if a root file exists     |
//! | prefer      | TLS first; plain if it fails or the server refuses | chain, if a root file exists |
//! | require     | always                                | chain, if a root file exists      |
//! | verify-ca   | always                                | chain to `sslrootcert`            |
//! | verify-full | always                                | chain, and the host name or IP    |
//!
//! `sslrootcert` defaults to `~/.postgresql/root.crt`; "a root file exists" is
//! libpq's rule that `require` (and `prefer`, `allow`) with that file present
//! checks the chain as `verify-ca` does. `sslcert`/`sslkey` (default
//! `~/.postgresql/postgresql.crt`/`.key`) are sent when the certificate file exists;
//! the key must then exist and be 0600 or stricter (0640 when owned by root). A Unix
//! socket never uses TLS (libpq ignores sslmode there; the server refuses TLS on it).
//! `verify-ca` is rustls's web-PKI chain check with its name mismatch alone
//! forgiven.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// Plain first, TLS when the server refuses the plain session.
    Allow,
    /// TLS first, plain when the handshake fails or the server refuses (default).
    Prefer,
    /// TLS or nothing.
    Require,
    /// TLS with the server's chain checked against the root certificates.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host.
    VerifyFull,
}

/// One way of trying a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Without TLS.
    Plain,
    /// With TLS.
    Tls,
}

impl SslMode {
    /// Parses a `sslmode` value.
    pub fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return Err(format!("invalid sslmode value: {s:?}")),
        })
    }

    /// The attempts to make, in order; the next is made only when the one before
    /// was refused (see [`refused`]), not when the socket failed.
    pub fn attempts(self) -> &'static [Attempt] {
        match self {
            SslMode::Disable => &[Attempt::Plain],
            SslMode::Allow => &[Attempt::Plain, Attempt::Tls],
            SslMode::Prefer => &[Attempt::Tls, Attempt::Plain],
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => &[Attempt::Tls],
        }
    }
}

/// Whether a failed tokio-postgres connection attempt was a refusal the next
/// attempt of [`SslMode::attempts`] may overcome: the server answered with an error
/// (e.g. pg_hba has no line for this kind of connection), refused TLS, or the TLS
/// handshake failed.
pub fn refused(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some() || is_tls_error(e)
}

/// Whether `e` is tokio-postgres's TLS error (the server refused TLS, or the
/// handshake failed: a certificate not trusted, a name mismatch, no common
/// protocol). Its `Display` is tokio-postgres's only mark of that kind.
pub fn is_tls_error(e: &tokio_postgres::Error) -> bool {
    e.to_string().starts_with("error performing TLS handshake")
}

/// The files the TLS settings name, with libpq's defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Files {
    /// `sslrootcert`, else `~/.postgresql/root.crt`.
    pub root_cert: PathBuf,
    /// `sslcert`, else `~/.postgresql/postgresql.crt`.
    pub cert: PathBuf,
    /// `sslkey`, else `~/.postgresql/postgresql.key`.
    pub key: PathBuf,
}

/// The TLS setting of a connection: the mode and, unless it is `disable`, the
/// rustls configuration every TLS attempt uses.
#[derive(Clone)]
pub struct Tls {
    /// The mode.
    pub mode: SslMode,
    /// The client configuration (`None` for `disable`).
    pub config: Option<Arc<ClientConfig>>,
}

impl Tls {
    /// Builds the rustls configuration `mode` needs from `files`. `Err`: a file
    /// cannot be read or parsed, `verify-*` without a root certificate file, a
    /// certificate without its key, or a key open to group or others.
    pub fn new(mode: SslMode, files: &Files) -> Result<Tls, String> {
        if mode == SslMode::Disable {
            return Ok(Tls { mode, config: None });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let have_root = files.root_cert.exists();
        if !have_root && matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
            return Err(format!(
                "root certificate file {} does not exist (sslmode={} checks the server's \
                 certificate against it): give one with sslrootcert= or use sslmode=require",
                files.root_cert.display(),
                if mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                }
            ));
        }
        let chain = match have_root {
            false => None,
            true => {
                let roots = Arc::new(roots(&files.root_cert)?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| format!("{}: {e}", files.root_cert.display()))?;
                Some(webpki)
            }
        };
        let verifier: Arc<dyn ServerCertVerifier> = match (mode, chain) {
            (SslMode::VerifyFull, Some(webpki)) => webpki,
            (_, chain) => Arc::new(Lenient {
                chain,
                provider: provider.clone(),
            }),
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match client_identity(files)? {
            Some((certs, key)) => builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("{}: {e}", files.key.display()))?,
            None => builder.with_no_client_auth(),
        };
        Ok(Tls {
            mode,
            config: Some(Arc::new(config)),
        })
    }
}

/// The certificates of the PEM file `path`.
fn roots(path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path)? {
        store
            .add(cert)
            .map_err(|e| format!("root certificate file {}: {e}", path.display()))?;
    }
    Ok(store)
}

/// Every certificate of the PEM file `path`; `Err` when it holds none.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bad = |e: &dyn std::fmt::Display| format!("certificate file {}: {e}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no PEM certificate in it"));
    }
    Ok(certs)
}

/// The client certificate chain and key, when the certificate file exists.
#[allow(clippy::type_complexity)]
fn client_identity(
    files: &Files,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, String> {
    if !files.cert.exists() {
        return Ok(None);
    }
    let certs = certificates(&files.cert)?;
    let key = files.key.display();
    let meta = std::fs::metadata(&files.key).map_err(|e| {
        format!(
            "certificate {} present, but not private key file {key}: {e}",
            files.cert.display()
        )
    })?;
    let me = rustix::process::geteuid().as_raw();
    check_key_mode(meta.uid(), me, meta.permissions().mode())
        .map_err(|rule| format!("private key file {key} {rule}"))?;
    let der = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("private key file {key}: {e} (encrypted keys are not supported)"))?;
    Ok(Some((certs, der)))
}

/// libpq's rule for a private key file: 0600 or stricter when owned by the user
/// (`me`), 0640 or stricter when owned by root (another user).
fn check_key_mode(owner: u32, me: u32, mode: u32) -> Result<(), String> {
    let mode = mode & 0o7777;
    let open = if owner == me {
        mode & 0o077 != 0
    } else {
        owner == 0 && mode & 0o037 != 0
    };
    if open {
        return Err(format!(
            "has mode {mode:04o}: it must be 0600 or stricter (0640 when owned by root), libpq's rule"
        ));
    }
    Ok(())
}

/// The check of `verify-ca` (`chain`: the chain must lead to a root certificate,
/// the name is not looked at), and of `allow`/`prefer`/`require` (the same with a
/// root certificate file, else none: any certificate is taken, TLS then protects
/// against eavesdropping, not against an impostor). The handshake's signature is
/// checked always.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The name is checked only after the chain verified: a name error means
        // the chain is good.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_their_attempts() {
        use Attempt::*;
        let m = |s| SslMode::parse(s).unwrap().attempts();
        assert_eq!(m("disable"), &[Plain]);
        assert_eq!(m("allow"), &[Plain, Tls]);
        assert_eq!(m("prefer"), &[Tls, Plain]);
        assert_eq!(m("require"), &[Tls]);
        assert_eq!(m("verify-ca"), &[Tls]);
        assert_eq!(m("verify-full"), &[Tls]);
        assert_eq!(
            SslMode::parse("verify_full").unwrap_err(),
            "invalid sslmode value: \"verify_full\""
        );
    }

    #[test]
    fn key_file_modes_as_libpq_checks_them() {
        assert!(check_key_mode(1000, 1000, 0o100600).is_ok());
        assert!(check_key_mode(1000, 1000, 0o400).is_ok());
        assert!(check_key_mode(1000, 1000, 0o640).is_err());
        assert!(check_key_mode(0, 1000, 0o640).is_ok());
        assert!(check_key_mode(0, 1000, 0o660).is_err());
        assert!(check_key_mode(0, 0, 0o640).is_err());
        assert_eq!(
            check_key_mode(1000, 1000, 0o644).unwrap_err(),
            "has mode 0644: it must be 0600 or stricter (0640 when owned by root), libpq's rule"
        );
    }

    #[test]
    fn verify_modes_need_a_root_file() {
        let files = Files {
            root_cert: "/nonexistent/root.crt".into(),
            cert: "/nonexistent/postgresql.crt".into(),
            key: "/nonexistent/postgresql.key".into(),
        };
        let e = Tls::new(SslMode::VerifyFull, &files).err().unwrap();
        assert_eq!(
            e,
            "root certificate file /nonexistent/root.crt does not exist (sslmode=verify-full \
             checks the server's certificate against it): give one with sslrootcert= or use \
             sslmode=require"
        );
        assert!(Tls::new(SslMode::Require, &files).unwrap().config.is_some());
        assert!(Tls::new(SslMode::Disable, &files).unwrap().config.is_none());
    }
}
