//! Connections with TLS as a [`TlsPlan`] says: the CA, client certificate and key files read
//! into a rustls configuration (`ring` provider, as the rest of runtape), the certificate
//! checks libpq makes, the `allow`/`prefer` second attempt, and a failed handshake said in one
//! line that names what was wrong.
//!
//! The TLS stream is `tokio-postgres-rustls`'s (it also gives SCRAM its channel binding, so a
//! password exchange over TLS is tied to the server's certificate); the checks are our own
//! rustls verifiers: rustls' WebPKI verifier for `verify-full`, the same verifier with only its
//! name error ignored for `verify-ca`, and no certificate check (the handshake's signature is
//! still verified) below that.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustls::pki_types::ServerName;
use rustls::{CertificateError, ClientConfig};
use tokio::runtime::Handle;
use tokio_postgres::config::SslMode as DriverMode;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, NoTls, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::tls::{Check, SslMode, TlsPlan};
use super::tls_files::{read_client_cert, webpki_verifier};
use super::tls_verify::{ChainOnly, NoCheck};

/// A [`TlsPlan`] made ready: its files read, its rustls configuration built. Built once per
/// store; every connection of the store uses it.
#[derive(Clone)]
pub(super) struct Tls {
    mode: SslMode,
    /// The connector over the rustls configuration; `None` under `disable`.
    connector: Option<MakeRustlsConnect>,
    /// The roots the server's certificate is checked against, as messages name them.
    roots: Option<String>,
    /// The client certificate file, as messages name it.
    client_cert: Option<PathBuf>,
}

impl Tls {
    /// Reads the files `plan` names and builds the configuration. Errors (one line each): a
    /// root or client certificate file that is missing, unreadable or holds no certificate; a
    /// key file that is missing, readable by others, encrypted or not the certificate's.
    pub(super) fn load(plan: &TlsPlan) -> Result<Tls, String> {
        if plan.mode == SslMode::Disable {
            return Ok(Tls {
                mode: SslMode::Disable,
                connector: None,
                roots: None,
                client_cert: None,
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?;
        let (builder, roots) = match &plan.check {
            Check::Nothing => (
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(NoCheck(provider.clone()))),
                None,
            ),
            Check::Chain(roots) => {
                let webpki = webpki_verifier(roots, &provider)?;
                (
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki))),
                    Some(roots.shown()),
                )
            }
            Check::ChainAndName(roots) => (
                builder.with_webpki_verifier(webpki_verifier(roots, &provider)?),
                Some(roots.shown()),
            ),
        };
        let mut config = match &plan.client {
            None => builder.with_no_client_auth(),
            Some(client) => {
                let (certs, key) = read_client_cert(client)?;
                builder.with_client_auth_cert(certs, key).map_err(|e| {
                    format!(
                        "the key in {} does not go with the certificate in {} (sslkey, sslcert): {e}",
                        client.key.display(),
                        client.cert.display()
                    )
                })?
            }
        };
        // What PostgreSQL 17 and later expect; older servers ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(Tls {
            mode: plan.mode,
            connector: Some(MakeRustlsConnect::new(config)),
            roots,
            client_cert: plan.client.as_ref().map(|c| c.cert.clone()),
        })
    }

    /// The `sslmode` connections follow.
    pub(super) fn mode(&self) -> SslMode {
        self.mode
    }
}

/// `tokio-postgres-rustls`'s connector, noting whether a handshake was started (the server
/// accepted TLS), which decides whether `prefer` tries again in the clear.
struct Tracked {
    inner: MakeRustlsConnect,
    started: Arc<AtomicBool>,
}

type Inner = <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect;

/// One handshake of a [`Tracked`] connector.
struct TrackedHandshake {
    inner: Inner,
    started: Arc<AtomicBool>,
}

impl MakeTlsConnect<Socket> for Tracked {
    type Stream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = TrackedHandshake;
    type Error = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<TrackedHandshake, Self::Error> {
        Ok(TrackedHandshake {
            inner: <MakeRustlsConnect as MakeTlsConnect<Socket>>::make_tls_connect(
                &mut self.inner,
                domain,
            )?,
            started: self.started.clone(),
        })
    }
}

impl TlsConnect<Socket> for TrackedHandshake {
    type Stream = <Inner as TlsConnect<Socket>>::Stream;
    type Error = <Inner as TlsConnect<Socket>>::Error;
    type Future = <Inner as TlsConnect<Socket>>::Future;

    fn connect(self, stream: Socket) -> Self::Future {
        self.started.store(true, Ordering::Relaxed);
        self.inner.connect(stream)
    }
}

/// A failed connection attempt: the driver's error and whether TLS was under way.
pub(super) struct Failed {
    pub(super) error: tokio_postgres::Error,
    tls_started: bool,
}

/// Connects as `tls` says (libpq's order of attempts); the connection's driver task runs on
/// `handle`. When two attempts fail, the error is the TLS attempt's.
pub(super) async fn connect(config: &Config, tls: &Tls, handle: &Handle) -> Result<Client, Failed> {
    match tls.mode {
        SslMode::Disable => once(config, DriverMode::Disable, tls, handle).await,
        SslMode::Allow => match once(config, DriverMode::Disable, tls, handle).await {
            // The server refused the session in the clear: try TLS.
            Err(f) if f.error.as_db_error().is_some() => {
                once(config, DriverMode::Require, tls, handle).await
            }
            other => other,
        },
        SslMode::Prefer => match once(config, DriverMode::Prefer, tls, handle).await {
            // The handshake failed, or the server refused the session over TLS.
            Err(f) if f.tls_started => once(config, DriverMode::Disable, tls, handle)
                .await
                .map_err(|_| f),
            other => other,
        },
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            once(config, DriverMode::Require, tls, handle).await
        }
    }
}

