//! Money moves once: the real binary killed (SIGKILL) at each step of a withdrawal, with a
//! hostile proxy in front of anvil holding the node call that follows the step, then another
//! process finishes. Afterwards the wallet's address sent exactly one transaction, paying the
//! recipient once.

use std::process::Stdio;

use serde_json::{json, Value};

use crate::chain::{Anvil, ONE_ETH, RICH};
use crate::common::*;
use crate::hostile_node::HostileNode;
use crate::procs::{Cluster, Server};

const PAYEE: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const AMOUNT: u128 = 777_000;

#[derive(Debug, Clone, Copy)]
enum KilledWhen {
    /// Approved, its nonce reserved, not signed (the fee lookup is held).
    Approved,
    /// Signed and stored, not sent (the send is held before the node).
    Signed,
    /// Sent: the node has it, its answer is held.
    Sent,
}

/// A cluster reading the node at `node`, with Alice and Bob, admins of one enterprise (its id
/// in the file `enterprise`).
pub async fn cluster(node: &str) -> Cluster {
    let env = [
        ("CUSTODIAN_CHAINS_HTETH_RPC_URL", node),
        ("CUSTODIAN_CHAINS_HTETH_CHAIN_ID", "31337"),
        ("CUSTODIAN_CHAINS_HTETH_CONFIRMATIONS", "3"),
        ("CUSTODIAN_CHAINS_HTETH_START_BLOCK", "0"),
        ("CUSTODIAN_CHAINS_HTETH_POLL_INTERVAL_MS", "50"),
        ("CUSTODIAN_CHAINS_HTETH_LEASE_MS", "1000"),
        ("CUSTODIAN_WITHDRAWALS_POLL_INTERVAL_MS", "50"),
        ("CUSTODIAN_WITHDRAWALS_GAP_CHECK_INTERVAL", "0"),
    ];
    let c = Cluster::new(&env).await;
    c.create_user("alice@example.com", false);
    c.create_user("bob@example.com", false);
    let out = c.cmd(&["enterprise", "create", "--name", "Fund", "--json"]).output().unwrap();
    let enterprise: Value = serde_json::from_slice(&out.stdout).unwrap();
    for who in ["alice@example.com", "bob@example.com"] {
        let e = enterprise["id"].as_str().unwrap();
        let mut add = c.cmd(&["enterprise", "add-user", "--enterprise", e, "--email", who, "--admin"]);
        assert!(add.stdout(Stdio::null()).status().unwrap().success());
    }
    std::fs::write(c.dir.path().join("enterprise"), enterprise["id"].as_str().unwrap()).unwrap();
    c
}

