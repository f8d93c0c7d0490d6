//! Token (ERC-20) withdrawals on a real token contract: a `transfer` call from the custodial
//! wallet's address, its gas paid in ETH, refused when the token or the gas is short.

use serde_json::{json, Value};

use crate::chain::{deploy_token, word_address, word_number, Anvil, ONE_ETH, OTHER, RICH};
use crate::common::*;
use crate::custody::custodial_on;
use crate::hostile_node::HostileNode;

async fn token_balance(anvil: &Anvil, contract: &str, who: &str) -> u128 {
    let call = json!({ "to": contract, "data": format!("0x70a08231{}", word_address(who)) });
    let v = anvil.rpc("eth_call", json!([call, "latest"])).await;
    u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// Sends `amount` of the token from anvil's first account to the wallet, and waits until the
/// watcher has read the wallet's token balance.
async fn fund_tokens(c: &crate::custody::Custodial, contract: &str, amount: u128) {
    let fund = json!({ "from": RICH, "to": contract,
        "data": format!("0xa9059cbb{}{}", word_address(&c.address()), word_number(amount)) });
    c.anvil.rpc("eth_sendTransaction", json!([fund])).await;
    c.anvil.mine(3).await;
    let path = format!("/api/v2/hteth/wallet/{}?allTokens=true", c.wallet_id());
    until("the watcher reads the token balance", 30, || async {
        let w: Value = expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await;
        let t = &w["tokens"]["hteth:tst"];
        (t["balanceString"] == json!(amount.to_string())
            && t["confirmedBalanceString"] == json!(amount.to_string()))
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_token_withdrawal_calls_the_contract_and_pays_the_recipient_once() {
    let anvil = Anvil::start().await;
    let (contract, token) = deploy_token(&anvil, &word_number(1_000_000 * ONE_ETH)).await;
    let c =
        custodial_on(anvil, ONE_ETH, 1, |cfg| cfg.chains.get_mut("hteth").unwrap().tokens.push(token)).await;
    fund_tokens(&c, &contract, 50 * ONE_ETH).await;
    // More than it holds, a token no chain configures: refused.
    let too_much = json!({ "recipients": [{ "address": OTHER, "amount": (51 * ONE_ETH).to_string(), "tokenName": "hteth:tst" }] });
    assert_error(c.initiate(&c.alice_token, &too_much).await, 400, "InsufficientBalance").await;
    let unknown = json!({ "recipients": [{ "address": OTHER, "amount": "1", "tokenName": "hteth:nope" }] });
    assert_error(c.initiate(&c.alice_token, &unknown).await, 400, "InvalidField").await;
    // 7 TST through the token's own route, BitGo's way of naming the coin.
    let body = json!({ "recipients": [{ "address": OTHER, "amount": (7 * ONE_ETH).to_string() }] });
    let path = format!("/api/v2/hteth:tst/wallet/{}/tx/initiate", c.wallet_id());
    let pending = expect_json(c.app.post_auth(&path, &c.alice_token, &body).await, 200).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    let id = pending["txRequestId"].as_str().unwrap();
    let sent = until("the token withdrawal is sent", 30, || async {
        let t = c.tx_request(id).await;
        (t["state"] == "delivered").then_some(t)
    })
    .await;
    assert_eq!(sent["intent"]["recipients"][0]["amount"]["symbol"], "hteth:tst");
    let hash = sent["transactions"][0]["txHash"].as_str().unwrap();
    let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    assert_eq!(receipt["to"].as_str().unwrap(), contract.to_lowercase());
    assert_eq!(token_balance(&c.anvil, &contract, OTHER).await, 7 * ONE_ETH);
    assert_eq!(token_balance(&c.anvil, &contract, &c.address()).await, 43 * ONE_ETH);
    assert_eq!(c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "latest"])).await, "0x1");
    // The watcher's transfers of the send: the token's moves 7 TST, fee-less; the ETH one of
    // the same transaction is the fee alone, which its baseValue leaves out.
    let hex = |v: &Value| u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let fee = hex(&receipt["gasUsed"]) * hex(&receipt["effectiveGasPrice"]);
    let send_of = |coin: &'static str| {
        let path = format!("/api/v2/{coin}/wallet/{}/transfer", c.wallet_id());
        let c = &c;
        async move {
            until("the send is seen", 30, || async {
                let body = expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await;
                body["transfers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["txid"] == json!(hash) && t["height"] != 999_999_999)
                    .cloned()
            })
            .await
        }
    };
    let token_send = send_of("hteth:tst").await;
    let seven = format!("-{}", 7 * ONE_ETH);
    assert_eq!(
        (
            &token_send["type"],
            &token_send["valueString"],
            &token_send["baseValueString"],
            &token_send["feeString"]
        ),
        (&json!("send"), &json!(seven), &json!(seven), &json!("0")),
        "{token_send}"
    );
    let eth_send = send_of("hteth").await;
    assert_eq!(
        (&eth_send["valueString"], &eth_send["baseValueString"], &eth_send["feeString"]),
        (&json!(format!("-{fee}")), &json!("0"), &json!(fee.to_string())),
        "{eth_send}"
    );
}

#[tokio::test]
async fn a_token_withdrawal_without_eth_for_its_gas_is_refused() {
    let anvil = Anvil::start().await;
    let (contract, token) = deploy_token(&anvil, &word_number(1_000_000 * ONE_ETH)).await;
    let c = custodial_on(anvil, 0, 1, |cfg| cfg.chains.get_mut("hteth").unwrap().tokens.push(token)).await;
    fund_tokens(&c, &contract, 5 * ONE_ETH).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "1", "tokenName": "hteth:tst" }] });
    let refused = assert_error(c.initiate(&c.alice_token, &body).await, 400, "InsufficientBalance").await;
    assert_eq!(refused["context"]["balance"], "0", "{refused}");
    assert!(c.app.raw_sql("SELECT id FROM withdrawals").await.is_empty());
}

