//! The scale curves as an SVG chart (hand-written: log-log axes, one line per workload and
//! store, each relative to its own cost at 1×, next to the two target slopes).

use std::fmt::Write as _;

/// One curve: its label and (scale factor, value) points.
pub(crate) struct Curve {
    pub(crate) label: String,
    pub(crate) dashed: bool,
    pub(crate) points: Vec<(f64, f64)>,
}

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

/// The chart: x = the work (× its 1× size), y = cost relative to 1×, both log10.
#[expect(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: axes, curves, targets and legend"
)]
pub(crate) fn chart(title: &str, curves: &[Curve]) -> String {
    let max_x = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .fold(10.0_f64, f64::max);
    let ys = curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (lo, hi) = ys.fold((1.0_f64, max_x), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (y0, y1) = (lo.log10().floor().min(-1.0), hi.log10().ceil().max(1.0));
    let x1 = max_x.log10().max(1.0);
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |x: f64| LEFT + x.log10() / x1 * pw;
    let py = |y: f64| TOP + (y1 - y.max(1e-9).log10()) / (y1 - y0) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"22\" font-size=\"14\">{}</text>\n",
        escape(title)
    );
    // Grid and labels, one line per decade.
    let mut d = y0 as i32;
    while d <= y1 as i32 {
        let y = py(10f64.powi(d));
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">×{}</text>",
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            trim(10f64.powi(d))
        );
        d += 1;
    }
    let mut d = 0;
    while f64::from(d) <= x1 {
        let x = px(10f64.powi(d));
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}×</text>",
            TOP + ph,
            TOP + ph + 16.0,
            trim(10f64.powi(d))
        );
        d += 1;
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">work (rows, cursors or sessions), \
         relative to 1×</text>\n<text transform=\"translate(16 {:.1}) rotate(-90)\" \
         text-anchor=\"middle\">cost relative to 1×</text>",
        LEFT + pw / 2.0,
        H - 12.0,
        TOP + ph / 2.0
    );
    // The target slopes: ×1.2 per 10× (flat) and ×11 per 10× (linear).
    for (slope, text) in [
        (1.2_f64, "target ×1.2 per 10×"),
        (11.0, "target ×11 per 10×"),
    ] {
        let end = slope.powf(x1);
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\" \
             stroke-width=\"1\" stroke-dasharray=\"2 3\"/><text x=\"{:.1}\" y=\"{:.1}\" \
             fill=\"#777\">{text}</text>",
            px(1.0),
            py(1.0),
            px(max_x),
            py(end.min(10f64.powf(y1))),
            px(max_x) - 120.0,
            py(end.min(10f64.powf(y1))) - 4.0
        );
    }
    for (i, c) in curves.iter().enumerate() {
        let color = COLORS[(i / 2) % COLORS.len()];
        let dash = if c.dashed {
            " stroke-dasharray=\"6 3\""
        } else {
            ""
        };
        let pts: Vec<String> = c
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            pts.join(" ")
        );
        for (x, y) in &c.points {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
                px(*x),
                py(*y)
            );
        }
        let ly = TOP + 14.0 * i as f64;
        let lx = W - RIGHT + 16.0;
        let _ = writeln!(
            s,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" \
             stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            escape(&c.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn trim(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_polyline_per_curve_and_labels_escaped() {
        let curves = vec![
            Curve {
                label: "page <sqlite>".into(),
                dashed: false,
                points: vec![(1.0, 1.0), (10.0, 1.1), (100.0, 1.3)],
            },
            Curve {
                label: "page pg".into(),
                dashed: true,
                points: vec![(1.0, 1.0), (10.0, 0.9)],
            },
        ];
        let svg = chart("t", &curves);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("page &lt;sqlite&gt;"));
        assert!(svg.ends_with("</svg>\n"));
    }
}
