//! Certificates for TLS tests, made with the `openssl` command.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Days a test certificate is valid.
const VALIDITY_DAYS: &str = "2";

/// A certificate authority for tests: an EC P-256 key and a self-signed CA certificate.
pub struct TestCa {
    cert: PathBuf,
    key: PathBuf,
}

/// A server certificate issued by a [`TestCa`], and its key.
pub struct ServerCert {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// The private key (PEM, unencrypted).
    pub key: PathBuf,
}

impl TestCa {
    /// Makes a CA called `name` in `dir` (`<name>.crt`, `<name>.key`).
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            VALIDITY_DAYS,
            "-subj",
            &format!("/CN=Syncline test CA {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            path_str(&key),
            "-out",
            path_str(&cert),
        ]);
        TestCa { cert, key }
    }

    /// The CA certificate (PEM), what a client gives as `sslrootcert`.
    pub fn cert(&self) -> &Path {
        &self.cert
    }

    /// Issues a server certificate for the DNS name `host` (its only subject alternative
    /// name), written to `dir` as `<name>.crt` and `<name>.key`.
    pub fn issue(&self, dir: &Path, name: &str, host: &str) -> ServerCert {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        let request = dir.join(format!("{name}.csr"));
        let extensions = dir.join(format!("{name}.ext"));
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={host}"),
            "-keyout",
            path_str(&key),
            "-out",
            path_str(&request),
        ]);
        fs::write(
            &extensions,
            format!(
                "subjectAltName=DNS:{host}\nbasicConstraints=critical,CA:FALSE\n\
                 keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
            ),
        )
        .expect("writing certificate extensions");
        openssl(&[
            "x509",
            "-req",
            "-in",
            path_str(&request),
            "-CA",
            path_str(&self.cert),
            "-CAkey",
            path_str(&self.key),
            "-set_serial",
            "1",
            "-days",
            VALIDITY_DAYS,
            "-extfile",
            path_str(&extensions),
            "-out",
            path_str(&cert),
        ]);
        ServerCert { cert, key }
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running openssl (is it installed?): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
