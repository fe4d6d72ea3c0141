//! The two checks of a server's certificate that rustls does not make as they are: the chain
//! without the host name (`verify-ca`), and nothing (libpq's `allow`, `prefer` and `require`
//! without a root file). `verify-full` is rustls' own WebPKI verifier.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// `verify-ca` (and a root file under the weaker modes): the certificate's chain must lead to
/// a trusted root, but it need not be made out to the host connected to. rustls' WebPKI
/// verifier checks the chain, then the name; only the name's error is turned into success, so
/// a certificate from an unknown CA is refused whatever its name.
#[derive(Debug)]
pub(super) struct ChainOnly(pub(super) Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `allow`, `prefer` and `require` without a root file: the certificate is not checked, as in
/// libpq (the session is encrypted, the server not authenticated). The handshake's signature
/// is still verified against the certificate's key.
#[derive(Debug)]
pub(super) struct NoCheck(pub(super) Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    use rustls::RootCertStore;

    use super::*;

    type Ca = CertifiedIssuer<'static, KeyPair>;

    /// A CA named `name`.
    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("a CA")
    }

    /// A certificate for `names`, signed by `ca`.
    fn leaf(ca: &Ca, names: &[&str]) -> CertificateDer<'static> {
        let key = KeyPair::generate().expect("a key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        CertificateParams::new(names)
            .expect("leaf params")
            .signed_by(&key, ca)
            .expect("signs")
            .der()
            .clone()
    }

    /// rustls' WebPKI verifier trusting `ca` (what `verify-full` uses).
    fn webpki(ca: &Ca) -> Arc<WebPkiServerVerifier> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).expect("adds the CA");
        WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("a verifier")
    }

    fn check(
        v: &dyn ServerCertVerifier,
        cert: &CertificateDer<'_>,
        name: &str,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = ServerName::try_from(name.to_owned()).expect("a server name");
        v.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
    }

    fn is_name_error(r: &Result<ServerCertVerified, rustls::Error>) -> bool {
        matches!(
            r,
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            ))
        )
    }

    fn is_unknown_issuer(r: &Result<ServerCertVerified, rustls::Error>) -> bool {
        matches!(
            r,
            Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer
            ))
        )
    }

    /// What rustls says of a certificate from a CA that has a trusted CA's name but not its key.
    fn is_bad_signature(r: &Result<ServerCertVerified, rustls::Error>) -> bool {
        matches!(
            r,
            Err(rustls::Error::InvalidCertificate(
                CertificateError::BadSignature
            ))
        )
    }

    #[test]
    fn chain_only_accepts_a_trusted_certificate_made_out_to_another_name() {
        let ca = ca("trusted");
        let cert = leaf(&ca, &["localhost"]);
        let full = webpki(&ca);
        let chain_only = ChainOnly(full.clone());
        assert!(check(full.as_ref(), &cert, "localhost").is_ok());
        assert!(check(&chain_only, &cert, "localhost").is_ok());
        for other in ["127.0.0.1", "db.example.com"] {
            assert!(
                is_name_error(&check(full.as_ref(), &cert, other)),
                "verify-full refuses {other}"
            );
            assert!(
                check(&chain_only, &cert, other).is_ok(),
                "verify-ca accepts {other}"
            );
        }
    }

    #[test]
    fn chain_only_refuses_an_unknown_ca_whatever_the_name() {
        let trusted = ca("trusted");
        let chain_only = ChainOnly(webpki(&trusted));
        let stranger = ca("stranger");
        let namesake = ca("trusted");
        for name in ["localhost", "127.0.0.1"] {
            let got = check(&chain_only, &leaf(&stranger, &["localhost"]), name);
            assert!(
                is_unknown_issuer(&got),
                "{name}: a certificate from another CA is refused, right name or not: {got:?}"
            );
            let got = check(&chain_only, &leaf(&namesake, &["localhost"]), name);
            assert!(
                is_bad_signature(&got),
                "{name}: so is one from a CA with the trusted CA's name: {got:?}"
            );
        }
        let self_signed = stranger.der().clone();
        assert!(check(&chain_only, &self_signed, "localhost").is_err());
    }

    #[test]
    fn no_check_accepts_any_certificate_and_still_knows_the_signature_schemes() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let none = NoCheck(provider);
        let stranger = ca("stranger");
        assert!(check(&none, &leaf(&stranger, &["elsewhere"]), "localhost").is_ok());
        assert!(
            none.supported_verify_schemes()
                .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
        );
    }
}