async fn once(
    config: &Config,
    mode: DriverMode,
    tls: &Tls,
    handle: &Handle,
) -> Result<Client, Failed> {
    let mut config = config.clone();
    config.ssl_mode(mode);
    let started = Arc::new(AtomicBool::new(false));
    let failed = |error| Failed {
        error,
        tls_started: started.load(Ordering::Relaxed),
    };
    let client = match (&tls.connector, mode) {
        (Some(connector), DriverMode::Prefer | DriverMode::Require) => {
            let connector = Tracked {
                inner: connector.clone(),
                started: started.clone(),
            };
            let (client, connection) = config.connect(connector).await.map_err(failed)?;
            handle.spawn(connection);
            client
        }
        _ => {
            let (client, connection) = config.connect(NoTls).await.map_err(failed)?;
            handle.spawn(connection);
            client
        }
    };
    Ok(client)
}

/// What went wrong with TLS in `failed`, as one clause; `None` when TLS was not the trouble.
pub(super) fn describe(failed: &Failed, tls: &Tls) -> Option<String> {
    let e = &failed.error;
    if let Some(db) = e.as_db_error() {
        let message = db.message();
        return (message.contains("certificate") && tls.client_cert.is_none()).then(|| {
            format!(
                "{message}; name a client certificate and its key with sslcert=PATH and sslkey=PATH"
            )
        });
    }
    let Some(error) = rustls_error(e) else {
        return (!failed.tls_started && chain_text(e).contains("server does not support TLS"))
            .then(|| {
                format!(
                    "the server does not offer TLS, and sslmode={} needs it; turn ssl on in the server's postgresql.conf, or use sslmode=prefer to connect in the clear when it does not",
                    tls.mode.name()
                )
            });
    };
    let roots = tls.roots.as_deref().unwrap_or("the CA file");
    Some(match error {
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => format!(
            "the server's certificate is for {}, not {} (sslmode={} checks the host name); connect by a name the certificate holds, or use sslmode=verify-ca to check only that a trusted CA signed it",
            if presented.is_empty() {
                "no host name".to_owned()
            } else {
                presented
                    .iter()
                    .map(|p| presented_name(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            server_name(expected),
            tls.mode.name()
        ),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => format!(
            "the server's certificate is not made out to the host in the URL (sslmode={} checks the host name)",
            tls.mode.name()
        ),
        // A certificate from a CA that has a trusted CA's name but not its key: BadSignature.
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => format!(
            "the server's certificate is not signed by a CA in {roots}; name the CA that signed it with sslrootcert=PATH"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired".to_owned(),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "the server's certificate is not valid yet (check this machine's clock)".to_owned(),
        rustls::Error::InvalidCertificate(other) => {
            format!("the server's certificate was refused: {other:?}")
        }
        rustls::Error::AlertReceived(alert) => match &tls.client_cert {
            Some(cert) => format!(
                "the server ended the TLS handshake ({alert:?}); it may not accept the client certificate {}",
                cert.display()
            ),
            None => format!("the server ended the TLS handshake ({alert:?})"),
        },
        other => format!("the TLS handshake failed: {other}"),
    })
}

/// A name a certificate presents, as rustls reports it (`DnsName("db.example.com")`,
/// `IpAddress(10.0.0.5)`), without the wrapping.
fn presented_name(reported: &str) -> &str {
    reported
        .strip_prefix("DnsName(\"")
        .and_then(|r| r.strip_suffix("\")"))
        .or_else(|| {
            reported
                .strip_prefix("IpAddress(")
                .and_then(|r| r.strip_suffix(')'))
        })
        .unwrap_or(reported)
}

/// A server name as the URL wrote it.
fn server_name(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_owned(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

/// The rustls error under a driver error (the driver wraps tokio-rustls' `io::Error`, which
/// wraps it).
fn rustls_error(e: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(r) = s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(r);
        }
        source = s.source();
    }
    None
}

/// The error and its sources, joined.
fn chain_text(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, KeyPair};

    use super::super::tls::{ClientCert, Roots};
    use super::*;

    #[test]
    fn presented_names_lose_rustls_wrapping() {
        assert_eq!(
            presented_name("DnsName(\"db.example.com\")"),
            "db.example.com"
        );
        assert_eq!(presented_name("IpAddress(10.0.0.5)"), "10.0.0.5");
        assert_eq!(presented_name("DirectoryName"), "DirectoryName");
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused_and_a_named_ca_file_must_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = KeyPair::generate().expect("a key");
        let cert = CertificateParams::new(vec!["runtape".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("signs");
        let other = KeyPair::generate().expect("another key");
        let cert_path = dir.path().join("c.crt");
        let key_path = dir.path().join("c.key");
        std::fs::write(&cert_path, cert.pem()).expect("writes");
        std::fs::write(&key_path, other.serialize_pem()).expect("writes");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))
                .expect("sets the mode");
        }
        let mut plan = TlsPlan {
            mode: SslMode::Require,
            check: Check::Nothing,
            client: Some(ClientCert {
                cert: cert_path,
                key: key_path.clone(),
            }),
        };
        let e = Tls::load(&plan)
            .err()
            .expect("a key of another certificate");
        assert!(e.contains("does not go with the certificate"), "{e}");
        std::fs::write(&key_path, key.serialize_pem()).expect("writes");
        assert!(Tls::load(&plan).is_ok());

        plan.check = Check::Chain(Roots::File(dir.path().join("ca.pem")));
        let e = Tls::load(&plan)
            .err()
            .expect("a named CA file that is not there");
        assert!(e.contains("ca.pem does not exist"), "{e}");
    }
}
