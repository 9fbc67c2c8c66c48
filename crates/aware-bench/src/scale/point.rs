//! One figure of a scale point, the growth per 10× between points, and the targets.

/// The figures of one store at one scale.
pub(crate) type Sample = Vec<Point>;

/// One figure: `value` is what the target is about (p50 of the page and the lists, p99 of the
/// drain, the sweep's total and its longest transaction, the peak RSS).
#[derive(Clone, Debug)]
pub(crate) struct Point {
    pub(crate) name: &'static str,
    pub(crate) value: f64,
    pub(crate) unit: &'static str,
    /// The other percentile of a latency (p99 beside a p50 target, p50 beside a p99 one).
    pub(crate) other: Option<(&'static str, f64)>,
    /// Units of work the value covers (cursors swept, commits), for a cost per unit.
    pub(crate) units: u64,
}

/// The target of a figure.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    /// At most this growth per 10× of the work.
    Growth(f64),
    /// At most this value at the largest scale measured.
    Max(f64),
}

impl Point {
    pub(crate) fn latency(name: &'static str, p50: f64, p99: f64) -> Point {
        if name == "drain" {
            return Point {
                name,
                value: p99,
                unit: "ms p99",
                other: Some(("p50", p50)),
                units: 1,
            };
        }
        Point {
            name,
            value: p50,
            unit: "ms p50",
            other: Some(("p99", p99)),
            units: 1,
        }
    }

    pub(crate) fn total(name: &'static str, ms: f64, units: u64) -> Point {
        Point {
            name,
            value: ms,
            unit: "ms",
            other: None,
            units,
        }
    }

    pub(crate) fn memory(rss_kb: u64, hwm_kb: u64) -> Point {
        Point {
            name: "rss_peak",
            value: hwm_kb as f64 / 1024.0,
            unit: "MiB",
            other: Some(("now", rss_kb as f64 / 1024.0)),
            units: 0,
        }
    }
}

/// The target of each figure (decision D45): reads and single batches stay flat, whole-table
/// passes grow at most linearly, the process stays small.
pub(crate) fn target(name: &str) -> Target {
    match name {
        "sweep" => Target::Growth(11.0),
        "rss_peak" => Target::Max(64.0),
        _ => Target::Growth(1.2),
    }
}

/// What each figure's work is counted in, for the text ("per 10× rows").
pub(crate) fn work_of(name: &str) -> &'static str {
    match name {
        "page" => "rows",
        "list" | "console_page" | "console_overview" => "sessions",
        _ => "cursors",
    }
}

/// The growth per 10× of a curve: the geometric mean of the steps between consecutive
/// points, normalised to one decade.
pub(crate) fn growth_per_10x(points: &[(u64, f64)]) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if points.len() < 2 || first.1 <= 0.0 || last.0 <= first.0 {
        return None;
    }
    let decades = (last.0 as f64 / first.0 as f64).log10();
    Some((last.1 / first.1).powf(1.0 / decades))
}

/// Whether a curve met its target, and the text of the target.
pub(crate) fn verdict(name: &str, growth: Option<f64>, last: f64) -> (bool, String) {
    match target(name) {
        Target::Growth(limit) => (
            growth.is_some_and(|g| g <= limit),
            format!("≤ ×{limit} per 10×"),
        ),
        Target::Max(limit) => (last <= limit, format!("≤ {limit} MiB")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_per_decade() {
        let g = growth_per_10x(&[(1, 1.0), (10, 2.0), (100, 4.0)]).unwrap_or(0.0);
        assert!((g - 2.0).abs() < 1e-9);
        let g = growth_per_10x(&[(1, 1.0), (100, 100.0)]).unwrap_or(0.0);
        assert!((g - 10.0).abs() < 1e-9);
        assert!(growth_per_10x(&[(1, 1.0)]).is_none());
    }

    #[test]
    fn verdicts_follow_the_targets() {
        assert!(verdict("page", Some(1.1), 0.0).0);
        assert!(!verdict("page", Some(1.3), 0.0).0);
        assert!(verdict("sweep", Some(10.5), 0.0).0);
        assert!(!verdict("rss_peak", Some(1.0), 65.0).0);
    }
}
