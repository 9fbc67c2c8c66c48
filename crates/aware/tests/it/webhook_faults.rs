//! A wake webhook receiver that hangs (02 §10): it accepts the connection and never answers.
//! Each attempt must time out after `timeout_ms`, be retried after the back-off, and after
//! `max_attempts` count one failure and log `wake_webhook_failed`; the notice stays pending and
//! the gateway keeps answering meanwhile.

use crate::common::*;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One connection the receiver accepted: when, and when the gateway closed it (end of file).
#[derive(Debug, Clone, Copy)]
struct Attempt {
    accepted: Instant,
    closed: Option<Instant>,
}

/// Accepts connections, reads what arrives, never writes a byte. Keeps every stream open until
/// the gateway closes it, and records when it did.
struct Hanging {
    port: u16,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    _streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Hanging {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let (a2, s2) = (attempts.clone(), streams.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let mut reader = stream.try_clone().unwrap();
                let i = {
                    let mut a = a2.lock().unwrap();
                    a.push(Attempt {
                        accepted: Instant::now(),
                        closed: None,
                    });
                    a.len() - 1
                };
                s2.lock().unwrap().push(stream);
                // Drain the request so the client is not blocked on writing; answer nothing.
                // End of file (or a reset) means the gateway gave up on this attempt.
                let a3 = a2.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
                    a3.lock().unwrap()[i].closed = Some(Instant::now());
                });
            }
        });
        Hanging {
            port,
            attempts,
            _streams: streams,
        }
    }

    fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
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

fn hook_config(port: u16, timeout_ms: u64, max_attempts: u32) -> String {
    format!(
        "{DEFAULT_CONFIG}[agents.main.wake_webhook]\nurl = \"http://127.0.0.1:{port}/hook\"\n\
         timeout_ms = {timeout_ms}\nmax_attempts = {max_attempts}\n"
    )
}

#[test]
fn the_gateway_answers_while_a_webhook_delivery_hangs() {
    // A minute of timeout: the delivery is certainly still hanging while the requests below
    // are answered, however slow the machine.
    let hook = Hanging::start();
    let s = Server::with_config(&hook_config(hook.port, 60_000, 1));
    s.create(W);
    s.create_child(C, W);
    s.hdm(C); // W's notice opens: one session-state wake for W goes to the hanging hook
    assert!(wait_until(Duration::from_secs(20), || !hook
        .attempts()
        .is_empty()));
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    s.create(X);
    s.hdm(C);
    // Answered while the delivery was still in flight: its connection is open, nothing failed.
    let a = hook.attempts();
    assert_eq!(a.len(), 1, "{a:?}");
    assert!(a[0].closed.is_none(), "the attempt ended early: {a:?}");
    assert_eq!(s.metric("aware_wake_webhook_in_flight "), Some(1.0));
    assert_eq!(s.metric("aware_wake_webhook_failures_total"), Some(0.0));
}

#[test]
fn a_hanging_webhook_times_out_is_retried_and_loses_nothing() {
    let hook = Hanging::start();
    let s = Server::with_config(&hook_config(hook.port, 300, 2));
    s.create(W);
    s.create_child(C, W);
    s.hdm(C); // W's notice opens: one session-state wake for W goes to the hanging hook

    // Two attempts, each given up by the gateway (its connection closed: the timeout), the
    // second only after the first was given up; then one failure, counted once.
    assert!(
        wait_until(Duration::from_secs(30), || s
            .metric("aware_wake_webhook_failures_total")
            == Some(1.0)),
        "failures: {:?}, attempts: {:?}, logs: {}",
        s.metric("aware_wake_webhook_failures_total"),
        hook.attempts(),
        s.logs()
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
    let a = hook.attempts();
    assert_eq!(a.len(), 2, "max_attempts = 2: {a:?}");
    let first_closed = a[0].closed.expect("the first attempt was never given up");
    assert!(
        first_closed <= a[1].accepted,
        "the retry started before the first attempt was given up: {a:?}"
    );
    // The second attempt is given up too (it does not hang on): its connection closes.
    assert!(
        wait_until(Duration::from_secs(30), || hook.attempts()[1]
            .closed
            .is_some()),
        "the second attempt was never given up: {:?}",
        hook.attempts()
    );
    assert_eq!(s.metric("aware_wake_webhook_failures_total"), Some(1.0));
    assert_eq!(s.notice_texts(W), vec![nt(C, 1)]);
    let d = s.drain(W);
    assert_eq!(d["notices"].as_array().unwrap().len(), 1, "{d}");
    eprintln!(
        "hanging webhook: attempts {:?} apart (timeout 300 ms + back-off 1 s; printed, not judged)",
        a[1].accepted.duration_since(a[0].accepted)
    );
}
