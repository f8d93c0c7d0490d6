//! The watcher's appearance events against a real anvil: `address_confirmation` the first time
//! a wallet address shows on chain, `wallet_confirmation` when a wallet's base address does,
//! including as a contract created at it.

use serde_json::{json, Value};

use crate::chain::*;
use crate::common::*;
use crate::receiver::TestReceiver;

/// (type, address, walletId) of what a receiver got.
fn got(r: &TestReceiver) -> Vec<(String, String, String)> {
    r.received()
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .map(|b| {
            let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("address"), s("walletId"))
        })
        .collect()
}

#[tokio::test]
async fn an_address_is_confirmed_once_when_it_first_shows_on_chain() {
    let c = chain_fixture().await;
    let addresses = TestReceiver::start().await;
    let hook = json!({ "type": "address_confirmation", "url": addresses.url });
    let path = format!("/api/v2/hteth/wallet/{WALLET}/webhooks");
    expect_json(c.app.post_auth(&path, &c.token, &hook).await, 200).await;
    let wallets = TestReceiver::start().await;
    let hook = json!({ "type": "wallet_confirmation", "url": wallets.url });
    expect_json(c.app.post_auth("/api/v2/hteth/webhooks", &c.token, &hook).await, 200).await;

    // The base address receives twice: one address_confirmation, one wallet_confirmation.
    c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    c.caught_up().await;
    // An added address: its own address_confirmation, no wallet_confirmation.
    let add = format!("/api/v2/internal/wallet/{WALLET}/addresses");
    expect_json(c.app.post_auth(&add, &c.admin, &json!({ "address": OTHER })).await, 200).await;
    c.anvil.send(RICH, OTHER, ONE_ETH).await;
    c.anvil.send(OTHER, RICH, 1).await;
    c.caught_up().await;
    wait_until_idle(&c.app.state.store).await;
    let wallet = WALLET.to_string();
    assert_eq!(
        got(&addresses),
        vec![
            ("address_confirmation".into(), WATCHED.to_string(), wallet.clone()),
            ("address_confirmation".into(), OTHER.to_string(), wallet.clone()),
        ]
    );
    assert_eq!(got(&wallets), vec![("wallet_confirmation".into(), WATCHED.to_string(), wallet)]);
}

