//! The sender: one attempt of one notification, its exact payload POSTed with its signatures
//! and custom headers through the SSRF guard, and the outcome it leads to.

use super::*;

pub(super) fn client(
    concurrency: usize,
    timeout: Duration,
    resolver: Option<Arc<ssrf::GuardedResolver>>,
) -> reqwest::Result<Client> {
    let mut b = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("Custodian-Webhooks/", env!("CARGO_PKG_VERSION")))
        .pool_max_idle_per_host(concurrency)
        .connect_timeout(timeout)
        .no_proxy();
    if let Some(r) = resolver {
        b = b.dns_resolver(r);
    }
    b.build()
}

/// The error and its causes on one line.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

/// What an attempt got back.
pub(super) struct Response {
    status: u16,
    body: String,
    retry_after: Option<Duration>,
}

impl Engine {
    /// One attempt at one notification.
    #[tracing::instrument(level = "debug", skip_all, fields(notification = %c.notification.id, webhook = %c.webhook.id))]
    pub(super) async fn deliver(&self, c: Claimed) -> Outcome {
        let started_at = self.deps.store.clock().now_ms();
        let t0 = Instant::now();
        let result = self.send(&c).await;
        let elapsed = t0.elapsed();
        let n = &c.notification;
        let (status_code, response_body, error, retry_after) = match result {
            Ok(r) => (Some(r.status), Some(r.body), None, r.retry_after),
            Err(e) => (None, None, Some(e), None),
        };
        let success = status_code.is_some_and(|s| (200..300).contains(&s));
        let response_body = response_body.map(|mut b| {
            if success {
                crate::text::truncate(&mut b, SUCCESS_BODY_LIMIT);
            }
            b
        });
        let completion = if success {
            Completion::Delivered
        } else {
            let failed_before = usize::try_from(n.retries).unwrap_or(usize::MAX);
            match retry::next_delay(&self.deps.config.delivery.retry_schedule, failed_before, retry_after) {
                Some(d) => Completion::Retry(
                    self.deps.store.clock().now_ms() + i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2),
                ),
                None => Completion::Failed,
            }
        };
        let outcome = match completion {
            Completion::Delivered => "delivered",
            Completion::Retry(_) => "retry",
            Completion::Failed => "failed",
        };
        self.deps.metrics.delivery(outcome, elapsed.as_secs_f64());
        if !success {
            // The URL and custom header values stay out of the log: they may carry credentials.
            tracing::warn!(
                notification = %n.id,
                webhook = %c.webhook.id,
                status = status_code.map(|s| s.to_string()).unwrap_or_else(|| "none".into()),
                error = error.as_deref().unwrap_or(""),
                next = outcome,
                "delivery failed"
            );
        }
        Outcome {
            attempt: Attempt {
                notification_id: n.id.clone(),
                webhook_id: c.webhook.id.clone(),
                started_at_ms: started_at,
                duration_ms: i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
                status_code,
                success,
                response_body,
                error,
            },
            completion,
        }
    }

    pub(super) async fn send(&self, c: &Claimed) -> Result<Response, String> {
        let (n, w) = (&c.notification, &c.webhook);
        let url = Url::parse(&w.url).map_err(|e| format!("invalid url: {e}"))?;
        let client = if w.allow_blocked_hosts {
            &self.open
        } else {
            ssrf::check_literal(&self.guard, &url).map_err(|e| e.to_string())?;
            &self.guarded
        };
        let timestamp = crate::clock::wall_now();
        let mut req = client
            .post(url)
            .timeout(Duration::from_secs(self.deps.config.delivery.timeout))
            .header(header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", n.idempotency_key())
            .header("webhook-id", n.id.as_str())
            .header("webhook-timestamp", timestamp.to_string());
        if let Some(eid) = w.level.enterprise_id() {
            let secrets = self
                .deps
                .secrets
                .get(&self.deps.store, &self.deps.key, eid)
                .await
                .map_err(|e| format!("webhook secret: {e}"))?;
            if let Some(s) = secrets {
                let body = n.payload.as_bytes();
                req = req.header("x-signature-sha256", signing::bitgo_signature(&s.current, body));
                let mut sigs = vec![signing::standard_signature(&s.current, &n.id, timestamp, body)];
                if let Some(prev) = &s.previous {
                    sigs.push(signing::standard_signature(prev, &n.id, timestamp, body));
                }
                req = req.header("webhook-signature", sigs.join(" "));
            }
        }
        for (k, v) in &w.custom_headers {
            req = req.header(k.as_str(), headers::open(&self.deps.key, &w.id, k, v)?);
        }
        let body = bytes::Bytes::from_owner(SharedText(n.payload.clone()));
        let mut res = req.body(body).send().await.map_err(|e| error_chain(&e.without_url()))?;
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry::parse_retry_after(v, chrono::Utc::now()));
        let mut body = Vec::new();
        while body.len() < RESPONSE_BODY_LIMIT {
            match res.chunk().await {
                Ok(Some(chunk)) => {
                    let room = RESPONSE_BODY_LIMIT - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                _ => break,
            }
        }
        Ok(Response { status, body: String::from_utf8_lossy(&body).into_owned(), retry_after })
    }
}

/// A payload shared with its notification (and its event's other notifications), sent as the
/// request body without a copy.
struct SharedText(std::sync::Arc<str>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}
