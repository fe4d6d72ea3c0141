//! TLS settings with libpq's meanings, resolved into what every connection does. Pure: the
//! environment, the home directory and which files exist are passed in; `tls_connect.rs` reads
//! the files and makes the connections.
//!
//! The parameters are libpq's, in the URL (`postgres://…/db?sslmode=verify-full&sslrootcert=
//! /etc/ca.pem`) or, where the URL leaves one out, in libpq's variable for it (`PGSSLMODE`,
//! `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`):
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow` | only if the server refuses the session in the clear | as `require` |
//! | `prefer` (default) | when the server offers it; if the TLS attempt fails, once more in the clear | as `require` |
//! | `require` | always | not checked, unless a root file is there (then as `verify-ca`) |
//! | `verify-ca` | always | signed by a CA in the root file |
//! | `verify-full` | always | signed by a CA in the root file, and made out to the host in the URL |
//!
//! The root file is `sslrootcert`, else `~/.postgresql/root.crt` when it exists;
//! `sslrootcert=system` means the system's trusted roots, needs `verify-full` and makes it the
//! default. As in libpq, a root file that is there makes `allow`, `prefer` and `require` check
//! the chain too (libpq's compatibility rule), and a connection over a Unix socket never uses
//! TLS. A client certificate (`sslcert`, else `~/.postgresql/postgresql.crt` when it exists)
//! is presented with its key (`sslkey`, else `~/.postgresql/postgresql.key`) when the server
//! asks for one; the key file must not be readable by group or others (libpq's rule).
//!
//! Where runtape is stricter than libpq: a file you name with `sslrootcert` or `sslcert` must
//! exist (libpq quietly goes on without it, which under `require` turns the check you asked
//! for off); the default files are used only when they exist, as in libpq. Not supported:
//! `sslpassword` (an encrypted key), `sslcrl`/`sslcrldir`, `sslcertmode`, `sslsni=0` and
//! `ssl_min_protocol_version` (TLS 1.2 and 1.3 are offered); the driver refuses them as
//! unknown options.

use std::path::{Path, PathBuf};

/// libpq's `sslmode`: whether TLS is tried or required, and (with [`Check`]) what is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SslMode {
    /// Never TLS.
    Disable,
    /// In the clear; with TLS only when the server refuses the session in the clear.
    Allow,
    /// TLS when the server offers it; in the clear when it does not or the TLS attempt fails.
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, the certificate signed by a trusted CA.
    VerifyCa,
    /// TLS, the certificate signed by a trusted CA and made out to the host connected to.
    VerifyFull,
}

impl SslMode {
    /// The mode `text` names (libpq's spelling, exactly).
    fn parse(text: &str) -> Result<SslMode, String> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode `{}` is not one of disable, allow, prefer, require, verify-ca, verify-full",
                    other.escape_debug()
                ));
            }
        })
    }

    /// The mode as `sslmode=` spells it.
    pub(super) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The TLS parameters as given, before they are resolved: from the URL, then from libpq's
/// variables for those the URL left out. Empty values count as not given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TlsParams {
    /// `sslmode`.
    pub(super) sslmode: Option<String>,
    /// `sslrootcert`: a CA file, or `system`.
    pub(super) sslrootcert: Option<String>,
    /// `sslcert`: the client certificate file.
    pub(super) sslcert: Option<String>,
    /// `sslkey`: the client key file.
    pub(super) sslkey: Option<String>,
}

/// The TLS parameters' names and libpq's variables for them.
const PARAMS: [(&str, &str); 4] = [
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
];

impl TlsParams {
    fn slot(&mut self, name: &str) -> Option<&mut Option<String>> {
        match name {
            "sslmode" => Some(&mut self.sslmode),
            "sslrootcert" => Some(&mut self.sslrootcert),
            "sslcert" => Some(&mut self.sslcert),
            "sslkey" => Some(&mut self.sslkey),
            _ => None,
        }
    }

    /// Fills each parameter the URL left out from libpq's variable for it (`PGSSLMODE`, …);
    /// `env` reads a variable.
    pub(super) fn or_env(mut self, env: impl Fn(&str) -> Option<String>) -> TlsParams {
        for (name, var) in PARAMS {
            if let Some(slot) = self.slot(name)
                && slot.is_none()
            {
                *slot = env(var).filter(|v| !v.is_empty());
            }
        }
        self
    }
}

/// Splits the TLS parameters (which the driver does not know) out of `url`'s query; returns
/// the URL without them and the parameters, percent-decoded. The last of a repeated parameter
/// counts, as in the driver. Where the query starts is found as the driver finds it (after the
/// credentials, so a `?` in a password is left alone).
pub(super) fn split_url(url: &str) -> Result<(String, TlsParams), String> {
    let after_scheme = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|p| url.strip_prefix(p))
        .unwrap_or(url);
    let host_start = url.len() - after_scheme.len() + after_scheme.find('@').map_or(0, |at| at + 1);
    let Some(q) = url[host_start..].find('?').map(|q| host_start + q) else {
        return Ok((url.to_owned(), TlsParams::default()));
    };
    let mut params = TlsParams::default();
    let mut kept = Vec::new();
    for pair in url[q + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key_text = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
        match params.slot(&key_text) {
            Some(slot) => {
                let value = percent_encoding::percent_decode_str(value)
                    .decode_utf8()
                    .map_err(|_| format!("the URL's {key_text} is not UTF-8 once decoded"))?;
                *slot = Some(value.into_owned()).filter(|v| !v.is_empty());
            }
            None => kept.push(pair),
        }
    }
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, params))
}

/// The certificates a server's certificate chain must lead to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Roots {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The system's trusted roots (`sslrootcert=system`).
    System,
}

impl Roots {
    /// The roots as messages name them.
    pub(super) fn shown(&self) -> String {
        match self {
            Roots::File(p) => p.display().to_string(),
            Roots::System => "the system's trusted roots".to_owned(),
        }
    }
}

/// What is checked of the server's certificate once TLS is up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Check {
    /// Nothing (the session is encrypted, but the server is not authenticated).
    Nothing,
    /// Its chain leads to one of the roots; the host name is not checked.
    Chain(Roots),
    /// Its chain leads to one of the roots and it is made out to the host connected to.
    ChainAndName(Roots),
}

/// A client certificate, presented when the server asks for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ClientCert {
    /// The PEM certificate file (the chain, leaf first).
    pub(super) cert: PathBuf,
    /// The PEM private key file.
    pub(super) key: PathBuf,
}

/// What every connection does: resolved from [`TlsParams`] by [`plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TlsPlan {
    /// Whether TLS is tried or required.
    pub(super) mode: SslMode,
    /// What is checked of the server's certificate.
    pub(super) check: Check,
    /// The client certificate, if any.
    pub(super) client: Option<ClientCert>,
}

