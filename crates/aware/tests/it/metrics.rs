//! `GET /metrics` beyond the spec's list (decision D17): build info, process metrics, the request
//! duration histogram, and the sessions / watchers / pending / stream-subscriber gauges, scraped
//! from a real `aware serve` after real traffic. Also the start-up log line in words.

use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One scrape: the text and its sample lines.
pub(crate) struct Scrape(pub(crate) String);

impl Scrape {
    pub(crate) fn take(s: &Server) -> Self {
        let r = s.get("/metrics");
        assert_eq!(r.status, 200);
        Scrape(r.body.as_str().expect("text body").to_string())
    }

    /// The value of the sample whose name and labels are exactly `series`.
    pub(crate) fn value(&self, series: &str) -> Option<f64> {
        self.0.lines().find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
    }

    pub(crate) fn must(&self, series: &str) -> f64 {
        self.value(series)
            .unwrap_or_else(|| panic!("no sample {series} in:\n{}", self.0))
    }

    /// The `# TYPE` of a family.
    pub(crate) fn kind(&self, family: &str) -> Option<&str> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# TYPE {family} ")))
    }

    /// Every sample line of `family` must come after its `# TYPE` line and before the next
    /// family's (the text format groups a family's lines).
    fn assert_grouped(&self, family: &str) {
        let lines: Vec<&str> = self.0.lines().collect();
        let start = lines
            .iter()
            .position(|l| *l == format!("# TYPE {family} {}", self.kind(family).unwrap()))
            .unwrap_or_else(|| panic!("no # TYPE for {family}"));
        let owns = |l: &str| {
            l.strip_prefix(family).is_some_and(|rest| {
                rest.starts_with([' ', '{'])
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| rest.starts_with(s))
            })
        };
        let mut end = start + 1;
        while end < lines.len() && !lines[end].starts_with('#') {
            end += 1;
        }
        for (i, l) in lines.iter().enumerate() {
            if owns(l) && !l.starts_with('#') {
                assert!(
                    i > start && i < end,
                    "sample `{l}` of {family} outside its group:\n{}",
                    self.0
                );
            }
        }
    }
}

fn pending_of(s: &Server, key: &str) -> usize {
    s.pending(key)["notices"]
        .as_array()
        .unwrap_or_else(|| panic!("pending of {key}"))
        .len()
}

#[test]
fn build_info_and_process_metrics() {
    let s = Server::start();
    let m = Scrape::take(&s);
    let version = s.get("/health").body["version"]
        .as_str()
        .expect("version")
        .to_string();
    assert_eq!(m.kind("aware_build_info"), Some("gauge"));
    assert_eq!(
        m.must(&format!("aware_build_info{{version=\"{version}\"}}")),
        1.0
    );
    if cfg!(target_os = "linux") {
        for (family, kind) in [
            ("process_resident_memory_bytes", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
            ("process_threads", "gauge"),
            ("process_cpu_seconds_total", "counter"),
            ("process_start_time_seconds", "gauge"),
        ] {
            assert_eq!(m.kind(family), Some(kind), "{family}:\n{}", m.0);
        }
        let rss = m.must("process_resident_memory_bytes");
        assert!(rss > 1e6 && rss < 1e10, "resident memory {rss}");
        assert!(m.must("process_virtual_memory_bytes") >= rss);
        let fds = m.must("process_open_fds");
        // stdin/out/err, the listener, the database and its WAL at least.
        assert!(
            fds >= 5.0 && fds <= m.must("process_max_fds"),
            "open fds {fds}"
        );
        // The tokio runtime and the store's writer thread at least.
        assert!(m.must("process_threads") >= 2.0);
        assert!(m.must("process_cpu_seconds_total") >= 0.0);
        // The test clock does not touch this one: it is the real start of the process.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = m.must("process_start_time_seconds");
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "start time {start}, now {now}"
        );
    } else {
        assert!(!m.0.contains("process_"), "{}", m.0);
    }
}

#[test]
fn store_gauges_follow_sessions_watchers_and_pending() {
    let s = Server::start();
    let m = Scrape::take(&s);
    for family in ["aware_sessions", "aware_watchers", "aware_pending_notices"] {
        assert_eq!(m.kind(family), Some("gauge"), "{family}");
        assert_eq!(m.must(family), 0.0, "{family} before any traffic");
    }
    for key in [W, X, C, D] {
        s.create(key);
    }
    // Two watchers of C, one of them also of D: two distinct watcher sessions, three cursors.
    for (a, b) in [(W, C), (X, C), (W, D)] {
        let r = s.watch(a, b);
        assert!(r.status == 200 || r.status == 201, "watch: {}", r.body);
    }
    s.hdm(C);
    s.hdm(D);
    let pending = pending_of(&s, W) + pending_of(&s, X);
    assert!(pending >= 2, "the human messages left no notice");
    let m = Scrape::take(&s);
    assert_eq!(m.must("aware_sessions"), 4.0);
    assert_eq!(m.must("aware_watchers"), 2.0);
    assert_eq!(m.must("aware_pending_notices"), pending as f64);
    // Draining W's notices leaves X's; the gauge is read at scrape time, so it follows at once.
    let left = pending_of(&s, X);
    s.drain(W);
    assert_eq!(pending_of(&s, W), 0);
    let m = Scrape::take(&s);
    assert_eq!(m.must("aware_pending_notices"), left as f64);
    // Deleting a session drops it from the sessions gauge.
    let r = s.delete(&format!("/v1/sessions/{}", seg(D)));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(Scrape::take(&s).must("aware_sessions"), 3.0);
}

