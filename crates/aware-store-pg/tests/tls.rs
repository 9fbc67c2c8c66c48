//! PostgreSQL over TLS against a throw-away cluster that accepts TCP only over TLS (`hostssl`),
//! with a certificate the test makes: every `sslmode` does what libpq's does, and the failures
//! say why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aware_store_pg::testing::{ClusterOptions, PgCluster, ServerTlsFiles};
use aware_store_pg::{PgOptions, PgStore};
use aware_tls::testing::TestCa;

struct Setup {
    _dir: tempfile::TempDir,
    cluster: PgCluster,
    /// The CA of the server's certificate (for `127.0.0.1` and `localhost`).
    ca: std::path::PathBuf,
    /// A CA that signed nothing the server has.
    stranger_ca: std::path::PathBuf,
}

fn setup(names: &[&str]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("pg test CA");
    let ca_file = ca.write_ca(dir.path());
    let (cert, key) = ca.write_leaf(dir.path(), "server", names);
    let stranger = TestCa::new("stranger CA");
    let stranger_dir = dir.path().join("stranger");
    std::fs::create_dir(&stranger_dir).unwrap();
    let stranger_ca = stranger.write_ca(&stranger_dir);
    let cluster = PgCluster::start_new(ClusterOptions {
        tls: Some(ServerTlsFiles {
            cert,
            key,
            client_ca: None,
        }),
        ..Default::default()
    })
    .expect("a TLS cluster");
    Setup {
        _dir: dir,
        cluster,
        ca: ca_file,
        stranger_ca,
    }
}

fn open(url: &str) -> Result<PgStore, String> {
    PgStore::open(PgOptions::new(url)).map_err(|e| e.to_string())
}

/// Whether this store's connections are encrypted, as the server sees them.
fn encrypted(store: &PgStore) -> bool {
    let mut c = store.connect().unwrap();
    c.query_one(
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        &[],
    )
    .unwrap()
    .get(0)
}

#[test]
fn sslmodes_against_a_server_that_requires_tls() {
    let s = setup(&["localhost", "127.0.0.1"]);
    let url = s.cluster.database().unwrap();
    let ca = s.ca.display();

    // verify-full: the chain and the host name (127.0.0.1, an address in the certificate).
    let store = open(&format!("{url}?sslmode=verify-full&sslrootcert={ca}")).unwrap();
    assert!(encrypted(&store));
    drop(store);
    // verify-ca, require and prefer connect too, encrypted.
    for mode in ["verify-ca", "require", "prefer"] {
        let store = open(&format!("{url}?sslmode={mode}&sslrootcert={ca}"))
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(encrypted(&store), "{mode}");
    }
    // The default (prefer, no root: encryption without a check), as libpq.
    let store = open(&url).unwrap();
    assert!(encrypted(&store));
    drop(store);

    // disable: the server refuses a connection without TLS; no retry helps, the message says
    // so and names pg_hba.conf.
    let e = open(&format!("{url}?sslmode=disable")).unwrap_err();
    assert!(e.contains("no encryption"), "{e}");
    // A server certificate from a CA we do not trust: refused, by verify-ca and verify-full.
    for mode in ["verify-ca", "verify-full", "require"] {
        let e = open(&format!(
            "{url}?sslmode={mode}&sslrootcert={}",
            s.stranger_ca.display()
        ))
        .unwrap_err();
        assert!(
            e.contains("UnknownIssuer") || e.contains("unknown issuer"),
            "{mode}: {e}"
        );
    }
    // verify-full without a root certificate: a configuration error, not a retry.
    let e = PgStore::open(PgOptions::new(format!("{url}?sslmode=verify-full")));
    let e = e.unwrap_err();
    assert!(
        matches!(e, aware_store::StoreError::Refused(_)),
        "not a refusal: {e}"
    );
    let e = e.to_string();
    if !std::path::Path::new(&format!(
        "{}/.postgresql/root.crt",
        std::env::var("HOME").unwrap_or_default()
    ))
    .exists()
    {
        assert!(e.contains("sslrootcert"), "{e}");
    }
}

