//! Bounded connections (docs/decisions.md#connections-and-database-outages): the header-read and idle timeouts, the per-address and
//! per-process caps, and the descriptor reserve that keeps deliveries going under a flood of
//! idle sockets. Each test fails on a server without the bound it names.

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

use crate::{
    common::*,
    receiver::{Answer, TestReceiver},
    webhooks::{fast, fixture, WALLET},
};

fn server_addr(app: &TestApp) -> SocketAddr {
    app.base.trim_start_matches("http://").parse().expect("server address")
}

/// A TCP connection to `to` from the loopback address `from` (Linux routes all of 127/8).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::from((from, 0))).expect("bind");
    socket.connect(to).await.expect("connect")
}

/// An HTTP client whose connections come from 127.0.0.2: another client address.
fn other_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().local_address(IpAddr::from([127, 0, 0, 2])).build().expect("client")
}

/// Reads until the server closes the connection (or 10 s pass: then panics, naming `what`).
async fn read_until_closed(stream: &mut TcpStream, what: &str) -> String {
    let mut got = Vec::new();
    match tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await {
        Ok(_) => String::from_utf8_lossy(&got).into_owned(),
        Err(_) => panic!("{what}: still open after 10 s"),
    }
}

/// A labelled counter of /metrics, read by `client`.
async fn labelled_metric(client: &reqwest::Client, app: &TestApp, series: &str) -> i64 {
    let text = client.get(app.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
}

#[tokio::test]
async fn a_connection_without_a_complete_request_head_is_closed() {
    let app = spawn_app_with(|c| {
        c.connections.header_read_timeout = 1;
        c.connections.idle_timeout = 1;
    })
    .await;
    let addr = server_addr(&app);
    for (what, sent) in [("nothing sent", ""), ("half a head", "GET /health HTTP/1.1\r\nHost: a\r\nX-Slow: ")]
    {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(sent.as_bytes()).await.expect("write");
        let started = Instant::now();
        read_until_closed(&mut s, what).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(900), "{what}: closed after {took:?}, before the timeout");
    }
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_after_its_idle_timeout() {
    let app = spawn_app_with(|c| {
        c.connections.header_read_timeout = 30;
        c.connections.idle_timeout = 1;
    })
    .await;
    let mut s = TcpStream::connect(server_addr(&app)).await.expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n").await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("\"ok\"") {
        let n = s.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed before answering: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let answered = Instant::now();
    let rest = read_until_closed(&mut s, "an idle kept-alive connection").await;
    assert!(rest.is_empty(), "nothing more is sent: {rest}");
    // Closed by the idle timeout (1 s), not the header-read timeout (30 s).
    assert!(answered.elapsed() >= Duration::from_millis(900), "closed after {:?}", answered.elapsed());
}

/// One address opens 5,000 idle connections: past `max_per_address` they are answered 503 and
/// closed, while another client is served and a webhook is still delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_hold_more_than_its_cap_and_others_are_served() {
    let f = fixture(|c| {
        fast(c);
        c.connections.max_per_address = 1000;
    })
    .await;
    let rx = TestReceiver::start().await;
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    let addr = server_addr(&f.app);
    let mut held = Vec::with_capacity(5000);
    for _ in 0..5000 {
        held.push(connect_from([127, 0, 0, 1], addr).await);
    }
    let other = other_client();
    let series = "custodian_http_connections_refused_total{limit=\"address\"}";
    let refused = until("the refusals to be counted", 30, || async {
        let n = labelled_metric(&other, &f.app, series).await;
        (n >= 4000).then_some(n)
    })
    .await;
    // The fixture's own client may hold a kept-alive connection or two from 127.0.0.1.
    assert!(refused <= 4003, "{refused} refused of 5,000 with a cap of 1,000");
    let last = read_until_closed(held.last_mut().expect("held"), "a refused connection").await;
    assert!(last.starts_with("HTTP/1.1 503"), "{last}");
    let body: Value = serde_json::from_str(last.split("\r\n\r\n").nth(1).expect("body")).expect("json");
    assert_eq!(body["name"], "ServerBusy");
    assert_eq!(body["context"]["limit"], "connections.max_per_address");
    assert!(body["requestId"].as_str().is_some_and(|s| !s.is_empty()), "{body}");

    let health = other.get(f.app.url("/health")).send().await.expect("health");
    assert_eq!(health.status(), 200);
    let res = other
        .post(f.app.url("/api/v2/internal/events"))
        .bearer_auth(&admin)
        .json(&json!({ "eventId": "during-flood", "type": "transfer", "walletId": WALLET }))
        .send()
        .await
        .expect("event");
    assert_eq!(res.status(), 200);
    rx.wait_for(1, 10).await;
    drop(held);
}

