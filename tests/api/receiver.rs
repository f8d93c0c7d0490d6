//! A real webhook receiver: a small HTTP server that records what it gets and answers from a
//! plan (status, Retry-After, delay), then 200. It can also hold every answer until the test
//! releases it, so that a test sees what happens while deliveries hang without timing them.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::HeaderMap, response::IntoResponse, routing::post, Router};

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: String,
    pub at: Instant,
}

/// One planned answer.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<u64>,
    pub delay_ms: u64,
}

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    plan: VecDeque<Answer>,
    default_delay_ms: u64,
    always_status: Option<u16>,
}

/// The receiver's state: what it got and its plan, and whether answers are held.
#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

#[derive(Clone)]
pub struct TestReceiver {
    pub url: String,
    pub port: u16,
    inner: Arc<Mutex<Inner>>,
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

async fn handle(
    State(Shared { inner, held }): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let answer = {
        let mut i = inner.lock().unwrap();
        i.received.push(Received {
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
            at: Instant::now(),
        });
        let default = Answer {
            status: i.always_status.unwrap_or(200),
            retry_after: None,
            delay_ms: i.default_delay_ms,
        };
        i.plan.pop_front().unwrap_or(default)
    };
    // Until the test releases the receiver; the sender lives as long as the receiver.
    let _ = held.subscribe().wait_for(|h| !*h).await;
    if answer.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(answer.delay_ms)).await;
    }
    let mut res =
        (axum::http::StatusCode::from_u16(answer.status).unwrap(), "receiver says hi").into_response();
    if let Some(r) = answer.retry_after {
        res.headers_mut().insert("retry-after", r.into());
    }
    res
}

impl TestReceiver {
    pub async fn start() -> Self {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let held = Arc::new(tokio::sync::watch::Sender::new(false));
        let shared = Shared { inner: inner.clone(), held: held.clone() };
        let app = Router::new().route("/hook", post(handle)).with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url: format!("http://127.0.0.1:{port}/hook"), port, inner, held }
    }

    /// Answers the next requests from `plan`, then 200.
    pub fn plan(&self, plan: &[Answer]) {
        self.inner.lock().unwrap().plan = plan.iter().copied().collect();
    }

    /// Answers every request with `status`.
    pub fn always(&self, status: u16) {
        self.inner.lock().unwrap().always_status = Some(status);
    }

    /// Holds every answer, to requests already waiting and to new ones, until [`Self::release`].
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Answers every held request, and stops holding.
    pub fn release(&self) {
        self.held.send_replace(false);
    }

    pub fn delay_all(&self, ms: u64) {
        self.inner.lock().unwrap().default_delay_ms = ms;
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().unwrap().received.clone()
    }

    /// Waits until at least `n` requests arrived (panics after `secs`).
    pub async fn wait_for(&self, n: usize, secs: u64) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(Instant::now() < deadline, "expected {n} deliveries, got {} after {secs} s", got.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
