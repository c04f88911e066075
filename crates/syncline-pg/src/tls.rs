//! TLS to Postgres with libpq's `sslmode` semantics, over rustls.
//!
//! - `disable`: no TLS.
//! - `prefer` (the default): TLS if the server offers it, without checking its certificate
//!   (unless `sslrootcert` is given: then the chain is checked); if the server declines, the
//!   session goes on without TLS, and if the handshake fails or `pg_hba.conf` refuses the
//!   session over TLS, the connection is made again without.
//! - `require`: TLS or nothing, without checking the certificate, unless `sslrootcert` is
//!   given: then, as with libpq, the chain is checked as with `verify-ca`.
//! - `verify-ca`: TLS, and the certificate must chain to a CA in `sslrootcert`.
//! - `verify-full`: as `verify-ca`, and the certificate must name the host (its subject
//!   alternative names; unlike libpq, the common name is not looked at).
//!
//! Connections over a Unix socket never use TLS, as with libpq. `allow`, client certificates
//! and `sslrootcert=system` are not supported and are refused when parsing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{PgError, PgResult};

/// The ALPN protocol name Postgres 17 expects (and older servers ignore), as libpq sends it.
const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// How a connection uses TLS: libpq's `sslmode` (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, else without.
    Prefer,
    /// TLS, the certificate unchecked (unless a root certificate is given).
    Require,
    /// TLS, the certificate chained to a given root.
    VerifyCa,
    /// TLS, the certificate chained to a given root and naming the host.
    VerifyFull,
}

impl SslMode {
    /// Parses an `sslmode` value.
    pub fn parse(text: &str) -> PgResult<SslMode> {
        match text {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            "allow" => Err(PgError::Config(
                "sslmode=allow is not supported: use prefer or disable".into(),
            )),
            other => Err(PgError::Config(format!("invalid sslmode {other:?}"))),
        }
    }

    /// The `sslmode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection fails rather than go on without TLS.
    pub fn requires_tls(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connection's TLS settings: the mode, the root certificate file, and the rustls client
/// configuration built from them once (absent with `disable`).
#[derive(Clone)]
pub struct TlsSettings {
    mode: SslMode,
    root_cert: Option<PathBuf>,
    client: Option<Arc<ClientConfig>>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("mode", &self.mode)
            .field("root_cert", &self.root_cert)
            .finish_non_exhaustive()
    }
}

impl TlsSettings {
    /// Settings for `mode`, trusting the CA certificates in the PEM file `root_cert`. The file
    /// is read now.
    pub fn new(mode: SslMode, root_cert: Option<&Path>) -> PgResult<TlsSettings> {
        if root_cert.is_some_and(|p| p == Path::new("system")) {
            return Err(PgError::Config(
                "sslrootcert=system is not supported: give the CA certificate file".into(),
            ));
        }
        let roots = root_cert.map(load_roots).transpose()?;
        let client = match (mode, roots) {
            (SslMode::Disable, _) => None,
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                return Err(PgError::Config(format!(
                    "sslmode={mode} needs sslrootcert, the file of the CA certificates to trust"
                )))
            }
            (SslMode::VerifyFull, Some(roots)) => Some(client_config(Verify::Full(roots))?),
            (_, Some(roots)) => Some(client_config(Verify::Chain(roots))?),
            (_, None) => Some(client_config(Verify::Nothing)?),
        };
        Ok(TlsSettings {
            mode,
            root_cert: root_cert.map(Path::to_owned),
            client,
        })
    }

    /// The mode.
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// The root certificate file, if one was given.
    pub fn root_cert(&self) -> Option<&Path> {
        self.root_cert.as_deref()
    }

    /// The rustls configuration, unless TLS is disabled.
    pub(crate) fn client(&self) -> Option<&Arc<ClientConfig>> {
        self.client.as_ref()
    }
}

/// What is checked of the server's certificate.
enum Verify {
    /// Nothing (beyond the handshake's own signatures).
    Nothing,
    /// That it chains to one of the roots.
    Chain(RootCertStore),
    /// That it chains to one of the roots and names the host.
    Full(RootCertStore),
}

fn client_config(verify: Verify) -> PgResult<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Tls(e.to_string()))?;
    let mut config = match verify {
        Verify::Full(roots) => builder.with_root_certificates(roots),
        Verify::Chain(roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(LibpqVerifier {
                roots: Some(roots),
                provider,
            })),
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(LibpqVerifier {
                roots: None,
                provider,
            })),
    }
    .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(Arc::new(config))
}

/// The CA certificates of the PEM file at `path`.
fn load_roots(path: &Path) -> PgResult<RootCertStore> {
    let bad =
        |e: &dyn fmt::Display| PgError::Config(format!("sslrootcert {}: {e}", path.display()));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    if roots.is_empty() {
        return Err(bad(&"no certificate in the file"));
    }
    Ok(roots)
}

/// The certificate checks of `require` (none) and `verify-ca` (the chain, not the name).
/// The handshake's signatures are always verified, so the peer holds the certificate's key.
#[derive(Debug)]
struct LibpqVerifier {
    roots: Option<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for LibpqVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Whether a session that failed over TLS is tried again without, under `sslmode=prefer`:
/// when TLS itself, the socket, or the server's `pg_hba.conf` (SQLSTATE 28000) refused it. Any
/// other error the server reports (no such database, wrong password …) would only be hidden
/// by the second attempt's.
pub(crate) fn worth_retrying_without_tls(e: &PgError) -> bool {
    e.sqlstate().is_none_or(|code| code == "28000")
}

/// The server name a certificate is checked against: a DNS name or an IP address.
pub(crate) fn server_name(host: &str) -> PgResult<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).map_err(|e| {
        PgError::Tls(format!(
            "{host:?} cannot be checked against a certificate: {e}"
        ))
    })
}

/// The TLS failure (certificate, protocol) behind a failed handshake's I/O error, as text;
/// `None` when the socket itself failed.
pub(crate) fn tls_failure(e: &std::io::Error) -> Option<String> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    let hint = match tls {
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
            " (no CA of sslrootcert signed it)"
        }
        _ => "",
    };
    Some(format!("handshake failed: {tls}{hint}"))
}