#[tokio::test]
async fn a_wallet_whose_contract_is_created_is_confirmed() {
    let c = chain_fixture().await;
    let wallets = TestReceiver::start().await;
    let hook = json!({ "type": "wallet_confirmation", "url": wallets.url });
    expect_json(c.app.post_auth("/api/v2/hteth/webhooks", &c.token, &hook).await, 200).await;
    // Anvil's fourth dev account creates a contract with its first transaction: the address
    // follows from its address and nonce (CREATE).
    let deployer = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
    let nonce = c.anvil.rpc("eth_getTransactionCount", json!([deployer, "latest"])).await;
    let nonce = u64::from_str_radix(nonce.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let created = deployer.parse::<alloy_primitives::Address>().unwrap().create(nonce).to_checksum(None);
    let other_wallet = "c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0";
    let record = json!({
        "id": other_wallet, "label": "contract", "coin": "hteth", "type": "hot",
        "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": { "baseAddress": created },
        "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false,
        "isCold": false, "startDate": "2025-01-01T00:00:00Z",
    });
    custodian::wallets::import::import(&c.app.state.store, &json!([record]).to_string(), |_, _| {})
        .await
        .expect("import");
    // The watcher's address book picks the new wallet up at a round's start: one more block
    // read means a round began after the import.
    c.anvil.mine(1).await;
    c.caught_up().await;
    let code = include_str!("../../chain-tests/contracts/TestToken.bin").trim();
    let deploy =
        json!({ "from": deployer, "data": format!("0x{code}{}", word_number(1000)), "gas": "0x200000" });
    c.anvil.rpc("eth_sendTransaction", json!([deploy])).await;
    c.caught_up().await;
    let got = wallets.wait_for(1, 20).await;
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(
        (body["walletId"].as_str(), body["address"].as_str()),
        (Some(other_wallet), Some(created.as_str()))
    );
}

#[tokio::test]
async fn fee_alerts_fire_once_when_the_fee_or_the_fee_address_balance_falls_below() {
    let c = chain_fixture().await;
    // The wallet's gas is paid from anvil's third dev account (10,000 ETH).
    let mut record = c.wallet().await;
    record["coinSpecific"]["feeAddress"] = json!(OTHER);
    let s = custodian::wallets::import::import(&c.app.state.store, &json!([record]).to_string(), |_, _| {})
        .await
        .expect("import");
    assert_eq!(s.updated, 1, "{s:?}");
    let alerts = TestReceiver::start().await;
    let path = format!("/api/v2/hteth/wallet/{WALLET}/webhooks");
    for kind in ["lowFee", "lowFeeAddressBalance"] {
        let hook = json!({ "type": kind, "url": alerts.url });
        expect_json(c.app.post_auth(&path, &c.token, &hook).await, 200).await;
    }
    // Anvil's base fee starts at 1 gwei and falls by an eighth with each empty block.
    let threshold = 9_999 * ONE_ETH;
    let (code, out) = crate::operator::run(
        &c.app,
        &[
            "wallet",
            "fee-alerts",
            "--wallet",
            WALLET,
            "--low-fee",
            "500000000",
            "--low-fee-address-balance",
            &threshold.to_string(),
        ],
        "",
    );
    assert_eq!(
        (code, out.trim()),
        (
            0,
            format!("{WALLET}: lowFee below 500000000 wei, lowFeeAddressBalance below {threshold} wei")
                .as_str()
        )
    );
    c.anvil.mine(30).await;
    // 10,000 ETH, then 9,998.x after a 2 ETH payment: below the threshold once, not again.
    c.anvil.send(OTHER, RICH, 2 * ONE_ETH).await;
    c.anvil.send(OTHER, RICH, 2 * ONE_ETH).await;
    c.caught_up().await;
    wait_until_idle(&c.app.state.store).await;
    let mut kinds: Vec<String> =
        got(&alerts).into_iter().map(|(kind, _, wallet)| format!("{kind} {wallet}")).collect();
    kinds.sort();
    assert_eq!(kinds, vec![format!("lowFee {WALLET}"), format!("lowFeeAddressBalance {WALLET}")]);
    let bodies: Vec<Value> =
        alerts.received().iter().map(|r| serde_json::from_str(&r.body).unwrap()).collect();
    let fee = bodies.iter().find(|b| b["type"] == "lowFee").unwrap();
    assert!(fee["averageBaseFee"].as_str().unwrap().parse::<u128>().unwrap() < 500_000_000, "{fee}");
    let balance = bodies.iter().find(|b| b["type"] == "lowFeeAddressBalance").unwrap();
    assert_eq!(balance["address"], OTHER);
    assert!(balance["balance"].as_str().unwrap().parse::<u128>().unwrap() < threshold, "{balance}");
}

#[tokio::test]
async fn a_reorg_that_takes_an_appearance_away_lets_the_new_branch_announce_it() {
    let c = chain_fixture().await;
    let addresses = TestReceiver::start().await;
    let hook = json!({ "type": "address_confirmation", "url": addresses.url });
    let path = format!("/api/v2/hteth/wallet/{WALLET}/webhooks");
    expect_json(c.app.post_auth(&path, &c.token, &hook).await, 200).await;
    c.anvil.mine(1).await;
    c.caught_up().await;
    c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    addresses.wait_for(1, 20).await;
    c.caught_up().await;
    let first_block = |r: &TestReceiver, i: usize| {
        let b: Value = serde_json::from_str(&r.received()[i].body).unwrap();
        (b["hash"].as_str().unwrap_or_default().to_string(), b["height"].clone())
    };
    let (first_tx, height) = first_block(&addresses, 0);
    // The block of that first appearance is replaced by an empty one: the address has not
    // appeared on the new branch yet, so its next transaction there announces it again.
    c.anvil.rpc("anvil_reorg", json!([1, []])).await;
    c.anvil.mine(1).await;
    c.caught_up().await;
    let again = c.anvil.send(RICH, WATCHED, 2 * ONE_ETH).await;
    addresses.wait_for(2, 20).await;
    c.caught_up().await;
    wait_until_idle(&c.app.state.store).await;
    let (second_tx, _) = first_block(&addresses, 1);
    assert_eq!(addresses.received().len(), 2, "{:?}", got(&addresses));
    assert_ne!(first_tx, second_tx);
    assert_eq!(second_tx, again);
    assert!(height.as_u64().is_some(), "{height}");
    assert_eq!(
        c.app.raw_sql("SELECT txid FROM chain_appearances").await,
        vec![again.clone()],
        "one appearance, on the new branch"
    );
}

#[tokio::test]
async fn fee_alerts_are_set_through_the_api_by_service_admins() {
    let c = chain_fixture().await;
    let path = format!("/api/v2/internal/wallet/{WALLET}/feeAlerts");
    let body = json!({ "lowFee": "2000000000", "lowFeeAddressBalance": null });
    let set = expect_json(c.app.put_auth(&path, &c.admin, &body).await, 200).await;
    assert_eq!(set, json!({ "walletId": WALLET, "lowFee": "2000000000", "lowFeeAddressBalance": null }));
    let stored = c.app.raw_sql("SELECT low_fee FROM wallet_fee_alerts").await;
    assert_eq!(stored, vec!["2000000000".to_string()]);
    // A wallet's own user is not a service admin; a bad amount changes nothing.
    assert_error(c.app.put_auth(&path, &c.token, &body).await, 403, "InsufficientScope").await;
    let bad = json!({ "lowFee": "-1" });
    assert_error(c.app.put_auth(&path, &c.admin, &bad).await, 400, "InvalidField").await;
    assert_eq!(c.app.raw_sql("SELECT low_fee FROM wallet_fee_alerts").await, stored);
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'wallet.fee_alerts_set'").await;
    assert_eq!(audit.len(), 1);
}

#[tokio::test]
async fn chain_settings_of_a_wallet_no_watcher_reads_are_refused_as_conflicts() {
    use crate::webhooks::{fixture, WALLET as TBTC_WALLET};
    let f = fixture(|_| {}).await;
    let admin = f.admin_token().await;
    let path = format!("/api/v2/internal/wallet/{TBTC_WALLET}/feeAlerts");
    let res = f.app.put_auth(&path, &admin, &json!({ "lowFee": "1" })).await;
    assert_error(res, 409, "WalletNotWatched").await;
    // A tbtc wallet takes tbtc addresses (tests/api/utxo.rs), not Ethereum ones.
    let path = format!("/api/v2/internal/wallet/{TBTC_WALLET}/addresses");
    let res = f.app.post_auth(&path, &admin, &json!({ "address": OTHER })).await;
    assert_error(res, 400, "InvalidField").await;
    assert!(f.app.raw_sql("SELECT wallet_id FROM wallet_fee_alerts").await.is_empty());
}
