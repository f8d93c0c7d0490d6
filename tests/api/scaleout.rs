//! Several `custodian serve` processes on one PostgreSQL database share the delivery work
//! (docs/decisions.md#storage-and-scale-out): claims use FOR UPDATE SKIP LOCKED with leases, so nothing is delivered twice
//! unless a process dies, and nothing is lost when one does.

use std::time::Duration;

use crate::{
    common::refused_within_a_second,
    procs::{distinct, Cluster},
    receiver::TestReceiver,
};

const TOTAL: usize = 5000;

fn delivery_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("CUSTODIAN_DELIVERY_ALLOWED_CIDRS", "127.0.0.1/32"),
        ("CUSTODIAN_DELIVERY_RETRY_SCHEDULE", "1,1,1"),
        ("CUSTODIAN_DELIVERY_TIMEOUT", "2"),
        ("CUSTODIAN_DELIVERY_POLL_INTERVAL_MS", "50"),
    ]
}

async fn wait_distinct(rx: &TestReceiver, n: usize, secs: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while distinct(&rx.received()) < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_deliver_every_notification_exactly_once() {
    let rx = TestReceiver::start().await;
    let cluster = Cluster::new(&delivery_env()).await;
    let a = cluster.start().await;
    let b = cluster.start().await;
    let token = cluster.login(&a.base).await;
    cluster.webhooks(&a.base, &token, &rx.url, 10).await;
    // 500 events x 10 webhooks, ingested half through each process.
    cluster.events(&[&a.base, &b.base], &token, "e", 0..TOTAL / 10).await;
    wait_distinct(&rx, TOTAL, 120).await;
    cluster.wait_until_idle().await;
    a.stop();
    b.stop();
    let received = rx.received();
    assert_eq!(distinct(&received), TOTAL, "every notification arrives");
    assert_eq!(received.len() - TOTAL, 0, "duplicates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_two_processes_loses_nothing() {
    let rx = TestReceiver::start().await;
    // A slow receiver and few workers, so that the kill lands mid-run.
    rx.delay_all(50);
    let mut env = delivery_env();
    env.push(("CUSTODIAN_DELIVERY_CONCURRENCY", "8"));
    let cluster = Cluster::new(&env).await;
    let a = cluster.start().await;
    let mut b = cluster.start().await;
    let token = cluster.login(&a.base).await;
    cluster.webhooks(&a.base, &token, &rx.url, 10).await;
    cluster.events(&[&a.base], &token, "k", 0..TOTAL / 10).await;
    rx.wait_for(TOTAL / 5, 60).await;
    b.kill();
    let at_kill = rx.received().len();
    assert!(at_kill < TOTAL, "the kill came too late ({at_kill} delivered)");
    rx.delay_all(0);
    // The survivor delivers the rest, and the dead process's claims once their leases end.
    wait_distinct(&rx, TOTAL, 120).await;
    a.stop();
    assert_eq!(distinct(&rx.received()), TOTAL, "every notification arrives (killed after {at_kill})");
}

/// A token revoked through one process is refused by the other within a second (its
/// authentication cache, docs/decisions.md#performance), and by the process that revoked it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_on_one_process_is_refused_by_the_other() {
    let cluster = Cluster::new(&[]).await;
    let (a, b) = (cluster.start_role("api").await, cluster.start_role("api").await);
    let session = cluster.login(&a.base).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let created: serde_json::Value = client
        .post(format!("{}/api/v2/user/accesstoken", a.base))
        .bearer_auth(&session)
        .json(&serde_json::json!({ "label": "x", "otp": "000000", "scope": ["profile"] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (id, secret) = (created["id"].as_str().unwrap(), created["token"].as_str().unwrap());
    let me = |base: &str| client.get(format!("{base}/api/v2/user/me")).bearer_auth(secret).send();
    assert_eq!(me(&b.base).await.unwrap().status(), 200);
    let res = client
        .delete(format!("{}/api/v2/user/accesstoken/{id}", a.base))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let since = std::time::Instant::now();
    assert_eq!(me(&a.base).await.unwrap().status(), 401, "refused at once where it was revoked");
    refused_within_a_second(since, "InvalidToken", || async { me(&b.base).await.unwrap() }).await;
    a.stop();
    b.stop();
}

/// A membership added and a user deactivated by a third process (the CLI) take effect on both
/// servers within a second (docs/decisions.md#performance: memberships and users are cached too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_and_deactivation_reach_every_process_within_a_second() {
    let cluster = Cluster::new(&[]).await;
    let (a, b) = (cluster.start_role("api").await, cluster.start_role("api").await);
    let session = cluster.login(&a.base).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let me = |base: &str| client.get(format!("{base}/api/v2/user/me")).bearer_auth(&session).send();
    let enterprises = |v: serde_json::Value| v["user"]["enterprises"].as_array().map_or(0, Vec::len);
    for s in [&a, &b] {
        let body: serde_json::Value = me(&s.base).await.unwrap().json().await.unwrap();
        assert_eq!(enterprises(body), 0, "cached without memberships");
    }
    let out = cluster.cmd(&["enterprise", "create", "--name", "Acme", "--json"]).output().unwrap();
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = created["id"].as_str().unwrap();
    let mut add = cluster.cmd(&["enterprise", "add-user", "--enterprise", id, "--email", "ops@example.com"]);
    assert!(add.output().unwrap().status.success());
    let since = std::time::Instant::now();
    for s in [&a, &b] {
        loop {
            let started = std::time::Instant::now();
            let body: serde_json::Value = me(&s.base).await.unwrap().json().await.unwrap();
            if enterprises(body) == 1 {
                break;
            }
            let late = started.duration_since(since);
            assert!(late < Duration::from_secs(1), "membership still unseen {late:?} after it was added");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut deactivate = cluster.cmd(&["user", "deactivate", "--email", "ops@example.com"]);
    assert!(deactivate.output().unwrap().status.success());
    let since = std::time::Instant::now();
    for s in [&a, &b] {
        refused_within_a_second(since, "InvalidToken", || async { me(&s.base).await.unwrap() }).await;
    }
    a.stop();
    b.stop();
}
