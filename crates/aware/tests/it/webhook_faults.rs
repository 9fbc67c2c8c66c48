//! A wake webhook receiver that hangs (02 §10): it accepts the connection and never answers.
//! Each attempt must time out after `timeout_ms`, be retried after the back-off, and after
//! `max_attempts` count one failure and log `wake_webhook_failed`; the notice stays pending and
//! the gateway keeps answering meanwhile.

use crate::common::*;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Accepts connections, reads what arrives, never writes a byte. Keeps every stream open.
struct Hanging {
    port: u16,
    accepted: Arc<Mutex<Vec<(Instant, TcpStream)>>>,
}

impl Hanging {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let a2 = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let mut reader = stream.try_clone().unwrap();
                a2.lock().unwrap().push((Instant::now(), stream));
                // Drain the request so the client is not blocked on writing; answer nothing.
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        Hanging { port, accepted }
    }

    fn attempts(&self) -> Vec<Instant> {
        self.accepted.lock().unwrap().iter().map(|a| a.0).collect()
    }
}

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    cond()
}

#[test]
fn a_hanging_webhook_times_out_is_retried_and_loses_nothing() {
    let hook = Hanging::start();
    let s = Server::with_config(&format!(
        "{DEFAULT_CONFIG}[agents.main.wake_webhook]\nurl = \"http://127.0.0.1:{}/hook\"\ntimeout_ms = 300\nmax_attempts = 2\n",
        hook.port
    ));
    s.create(W);
    s.create_child(C, W);
    let started = Instant::now();
    s.hdm(C); // W's notice opens: one session-state wake for W goes to the hanging hook

    // While the receiver hangs, the gateway answers at once.
    assert!(wait_until(Duration::from_secs(5), || !hook
        .attempts()
        .is_empty()));
    let t = Instant::now();
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "a request waited on the webhook"
    );

    // Two attempts: the first times out after 300 ms, the retry follows 1 s later.
    assert!(
        wait_until(Duration::from_secs(10), || s
            .metric("aware_wake_webhook_failures_total")
            == Some(1.0)),
        "failures: {:?}, attempts: {}, logs: {}",
        s.metric("aware_wake_webhook_failures_total"),
        hook.attempts().len(),
        s.logs()
    );
    let gave_up_after = started.elapsed();
    let attempts = hook.attempts();
    assert_eq!(attempts.len(), 2, "max_attempts = 2");
    let gap = attempts[1].duration_since(attempts[0]);
    assert!(
        gap >= Duration::from_millis(1250) && gap < Duration::from_millis(2500),
        "timeout 300 ms + back-off 1 s, got {gap:?}"
    );
    assert!(
        gave_up_after < Duration::from_secs(4),
        "the second attempt timed out after timeout_ms too ({gave_up_after:?})"
    );
    assert!(s.logs().contains("wake_webhook_failed"), "{}", s.logs());
    assert_eq!(
        s.metric("aware_wakes_delivered_total{channel=\"webhook\"}"),
        Some(0.0)
    );
    // No third attempt: the give-up line (logged when the delivery task ends, after its last
    // attempt) is in, and the attempts stand at 2. The notice is still pending: nothing lost.
    assert!(
        wait_until(Duration::from_secs(10), || s.logs().contains("attempts=2")),
        "{}",
        s.logs()
    );
    assert_eq!(hook.attempts().len(), 2);
    assert_eq!(s.metric("aware_wake_webhook_failures_total"), Some(1.0));
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    let d = s.drain(W);
    assert_eq!(d["notices"].as_array().unwrap().len(), 1, "{d}");
    eprintln!("hanging webhook: 2 attempts {gap:?} apart, failure counted after {gave_up_after:?}");
}
