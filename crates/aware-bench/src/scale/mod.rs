//! `aware-bench scale`: how cost grows with the work (decision D45). Each workload runs at 1×,
//! 10× and 100× of its work, on SQLite and on PostgreSQL: a 50-event `list_since` page (rows
//! 50k / 500k / 5M), the session list and the console's table and overview (sessions 10k /
//! 100k / 1M), the drain of a watcher with ten pending notices and the restart sweep with its
//! longest transaction (pending cursors 10k / 100k / 1M), and the process's peak RSS. It prints
//! each figure, its growth per 10× and the target (met / not met, never asserted); `--json`
//! writes every figure, `--svg` the curves.

mod fill;
mod point;
mod svg;
mod work;

use crate::prelude::*;
use crate::util::fmt_int;
use aware_store_pg::testing::{ClusterOptions, PgCluster};
use fill::Db;
use point::{growth_per_10x, verdict, work_of, Sample};

/// Arguments of `aware-bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Print every figure as JSON on stdout (the text goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Where to write the SVG chart of the curves.
    #[arg(long, value_name = "PATH", default_value = "target/bench/scale.svg")]
    pub svg: PathBuf,
    /// `sqlite`, `pg` (a throw-away PostgreSQL cluster, fsync on) or `both`.
    #[arg(long, value_enum, default_value_t = Stores::Both)]
    pub store: Stores,
    /// The largest scale: 1, 10 or 100 (× the base work).
    #[arg(long, default_value_t = 100)]
    pub max_scale: u64,
    /// Small bases (rows 1,000, sessions 2,000) and 60 calls per latency, for CI.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the SQLite files (a temporary directory is made inside it).
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stores {
    Sqlite,
    Pg,
    Both,
}

/// Base work at 1×: (event rows, sessions = pending cursors).
fn bases(quick: bool) -> (u64, u64) {
    if quick {
        (1_000, 2_000)
    } else {
        (50_000, 10_000)
    }
}

