//! A database outage, injected on purpose (docs/decisions.md#connections-and-database-outages): the server reaches PostgreSQL through
//! a TCP proxy the test cuts and restores. During the cut every request that needs the
//! database answers 503 `ServiceUnavailable` quickly; afterwards the client's retries with the
//! same `eventId` are accepted, and every accepted event is delivered exactly once, including
//! the deliveries that finished while their outcomes could not be written. PostgreSQL only:
//! a SQLite file has no connection to cut.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

use crate::{
    common::*,
    procs::distinct,
    receiver::TestReceiver,
    webhooks::{fast, fixture, WALLET},
};

/// A TCP proxy to `upstream`. Cut: every open connection is closed, and new ones are closed as
/// soon as they are accepted, as when the database server goes away. Restored: it forwards
/// again.
pub(crate) struct CutProxy {
    pub addr: SocketAddr,
    pub cut: watch::Sender<bool>,
}

impl CutProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (cut, watch) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if *watch.borrow() {
                    continue;
                }
                let mut cut = watch.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.wait_for(|c| *c) => {}
                    }
                });
            }
        });
        CutProxy { addr, cut }
    }
}

/// `url` (postgres://user@host:port/db) through the proxy on 127.0.0.1:`port`.
pub(crate) fn through(url: &str, port: u16) -> String {
    let mut u = url::Url::parse(url).expect("database URL");
    u.set_host(Some("127.0.0.1")).expect("host");
    u.set_port(Some(port)).expect("port");
    u.to_string()
}

pub(crate) fn upstream(url: &str) -> SocketAddr {
    let u = url::Url::parse(url).expect("database URL");
    let host = u.host_str().expect("host").to_string();
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), u.port().unwrap_or(5432)))
        .expect("resolve")
        .next()
        .expect("an address")
}

fn event(i: usize) -> Value {
    json!({ "eventId": format!("outage-{i}"), "type": "transfer", "walletId": WALLET })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_a_quick_503_and_no_event_is_lost_or_duplicated() {
    let admin_url = std::env::var("CUSTODIAN_TEST_POSTGRES_URL").expect("CUSTODIAN_TEST_POSTGRES_URL");
    let proxy = CutProxy::start(upstream(&admin_url)).await;
    let port = proxy.addr.port();
    let f = fixture(move |c| {
        fast(c);
        let defaults = custodian::config::PostgresConfig::default();
        c.postgres.acquire_timeout_ms = defaults.acquire_timeout_ms;
        c.postgres.statement_timeout = defaults.statement_timeout;
        c.database_url = through(&c.database_url, port);
    })
    .await;
    let rx = TestReceiver::start().await;
    // Slow enough that deliveries are in flight when the database goes.
    rx.delay_all(400);
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    for i in 0..20 {
        expect_json(f.app.ingest(&admin, &event(i)).await, 200).await;
    }

    proxy.cut.send_replace(true);
    let asked = Instant::now();
    let health = f.app.client.get(f.app.url("/health")).send().await.expect("health");
    assert_eq!(health.status(), 503);
    assert!(asked.elapsed() < Duration::from_millis(1200), "/health took {:?}", asked.elapsed());
    // Ten events, a lookup and a login while the database is away: each a quick 503.
    let during = (20..30).map(|i| {
        let (app, admin) = (&f.app, admin.clone());
        async move { (Instant::now(), app.ingest(&admin, &event(i)).await) }
    });
    let mut refused = 0;
    for (sent, res) in futures_util::future::join_all(during).await {
        let took = sent.elapsed();
        assert!(took < Duration::from_millis(2500), "answered after {took:?}");
        assert_eq!(res.headers().get("retry-after").map(|v| v.to_str().unwrap_or("")), Some("1"));
        assert_error(res, 503, "ServiceUnavailable").await;
        refused += 1;
    }
    let lookup = f.app.lookup(&f.token, "", &json!({ "ids": [WALLET] })).await;
    assert_error(lookup, 503, "ServiceUnavailable").await;
    let login = f.app.login_raw(&f.user.email, PASSWORD, &f.user.code(0)).await;
    assert_error(login, 503, "ServiceUnavailable").await;
    // The outage lasts half a second more, so that in-flight deliveries finish during it and
    // their outcomes wait for the database (the scenario's pacing; it waits for no outcome).
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.cut.send_replace(false);

    // The client retries what was refused, with the same eventIds.
    for i in 20..30 {
        until("the retried event to be accepted", 10, || async {
            let res = f.app.ingest(&admin, &event(i)).await;
            (res.status() == 200).then_some(())
        })
        .await;
    }
    rx.delay_all(0);
    rx.wait_for(30, 30).await;
    wait_until_idle(&f.app.state.store).await;
    let got = rx.received();
    let stored = f.app.raw_sql("SELECT count(*)::text FROM events").await;
    assert_eq!(refused, 10);
    assert_eq!(stored, vec!["30".to_string()], "accepted 20 + 10 retried");
    assert_eq!(distinct(&got), 30, "every accepted event delivered");
    assert_eq!(got.len(), 30, "and none twice ({} deliveries)", got.len());
}
