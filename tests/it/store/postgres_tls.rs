//! TLS to PostgreSQL with libpq's meanings, against real servers started with TLS on and a CA,
//! server and client certificates made here (rcgen): `verify-full` connects and a run
//! completes and verifies over it; a wrong host name and an unknown CA are refused in one line
//! that says which (and never shows the password); `require` refuses a server without TLS;
//! `prefer`, `allow` and `disable` connect the way libpq does (checked in `pg_stat_ssl`);
//! `verify-ca` accepts another name but not another CA; client certificates; and the same
//! settings from `PGSSLMODE`/`PGSSLROOTCERT` and `~/.postgresql/root.crt`.
//!
//! The in-process tests read `$HOME/.postgresql/` as runtape does; they assume it holds no
//! `root.crt` or `postgresql.crt` (the binary tests set `HOME` to an empty directory).

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::cli::{echo_spec, on, run_id, text};
use crate::support::pg::{PgServer, ServerTls};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use runtape::store::PostgresStore;

const PASSWORD: &str = "tls-test-pw-81f3";

/// Two turns, one call of `echo`.
fn spec() -> String {
    let replies = r#"  { text = "one", tool_calls = [{ name = "echo", arguments = { n = 1 } }] },
  { text = "two" },"#;
    echo_spec("count to two", replies, "")
}

type Ca = CertifiedIssuer<'static, KeyPair>;

/// A CA named `name`.
fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("a CA")
}

/// A certificate signed by `ca` for the host `names`, with common name `cn`; and its key.
fn issue(ca: &Ca, names: &[&str], cn: &str) -> (String, String) {
    let key = KeyPair::generate().expect("a key");
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params.signed_by(&key, ca).expect("signs");
    (cert.pem(), key.serialize_pem())
}

/// The certificates of one test: the server's CA and a CA nobody trusts, written as PEM files.
struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
    /// The server's CA, as a file.
    ca_file: PathBuf,
    /// A CA that signed nothing the server has.
    stranger_file: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = ca("runtape test CA");
        let ca_file = write(dir.path(), "ca.pem", &ca.pem(), 0o644);
        let stranger_file = write(
            dir.path(),
            "stranger-ca.pem",
            &self::ca("stranger CA").pem(),
            0o644,
        );
        Pki {
            dir,
            ca,
            ca_file,
            stranger_file,
        }
    }

    /// TLS for a server whose certificate is for `localhost` only, with these TCP rules.
    fn server(&self, hba: &[&str]) -> ServerTls {
        let (cert_pem, key_pem) = issue(&self.ca, &["localhost"], "localhost");
        ServerTls {
            cert_pem,
            key_pem,
            client_ca_pem: None,
            hba: hba.iter().map(|l| (*l).to_owned()).collect(),
        }
    }
}

/// Writes `text` to `dir/name` with permissions `mode`.
fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writes");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

/// Gives role `runtape` the test password and makes databases `tls_only`, `clear_only` and
/// `either` (the TCP rules of [`RULES`] tell them apart).
fn prepare(server: &PgServer) {
    server.sql(
        "postgres",
        &format!("ALTER ROLE runtape PASSWORD '{PASSWORD}'"),
    );
    for db in ["tls_only", "clear_only", "either"] {
        server.sql("postgres", &format!("CREATE DATABASE {db}"));
    }
}

/// A new CA and a server with its certificate under [`RULES`], [`prepare`]d.
fn prepared_tls_server() -> (Pki, PgServer) {
    let pki = Pki::new();
    let server = PgServer::start_tls(&pki.server(&RULES));
    prepare(&server);
    (pki, server)
}

/// TCP rules: TLS only, in the clear only, or either, by database; a password always.
const RULES: [&str; 3] = [
    "hostssl tls_only all 127.0.0.1/32 scram-sha-256",
    "hostnossl clear_only all 127.0.0.1/32 scram-sha-256",
    "host either all 127.0.0.1/32 scram-sha-256",
];

/// `postgres://runtape:PASSWORD@HOST:PORT/DB?QUERY`, its connections named `app`.
fn url(server: &PgServer, host: &str, db: &str, app: &str, query: &str) -> String {
    format!(
        "postgres://runtape:{PASSWORD}@{host}:{}/{db}?application_name={app}{}{query}",
        server.port(),
        if query.is_empty() { "" } else { "&" }
    )
}

/// Whether the open connections named `app` use TLS: `t`, `f`, or empty for none.
fn ssl_of(server: &PgServer, app: &str) -> String {
    server.sql(
        "postgres",
        &format!(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = '{app}'"
        ),
    )
}

