//! Many withdrawals from one wallet at once, through two server processes on one database:
//! each gets its own nonce, consecutive from the address's first, none twice, none skipped,
//! every one mined.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::chain::{Anvil, ONE_ETH, RICH};
use crate::common::*;
use crate::custody_faults::{cluster, post, withdrawal};

const PAYEE: &str = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65";
const COUNT: usize = 50;

#[tokio::test]
async fn fifty_withdrawals_through_two_processes_take_consecutive_nonces_and_are_all_mined() {
    let anvil = Anvil::start().await;
    let c = cluster(&anvil.url).await;
    let enterprise = std::fs::read_to_string(c.dir.path().join("enterprise")).unwrap();
    let servers = [c.start().await, c.start().await];
    let alice = c.login_as(&servers[0].base, "alice@example.com").await;
    let bob = c.login_as(&servers[1].base, "bob@example.com").await;
    let add = json!({ "label": "busy", "enterprise": enterprise, "type": "custodial" });
    let wallet = post(&c, &servers[0], &alice, "/api/v2/hteth/wallet/add", &add, "POST").await;
    let (wallet_id, address) = (
        wallet["id"].as_str().unwrap().to_string(),
        wallet["coinSpecific"]["baseAddress"].as_str().unwrap().to_string(),
    );
    anvil.send(RICH, &address, ONE_ETH).await;
    anvil.mine(3).await;
    let path = format!("{}/api/v2/hteth/wallet/{wallet_id}?expandBalance=true", servers[0].base);
    until("the wallet is funded", 30, || async {
        let w: Value = c.client.get(&path).bearer_auth(&alice).send().await.ok()?.json().await.ok()?;
        (w["balanceString"] == json!(ONE_ETH.to_string())
            && w["confirmedBalanceString"] == json!(ONE_ETH.to_string()))
        .then_some(())
    })
    .await;
    post(&c, &servers[0], &alice, "/api/v2/user/unlock", &json!({ "otp": "000000" }), "POST").await;
    post(&c, &servers[1], &alice, "/api/v2/user/unlock", &json!({ "otp": "000000" }), "POST").await;
    let before = anvil.balance(PAYEE).await;
    // All at once, half through each process; then the approvals, crosswise: one after another,
    // as a person gives them (each checks an OTP, and parallel OTP checks of one user count
    // against its failure limit before they run).
    let initiated = join_all((0..COUNT).map(|i| {
        let (c, s, alice, wallet_id) = (&c, &servers[i % 2], &alice, &wallet_id);
        async move {
            let body = json!({ "recipients": [{ "address": PAYEE, "amount": (1000 + i).to_string() }], "sequenceId": format!("w{i}") });
            post(c, s, alice, &format!("/api/v2/hteth/wallet/{wallet_id}/tx/initiate"), &body, "POST").await
        }
    }))
    .await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    for (i, p) in initiated.iter().enumerate() {
        let id = p["id"].as_str().unwrap();
        post(
            &c,
            &servers[(i + 1) % 2],
            &bob,
            &format!("/api/v2/hteth/pendingapprovals/{id}"),
            &approve,
            "PUT",
        )
        .await;
    }
    let ids: Vec<String> = initiated.iter().map(|p| p["txRequestId"].as_str().unwrap().to_string()).collect();
    let sent = until_advancing("every withdrawal is sent", 30, || async {
        let all: Vec<Value> = ids.iter().map(|id| withdrawal(&c, id)).collect();
        let done = all.iter().filter(|w| w["state"] == "delivered").count();
        (done as u64, (done == COUNT).then_some(all))
    })
    .await;
    anvil.mine(1).await;
    let nonces: BTreeSet<u64> =
        sent.iter().map(|w| w["transactions"][0]["nonce"].as_u64().unwrap()).collect();
    assert_eq!(nonces, (0..COUNT as u64).collect(), "one nonce each, consecutive from 0");
    for w in &sent {
        let hash = w["transactions"][0]["txHash"].as_str().unwrap();
        let receipt = anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
        assert_eq!(receipt["status"], "0x1", "{receipt}");
    }
    let count = anvil.rpc("eth_getTransactionCount", json!([address, "latest"])).await;
    assert_eq!(count, json!(format!("0x{COUNT:x}")), "exactly {COUNT} transactions left the address");
    let paid: u128 = (0..COUNT as u128).map(|i| 1000 + i).sum();
    assert_eq!(anvil.balance(PAYEE).await, before + paid);
}

#[tokio::test]
async fn an_unlock_or_a_lock_through_one_process_counts_at_once_in_another() {
    let anvil = Anvil::start().await;
    let c = cluster(&anvil.url).await;
    let enterprise = std::fs::read_to_string(c.dir.path().join("enterprise")).unwrap();
    let [a, b] = [c.start().await, c.start().await];
    let alice = c.login_as(&a.base, "alice@example.com").await;
    let add = json!({ "label": "two hosts", "enterprise": enterprise, "type": "custodial" });
    let wallet = post(&c, &a, &alice, "/api/v2/hteth/wallet/add", &add, "POST").await;
    let initiate = format!("{}/api/v2/hteth/wallet/{}/tx/initiate", b.base, wallet["id"].as_str().unwrap());
    let body = json!({ "recipients": [{ "address": PAYEE, "amount": "1" }] });
    let name = |v: Value| v["name"].as_str().unwrap_or_default().to_string();
    let ask = || async {
        let res = c.client.post(&initiate).bearer_auth(&alice).json(&body).send().await.unwrap();
        name(res.json().await.unwrap())
    };
    // `b` has the session in its read cache (a refusal needs it loaded).
    assert_eq!(ask().await, "NeedsUnlock");
    post(&c, &a, &alice, "/api/v2/user/unlock", &json!({ "otp": "000000" }), "POST").await;
    // Unlocked through `a`: `b` sees it at once (the wallet is empty, so the next refusal).
    assert_eq!(ask().await, "InsufficientBalance");
    post(&c, &a, &alice, "/api/v2/user/lock", &json!({}), "POST").await;
    assert_eq!(ask().await, "NeedsUnlock");
}