#[test]
fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    // The server's certificate names another host.
    let s = setup(&["db.other.example"]);
    let url = s.cluster.database().unwrap();
    let ca = s.ca.display();
    let e = open(&format!("{url}?sslmode=verify-full&sslrootcert={ca}")).unwrap_err();
    eprintln!("verify-full against a certificate for another name: {e}");
    assert!(
        e.contains("not valid for name") && e.contains("127.0.0.1"),
        "a clear message: {e}"
    );
    let url_with_password = url.replacen("postgres@", "postgres:s3cret@", 1);
    let e = open(&format!(
        "{url_with_password}?sslmode=verify-full&sslrootcert={ca}"
    ))
    .unwrap_err();
    assert!(!e.contains("s3cret"), "{e}");
    // verify-ca checks the chain only: it connects.
    let store = open(&format!("{url}?sslmode=verify-ca&sslrootcert={ca}")).unwrap();
    assert!(encrypted(&store));
}

/// Sets one environment variable for this test binary's process (only this test reads it).
fn set_env(k: &str, v: &std::path::Path) {
    // Edition 2021: not `unsafe`; no other test of this binary reads PGPASSFILE.
    std::env::set_var(k, v);
}

#[test]
fn a_client_certificate_and_the_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("pg CA");
    let ca_file = ca.write_ca(dir.path());
    let (cert, key) = ca.write_leaf(dir.path(), "server", &["localhost", "127.0.0.1"]);
    // The client CA: `postgres` logs in with a certificate that names it.
    let clients = TestCa::new("pg client CA");
    let client_dir = dir.path().join("clients");
    std::fs::create_dir(&client_dir).unwrap();
    let client_ca = clients.write_ca(&client_dir);
    let (ccert, ckey) = clients.write_leaf(&client_dir, "postgres", &["postgres"]);
    let cluster = PgCluster::start_new(ClusterOptions {
        tls: Some(ServerTlsFiles {
            cert,
            key,
            client_ca: Some(client_ca),
        }),
        ..Default::default()
    })
    .expect("a TLS cluster with client certificates");
    let url = cluster.database().unwrap();
    let verified = format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        ca_file.display()
    );

    // With the client certificate: in. Without: the server asks for one.
    let store = open(&format!(
        "{verified}&sslcert={}&sslkey={}",
        ccert.display(),
        ckey.display()
    ))
    .unwrap();
    assert!(encrypted(&store));
    drop(store);
    let e = open(&verified).unwrap_err();
    assert!(e.contains("certificate"), "{e}");

    // A role with a password (scram-sha-256), the password from PGPASSFILE only, on a database
    // of its own.
    let url = cluster.database().unwrap();
    let verified = format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        ca_file.display()
    );
    let db = url.rsplit('/').next().unwrap();
    let mut admin = postgres::Client::connect(&cluster.socket_url(&url), postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE ROLE aware LOGIN PASSWORD 'pg-pass-s3cret'; ALTER DATABASE {db} OWNER TO aware"
        ))
        .unwrap();
    let as_aware = verified.replacen("postgres@", "aware@", 1);
    let pgpass = dir.path().join("pgpass");
    std::fs::write(
        &pgpass,
        format!("127.0.0.1:{}:{db}:aware:pg-pass-s3cret\n", cluster.port()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let wrong = dir.path().join("pgpass-wrong");
    std::fs::write(&wrong, "*:*:*:aware:not-it\n").unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    set_env("PGPASSFILE", &wrong);
    let e = open(&as_aware).unwrap_err();
    assert!(e.contains("28P01") && !e.contains("not-it"), "{e}");
    set_env("PGPASSFILE", &pgpass);
    let store = open(&as_aware).unwrap();
    assert!(encrypted(&store));
}