/// Opens the store at `url`, which must work; whether its connections use TLS.
fn opens_with_tls(server: &PgServer, url: &str, app: &str) -> bool {
    let store = PostgresStore::open(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let ssl = ssl_of(server, app);
    drop(store);
    match ssl.as_str() {
        "t" => true,
        "f" => false,
        other => panic!("no connection named {app} ({other:?})"),
    }
}

/// The one-line error opening the store at `url` gives; never the password.
fn refused(url: &str) -> String {
    let e = PostgresStore::open(url).expect_err("refused").to_string();
    assert!(!e.contains(PASSWORD), "the password is never shown: {e}");
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

/// [`refused`] for `server`'s database `db` reached at `host`, with `query` added to the URL.
fn refused_by(server: &PgServer, host: &str, db: &str, query: &str) -> String {
    refused(&url(server, host, db, "x", query))
}

/// Runs the binary with `args` on `url`, with `HOME` at `home` and `env` set.
fn runtape(url: &str, home: &Path, env: &[(&str, &Path)], args: &[&str]) -> Output {
    on(Path::new(url))
        .env("HOME", home)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("runs the binary")
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn verify_full_connects_and_a_run_completes_and_verifies_over_tls() {
    let (pki, server) = prepared_tls_server();
    let ca = pki.ca_file.display().to_string();
    let q = format!("sslmode=verify-full&sslrootcert={ca}");
    assert!(opens_with_tls(
        &server,
        &url(&server, "localhost", "tls_only", "vf", &q),
        "vf"
    ));

    let home = tempfile::tempdir().expect("tempdir");
    let spec = write(pki.dir.path(), "count.toml", &spec(), 0o644);
    let db = url(&server, "localhost", "either", "vf_run", &q);
    let out = runtape(
        &db,
        home.path(),
        &[],
        &["run", spec.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", text(&out));
    let run = run_id(&out);
    let out = runtape(&db, home.path(), &[], &["verify", &run]);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("OK"),
        "{}",
        text(&out)
    );
    assert_eq!(
        server.sql(
            "either",
            &format!("SELECT status FROM runtape.runs WHERE id = '{run}'")
        ),
        "completed"
    );
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_wrong_host_name_or_an_unknown_ca_is_refused_saying_which_and_verify_ca_skips_only_the_name() {
    let (pki, server) = prepared_tls_server();
    let ca = pki.ca_file.display().to_string();
    let stranger = pki.stranger_file.display().to_string();

    let e = refused_by(
        &server,
        "127.0.0.1",
        "tls_only",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    assert!(
        e.contains("the server's certificate is for localhost, not 127.0.0.1"),
        "{e}"
    );
    assert!(e.contains("sslmode=verify-ca"), "says what else to do: {e}");

    for (mode, host) in [("verify-full", "localhost"), ("verify-ca", "127.0.0.1")] {
        let e = refused_by(
            &server,
            host,
            "tls_only",
            &format!("sslmode={mode}&sslrootcert={stranger}"),
        );
        assert!(
            e.contains(&format!(
                "the server's certificate is not signed by a CA in {stranger}"
            )),
            "{mode}: {e}"
        );
    }

    // verify-ca checks the chain but not the name.
    assert!(opens_with_tls(
        &server,
        &url(
            &server,
            "127.0.0.1",
            "tls_only",
            "vca",
            &format!("sslmode=verify-ca&sslrootcert={ca}")
        ),
        "vca"
    ));
    // require checks nothing when no root file is named or in ~/.postgresql.
    assert!(opens_with_tls(
        &server,
        &url(&server, "127.0.0.1", "tls_only", "req", "sslmode=require"),
        "req"
    ));
    // …but checks the chain of a root file it is given, as libpq does.
    let e = refused_by(
        &server,
        "127.0.0.1",
        "tls_only",
        &format!("sslmode=require&sslrootcert={stranger}"),
    );
    assert!(e.contains("is not signed by a CA in"), "{e}");

    let e = refused_by(
        &server,
        "localhost",
        "tls_only",
        "sslmode=verify-full&sslrootcert=/no/such/ca.pem",
    );
    assert!(
        e.contains("the root certificate file (sslrootcert) /no/such/ca.pem does not exist"),
        "{e}"
    );
    let e = refused_by(&server, "localhost", "tls_only", "sslmode=verify_full");
    assert!(e.contains("sslmode `verify_full` is not one of"), "{e}");
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn require_refuses_a_server_without_tls_where_prefer_and_disable_connect_in_the_clear() {
    let server = PgServer::start();
    let db = server.fresh_db();
    let name = PgServer::db_of(&db);
    let plain = |app: &str, query: &str| {
        format!(
            "postgres://runtape:{PASSWORD}@127.0.0.1:{}/{name}?application_name={app}&{query}",
            server.port()
        )
    };
    let pki = Pki::new();
    let ca = pki.ca_file.display().to_string();
    for mode in ["require", "verify-ca", "verify-full"] {
        let e = refused(&plain("x", &format!("sslmode={mode}&sslrootcert={ca}")));
        assert!(
            e.contains(&format!(
                "the server does not offer TLS, and sslmode={mode} needs it"
            )),
            "{mode}: {e}"
        );
    }
    assert!(!opens_with_tls(
        &server,
        &plain("pref", "sslmode=prefer"),
        "pref"
    ));
    assert!(!opens_with_tls(
        &server,
        &plain("dis", "sslmode=disable"),
        "dis"
    ));
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn prefer_allow_and_disable_choose_tls_as_libpq_does() {
    let (_pki, server) = prepared_tls_server();
    let open = |db: &str, mode: &str| {
        let app = format!("{mode}_{db}");
        opens_with_tls(
            &server,
            &url(&server, "127.0.0.1", db, &app, &format!("sslmode={mode}")),
            &app,
        )
    };
    // prefer: TLS when offered; in the clear once more when the server refuses TLS.
    assert!(open("either", "prefer"));
    assert!(open("tls_only", "prefer"));
    assert!(!open("clear_only", "prefer"));
    // allow: in the clear; TLS once more when the server refuses that.
    assert!(!open("either", "allow"));
    assert!(open("tls_only", "allow"));
    // disable: never TLS.
    assert!(!open("either", "disable"));
    let e = refused_by(&server, "127.0.0.1", "tls_only", "sslmode=disable");
    assert!(e.contains("no pg_hba.conf entry"), "{e}");
    // The default is prefer.
    assert!(opens_with_tls(
        &server,
        &url(&server, "127.0.0.1", "either", "default", ""),
        "default"
    ));
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_client_certificate_is_presented_when_the_server_requires_one() {
    let pki = Pki::new();
    let clients = ca("client CA");
    let mut tls = pki.server(&["hostssl all all 127.0.0.1/32 trust clientcert=verify-full"]);
    tls.client_ca_pem = Some(clients.pem());
    let server = PgServer::start_tls(&tls);
    prepare(&server);
    let dir = pki.dir.path();
    let (cert, key) = issue(&clients, &[], "runtape");
    let cert = write(dir, "client.crt", &cert, 0o644);
    let key = write(dir, "client.key", &key, 0o600);
    let base = format!("sslmode=verify-full&sslrootcert={}", pki.ca_file.display());

    let e = refused_by(&server, "localhost", "either", &base);
    assert!(e.contains("sslcert=PATH and sslkey=PATH"), "{e}");

    let with = |cert: &Path, key: &Path| {
        format!("{base}&sslcert={}&sslkey={}", cert.display(), key.display())
    };
    assert!(opens_with_tls(
        &server,
        &url(&server, "localhost", "either", "cc", &with(&cert, &key)),
        "cc"
    ));

    // A certificate from a CA the server does not trust.
    let (other, other_key) = issue(&ca("rogue client CA"), &[], "runtape");
    let other = write(dir, "rogue.crt", &other, 0o644);
    let other_key = write(dir, "rogue.key", &other_key, 0o600);
    let e = refused_by(&server, "localhost", "either", &with(&other, &other_key));
    assert!(e.contains("rogue.crt"), "names the certificate: {e}");

    // A key others can read is refused before anything connects, as libpq does.
    let open_key = write(
        dir,
        "open.key",
        &std::fs::read_to_string(&key).expect("reads"),
        0o644,
    );
    let e = refused_by(&server, "localhost", "either", &with(&cert, &open_key));
    assert!(e.contains("can be read by others"), "{e}");
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn the_pg_variables_and_the_home_root_file_are_used_where_the_url_says_nothing() {
    let (pki, server) = prepared_tls_server();
    let home = tempfile::tempdir().expect("tempdir");
    let by_ip = url(&server, "127.0.0.1", "either", "env", "");
    let by_name = url(&server, "localhost", "either", "env", "");
    let verify_full: [(&str, &Path); 2] = [
        ("PGSSLMODE", Path::new("verify-full")),
        ("PGSSLROOTCERT", &pki.ca_file),
    ];

    let out = runtape(&by_name, home.path(), &verify_full, &["ls"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = runtape(&by_ip, home.path(), &verify_full, &["ls"]);
    assert!(!out.status.success());
    let said = text(&out);
    assert!(said.contains("is for localhost, not 127.0.0.1"), "{said}");
    assert!(!said.contains(PASSWORD), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");

    // The URL wins over the variables.
    let url_disable = format!("{by_ip}&sslmode=disable");
    let out = runtape(&url_disable, home.path(), &verify_full, &["ls"]);
    assert!(out.status.success(), "{}", text(&out));

    let out = runtape(
        &by_ip,
        home.path(),
        &[("PGSSLMODE", Path::new("on"))],
        &["ls"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("sslmode `on` is not one of"),
        "{}",
        text(&out)
    );

    // ~/.postgresql/root.crt makes require check the chain (libpq's rule), not the name.
    let dot = home.path().join(".postgresql");
    std::fs::create_dir(&dot).expect("mkdir");
    let require = format!("{by_ip}&sslmode=require");
    std::fs::copy(&pki.stranger_file, dot.join("root.crt")).expect("copies");
    let out = runtape(&require, home.path(), &[], &["ls"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains(&format!(
            "is not signed by a CA in {}",
            dot.join("root.crt").display()
        )),
        "{}",
        text(&out)
    );
    std::fs::copy(&pki.ca_file, dot.join("root.crt")).expect("copies");
    let out = runtape(&require, home.path(), &[], &["ls"]);
    assert!(out.status.success(), "{}", text(&out));
}
