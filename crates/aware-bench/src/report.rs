//! Targets with PASS/FAIL, the JSON figures, and comparing two reports.

use crate::prelude::*;
use crate::util::*;

/// Whether a larger figure is better (throughput) or a smaller one (latency, ratio, memory).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Higher,
    Lower,
}

impl Better {
    fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }
}

/// One workload's result: its line of text, its figures and its targets.
pub(crate) struct Outcome {
    id: String,
    pub(crate) line: String,
    figures: Vec<(String, f64, String, Better)>,
    /// (figure, limit, pass, extra condition that must also hold, if any)
    targets: Vec<(String, f64, bool, Option<String>)>,
}

impl Outcome {
    pub(crate) fn new(id: &str, line: String) -> Self {
        Outcome {
            id: id.to_string(),
            line,
            figures: Vec::new(),
            targets: Vec::new(),
        }
    }

    pub(crate) fn figure(mut self, name: &str, value: f64, unit: &str, better: Better) -> Self {
        self.figures
            .push((name.to_string(), value, unit.to_string(), better));
        self
    }

    fn find(&self, name: &str) -> Option<&(String, f64, String, Better)> {
        self.figures.iter().find(|f| f.0 == name)
    }

    /// A target on a figure recorded before: at least `limit` when higher is better, at most
    /// `limit` when lower is.
    pub(crate) fn target(self, figure: &str, limit: f64) -> Self {
        self.target_and(figure, limit, None)
    }

    /// A target that also needs `extra` (its text, and whether it held).
    pub(crate) fn target_and(
        mut self,
        figure: &str,
        limit: f64,
        extra: Option<(&str, bool)>,
    ) -> Self {
        let pass = match self.find(figure) {
            Some((_, v, _, Better::Higher)) => *v >= limit,
            Some((_, v, _, Better::Lower)) => *v <= limit,
            None => false,
        } && extra.is_none_or(|(_, ok)| ok);
        self.targets.push((
            figure.to_string(),
            limit,
            pass,
            extra.map(|(t, _)| t.to_string()),
        ));
        self
    }
}

/// Formats a figure: thousands separators from 1,000 up, two decimals below.
/// How a design goal came out, in words for a reader (the JSON keeps `pass`).
fn met_word(pass: bool) -> &'static str {
    if pass {
        "met"
    } else {
        "not met"
    }
}

pub(crate) fn fmt_value(v: f64) -> String {
    if v.abs() >= 1000.0 {
        fmt_int(v.round() as u64)
    } else {
        format!("{v:.2}")
    }
}

/// Collects the workloads of one run; prints text (to stderr when the JSON goes to stdout).
pub(crate) struct Report {
    bench: &'static str,
    quick: bool,
    json: bool,
    workloads: Vec<Value>,
    passed: usize,
    failed: usize,
}

impl Report {
    pub(crate) fn new(bench: &'static str, quick: bool, json: bool) -> Self {
        Report {
            bench,
            quick,
            json,
            workloads: Vec::new(),
            passed: 0,
            failed: 0,
        }
    }

    pub(crate) fn say(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            say!("{text}");
        }
    }

    pub(crate) fn add(&mut self, o: Outcome, secs: f64) {
        self.say(&format!("{}  ({secs:.1} s)", o.line));
        let mut targets = Vec::new();
        for (figure, limit, pass, extra) in &o.targets {
            let (value, unit, better) = o
                .find(figure)
                .map_or((f64::NAN, "", Better::Higher), |f| (f.1, f.2.as_str(), f.3));
            let op = if better == Better::Higher { ">=" } else { "<=" };
            let extra_text = extra
                .as_ref()
                .map(|t| format!(" and {t}"))
                .unwrap_or_default();
            self.say(&format!(
                "    goal {} {figure} {op} {} {unit}{extra_text}: {} {unit} -> {}",
                o.id,
                fmt_value(*limit),
                fmt_value(value),
                met_word(*pass)
            ));
            if *pass {
                self.passed += 1;
            } else {
                self.failed += 1;
            }
            targets.push(
                json!({"figure": figure, "op": op, "limit": limit, "value": value,
                                "unit": unit, "also": extra, "pass": pass}),
            );
        }
        let figures: Vec<Value> = o
            .figures
            .iter()
            .map(|(name, value, unit, better)| {
                json!({"name": name, "value": value, "unit": unit, "better": better.as_str()})
            })
            .collect();
        self.workloads
            .push(json!({"id": o.id, "line": o.line, "seconds": secs,
                                   "figures": figures, "targets": targets}));
    }

    /// Prints the totals; with `--json`, writes the report to stdout.
    pub(crate) fn finish(self, total_secs: f64) -> Result<()> {
        self.finish_with(total_secs, Vec::new())
    }

    /// [`Report::finish`] with more top-level fields in the JSON (the soak's sample windows).
    pub(crate) fn finish_with(self, total_secs: f64, extra: Vec<(&str, Value)>) -> Result<()> {
        // The soak has no design goals (its verdict is its exit status): no goals line.
        if self.passed + self.failed > 0 {
            self.say(&format!(
                "total {total_secs:.1} s; design goals met: {} of {} (for information only: they are \
                 the project's performance goals at full size on a quiet machine, so a --quick run or \
                 a busy machine misses some; the exit status does not depend on them)",
                self.passed,
                self.passed + self.failed
            ));
        }
        if self.json {
            let unix = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let doc = json!({
                "bench": self.bench,
                "version": env!("CARGO_PKG_VERSION"),
                "quick": self.quick,
                "unixTime": unix,
                "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "seconds": total_secs,
                "workloads": self.workloads,
            });
            let mut doc = doc;
            for (k, v) in extra {
                doc[k] = v;
            }
            say!("{}", serde_json::to_string_pretty(&doc)?);
        }
        Ok(())
    }
}

