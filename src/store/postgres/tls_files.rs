//! The files TLS reads, each refused in one line that names it: the CA certificates
//! (`sslrootcert`, or the system's), the client certificate (`sslcert`) and its key (`sslkey`,
//! which must be readable by its owner only, as libpq requires).

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::tls::{ClientCert, Roots};

/// rustls' WebPKI verifier over `roots`.
pub(super) fn webpki_verifier(
    roots: &Roots,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    let store = read_roots(roots)?;
    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| format!("cannot use the CA certificates in {}: {e}", roots.shown()))
}

/// The CA certificates of `roots`: a PEM file's, or the system's (the OS store, found as
/// OpenSSL finds it, `SSL_CERT_FILE`/`SSL_CERT_DIR` included; what libpq's `system` means).
fn read_roots(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            let certs = read_certs(path, "root certificate file (sslrootcert)")?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "the root certificate file {} (sslrootcert) holds no usable CA certificate",
                    path.display()
                ));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                return Err(format!(
                    "sslrootcert=system found no trusted root certificates on this system{why}; install the CA certificates (ca-certificates), or name a CA file with sslrootcert=PATH"
                ));
            }
        }
    }
    Ok(store)
}

/// The PEM certificates in `path` (at least one); `what` names the file in errors.
fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("the {what} {} does not exist", path.display())
        } else {
            format!("cannot read the {what} {}: {e}", path.display())
        }
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the {what} {} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "the {what} {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The client certificate chain and its key. The key file must be a regular file that only its
/// owner can read (0600 or less; 0640 or less when root owns it), as libpq requires.
pub(super) fn read_client_cert(
    client: &ClientCert,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let certs = read_certs(&client.cert, "client certificate file (sslcert)")?;
    let key = &client.key;
    let meta = std::fs::metadata(key).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "the client certificate {} has no key file {} (sslkey)",
                client.cert.display(),
                key.display()
            )
        } else {
            format!("cannot read the key file {} (sslkey): {e}", key.display())
        }
    })?;
    if !meta.is_file() {
        return Err(format!(
            "the key file {} (sslkey) is not a regular file",
            key.display()
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let mode = meta.mode();
        let too_open = if meta.uid() == 0 {
            mode & 0o037 != 0
        } else {
            mode & 0o077 != 0
        };
        if too_open {
            return Err(format!(
                "the key file {} (sslkey) can be read by others (mode {:o}); make it u=rw (chmod 600), or u=rw,g=r (640) when root owns it",
                key.display(),
                mode & 0o777
            ));
        }
    }
    let bytes = std::fs::read(key)
        .map_err(|e| format!("cannot read the key file {} (sslkey): {e}", key.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
        if bytes.windows(9).any(|w| w == b"ENCRYPTED") {
            format!(
                "the key in {} (sslkey) is encrypted, which runtape does not support (no sslpassword); decrypt it (openssl pkey -in KEY -out PLAIN) and keep it 0600",
                key.display()
            )
        } else {
            format!(
                "the key file {} (sslkey) holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
                key.display()
            )
        }
    })?;
    Ok((certs, key))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use rcgen::{CertificateParams, KeyPair};

    use super::*;

    /// A self-signed certificate for `name` and its key, as PEM.
    fn pair(name: &str) -> (String, String) {
        let key = KeyPair::generate().expect("a key");
        let cert = CertificateParams::new(vec![name.to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("signs");
        (cert.pem(), key.serialize_pem())
    }

    /// Writes `text` to `name` in `dir` with permissions `mode`.
    fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writes");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .expect("sets the mode");
        }
        path
    }

    #[test]
    fn root_files_that_are_missing_or_hold_no_certificate_are_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.pem");
        let e = read_roots(&Roots::File(missing.clone())).expect_err("missing");
        assert!(
            e.contains(&format!("{} does not exist", missing.display())),
            "{e}"
        );
        assert!(e.contains("sslrootcert"), "{e}");
        let empty = write(dir.path(), "empty.pem", "not a certificate\n", 0o644);
        let e = read_roots(&Roots::File(empty)).expect_err("no certificate");
        assert!(e.contains("holds no PEM certificate"), "{e}");
        let (cert, _) = pair("ca");
        let good = write(dir.path(), "ca.pem", &cert, 0o644);
        assert_eq!(read_roots(&Roots::File(good)).expect("reads").len(), 1);
    }

    #[test]
    fn the_system_roots_load_or_say_how_to_get_them() {
        match read_roots(&Roots::System) {
            Ok(store) => assert!(!store.is_empty()),
            Err(e) => assert!(
                e.contains("sslrootcert=system found no trusted root certificates"),
                "{e}"
            ),
        }
    }

    #[test]
    fn a_client_key_is_refused_when_missing_readable_by_others_encrypted_or_not_a_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = pair("runtape");
        let cert = write(dir.path(), "client.crt", &cert, 0o644);
        let client = |key: PathBuf| ClientCert {
            cert: cert.clone(),
            key,
        };
        let e = read_client_cert(&client(dir.path().join("none.key"))).expect_err("missing");
        assert!(e.contains("has no key file"), "{e}");
        #[cfg(unix)]
        {
            let open = write(dir.path(), "open.key", &key, 0o644);
            let e = read_client_cert(&client(open)).expect_err("readable by others");
            assert!(e.contains("can be read by others (mode 644)"), "{e}");
        }
        let encrypted = write(
            dir.path(),
            "enc.key",
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
            0o600,
        );
        let e = read_client_cert(&client(encrypted)).expect_err("encrypted");
        assert!(e.contains("is encrypted"), "{e}");
        let not_key = write(dir.path(), "cert-as-key.key", "hello\n", 0o600);
        let e = read_client_cert(&client(not_key)).expect_err("not a key");
        assert!(e.contains("holds no PEM private key"), "{e}");
        let good = write(dir.path(), "good.key", &key, 0o600);
        let (certs, _) = read_client_cert(&client(good)).expect("reads");
        assert_eq!(certs.len(), 1);
    }
}