/// Opens `GET /v1/wakes` on a raw socket and returns it once the response head arrived.
fn open_stream(s: &Server) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "GET /v1/wakes HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = c.read(&mut byte).expect("read the response head");
        assert!(n == 1, "stream closed before its head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    c
}

#[test]
fn stream_subscribers_gauge_counts_open_sse_connections() {
    let s = Server::start();
    s.create(W);
    let m = Scrape::take(&s);
    assert_eq!(m.kind("aware_wake_stream_subscribers"), Some("gauge"));
    assert_eq!(m.must("aware_wake_stream_subscribers"), 0.0);
    let first = open_stream(&s);
    assert_eq!(Scrape::take(&s).must("aware_wake_stream_subscribers"), 1.0);
    let second = open_stream(&s);
    assert_eq!(Scrape::take(&s).must("aware_wake_stream_subscribers"), 2.0);
    drop(second);
    drop(first);
    // The server notices the closed sockets on its own schedule; wait for it, bounded.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = Scrape::take(&s).must("aware_wake_stream_subscribers");
        if n == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gauge still {n} after the clients closed their streams"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn request_duration_histogram_counts_requests_by_route_and_status() {
    let s = Server::start();
    s.create(W);
    for _ in 0..5 {
        s.pending(W);
    }
    // Two 404s on the same route pattern: a separate series.
    for key in ["agent:main:nobody", "agent:main:none"] {
        let r = s.get(&format!("/v1/sessions/{}/pending", seg(key)));
        assert_eq!(r.status, 404, "{}", r.body);
    }
    let m = Scrape::take(&s);
    assert_eq!(
        m.kind("aware_http_request_duration_seconds"),
        Some("histogram")
    );
    assert_eq!(m.kind("aware_http_requests_total"), Some("counter"));
    m.assert_grouped("aware_http_request_duration_seconds");
    m.assert_grouped("aware_http_requests_total");
    for (status, n) in [("200", 5.0), ("404", 2.0)] {
        let labels = format!("route=\"/v1/sessions/{{key}}/pending\",status=\"{status}\"");
        let h = |suffix: &str, extra: &str| {
            format!("aware_http_request_duration_seconds{suffix}{{{labels}{extra}}}")
        };
        assert_eq!(m.must(&h("_count", "")), n, "{status}");
        assert_eq!(m.must(&format!("aware_http_requests_total{{{labels}}}")), n);
        assert_eq!(m.must(&h("_bucket", ",le=\"+Inf\"")), n);
        let sum = m.must(&h("_sum", ""));
        assert!(sum > 0.0 && sum < 60.0 * n, "sum {sum}");
        // Buckets are cumulative: never falling, ending at the count.
        let prefix = h("_bucket", "");
        let prefix = &prefix[..prefix.len() - 1];
        let buckets: Vec<f64> =
            m.0.lines()
                .filter(|l| l.starts_with(prefix) && l.contains(",le=\""))
                .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
                .collect();
        assert!(buckets.len() >= 10, "{buckets:?}");
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert_eq!(buckets.last(), Some(&n));
    }
    // The scrape itself is counted once answered: the next scrape sees the first.
    let m = Scrape::take(&s);
    assert_eq!(
        m.must("aware_http_request_duration_seconds_count{route=\"/metrics\",status=\"200\"}"),
        1.0
    );
}

#[test]
fn startup_log_line_is_words_not_debug_text() {
    let s = Server::start();
    let deadline = Instant::now() + Duration::from_secs(20);
    let line = loop {
        let logs = s.logs();
        if let Some(l) = logs.lines().find(|l| l.contains("start-up done")) {
            break l.to_string();
        }
        assert!(Instant::now() < deadline, "no start-up line in:\n{logs}");
        std::thread::sleep(Duration::from_millis(50));
    };
    for debug in ["Some(", "None", "PruneReport", "SweepReport", "{ "] {
        assert!(!line.contains(debug), "debug text {debug:?} in: {line}");
    }
    assert!(line.contains("restart sweep"), "{line}");
    assert!(line.contains("first prune"), "{line}");
}