/// `--compare A B`: for every figure of every workload in both reports, B / A and whether that
/// is better or worse (within 3 % counts as the same); then the targets whose verdict changed.
#[expect(
    clippy::too_many_lines,
    reason = "one comparison table, a row per target in the order the report prints them"
)]
pub(crate) fn compare(a_path: &Path, b_path: &Path) -> Result<()> {
    let load = |p: &Path| -> Result<Value> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a bench report (JSON)", p.display()))?;
        if !v["workloads"].is_array() {
            bail!(
                "{} is not a bench report: no \"workloads\" array (write one with `aware-bench engine \
                 --json > FILE` or `aware-bench http --json > FILE`)",
                p.display()
            );
        }
        Ok(v)
    };
    let (a, b) = (load(a_path)?, load(b_path)?);
    say!(
        "A = {} ({} {}{}), B = {} ({} {}{}); ratio = B / A",
        a_path.display(),
        a["bench"].as_str().unwrap_or("?"),
        a["version"].as_str().unwrap_or("?"),
        if a["quick"] == true { ", quick" } else { "" },
        b_path.display(),
        b["bench"].as_str().unwrap_or("?"),
        b["version"].as_str().unwrap_or("?"),
        if b["quick"] == true { ", quick" } else { "" },
    );
    if a["quick"] != b["quick"] {
        say!("note: one run is --quick and the other is not; sizes differ");
    }
    let empty = Vec::new();
    let workloads = |v: &Value| v["workloads"].as_array().unwrap_or(&empty).clone();
    let (wa, wb) = (workloads(&a), workloads(&b));
    say!(
        "{:<12} {:<26} {:>14} {:>14} {:<6} {:>8}  verdict",
        "workload",
        "figure",
        "A",
        "B",
        "unit",
        "B/A"
    );
    let (mut better, mut worse) = (0, 0);
    for w in &wb {
        let id = w["id"].as_str().unwrap_or("?");
        let Some(old) = wa.iter().find(|x| x["id"] == w["id"]) else {
            say!("{id:<12} only in B");
            continue;
        };
        for f in w["figures"].as_array().unwrap_or(&empty) {
            let name = f["name"].as_str().unwrap_or("?");
            let Some(of) = old["figures"]
                .as_array()
                .and_then(|fs| fs.iter().find(|x| x["name"] == f["name"]))
            else {
                say!("{id:<12} {name:<26} only in B");
                continue;
            };
            let (va, vb) = (of["value"].as_f64(), f["value"].as_f64());
            let (Some(va), Some(vb)) = (va, vb) else {
                continue;
            };
            let ratio = if va == 0.0 { f64::NAN } else { vb / va };
            let higher = f["better"] == "higher";
            let verdict = if !ratio.is_finite() || (ratio - 1.0).abs() <= 0.03 {
                "same"
            } else if (ratio > 1.0) == higher {
                better += 1;
                "better"
            } else {
                worse += 1;
                "worse"
            };
            say!(
                "{id:<12} {name:<26} {:>14} {:>14} {:<6} {:>7.2}x  {verdict}",
                fmt_value(va),
                fmt_value(vb),
                f["unit"].as_str().unwrap_or(""),
                ratio
            );
        }
        for t in w["targets"].as_array().unwrap_or(&empty) {
            let was = old["targets"].as_array().and_then(|ts| {
                ts.iter()
                    .find(|x| x["figure"] == t["figure"])
                    .map(|x| x["pass"].clone())
            });
            if let Some(was) = was {
                if was != t["pass"] {
                    let word = |p: &Value| met_word(*p == true);
                    say!(
                        "{id:<12} goal {} {} {}: {} -> {}",
                        t["figure"].as_str().unwrap_or("?"),
                        t["op"].as_str().unwrap_or("?"),
                        fmt_value(t["limit"].as_f64().unwrap_or(f64::NAN)),
                        word(&was),
                        word(&t["pass"])
                    );
                }
            }
        }
    }
    for w in &wa {
        if !wb.iter().any(|x| x["id"] == w["id"]) {
            say!("{:<12} only in A", w["id"].as_str().unwrap_or("?"));
        }
    }
    say!("{better} figures better, {worse} worse (beyond 3 %)");
    Ok(())
}
