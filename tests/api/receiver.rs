//! A real webhook receiver: a small HTTP server that records what it gets and answers from a
//! plan (status, Retry-After, delay), then 200.

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

#[derive(Clone)]
pub struct TestReceiver {
    pub url: String,
    pub port: u16,
    inner: Arc<Mutex<Inner>>,
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
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
        let app = Router::new().route("/hook", post(handle)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url: format!("http://127.0.0.1:{port}/hook"), port, inner }
    }

    /// Answers the next requests from `plan`, then 200.
    pub fn plan(&self, plan: &[Answer]) {
        self.inner.lock().unwrap().plan = plan.iter().copied().collect();
    }

    /// Answers every request with `status`.
    pub fn always(&self, status: u16) {
        self.inner.lock().unwrap().always_status = Some(status);
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