#[tokio::test]
async fn a_withdrawal_the_node_says_would_revert_fails_without_taking_a_nonce_or_holding_others_back() {
    let anvil = Anvil::start().await;
    // A contract that takes no ETH: a payment to it reverts.
    let (contract, _) = deploy_token(&anvil, &word_number(ONE_ETH)).await;
    let c = custodial_on(anvil, ONE_ETH, 1, |_| {}).await;
    let id = c.approved(&json!({ "recipients": [{ "address": contract, "amount": "1" }] })).await;
    let failed = c.state_is(&id, "failed").await;
    assert!(failed["transactions"][0]["nonce"].is_null(), "no nonce taken: {failed}");
    // The next one is signed at the address's first nonce: no gap behind the failed one.
    let sent = c.withdraw(OTHER, "5").await;
    assert_eq!(sent["transactions"][0]["nonce"], 0);
}

#[tokio::test]
async fn a_payment_to_an_address_without_code_is_not_estimated_and_one_to_a_contract_is() {
    let anvil = Anvil::start().await;
    let (contract, _) = deploy_token(&anvil, &word_number(ONE_ETH)).await;
    // The service reaches the node through a proxy that counts what it is asked.
    let node = HostileNode::start(&anvil.url).await;
    let url = node.url.clone();
    let c = custodial_on(anvil, ONE_ETH, 1, |cfg| {
        if let Some(chain) = cfg.chains.get_mut("hteth") {
            chain.rpc_url = url;
        }
    })
    .await;
    for amount in ["5", "6"] {
        let sent = c.withdraw(OTHER, amount).await;
        let hash = sent["transactions"][0]["txHash"].as_str().unwrap();
        let tx = c.anvil.rpc("eth_getTransactionByHash", json!([hash])).await;
        assert_eq!(tx["gas"], "0x5208", "a plain payment's 21,000 gas: {tx}");
    }
    assert_eq!(node.count("eth_estimateGas"), 0, "no estimate for a payee without code");
    assert!(node.count("eth_getCode") >= 1, "whether the payee holds code was asked");
    // A contract payee is estimated: this one takes no ETH, so the estimate fails it.
    let id = c.approved(&json!({ "recipients": [{ "address": contract, "amount": "1" }] })).await;
    c.state_is(&id, "failed").await;
    assert!(node.count("eth_estimateGas") >= 1);
}

#[tokio::test]
async fn a_withdrawal_mined_but_reverted_ends_failed_and_is_not_sent_again() {
    let anvil = Anvil::start().await;
    let (contract, token) = deploy_token(&anvil, &word_number(1_000_000 * ONE_ETH)).await;
    let c =
        custodial_on(anvil, ONE_ETH, 1, |cfg| cfg.chains.get_mut("hteth").unwrap().tokens.push(token)).await;
    fund_tokens(&c, &contract, 5 * ONE_ETH).await;
    c.anvil.rpc("evm_setAutomine", json!([false])).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "1000", "tokenName": "hteth:tst" }] });
    let id = c.approved(&body).await;
    let sent = c.state_is(&id, "delivered").await;
    // While it waits in the pool, the wallet's token balance is taken away (balanceOf is the
    // contract's slot 1): mined, the transfer reverts.
    let mut key = [0u8; 64];
    key[12..32].copy_from_slice(&hex::decode(c.address().trim_start_matches("0x")).unwrap());
    key[63] = 1;
    let slot = alloy_primitives::keccak256(key);
    c.anvil
        .rpc("anvil_setStorageAt", json!([contract, slot.to_string(), format!("0x{}", "0".repeat(64))]))
        .await;
    c.anvil.mine(1).await;
    let hash = sent["transactions"][0]["txHash"].as_str().unwrap();
    let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
    assert_eq!(receipt["status"], "0x0", "{receipt}");
    // One reverted receipt decides nothing: the signer reads it again once its block is the
    // chain's `confirmations` (3) deep, finds no Transfer of it logged, and only then fails it.
    c.tx_request_where(&id, "the signer sees it mined", |t| t["transactions"][0]["blockHeight"].is_u64())
        .await;
    assert_eq!(c.tx_request(&id).await["state"], "delivered");
    c.anvil.mine(2).await;
    let failed = c.state_is(&id, "failed").await;
    assert_eq!(failed["transactions"][0]["txHash"], hash, "{failed}");
    assert_eq!(token_balance(&c.anvil, &contract, OTHER).await, 0);
    // Nothing more left the address: its one nonce went to the reverted transaction.
    c.anvil.mine(1).await;
    assert_eq!(c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "pending"])).await, "0x1");
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'withdrawal.failed'").await;
    assert_eq!(audit.len(), 1);
}

