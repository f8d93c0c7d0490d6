//! The chain watcher when things break: a process killed mid-backfill, a second process taking
//! the chain over, the node going away, a reorg deeper than `reorg_depth`.

use std::{collections::HashSet, process::Stdio, time::Duration};

use serde_json::{json, Value};

use crate::chain::{Anvil, ONE_ETH, RICH, WATCHED};
use crate::common::*;
use crate::hostile_node::HostileNode;
use crate::procs::{Cluster, Server};
use crate::receiver::TestReceiver;

const ETH_WALLET: &str = "e7e1a1b2c3d4e5f60718293a4b5c6d7e";

/// A cluster whose processes watch `anvil` as hteth (3 confirmations, one block per round, so
/// a backfill takes many rounds), with an hteth wallet at [`WATCHED`].
async fn chain_cluster(anvil: &Anvil) -> Cluster {
    chain_cluster_at(&anvil.url, &[]).await
}

/// [`chain_cluster`] reading the node at `rpc_url`, with `more` settings.
async fn chain_cluster_at(rpc_url: &str, more: &[(&str, &str)]) -> Cluster {
    let mut env = vec![
        ("CUSTODIAN_CHAINS_HTETH_RPC_URL", rpc_url),
        ("CUSTODIAN_CHAINS_HTETH_CHAIN_ID", "31337"),
        ("CUSTODIAN_CHAINS_HTETH_CONFIRMATIONS", "3"),
        ("CUSTODIAN_CHAINS_HTETH_START_BLOCK", "0"),
        ("CUSTODIAN_CHAINS_HTETH_BATCH_BLOCKS", "1"),
        ("CUSTODIAN_CHAINS_HTETH_POLL_INTERVAL_MS", "50"),
        ("CUSTODIAN_DELIVERY_ALLOWED_CIDRS", "127.0.0.1/32"),
        ("CUSTODIAN_DELIVERY_POLL_INTERVAL_MS", "50"),
    ];
    env.extend_from_slice(more);
    let cluster = Cluster::new(&env).await;
    let wallet = json!([{
        "id": ETH_WALLET, "label": "eth", "coin": "hteth", "allowBackupKeySigning": false, "approvalsRequired": 1,
        "coinSpecific": { "baseAddress": WATCHED }, "deleted": false, "disableTransactionNotifications": false,
        "hasLargeNumberOfAddresses": false, "isCold": false, "startDate": "2025-01-01T00:00:00Z",
    }]);
    std::fs::write(cluster.dir.path().join("eth.json"), wallet.to_string()).unwrap();
    assert!(cluster.cmd(&["wallet", "import", "eth.json"]).stdout(Stdio::null()).status().unwrap().success());
    cluster
}