/// A withdrawal as `custodian withdrawal show` prints it (its txRequest).
pub fn withdrawal(c: &Cluster, id: &str) -> Value {
    let out = c.cmd(&["withdrawal", "show", id]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// `method` (POST or PUT) of `body` to `path` on `server`, asserting 200.
pub async fn post(
    c: &Cluster,
    server: &Server,
    token: &str,
    path: &str,
    body: &Value,
    method: &str,
) -> Value {
    let url = format!("{}{path}", server.base);
    let req = match method {
        "PUT" => c.client.put(url),
        _ => c.client.post(url),
    };
    let res = req.bearer_auth(token).json(body).send().await.unwrap();
    let status = res.status();
    let v: Value = res.json().await.unwrap();
    assert_eq!(status, 200, "{path}: {v}");
    v
}

async fn kill_once_at(at: KilledWhen) {
    let anvil = Anvil::start().await;
    let node = HostileNode::start(&anvil.url).await;
    let c = cluster(&node.url).await;
    let enterprise = std::fs::read_to_string(c.dir.path().join("enterprise")).unwrap();
    let mut first = c.start().await;
    let alice = c.login_as(&first.base, "alice@example.com").await;
    let bob = c.login_as(&first.base, "bob@example.com").await;
    let add = json!({ "label": "cold", "enterprise": enterprise, "type": "custodial" });
    let wallet = post(&c, &first, &alice, "/api/v2/hteth/wallet/add", &add, "POST").await;
    let (wallet_id, address) = (
        wallet["id"].as_str().unwrap().to_string(),
        wallet["coinSpecific"]["baseAddress"].as_str().unwrap().to_string(),
    );
    anvil.send(RICH, &address, ONE_ETH).await;
    anvil.mine(3).await;
    let path = format!("{}/api/v2/hteth/wallet/{wallet_id}?expandBalance=true", first.base);
    until("the wallet is funded", 30, || async {
        let w: Value = c.client.get(&path).bearer_auth(&alice).send().await.ok()?.json().await.ok()?;
        (w["balanceString"] == json!(ONE_ETH.to_string())
            && w["confirmedBalanceString"] == json!(ONE_ETH.to_string()))
        .then_some(())
    })
    .await;
    post(&c, &first, &alice, "/api/v2/user/unlock", &json!({ "otp": "000000" }), "POST").await;
    let before = anvil.balance(PAYEE).await;
    node.lie(|l| match at {
        KilledWhen::Approved => l.hold_methods = vec!["eth_feeHistory"],
        KilledWhen::Signed => l.hold_methods = vec!["eth_sendRawTransaction"],
        KilledWhen::Sent => l.hold_answers_of = vec!["eth_sendRawTransaction"],
    });
    let body =
        json!({ "recipients": [{ "address": PAYEE, "amount": AMOUNT.to_string() }], "sequenceId": "once" });
    let pending =
        post(&c, &first, &alice, &format!("/api/v2/hteth/wallet/{wallet_id}/tx/initiate"), &body, "POST")
            .await;
    let id = pending["txRequestId"].as_str().unwrap().to_string();
    let approval = pending["id"].as_str().unwrap();
    let approve = json!({ "state": "approved", "otp": "000000" });
    post(&c, &first, &bob, &format!("/api/v2/hteth/pendingapprovals/{approval}"), &approve, "PUT").await;
    let (method, state) = match at {
        KilledWhen::Approved => ("eth_feeHistory", "pendingDelivery"),
        KilledWhen::Signed | KilledWhen::Sent => ("eth_sendRawTransaction", "signed"),
    };
    let held = until(&format!("the signer waits on {method} ({at:?})"), 30, || async {
        let w = withdrawal(&c, &id);
        (node.count(method) > 0 && w["state"] == state).then_some(w)
    })
    .await;
    if let KilledWhen::Approved = at {
        assert!(held["transactions"][0]["nonce"].is_u64(), "the nonce is stored before signing: {held}");
    }
    let hash_at_kill = held["transactions"][0]["txHash"].clone();
    first.kill();
    node.lie(|l| {
        l.hold_methods.clear();
        l.hold_answers_of.clear();
    });
    let second = c.start().await;
    let sent = until(&format!("another process sends it ({at:?})"), 60, || async {
        let w = withdrawal(&c, &id);
        (w["state"] == "delivered").then_some(w)
    })
    .await;
    if !hash_at_kill.is_null() {
        assert_eq!(
            sent["transactions"][0]["txHash"], hash_at_kill,
            "the same signed bytes, not new ones ({at:?})"
        );
    }
    anvil.mine(3).await;
    let hash = sent["transactions"][0]["txHash"].as_str().unwrap();
    let receipt = anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
    assert_eq!(receipt["status"], "0x1", "{at:?}: {receipt}");
    // Exactly one transaction left the address, and the payee was paid once.
    assert_eq!(anvil.rpc("eth_getTransactionCount", json!([address, "latest"])).await, "0x1", "{at:?}");
    assert_eq!(anvil.rpc("eth_getTransactionCount", json!([address, "pending"])).await, "0x1", "{at:?}");
    assert_eq!(anvil.balance(PAYEE).await, before + AMOUNT, "{at:?}");
    no_gap_left(&c, &second, at).await;
}

/// No nonce is left stranded: the process that finished the withdrawal (`server`) checks every
/// round and finds no gap, and filled none.
async fn no_gap_left(c: &Cluster, second: &Server, at: KilledWhen) {
    let metrics = format!("{}/metrics", second.base);
    let rounds = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("custodian_custody_signer_rounds_total ")?.parse::<u64>().ok())
    };
    let seen = c.client.get(&metrics).send().await.unwrap().text().await.unwrap();
    let from = rounds(&seen).unwrap_or(0);
    let text = until(&format!("a gap check after it was mined ({at:?})"), 30, || async {
        let text = c.client.get(&metrics).send().await.ok()?.text().await.ok()?;
        (rounds(&text)? > from).then_some(text)
    })
    .await;
    assert!(text.lines().any(|l| l == "custodian_custody_nonce_gap 0"), "{at:?}");
    assert!(text.lines().any(|l| l == "custodian_custody_nonce_fills_total 0"), "{at:?}");
}

#[tokio::test]
async fn a_signer_killed_after_approval_signs_once_with_the_stored_nonce() {
    kill_once_at(KilledWhen::Approved).await;
}

#[tokio::test]
async fn a_signer_killed_after_signing_sends_the_stored_bytes_once() {
    kill_once_at(KilledWhen::Signed).await;
}

#[tokio::test]
async fn a_signer_killed_after_the_node_took_it_does_not_send_another() {
    kill_once_at(KilledWhen::Sent).await;
}
