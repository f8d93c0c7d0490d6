//! The accept loop (docs/decisions.md#connections-and-database-outages). Each connection is served by hyper's HTTP/1 with a
//! header-read timeout, is closed when it sits idle between requests, and counts against a cap
//! per process and per client address. A connection beyond a cap is answered 503 `ServerBusy`
//! and closed at once, so no client can hold sockets until the process runs out of file
//! descriptors. (`axum::serve` has neither the timeouts nor the caps.)

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use axum::{extract::ConnectInfo, Router};
use hyper::{body::Incoming, server::conn::http1, Request};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use ipnet::IpNet;
use tokio::{net::TcpListener, sync::watch};
use tower::ServiceExt;

use crate::{
    config::Config,
    metrics::{Metrics, RefusalLabels},
};

/// The bounds `serve` applies, from `config.connections` (see [`Limits::from_config`]).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once in this process, after the descriptor budget.
    pub max: usize,
    /// Connections open at once from one [`address_key`]; 0: no cap.
    pub max_per_address: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Peers exempt from the per-address cap (`trusted_proxies`).
    pub exempt: Vec<IpNet>,
}

impl Limits {
    /// Raises the soft file-descriptor limit to the hard one, then takes `connections.max`,
    /// lowered to fit the limit less `connections.reserved_descriptors`, `delivery.concurrency`
    /// and the database pool (logged when lowered).
    pub fn from_config(config: &Config) -> Self {
        let c = &config.connections;
        let soft = match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(soft) => soft,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read or raise the file descriptor limit");
                u64::MAX
            }
        };
        let reserve = c.reserved_descriptors
            + config.delivery.concurrency as u64
            + u64::from(config.postgres.max_connections);
        let budget = usize::try_from(soft.saturating_sub(reserve)).unwrap_or(usize::MAX).max(1);
        if budget < c.max {
            tracing::warn!(
                descriptors = soft,
                reserved = reserve,
                connections = budget,
                "the file descriptor limit allows fewer inbound connections than connections.max"
            );
        }
        Self {
            max: c.max.min(budget),
            max_per_address: c.max_per_address,
            header_read_timeout: Duration::from_secs(c.header_read_timeout),
            idle_timeout: Duration::from_secs(c.idle_timeout),
            exempt: config.trusted_proxies.clone(),
        }
    }
}

/// The key a client address is counted under: an IPv4 address (also when written as an
/// IPv4-mapped IPv6 address), or the /64 network of an IPv6 address, since one host usually
/// holds a whole /64.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// Open connections, in all and by address key.
struct Gate {
    limits: Limits,
    counts: Mutex<Counts>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Counts {
    open: usize,
    by_key: HashMap<IpAddr, usize>,
}

/// One admitted connection; gives its place back when dropped.
struct Admission {
    gate: Arc<Gate>,
    key: Option<IpAddr>,
}

impl Gate {
    /// Counts a new connection from `peer`, or names the cap it would pass.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admission, &'static str> {
        let per_address = self.limits.max_per_address;
        let key = (per_address > 0 && !self.limits.exempt.iter().any(|n| n.contains(&peer)))
            .then(|| address_key(peer));
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if counts.open >= self.limits.max {
            return Err("process");
        }
        if let Some(key) = key {
            let n = counts.by_key.entry(key).or_default();
            if *n >= per_address {
                return Err("address");
            }
            *n += 1;
        }
        counts.open += 1;
        self.metrics.connections_open.set(counts.open as i64);
        Ok(Admission { gate: self.clone(), key })
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut counts = self.gate.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.open = counts.open.saturating_sub(1);
        if let Some(key) = self.key {
            if let Some(n) = counts.by_key.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    counts.by_key.remove(&key);
                }
            }
        }
        self.gate.metrics.connections_open.set(counts.open as i64);
    }
}

/// Answers a connection refused at a cap with a 503 in the spec's error shape, if the socket
/// takes it at once (it is new, so its send buffer is empty), and closes it.
fn refuse(stream: tokio::net::TcpStream, limit: &'static str) {
    let setting = if limit == "process" { "connections.max" } else { "connections.max_per_address" };
    let body = serde_json::json!({
        "name": "ServerBusy",
        "error": "too many open connections; try again shortly",
        "context": { "limit": setting, "retryAfter": 1 },
        "requestId": crate::ids::new_id(),
    })
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let _ = stream.try_write(format!("{head}{body}").as_bytes());
}

/// When a connection last finished a request, for the idle timeout.
struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `opened` to the end of the last request, plus one; 0: none yet.
    last_done: AtomicU64,
}

/// Marks a request done when dropped, also when its future is cancelled.
struct Running(Arc<Activity>);

impl Activity {
    fn start(self: &Arc<Self>) -> Running {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Running(self.clone())
    }

    /// Since when the connection has had no request, if it has finished one (before that,
    /// hyper's header-read timeout bounds the wait).
    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        match self.last_done.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(self.opened + Duration::from_millis(ms - 1)),
        }
    }

    /// Completes once no request is in progress (polled: only used while stopping).
    async fn quiet(&self) {
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Completes once the connection has been idle for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            match self.idle_since() {
                Some(since) if since.elapsed() >= limit => return,
                Some(since) => tokio::time::sleep_until((since + limit).into()).await,
                None => tokio::time::sleep(limit).await,
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.opened.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.0.last_done.store(ms + 1, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts connections on `listener` and serves `app` on each, within `limits`, until `stop`
/// turns true; then stops accepting and waits up to `drain` for open requests to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let idle = limits.idle_timeout;
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let gate = Arc::new(Gate { limits, counts: Mutex::default(), metrics: metrics.clone() });
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        let admission = match gate.admit(peer.ip()) {
            Ok(a) => a,
            Err(limit) => {
                metrics.connections_refused.get_or_create(&RefusalLabels { limit }).inc();
                refuse(stream, limit);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_done: AtomicU64::new(0),
        });
        let (app, requests) = (app.clone(), activity.clone());
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            let running = requests.start();
            let call = app.clone().oneshot(req);
            async move {
                let res = call.await;
                drop(running);
                res
            }
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let mut stopping = stop.clone();
        tokio::spawn(async move {
            let _admission = admission;
            // At stop, a request in progress finishes (hyper's graceful shutdown); a connection
            // without one, even one that has sent nothing yet, is closed at once instead of
            // holding the stop until its header-read timeout.
            let closing = async {
                let _ = stopping.wait_for(|s| *s).await;
                activity.quiet().await;
            };
            tokio::select! {
                _ = conn => {}
                _ = activity.idle_for(idle) => {}
                _ = closing => {}
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after the drain period; closing them");
    }
}

/// After a failed accept: a connection that went away before it was taken is nothing; anything
/// else (out of descriptors) is logged and waited out briefly instead of retried in a spin.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().expect("ip");
        let c: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        assert_eq!(address_key(a), "2001:db8:1:2::".parse::<IpAddr>().expect("ip"));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("ip");
        assert_eq!(address_key(mapped), "192.0.2.7".parse::<IpAddr>().expect("ip"));
    }
}