#[tokio::test]
async fn a_tx_request_pays_what_its_amount_symbol_names_and_refuses_other_symbols() {
    let anvil = Anvil::start().await;
    let (contract, token) = deploy_token(&anvil, &word_number(1_000_000 * ONE_ETH)).await;
    let c =
        custodial_on(anvil, ONE_ETH, 1, |cfg| cfg.chains.get_mut("hteth").unwrap().tokens.push(token)).await;
    fund_tokens(&c, &contract, 5 * ONE_ETH).await;
    let path = format!("/api/v2/wallet/{}/txrequests", c.wallet_id());
    let intent = |recipients: Value| json!({ "intent": { "intentType": "payment", "recipients": recipients }, "apiVersion": "full" });
    let pay = |symbol: Value| json!({ "address": { "address": OTHER }, "amount": { "value": ONE_ETH.to_string(), "symbol": symbol } });
    // Another coin, an unknown token, another chain's token, a mixed pair (an absent symbol is
    // the wallet's coin): refused, the field named, nothing stored.
    let refused = [
        (intent(json!([pay(json!("btc"))])), "intent.recipients[0].amount.symbol"),
        (intent(json!([pay(json!("hteth:nope"))])), "intent.recipients[0].amount.symbol"),
        (intent(json!([pay(json!("eth:tst"))])), "intent.recipients[0].amount.symbol"),
        (intent(json!([pay(json!("hteth")), pay(json!("hteth:tst"))])), "intent.recipients[1].amount.symbol"),
        (intent(json!([pay(Value::Null), pay(json!("hteth:tst"))])), "intent.recipients[1].amount.symbol"),
    ];
    for (body, field) in refused {
        let got =
            assert_error(c.app.post_auth(&path, &c.alice_token, &body).await, 400, "InvalidField").await;
        assert_eq!(got["context"]["field"], field, "{body}: {got}");
    }
    assert!(c.app.raw_sql("SELECT id FROM withdrawals").await.is_empty());
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'withdrawal.refused'").await;
    assert_eq!(audit.len(), 5, "each refusal is audited");
    // 1 hteth:tst is a token withdrawal of 1 TST: the contract's transfer, no ETH paid out.
    let eth_before = c.anvil.balance(OTHER).await;
    let t = expect_json(
        c.app.post_auth(&path, &c.alice_token, &intent(json!([pay(json!("hteth:tst"))]))).await,
        200,
    )
    .await;
    assert_eq!(t["intent"]["recipients"][0]["amount"]["symbol"], "hteth:tst", "{t}");
    let id = t["txRequestId"].as_str().unwrap();
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, t["pendingApprovalId"].as_str().unwrap(), &approve).await, 200).await;
    let sent = c.state_is(id, "delivered").await;
    let hash = sent["transactions"][0]["txHash"].as_str().unwrap();
    c.anvil.mine(1).await;
    let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
    assert_eq!(receipt["to"].as_str().unwrap(), contract.to_lowercase(), "{receipt}");
    assert_eq!(token_balance(&c.anvil, &contract, OTHER).await, ONE_ETH);
    assert_eq!(c.anvil.balance(OTHER).await, eth_before, "no ETH paid to the recipient");
    // The wallet's coin, named or not (its case ignored), is an ETH withdrawal.
    for symbol in [json!("hteth"), json!("HTETH"), Value::Null] {
        let small = json!({ "intent": { "intentType": "payment", "recipients": [
            { "address": { "address": OTHER }, "amount": { "value": "5", "symbol": symbol } }] } });
        let t = expect_json(c.app.post_auth(&path, &c.alice_token, &small).await, 200).await;
        assert_eq!(t["intent"]["recipients"][0]["amount"]["symbol"], "hteth", "{t}");
    }
}