pub async fn transfer_hook(cluster: &Cluster, server: &Server, url: &str) {
    let token = cluster.login(&server.base).await;
    let res = cluster
        .client
        .post(format!("{}/api/v2/hteth/wallet/{ETH_WALLET}/webhooks", server.base))
        .bearer_auth(&token)
        .json(&json!({ "type": "transfer", "url": url }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
}

/// `custodian chain status --json` of the cluster's database.
pub fn status(cluster: &Cluster) -> Value {
    let out = cluster.cmd(&["chain", "status", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)))
}

/// Waits until the cluster's checkpoint is at `head`. A restarted process first waits out the
/// dead one's lease (15 s); on a loaded machine the backfill after it may be slow, but it must
/// keep moving.
pub async fn backfill_reaches(cluster: &Cluster, head: u64) {
    until_advancing("the backfill to reach the head", 45, || async {
        let height = status(cluster)["height"].as_u64().unwrap_or(0);
        (height, (height == head).then_some(()))
    })
    .await
}

/// (hash, state) of each distinct idempotency key received, and how many keys.
pub fn events_by_key(receiver: &TestReceiver) -> (HashSet<(String, String)>, usize) {
    let mut keys = HashSet::new();
    let mut events = HashSet::new();
    for r in receiver.received() {
        let key =
            r.headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        if keys.insert(key) {
            let b: Value = serde_json::from_str(&r.body).unwrap();
            events
                .insert((b["hash"].as_str().unwrap().to_string(), b["state"].as_str().unwrap().to_string()));
        }
    }
    (events, keys.len())
}

#[tokio::test]
async fn a_watcher_killed_mid_backfill_resumes_and_notifies_every_transfer_once() {
    let anvil = Anvil::start().await;
    let mut txids = Vec::new();
    anvil.mine(1).await;
    // Transfers spread over a thousand blocks, so that the kill lands mid-backfill.
    for _ in 0..10 {
        txids.push(anvil.send(RICH, WATCHED, ONE_ETH).await);
        anvil.mine(100).await;
    }
    let head = anvil.head().await;
    let cluster = chain_cluster(&anvil).await;
    let receiver = TestReceiver::start().await;
    // The hook exists before the watcher reads block 1: an API-only process registers it.
    let api = cluster.start_role("api").await;
    transfer_hook(&cluster, &api, &receiver.url).await;
    let mut first = cluster.start().await;
    until("the backfill is under way", 30, || async { (receiver.received().len() >= 3).then_some(()) }).await;
    first.kill();
    let at_kill = status(&cluster)["height"].as_u64().unwrap_or(0);
    assert!(at_kill < head, "killed before the end: {at_kill} of {head}");
    // The second process waits out the dead one's lease, then resumes from the checkpoint.
    let _second = cluster.start().await;
    backfill_reaches(&cluster, head).await;
    let want: HashSet<(String, String)> = txids
        .iter()
        .flat_map(|t| [(t.clone(), "unconfirmed".to_string()), (t.clone(), "confirmed".to_string())])
        .collect();
    until_advancing("every transfer's two notifications", 30, || async {
        let keys = events_by_key(&receiver).1;
        (keys as u64, (keys >= want.len()).then_some(()))
    })
    .await;
    cluster.wait_until_idle().await;
    let (events, keys) = events_by_key(&receiver);
    assert_eq!(events, want);
    assert_eq!(keys, want.len(), "one idempotency key per transfer and state");
}

/// A watcher killed (kill -9) with its checkpoint at each height from before a transfer's block
/// to after its confirmation depth: the process that takes over tells every state once. The
/// kill lands while the node holds back the next block, so each height is hit exactly.
#[tokio::test]
async fn a_watcher_killed_at_each_height_around_a_transfer_tells_every_state_once() {
    let anvil = Anvil::start().await;
    anvil.mine(2).await;
    // The transfer is in block 3 and confirmed (3 confirmations) at block 5.
    let txid = anvil.send(RICH, WATCHED, ONE_ETH).await;
    anvil.mine(6).await;
    let head = anvil.head().await;
    let want: HashSet<(String, String)> =
        ["unconfirmed", "confirmed"].iter().map(|s| (txid.clone(), s.to_string())).collect();
    for kill_at in 1..=6u64 {
        let node = HostileNode::start(&anvil.url).await;
        node.lie(|l| l.hold_from = Some(kill_at + 1));
        let cluster = chain_cluster_at(&node.url, &[("CUSTODIAN_CHAINS_HTETH_LEASE_MS", "1000")]).await;
        let receiver = TestReceiver::start().await;
        let api = cluster.start_role("api").await;
        transfer_hook(&cluster, &api, &receiver.url).await;
        let mut first = cluster.start().await;
        until(&format!("the watcher waits for block {}", kill_at + 1), 30, || async {
            (node.asked_for_block(kill_at + 1) && status(&cluster)["height"].as_u64() == Some(kill_at))
                .then_some(())
        })
        .await;
        first.kill();
        node.lie(|l| l.hold_from = None);
        let _second = cluster.start().await;
        backfill_reaches(&cluster, head).await;
        until_advancing(&format!("both notifications after a kill at {kill_at}"), 30, || async {
            let keys = events_by_key(&receiver).1;
            (keys as u64, (keys >= want.len()).then_some(()))
        })
        .await;
        let (events, keys) = events_by_key(&receiver);
        assert_eq!(events, want, "killed at {kill_at}");
        assert_eq!(keys, want.len(), "one idempotency key per state, killed at {kill_at}");
    }
}

#[tokio::test]
async fn a_second_process_takes_the_chain_over_when_the_watcher_dies() {
    let anvil = Anvil::start().await;
    let cluster = chain_cluster(&anvil).await;
    let receiver = TestReceiver::start().await;
    let mut a = cluster.start().await;
    transfer_hook(&cluster, &a, &receiver.url).await;
    until("the first process holds the chain", 30, || async {
        status(&cluster)["height"].as_u64().map(|_| ())
    })
    .await;
    // Started second, `b` finds the chain held and waits.
    let _b = cluster.start().await;
    let before = anvil.send(RICH, WATCHED, ONE_ETH).await;
    until("the first transfer", 30, || async {
        events_by_key(&receiver).0.iter().any(|(h, _)| h == &before).then_some(())
    })
    .await;
    // The holder dies; `b` takes over once the lease ends, from the checkpoint.
    a.kill();
    let after = anvil.send(RICH, WATCHED, ONE_ETH).await;
    anvil.mine(3).await;
    until("the transfer after the kill, confirmed", 60, || async {
        events_by_key(&receiver).0.contains(&(after.clone(), "confirmed".to_string())).then_some(())
    })
    .await;
    let (events, keys) = events_by_key(&receiver);
    assert_eq!(keys, events.len(), "no event twice under two keys");
    assert!(events.contains(&(before, "confirmed".into())), "no gap: {events:?}");
}

#[tokio::test]
async fn a_node_that_goes_away_is_waited_for_and_the_api_keeps_answering() {
    let mut c = crate::chain::chain_fixture().await;
    c.anvil.mine(1).await;
    c.caught_up().await;
    c.anvil.stop();
    // For 30 seconds the node is away: rounds fail, are counted and named in /health, and the
    // API answers throughout.
    let health = |app: &TestApp| {
        let req = app.client.get(app.url("/health"));
        async move {
            let res = req.send().await.unwrap();
            assert_eq!(res.status(), 200);
            res.json::<Value>().await.unwrap()
        }
    };
    let (mut named, end) = (false, std::time::Instant::now() + Duration::from_secs(30));
    while std::time::Instant::now() < end {
        named |= health(&c.app).await["chains"][0]["error"].as_str().is_some_and(|e| e.starts_with("node:"));
        assert_eq!(c.app.get_auth("/api/v2/user/me", &c.token).await.status(), 200);
        // Paces the polling over the 30 s; it waits for no outcome.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(named, "the node's absence is named in /health");
    let text = c.app.client.get(c.app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.lines().any(|l| l.starts_with("custodian_chain_errors_total{coin=\"hteth\"}")), "{text}");
    // Back: what it mined since is read, nothing lost, and the error is cleared.
    c.anvil.restart().await;
    let txid = c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    c.anvil.mine(3).await;
    until("the transfer made after the node came back is confirmed", 90, || async {
        c.notified().iter().any(|(state, _, hash)| state == "confirmed" && hash == &txid).then_some(())
    })
    .await;
    c.caught_up().await;
    until("the error is cleared", 20, || async {
        health(&c.app).await["chains"][0].get("error").is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_reorg_deeper_than_reorg_depth_halts_the_chain_until_resynced() {
    let anvil = Anvil::start().await;
    let app = spawn_app_with(|c| crate::chain::watch(c, &anvil)).await;
    anvil.mine(12).await;
    let head = anvil.head().await;
    let chains = &app.state.chains;
    let height = || async { custodian::chain::status(chains).await.unwrap()[0].clone() };
    until("caught up", 20, || async { (height().await.height == Some(head)).then_some(()) }).await;
    // reorg_depth is 8 in `watch`: a 10-block reorg is beyond it.
    anvil.rpc("anvil_reorg", json!([10, []])).await;
    anvil.mine(1).await;
    let halted = until("the chain halts", 20, || async { height().await.halted }).await;
    assert!(halted.contains("reorg_depth"), "{halted}");
    // /health names the halted chain and stays 200: the API keeps serving.
    let health = app.client.get(app.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["chains"][0]["coin"], "hteth", "{health}");
    assert!(health["chains"][0]["halted"].as_str().is_some_and(|h| h.contains("reorg_depth")), "{health}");
    let audit = app.raw_sql("SELECT type FROM audit_log WHERE type = 'chain.reorg_too_deep'").await;
    assert_eq!(audit.len(), 1);
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("custodian_chain_deep_reorgs_total{coin=\"hteth\"} 1"), "{text}");
    // Halted: new blocks are not read.
    let stuck = height().await.height;
    anvil.mine(2).await;
    // A round ran after the blocks were made (it saw the new head), and read none of them.
    let new_head = anvil.head().await;
    until("a round that sees the new head", 20, || async {
        (height().await.node_head == Some(new_head)).then_some(())
    })
    .await;
    assert_eq!(height().await.height, stuck);
    custodian::chain::resync(chains, "hteth", head - 10).await.unwrap();
    let now = anvil.head().await;
    until("resynced to the head", 20, || async {
        let s = height().await;
        (s.halted.is_none() && s.height == Some(now)).then_some(())
    })
    .await;
    let health: serde_json::Value =
        app.client.get(app.url("/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["chains"][0]["halted"], serde_json::Value::Null, "{health}");
    assert_eq!(health["chains"][0]["height"], now, "{health}");
    // The watcher's speed is measured every 5 seconds and shown with the rest.
    until("blocks per second in /health", 20, || async {
        let health: serde_json::Value =
            app.client.get(app.url("/health")).send().await.unwrap().json().await.unwrap();
        health["chains"][0]["blocksPerSecond"].as_f64()
    })
    .await;
}

#[tokio::test]
async fn a_node_of_another_chain_is_named_in_health_and_not_read() {
    let anvil = Anvil::start().await;
    anvil.mine(3).await;
    let app = spawn_app_with(|c| {
        crate::chain::watch(c, &anvil);
        if let Some(chain) = c.chains.get_mut("hteth") {
            chain.chain_id = 1;
        }
    })
    .await;
    let error = until("the chain's error in /health", 20, || async {
        let health: serde_json::Value =
            app.client.get(app.url("/health")).send().await.unwrap().json().await.unwrap();
        health["chains"][0]["error"].as_str().map(str::to_string)
    })
    .await;
    assert!(error.contains("the node answers 31337, not chains.hteth.chain_id 1"), "{error}");
    assert!(!error.contains(&anvil.url), "the node's URL is never shown: {error}");
    let status = custodian::chain::status(&app.state.chains).await.unwrap();
    assert_eq!(status[0].height, None, "no block is read from another chain's node");
}

#[tokio::test]
async fn balances_a_backfill_left_due_are_read_after_a_restart() {
    let anvil = Anvil::start().await;
    anvil.mine(1).await;
    anvil.send(RICH, WATCHED, ONE_ETH).await;
    // The transfer is far behind the head: its balance can only be read near the head.
    anvil.mine(400).await;
    let head = anvil.head().await;
    let cluster = chain_cluster(&anvil).await;
    let receiver = TestReceiver::start().await;
    let api = cluster.start_role("api").await;
    transfer_hook(&cluster, &api, &receiver.url).await;
    let mut first = cluster.start().await;
    until("the transfer's two notifications", 30, || async {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    first.kill();
    let at_kill = status(&cluster)["height"].as_u64().unwrap_or(0);
    assert!(at_kill + 64 < head, "killed far from the head: {at_kill} of {head}");
    // The second process never sees the transfer, yet knows the wallet's balance is due.
    let _second = cluster.start().await;
    backfill_reaches(&cluster, head).await;
    let token = cluster.login(&api.base).await;
    let wallet: Value = cluster
        .client
        .get(format!("{}/api/v2/hteth/wallet/{ETH_WALLET}?expandBalance=true", api.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(wallet["balanceString"], anvil.balance(WATCHED).await.to_string(), "{wallet}");
}