/// Resolves `params` as libpq does. `home` is the home directory (for `~/.postgresql/`),
/// `exists` tells whether a file is there (only the default files are looked for; a named file
/// is read, and refused if missing, when the TLS configuration is built). `over_tcp` is false
/// when every host is a Unix socket, where libpq never uses TLS. Errors are one line: an
/// unknown `sslmode`, `sslrootcert=system` with a weaker mode than `verify-full`, or
/// `verify-ca`/`verify-full` with no root file.
pub(super) fn plan(
    params: &TlsParams,
    home: Option<&Path>,
    exists: impl Fn(&Path) -> bool,
    over_tcp: bool,
) -> Result<TlsPlan, String> {
    let system = params.sslrootcert.as_deref() == Some("system");
    let mode = match params.sslmode.as_deref() {
        Some(text) => SslMode::parse(text)?,
        None if system => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    if system && mode != SslMode::VerifyFull {
        return Err(format!(
            "sslmode={} may not be used with sslrootcert=system: any host can get a certificate from a public CA, so only sslmode=verify-full (the default with sslrootcert=system) authenticates the server",
            mode.name()
        ));
    }
    if mode == SslMode::Disable || !over_tcp {
        return Ok(TlsPlan {
            mode: SslMode::Disable,
            check: Check::Nothing,
            client: None,
        });
    }
    let in_home = |name: &str| home.map(|h| h.join(".postgresql").join(name));
    let roots = match params.sslrootcert.as_deref() {
        Some("system") => Some(Roots::System),
        Some(path) => Some(Roots::File(PathBuf::from(path))),
        None => in_home("root.crt").filter(|p| exists(p)).map(Roots::File),
    };
    let check = match (mode, roots) {
        (SslMode::VerifyFull, Some(roots)) => Check::ChainAndName(roots),
        (_, Some(roots)) => Check::Chain(roots),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            let looked = in_home("root.crt").map_or_else(
                || "no home directory to find ~/.postgresql/root.crt in".to_owned(),
                |p| format!("{} does not exist", p.display()),
            );
            return Err(format!(
                "sslmode={} needs the CA certificates to check the server's certificate against, and {looked}: name a CA file with sslrootcert=PATH, use sslrootcert=system for the system's trusted roots, or use sslmode=require to encrypt without checking",
                mode.name()
            ));
        }
        (_, None) => Check::Nothing,
    };
    let cert = match params.sslcert.as_deref() {
        Some(path) => Some(PathBuf::from(path)),
        None => in_home("postgresql.crt").filter(|p| exists(p)),
    };
    let client = match cert {
        None => None,
        Some(cert) => {
            let key = params
                .sslkey
                .as_deref()
                .map(PathBuf::from)
                .or_else(|| in_home("postgresql.key"))
                .ok_or_else(|| {
                    format!(
                        "the client certificate {} has no key: name its key file with sslkey=PATH",
                        cert.display()
                    )
                })?;
            Some(ClientCert { cert, key })
        }
    };
    Ok(TlsPlan {
        mode,
        check,
        client,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> TlsParams {
        let mut p = TlsParams::default();
        for (k, v) in pairs {
            *p.slot(k).expect("a TLS parameter") = Some((*v).to_owned());
        }
        p
    }

    /// Plans with a home of /home/u where only `present` exists.
    fn plan_with(p: &TlsParams, present: &[&str]) -> Result<TlsPlan, String> {
        plan(
            p,
            Some(Path::new("/home/u")),
            |f| present.iter().any(|x| Path::new(x) == f),
            true,
        )
    }

    #[test]
    fn the_tls_parameters_leave_the_url_and_the_rest_stays() {
        let (rest, p) = split_url(
            "postgres://me:p%3Fw@db.example.com:5433/app?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fmy%20ca.pem&connect_timeout=3",
        )
        .expect("splits");
        assert_eq!(
            rest,
            "postgres://me:p%3Fw@db.example.com:5433/app?application_name=x&connect_timeout=3"
        );
        assert_eq!(
            p,
            params(&[
                ("sslmode", "verify-full"),
                ("sslrootcert", "/etc/my ca.pem")
            ])
        );
    }

    #[test]
    fn a_url_with_only_tls_parameters_loses_its_question_mark() {
        let (rest, p) =
            split_url("postgresql://u@h/db?sslmode=require&sslmode=disable").expect("splits");
        assert_eq!(rest, "postgresql://u@h/db");
        assert_eq!(p, params(&[("sslmode", "disable")]), "the last one counts");
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        let url = "postgres://u:a?sslmode=disable@h/db";
        let (rest, p) = split_url(url).expect("splits");
        assert_eq!(rest, url);
        assert_eq!(p, TlsParams::default());
    }

    #[test]
    fn a_tls_parameter_that_is_not_utf8_is_refused() {
        let e = split_url("postgres://u@h/db?sslrootcert=%FF").expect_err("not UTF-8");
        assert!(e.contains("sslrootcert"), "{e}");
    }

    #[test]
    fn the_url_wins_over_the_environment() {
        let env = |v: &str| match v {
            "PGSSLMODE" => Some("verify-ca".to_owned()),
            "PGSSLROOTCERT" => Some("/env/ca.pem".to_owned()),
            "PGSSLCERT" => Some(String::new()),
            _ => None,
        };
        let p = params(&[("sslmode", "require")]).or_env(env);
        assert_eq!(
            p,
            params(&[("sslmode", "require"), ("sslrootcert", "/env/ca.pem")]),
            "an empty variable counts as unset"
        );
    }

    #[test]
    fn every_libpq_mode_parses_and_nothing_else_does() {
        for name in [
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ] {
            assert_eq!(SslMode::parse(name).expect(name).name(), name);
        }
        for bad in ["Require", "verify_full", "on", ""] {
            let e = SslMode::parse(bad).expect_err(bad);
            assert!(e.contains("is not one of disable"), "{e}");
        }
    }

    #[test]
    fn prefer_is_the_default_and_checks_nothing_without_a_root_file() {
        let got = plan_with(&TlsParams::default(), &[]).expect("plans");
        assert_eq!(
            got,
            TlsPlan {
                mode: SslMode::Prefer,
                check: Check::Nothing,
                client: None
            }
        );
    }

    #[test]
    fn require_checks_the_chain_when_a_root_file_is_there_as_libpq_does() {
        let p = params(&[("sslmode", "require")]);
        assert_eq!(plan_with(&p, &[]).expect("plans").check, Check::Nothing);
        assert_eq!(
            plan_with(&p, &["/home/u/.postgresql/root.crt"])
                .expect("plans")
                .check,
            Check::Chain(Roots::File("/home/u/.postgresql/root.crt".into()))
        );
        let named = params(&[("sslmode", "require"), ("sslrootcert", "/ca.pem")]);
        assert_eq!(
            plan_with(&named, &[]).expect("plans").check,
            Check::Chain(Roots::File("/ca.pem".into())),
            "a named file is checked for when it is read, not skipped"
        );
    }

    #[test]
    fn verify_modes_need_roots_and_say_where_they_looked() {
        for mode in ["verify-ca", "verify-full"] {
            let e = plan_with(&params(&[("sslmode", mode)]), &[]).expect_err(mode);
            assert!(
                e.contains("/home/u/.postgresql/root.crt does not exist"),
                "{e}"
            );
            assert!(e.contains("sslrootcert=system"), "{e}");
        }
        let p = params(&[("sslmode", "verify-full"), ("sslrootcert", "/ca.pem")]);
        assert_eq!(
            plan_with(&p, &[]).expect("plans").check,
            Check::ChainAndName(Roots::File("/ca.pem".into()))
        );
        let p = params(&[("sslmode", "verify-ca")]);
        assert_eq!(
            plan_with(&p, &["/home/u/.postgresql/root.crt"])
                .expect("plans")
                .check,
            Check::Chain(Roots::File("/home/u/.postgresql/root.crt".into()))
        );
    }

    #[test]
    fn system_roots_mean_verify_full_and_refuse_weaker_modes() {
        let p = params(&[("sslrootcert", "system")]);
        let got = plan_with(&p, &[]).expect("plans");
        assert_eq!(got.mode, SslMode::VerifyFull);
        assert_eq!(got.check, Check::ChainAndName(Roots::System));
        for weak in ["disable", "allow", "prefer", "require", "verify-ca"] {
            let p = params(&[("sslmode", weak), ("sslrootcert", "system")]);
            let e = plan_with(&p, &[]).expect_err(weak);
            assert!(
                e.contains(&format!("sslmode={weak} may not be used")),
                "{e}"
            );
        }
    }

    #[test]
    fn disable_and_unix_sockets_never_use_tls_or_read_files() {
        let p = params(&[("sslmode", "disable"), ("sslcert", "/c.pem")]);
        let got = plan_with(&p, &["/home/u/.postgresql/root.crt"]).expect("plans");
        assert_eq!(
            (got.mode, got.check, got.client),
            (SslMode::Disable, Check::Nothing, None)
        );
        let p = params(&[("sslmode", "verify-full")]);
        let got = plan(&p, None, |_| false, false).expect("a Unix socket has no TLS");
        assert_eq!(got.mode, SslMode::Disable);
        let e = plan(&params(&[("sslmode", "bogus")]), None, |_| false, false)
            .expect_err("still a bad value");
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn client_certificates_come_from_the_parameters_or_home() {
        let home_pair = ClientCert {
            cert: "/home/u/.postgresql/postgresql.crt".into(),
            key: "/home/u/.postgresql/postgresql.key".into(),
        };
        let got = plan_with(
            &TlsParams::default(),
            &["/home/u/.postgresql/postgresql.crt"],
        );
        assert_eq!(got.expect("plans").client, Some(home_pair));
        assert_eq!(
            plan_with(&TlsParams::default(), &[]).expect("plans").client,
            None
        );
        let p = params(&[("sslcert", "/c.pem"), ("sslkey", "/k.pem")]);
        assert_eq!(
            plan_with(&p, &[]).expect("plans").client,
            Some(ClientCert {
                cert: "/c.pem".into(),
                key: "/k.pem".into()
            })
        );
        let p = params(&[("sslcert", "/c.pem")]);
        let e = plan(&p, None, |_| false, true).expect_err("no key and no home");
        assert!(e.contains("sslkey=PATH"), "{e}");
    }
}