#[tokio::test]
async fn past_the_process_cap_every_address_waits_for_a_free_place() {
    let app = spawn_app_with(|c| {
        c.connections.max = 100;
        c.connections.max_per_address = 0;
    })
    .await;
    let addr = server_addr(&app);
    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(connect_from([127, 0, 0, 1], addr).await);
    }
    let mut late = connect_from([127, 0, 0, 2], addr).await;
    let answer = read_until_closed(&mut late, "a connection past the process cap").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("\"limit\":\"connections.max\""), "{answer}");
    held.truncate(90);
    let other = other_client();
    until("a place to free up", 10, || async {
        other.get(app.url("/health")).send().await.ok().filter(|r| r.status() == 200).map(|_| ())
    })
    .await;
}

/// A server started with 512 file descriptors: 2,000 idle connections fill only what the
/// descriptor budget leaves for them, and a webhook retry during the flood still connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbound_sockets_never_take_the_descriptors_deliveries_need() {
    use crate::procs::Cluster;
    let rx = TestReceiver::start().await;
    let cluster = Cluster::new(&[
        ("CUSTODIAN_DELIVERY_ALLOWED_CIDRS", "127.0.0.1/32"),
        ("CUSTODIAN_DELIVERY_RETRY_SCHEDULE", "3"),
        ("CUSTODIAN_DELIVERY_POLL_INTERVAL_MS", "50"),
        ("CUSTODIAN_DELIVERY_CONCURRENCY", "32"),
        ("CUSTODIAN_CONNECTIONS_MAX_PER_ADDRESS", "0"),
    ])
    .await;
    let log = cluster.dir.path().join("serve.log");
    let server = cluster.start_with_descriptors(512, &log).await;
    let base = server.base.clone();
    let token = cluster.login(&base).await;
    cluster.webhooks(&base, &token, &rx.url, 1).await;
    // The first attempt fails; the retry, 3 s later, falls inside the flood.
    rx.plan(&[Answer { status: 500, retry_after: None, delay_ms: 0 }]);
    cluster.events(&[&base], &token, "fd", 0..1).await;
    rx.wait_for(1, 10).await;
    let addr: SocketAddr = base.trim_start_matches("http://").parse().expect("addr");
    let mut held = Vec::with_capacity(2000);
    for _ in 0..2000 {
        held.push(connect_from([127, 0, 0, 1], addr).await);
    }
    rx.wait_for(2, 15).await;
    // The server closes the connections over its cap: wait until the ones still open (reading
    // would block, not end) are within it. 512 less 256 reserved, 32 for deliveries and 16 for
    // the pool.
    let admitted = || {
        let mut buf = [0u8; 16];
        held.iter()
            .filter(|s| matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock))
            .count()
    };
    until("the connections over the cap closed", 15, || async { (admitted() <= 208).then_some(()) }).await;
    let admitted = admitted();
    assert!((1..=208).contains(&admitted), "{admitted} of 2,000 connections held open");
    drop(held);
    until("the server to take connections again", 10, || async {
        let r = cluster.client.get(format!("{base}/health")).send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    drop(server);
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!text.contains("Too many open files"), "the server ran out of descriptors:\n{text}");
    assert!(text.contains("allows fewer inbound connections"), "the lowered cap is logged:\n{text}");
}

/// A stop does not wait for connections without a request in progress: one halfway through its
/// request head would otherwise hold it until its header-read timeout (30 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_closes_connections_that_have_no_request_in_progress() {
    use crate::procs::Cluster;
    let cluster = Cluster::new(&[]).await;
    let server = cluster.start().await;
    let addr: SocketAddr = server.base.trim_start_matches("http://").parse().expect("addr");
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let mut partial = TcpStream::connect(addr).await.expect("connect");
    partial.write_all(b"GET /health HTTP/1.1\r\nHost: a\r\n").await.expect("write");
    // The server has accepted both before the stop (its gauge counts them, and this request).
    until("both connections accepted", 10, || async {
        let text =
            cluster.client.get(format!("{}/metrics", server.base)).send().await.ok()?.text().await.ok()?;
        let open = text.lines().find(|l| l.starts_with("custodian_http_connections_open"))?;
        (open.rsplit(' ').next()?.parse::<f64>().ok()? >= 3.0).then_some(())
    })
    .await;
    let asked = Instant::now();
    tokio::task::spawn_blocking(move || server.stop()).await.expect("stop");
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(10), "the stop took {took:?}");
    assert!(read_until_closed(&mut silent, "a silent connection at stop").await.is_empty());
    read_until_closed(&mut partial, "a connection halfway through its head at stop").await;
}