/// Text to stderr when the JSON goes to stdout.
fn tell(json: bool, text: &str) {
    if json {
        eprintln!("{text}");
    } else {
        say!("{text}");
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "every curve of the scale bench in the order the report and the chart show them"
)]
pub fn run(args: ScaleArgs) -> Result<()> {
    let started = Instant::now();
    if ![1, 10, 100].contains(&args.max_scale) {
        bail!("--max-scale must be 1, 10 or 100");
    }
    let (rows, sessions) = bases(args.quick);
    let scales: Vec<u64> = [1, 10, 100]
        .into_iter()
        .filter(|s| *s <= args.max_scale)
        .collect();
    let tmp = match &args.data_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("aware-scale-")
            .tempdir_in(d),
        None => tempfile::Builder::new().prefix("aware-scale-").tempdir(),
    }
    .context("creating the bench directory")?;
    let stores: Vec<&str> = match args.store {
        Stores::Sqlite => vec!["sqlite"],
        Stores::Pg => vec!["pg"],
        Stores::Both => vec!["sqlite", "pg"],
    };
    tell(
        args.json,
        &format!(
            "aware-bench scale{}: scales {:?}, 1× = {} event rows, {} sessions with one pending \
             cursor each (+ {} drain watchers × {} notices); stores filled with plain SQL, then \
             measured through the engine",
            if args.quick { " --quick" } else { "" },
            scales,
            fmt_int(rows),
            fmt_int(sessions),
            fill::HOT_WATCHERS,
            fill::HOT_TARGETS
        ),
    );
    let mut results: Vec<(&str, u64, Sample)> = Vec::new();
    for store in &stores {
        let cluster = if *store == "pg" {
            Some(
                PgCluster::start_new(ClusterOptions {
                    fsync: true,
                    ..Default::default()
                })
                .map_err(|e| anyhow!("starting a throw-away PostgreSQL cluster: {e}"))?,
            )
        } else {
            None
        };
        for &scale in &scales {
            let t = Instant::now();
            let mut sample = Sample::new();
            let db = Db::create(tmp.path(), &format!("events-{scale}"), cluster.as_ref())?;
            let streams = db.fill_events(rows * scale)?;
            let filled = t.elapsed();
            work::page(&db, streams, work::calls(args.quick), &mut sample)?;
            drop_db(db);
            let db = Db::create(tmp.path(), &format!("sessions-{scale}"), cluster.as_ref())?;
            let t2 = Instant::now();
            db.fill_sessions(sessions * scale)?;
            let filled = filled + t2.elapsed();
            work::sessions(&db, sessions * scale, work::calls(args.quick), &mut sample)?;
            drop_db(db);
            let line: Vec<String> = sample
                .iter()
                .map(|p| format!("{} {:.3} {}", p.name, p.value, p.unit))
                .collect();
            tell(
                args.json,
                &format!(
                    "{store} {scale}× ({} rows, {} sessions; filled in {:.1} s, measured in \
                     {:.1} s): {}",
                    fmt_int(rows * scale),
                    fmt_int(sessions * scale),
                    filled.as_secs_f64(),
                    (t.elapsed() - filled).as_secs_f64(),
                    line.join(", ")
                ),
            );
            results.push((store, scale, sample));
        }
        drop(cluster);
    }
    let summary = summarise(&results, &stores, args.json);
    let curves = curves(&results, &stores);
    if let Some(dir) = args.svg.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let title = format!(
        "aware-bench scale{}: cost relative to 1× (solid SQLite, dashed PostgreSQL)",
        if args.quick { " --quick" } else { "" }
    );
    std::fs::write(&args.svg, svg::chart(&title, &curves))
        .with_context(|| format!("writing {}", args.svg.display()))?;
    tell(
        args.json,
        &format!(
            "chart: {} ({:.1} s in all)",
            args.svg.display(),
            started.elapsed().as_secs_f64()
        ),
    );
    if args.json {
        let points: Vec<Value> = results
            .iter()
            .flat_map(|(store, scale, sample)| {
                sample.iter().map(move |p| {
                    json!({
                        "store": store, "scale": scale, "name": p.name, "value": p.value,
                        "unit": p.unit, "other": p.other.map(|(k, v)| json!({ k: v })),
                        "units": p.units,
                        "work": match work_of(p.name) {
                            "rows" => rows * scale,
                            _ => sessions * scale,
                        },
                    })
                })
            })
            .collect();
        let report = json!({
            "bench": "scale",
            "quick": args.quick,
            "bases": { "rows": rows, "sessions": sessions },
            "points": points,
            "curves": summary,
            "secs": started.elapsed().as_secs_f64(),
        });
        crate::util::out(&serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// A store's files go when the point is measured (a database stays in the cluster until the
/// cluster goes, with the process).
fn drop_db(db: Db) {
    if let Db::Sqlite(path) = db {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The names of the figures, in the order they are measured.
fn names(results: &[(&str, u64, Sample)]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    for (_, _, sample) in results {
        for p in sample {
            if !v.contains(&p.name) {
                v.push(p.name);
            }
        }
    }
    v
}

/// (scale, value) of one figure on one store.
fn series(results: &[(&str, u64, Sample)], store: &str, name: &str) -> Vec<(u64, f64)> {
    results
        .iter()
        .filter(|(s, _, _)| *s == store)
        .filter_map(|(_, scale, sample)| {
            sample
                .iter()
                .find(|p| p.name == name)
                .map(|p| (*scale, p.value))
        })
        .collect()
}

/// Prints one line per figure and store: the values, the cost per unit where it has one, the
/// growth per 10× and the target; returns the same as JSON.
fn summarise(results: &[(&str, u64, Sample)], stores: &[&str], json: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for name in names(results) {
        for store in stores {
            let pts = series(results, store, name);
            let Some(last) = pts.last() else { continue };
            let growth = growth_per_10x(&pts);
            let (met, target) = verdict(name, growth, last.1);
            let values: Vec<String> = pts
                .iter()
                .map(|(scale, v)| {
                    let per = results
                        .iter()
                        .find(|(s, sc, _)| s == store && sc == scale)
                        .and_then(|(_, _, sample)| sample.iter().find(|p| p.name == name))
                        .filter(|p| p.units > 1)
                        .map(|p| format!(" ({:.2} us/unit)", p.value * 1e3 / p.units as f64))
                        .unwrap_or_default();
                    format!("{scale}× {v:.3}{per}")
                })
                .collect();
            let unit = results
                .iter()
                .flat_map(|(_, _, s)| s.iter())
                .find(|p| p.name == name)
                .map_or("", |p| p.unit);
            tell(
                json,
                &format!(
                    "{name} [{store}] {unit}: {} | growth {} per 10× {} | target {target}: {}",
                    values.join(", "),
                    growth.map_or("-".into(), |g| format!("×{g:.2}")),
                    work_of(name),
                    if met { "met" } else { "NOT MET" }
                ),
            );
            out.push(json!({
                "name": name, "store": store, "unit": unit,
                "growth_per_10x": growth, "target": target, "met": met,
            }));
        }
    }
    out
}

/// The chart's curves: each figure relative to its 1× value (the RSS left out: it has a
/// ceiling, not a slope).
fn curves(results: &[(&str, u64, Sample)], stores: &[&str]) -> Vec<svg::Curve> {
    let mut v = Vec::new();
    for name in names(results).into_iter().filter(|n| *n != "rss_peak") {
        for store in stores {
            let pts = series(results, store, name);
            let Some(&(s0, v0)) = pts.first() else {
                continue;
            };
            if v0 <= 0.0 {
                continue;
            }
            v.push(svg::Curve {
                label: format!("{name} ({store})"),
                dashed: *store == "pg",
                points: pts
                    .iter()
                    .map(|(s, val)| (*s as f64 / s0 as f64, val / v0))
                    .collect(),
            });
        }
    }
    v
}
