//! `aware migrate`: moves the state between the embedded SQLite store and PostgreSQL.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// Source: a data directory (its state.db) or a postgres:// URL.
    #[arg(long, value_name = "DIR|URL")]
    from: String,
    /// Target, empty: a data directory or a postgres:// URL (the other kind than --from).
    #[arg(long, value_name = "DIR|URL")]
    to: String,
    /// File holding the PostgreSQL password (else the URL's, else PGPASSWORD).
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// Exit status 2 with a message: usage errors.
fn usage(msg: impl std::fmt::Display) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2);
}

pub fn run(args: MigrateArgs) -> Result<()> {
    let password = match &args.password_file {
        Some(p) => Some(
            aware_gateway::config::read_token_file("--password-file", p)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        None => None,
    };
    let options = |url: &str| {
        // As for `serve --store`: a password on the command line is readable in `ps`.
        if aware_store_pg::url_has_password(url) {
            usage(format!(
                "{} carries a password, which every local user can read in ps; give it with \
                 --password-file or PGPASSWORD instead",
                aware_store_pg::redact_url(url)
            ));
        }
        let o = aware_store_pg::PgOptions::new(url)
            .password(password.clone())
            .with_env(|k| std::env::var(k).ok());
        if let Err(e) = o.validate() {
            usage(e);
        }
        o
    };
    let mut last_table = String::new();
    let mut progress = |table: &str, copied: u64, total: u64| {
        let mut err = std::io::stderr();
        if table != last_table {
            if !last_table.is_empty() {
                let _ = writeln!(err);
            }
            last_table = table.to_string();
        }
        let _ = write!(err, "\r{table}: {copied}/{total} rows");
        let _ = err.flush();
    };
    let report = match (is_url(&args.from), is_url(&args.to)) {
        (false, true) => {
            let to = options(&args.to);
            eprintln!("copying {} into {}", args.from, to.location());
            aware_store_pg::migrate::sqlite_to_postgres(args.from.as_ref(), to, &mut progress)
        }
        (true, false) => {
            let from = options(&args.from);
            eprintln!("copying {} into {}", from.location(), args.to);
            aware_store_pg::migrate::postgres_to_sqlite(from, args.to.as_ref(), &mut progress)
        }
        _ => {
            usage("one of --from and --to must be a data directory and the other a postgres:// URL")
        }
    };
    eprintln!();
    let report = report.context("migration failed; the target was left as it was")?;
    let total: u64 = report.tables.iter().map(|(_, n)| n).sum();
    if report.tables.is_empty() {
        bail!("nothing was copied");
    }
    eprintln!(
        "done: {total} rows in {} tables, counts verified",
        report.tables.len()
    );
    Ok(())
}
