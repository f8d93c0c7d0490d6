//! The chain watcher against a real Ethereum node: anvil, from npm (`chain-tests/`, installed
//! by `.ci/run`). Transactions are sent from anvil's unlocked dev accounts.

use std::process::Stdio;

use custodian::config::{ChainConfig, Config};
use serde_json::{json, Value};

use crate::common::*;
use crate::receiver::TestReceiver;

/// anvil's first three dev accounts.
pub const RICH: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
pub const WATCHED: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
pub const OTHER: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
pub const WALLET: &str = "feedfacefeedfacefeedfacefeedface";
pub const ONE_ETH: u128 = 1_000_000_000_000_000_000;

/// A running anvil, killed when dropped. Its chain is kept in a file when it stops cleanly, so
/// [`Anvil::restart`] brings the same chain back.
pub struct Anvil {
    child: Option<std::process::Child>,
    port: u16,
    state: tempfile::TempDir,
    pub url: String,
    http: reqwest::Client,
}

impl Drop for Anvil {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn anvil_bin() -> String {
    std::env::var("CUSTODIAN_TEST_ANVIL").unwrap_or_else(|_| {
        format!(
            "{}/chain-tests/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil",
            env!("CARGO_MANIFEST_DIR")
        )
    })
}

impl Anvil {
    /// Starts anvil on a free port (chain id 31337, automine).
    pub async fn start() -> Self {
        // The port is free when asked, but another test's socket can take it before anvil binds
        // it; anvil then exits at once, and a new port is tried.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut anvil = Anvil {
                child: None,
                port,
                state: tempfile::tempdir().unwrap(),
                url: format!("http://127.0.0.1:{port}"),
                http: reqwest::Client::new(),
            };
            if anvil.launch().await {
                return anvil;
            }
        }
        panic!("anvil exited at start five times, each on a new port");
    }

    /// Starts the node again (after [`Anvil::stop`]) with the chain it had.
    pub async fn restart(&mut self) {
        assert!(self.launch().await, "anvil exited at restart: port {} taken meanwhile?", self.port);
    }

    /// Starts anvil on `self.port` and waits until it answers: false when it exits first.
    async fn launch(&mut self) -> bool {
        let bin = anvil_bin();
        assert!(
            std::path::Path::new(&bin).exists(),
            "anvil not found at {bin}: run `npm install` in chain-tests/ (as .ci/run does)"
        );
        let child = std::process::Command::new(bin)
            .args([
                "--port",
                &self.port.to_string(),
                "--host",
                "127.0.0.1",
                "--chain-id",
                "31337",
                "--silent",
            ])
            .arg("--state")
            .arg(self.state.path().join("chain.json"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start anvil");
        let child = std::cell::RefCell::new(child);
        let answered = until("anvil answers", 20, || async {
            if let Ok(Some(status)) = child.borrow_mut().try_wait() {
                eprintln!("anvil on port {} exited at start: {status}", self.port);
                return Some(false);
            }
            self.try_rpc("eth_blockNumber", json!([])).await.ok().map(|_| true)
        })
        .await;
        self.child = Some(child.into_inner());
        answered
    }

    /// Stops the node cleanly (SIGTERM: it writes its chain to the state file).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = std::process::Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let _ = c.wait();
        }
    }

    async fn try_rpc(&self, method: &str, params: Value) -> Result<Value, String> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let res = self.http.post(&self.url).json(&body).send().await.map_err(|e| e.to_string())?;
        let v: Value = res.json().await.map_err(|e| e.to_string())?;
        match v.get("error") {
            Some(e) => Err(e.to_string()),
            None => Ok(v["result"].clone()),
        }
    }

    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        self.try_rpc(method, params.clone()).await.unwrap_or_else(|e| panic!("{method} {params}: {e}"))
    }

    pub async fn send(&self, from: &str, to: &str, wei: u128) -> String {
        let tx = json!({ "from": from, "to": to, "value": format!("0x{wei:x}") });
        self.rpc("eth_sendTransaction", json!([tx])).await.as_str().unwrap().to_string()
    }

    pub async fn mine(&self, blocks: u64) {
        self.rpc("anvil_mine", json!([format!("0x{blocks:x}")])).await;
    }

    pub async fn head(&self) -> u64 {
        hex_u128(&self.rpc("eth_blockNumber", json!([])).await) as u64
    }

    /// The address's mined transaction count (`eth_getTransactionCount` at `latest`).
    pub async fn nonce(&self, address: &str) -> u64 {
        hex_u128(&self.rpc("eth_getTransactionCount", json!([address, "latest"])).await) as u64
    }

    pub async fn balance(&self, address: &str) -> u128 {
        hex_u128(&self.rpc("eth_getBalance", json!([address, "latest"])).await)
    }
}

fn hex_u128(v: &Value) -> u128 {
    u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// The node as a chain of the config, 3 confirmations, polled every 50 ms from block 0.
pub fn watch(c: &mut Config, anvil: &Anvil) {
    crate::webhooks::fast(c);
    let chain = ChainConfig {
        rpc_url: anvil.url.clone(),
        chain_id: 31337,
        confirmations: 3,
        reorg_depth: 8,
        poll_interval_ms: 50,
        start_block: Some(0),
        ..ChainConfig::default()
    };
    c.chains.insert("hteth".into(), chain);
}

/// (state, valueString, hash) of every transfer notification `receiver` got, in arrival order.
pub fn transfer_notices(receiver: &TestReceiver) -> Vec<(String, String, String)> {
    receiver
        .received()
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .map(|b| {
            let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
            (s("state"), s("valueString"), s("hash"))
        })
        .collect()
}

pub struct Chain {
    pub anvil: Anvil,
    pub app: TestApp,
    pub token: String,
    pub admin: String,
    pub receiver: TestReceiver,
}

pub async fn chain_fixture() -> Chain {
    chain_fixture_on(Anvil::start().await, |_| {}).await
}

pub async fn chain_fixture_on(anvil: Anvil, tweak: impl FnOnce(&mut Config)) -> Chain {
    let app = spawn_app_with(|c| {
        watch(c, &anvil);
        tweak(c);
    })
    .await;
    let user = app.create_user("chain@example.com").await;
    let enterprise = app.create_enterprise("Chain", &[(&user, true)]).await;
    let record = json!({
        "id": WALLET, "label": "eth hot", "coin": "hteth", "type": "hot", "m": 2, "n": 3, "enterprise": enterprise,
        "organization": "org-7", "allowBackupKeySigning": false, "approvalsRequired": 1,
        "coinSpecific": { "baseAddress": WATCHED.to_lowercase() }, "deleted": false,
        "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false, "isCold": false,
        "startDate": "2025-01-01T00:00:00Z", "users": [{ "user": user.id, "permissions": ["admin"] }],
    });
    let s = custodian::wallets::import::import(&app.state.store, &json!([record]).to_string(), |_, _| {})
        .await
        .expect("import");
    assert_eq!(s.imported, 1, "{s:?}");
    let token = app.login(&user).await;
    let ops = app.create_user_with("chain-ops@example.com", true).await;
    let admin = app.login(&ops).await;
    let receiver = TestReceiver::start().await;
    let hook = json!({ "type": "transfer", "url": receiver.url, "label": "chain" });
    expect_json(app.post_auth(&format!("/api/v2/hteth/wallet/{WALLET}/webhooks"), &token, &hook).await, 200)
        .await;
    Chain { anvil, app, token, admin, receiver }
}

impl Chain {
    pub async fn transfers(&self, query: &str) -> Vec<Value> {
        let path = format!("/api/v2/hteth/wallet/{WALLET}/transfer{query}");
        let body = expect_json(self.app.get_auth(&path, &self.token).await, 200).await;
        body["transfers"].as_array().unwrap().clone()
    }

    pub async fn wallet(&self) -> Value {
        let path = format!("/api/v2/hteth/wallet/{WALLET}?expandBalance=true");
        expect_json(self.app.get_auth(&path, &self.token).await, 200).await
    }

    /// (state, valueString, hash) of every transfer notification received so far.
    pub fn notified(&self) -> Vec<(String, String, String)> {
        transfer_notices(&self.receiver)
    }

    async fn checkpoint(&self) -> u64 {
        let s = custodian::chain::status(&self.app.state.chains).await.unwrap();
        s[0].height.unwrap_or(0)
    }

    pub async fn caught_up(&self) {
        let head = self.anvil.head().await;
        until("the watcher reaches the node's head", 20, || async {
            (self.checkpoint().await >= head).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn an_eth_transfer_is_notified_unconfirmed_then_confirmed_with_the_nodes_balance() {
    let c = chain_fixture().await;
    let txid = c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    c.receiver.wait_for(1, 20).await;
    let first = c.notified();
    assert_eq!(first, [("unconfirmed".to_string(), ONE_ETH.to_string(), txid.clone())]);
    // Two more blocks: three confirmations.
    c.anvil.mine(2).await;
    c.receiver.wait_for(2, 20).await;
    assert_eq!(c.notified()[1], ("confirmed".to_string(), ONE_ETH.to_string(), txid.clone()));
    c.caught_up().await;
    let listed = c.transfers("").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let t = &listed[0];
    assert_eq!((t["state"].as_str(), t["type"].as_str()), (Some("confirmed"), Some("receive")));
    assert_eq!(t["txid"].as_str(), Some(txid.as_str()));
    assert_eq!(t["valueString"].as_str(), Some(ONE_ETH.to_string().as_str()));
    assert_eq!(t["entries"][0]["address"].as_str(), Some(WATCHED));
    // The transfer by id, and the same through the filters.
    let id = t["id"].as_str().unwrap();
    let by_id = expect_json(
        c.app.get_auth(&format!("/api/v2/hteth/wallet/{WALLET}/transfer/{id}"), &c.token).await,
        200,
    )
    .await;
    assert_eq!(by_id["txid"], t["txid"]);
    assert_eq!(c.transfers(&format!("?txHash={txid}&type=receive&state=confirmed")).await.len(), 1);
    assert_eq!(c.transfers("?type=send").await.len(), 0);
    // Balances are the node's.
    let node = c.anvil.balance(WATCHED).await;
    let w = c.wallet().await;
    assert_eq!(w["balanceString"].as_str(), Some(node.to_string().as_str()), "{w}");
    assert_eq!(w["confirmedBalanceString"].as_str(), Some(node.to_string().as_str()), "{w}");
    // A send from the wallet: its value is negative, amount and fee.
    let sent = c.anvil.send(WATCHED, OTHER, ONE_ETH / 4).await;
    c.receiver.wait_for(3, 20).await;
    let (state, value, hash) = c.notified()[2].clone();
    assert_eq!((state.as_str(), hash.as_str()), ("unconfirmed", sent.as_str()));
    let value: i128 = value.parse().unwrap();
    assert!(value < -((ONE_ETH / 4) as i128), "amount and fee: {value}");
    c.caught_up().await;
    let node = c.anvil.balance(WATCHED).await;
    let w = c.wallet().await;
    assert_eq!(w["balanceString"].as_str(), Some(node.to_string().as_str()), "{w}");
    // Spendable is the confirmed balance less the unconfirmed send.
    let confirmed: u128 = w["confirmedBalanceString"].as_str().unwrap().parse().unwrap();
    let spendable: u128 = w["spendableBalanceString"].as_str().unwrap().parse().unwrap();
    assert_eq!(confirmed - spendable, value.unsigned_abs());
    // Balances of a watched coin are the node's: setting them is refused.
    let res = c
        .app
        .post_auth(
            &format!("/api/v2/internal/wallet/{WALLET}/balance"),
            &c.admin,
            &json!({ "balanceString": "1" }),
        )
        .await;
    assert_error(res, 400, "BadRequest").await;
}

#[tokio::test]
async fn a_transfer_in_an_orphaned_block_is_removed_and_its_balance_restored() {
    let c = chain_fixture().await;
    c.anvil.mine(1).await;
    c.caught_up().await;
    let before = c.anvil.balance(WATCHED).await;
    let txid = c.anvil.send(RICH, WATCHED, 2 * ONE_ETH).await;
    c.receiver.wait_for(1, 20).await;
    c.caught_up().await;
    assert_eq!(c.wallet().await["balanceString"].as_str(), Some((before + 2 * ONE_ETH).to_string().as_str()));
    // Replace the last block by an empty one: the transaction is gone from the chain.
    c.anvil.rpc("anvil_reorg", json!([1, []])).await;
    c.anvil.mine(1).await;
    c.receiver.wait_for(2, 20).await;
    assert_eq!(c.notified()[1], ("removed".to_string(), (2 * ONE_ETH).to_string(), txid.clone()));
    c.caught_up().await;
    let listed = c.transfers("").await;
    assert_eq!(listed[0]["state"].as_str(), Some("removed"), "{listed:?}");
    assert_eq!(c.anvil.balance(WATCHED).await, before);
    until("the balance is restored", 10, || async {
        (c.wallet().await["balanceString"].as_str() == Some(before.to_string().as_str())).then_some(())
    })
    .await;
    let status = custodian::chain::status(&c.app.state.chains).await.unwrap();
    assert_eq!(status[0].last_reorg_depth, Some(1));
}

#[tokio::test]
async fn a_transaction_re_included_after_a_reorg_is_confirmed_again() {
    let c = chain_fixture().await;
    c.anvil.mine(1).await;
    c.caught_up().await;
    let txid = c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    c.receiver.wait_for(1, 20).await;
    c.caught_up().await;
    // The block is replaced by another holding the same signed transaction: a new block hash.
    let raw = c.anvil.rpc("eth_getRawTransactionByHash", json!([txid])).await;
    c.anvil.rpc("anvil_reorg", json!([1, [[raw, 0]]])).await;
    c.anvil.mine(3).await;
    until("confirmed on the new branch", 20, || async {
        c.notified().iter().any(|(state, _, hash)| state == "confirmed" && hash == &txid).then_some(())
    })
    .await;
    c.caught_up().await;
    wait_until_idle(&c.app.state.store).await;
    // Events are not ordered across a run: the states told, as a multiset.
    let mut told: Vec<String> =
        c.notified().into_iter().filter(|(_, _, h)| h == &txid).map(|(state, _, _)| state).collect();
    told.sort();
    assert_eq!(told, ["confirmed", "removed", "unconfirmed", "unconfirmed"]);
    let listed = c.transfers("").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "confirmed", "{listed:?}");
    let status = custodian::chain::status(&c.app.state.chains).await.unwrap();
    assert_eq!(status[0].last_reorg_depth, Some(1));
}

#[tokio::test]
async fn block_webhooks_hear_each_block_once_at_their_confirmations() {
    let c = chain_fixture().await;
    c.anvil.mine(3).await;
    c.caught_up().await;
    let start = c.anvil.head().await;
    let blocks = TestReceiver::start().await;
    let hook = json!({ "type": "block", "url": blocks.url, "numConfirmations": 3 });
    expect_json(c.app.post_auth("/api/v2/hteth/webhooks", &c.token, &hook).await, 200).await;
    c.anvil.mine(6).await;
    c.caught_up().await;
    // Blocks start-1 ..= start+4 reach 3 confirmations with blocks start+1 ..= start+6, after
    // the webhook was made; none twice, none early.
    blocks.wait_for(6, 20).await;
    // The checkpoint is at the head, and a block's events commit with it: once the outbox is
    // idle, whatever was sent has arrived.
    wait_until_idle(&c.app.state.store).await;
    let got = blocks.received();
    let mut heights: Vec<u64> = got
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .map(|b| {
            assert_eq!(b["confirmations"], 3, "{b}");
            b["height"].as_u64().unwrap()
        })
        .collect();
    // Deliveries are not ordered (blocks read together are announced together): each once.
    heights.sort_unstable();
    assert_eq!(heights, (start - 1..=start + 4).collect::<Vec<_>>());
}

#[tokio::test]
async fn addresses_are_listed_added_checksummed_and_watched() {
    let c = chain_fixture().await;
    let list = format!("/api/v2/hteth/wallet/{WALLET}/addresses");
    let first = expect_json(c.app.get_auth(&list, &c.token).await, 200).await;
    assert_eq!(
        first["addresses"][0]["address"].as_str(),
        Some(WATCHED),
        "the record's base address: {first}"
    );
    let path = format!("/api/v2/internal/wallet/{WALLET}/addresses");
    // Only service admins add addresses, and only real ones.
    assert_error(
        c.app.post_auth(&path, &c.token, &json!({ "address": OTHER })).await,
        403,
        "InsufficientScope",
    )
    .await;
    let bad = OTHER.replace('C', "c").replacen("c", "C", 1);
    assert_error(c.app.post_auth(&path, &c.admin, &json!({ "address": bad })).await, 400, "InvalidField")
        .await;
    let added = expect_json(
        c.app.post_auth(&path, &c.admin, &json!({ "address": OTHER.to_lowercase(), "label": "cold" })).await,
        200,
    )
    .await;
    assert_eq!(added["address"].as_str(), Some(OTHER));
    let both = expect_json(c.app.get_auth(&list, &c.token).await, 200).await;
    assert_eq!(both["count"], 2, "{both}");
    let paged = expect_json(
        c.app.get_auth(&format!("/api/v2/hteth/wallet/{WALLET}/addresses?limit=1"), &c.token).await,
        200,
    )
    .await;
    assert_eq!(paged["count"], 1);
    let next = paged["nextBatchPrevId"].as_str().unwrap();
    let rest = expect_json(
        c.app.get_auth(&format!("/api/v2/hteth/wallet/{WALLET}/addresses?prevId={next}"), &c.token).await,
        200,
    )
    .await;
    assert_eq!(rest["count"], 1);
    assert_ne!(rest["addresses"][0]["address"], paged["addresses"][0]["address"]);
    // The added address is watched: a payment to it is the wallet's.
    let txid = c.anvil.send(RICH, OTHER, ONE_ETH).await;
    until("the added address's transfer", 20, || async {
        c.notified().into_iter().find(|(_, _, h)| h == &txid)
    })
    .await;
}

/// 32-byte ABI words.
pub fn word_address(a: &str) -> String {
    format!("{:0>64}", a.trim_start_matches("0x").to_lowercase())
}

pub fn word_number(n: u128) -> String {
    format!("{n:064x}")
}

/// Deploys the test ERC-20 token (chain-tests/contracts) with its whole `supply` (a 32-byte
/// ABI word) held by [`RICH`]: its address, and the `hteth:tst` token setting for it.
pub async fn deploy_token(anvil: &Anvil, supply: &str) -> (String, custodian::config::TokenConfig) {
    let code = include_str!("../../chain-tests/contracts/TestToken.bin").trim();
    let deploy = json!({ "from": RICH, "data": format!("0x{code}{supply}"), "gas": "0x200000" });
    let tx = anvil.rpc("eth_sendTransaction", json!([deploy])).await;
    let receipt = until("the token is deployed", 10, || async {
        Some(anvil.rpc("eth_getTransactionReceipt", json!([tx])).await).filter(|r| !r.is_null())
    })
    .await;
    let contract = receipt["contractAddress"].as_str().unwrap_or_else(|| panic!("{receipt}")).to_string();
    let token =
        custodian::config::TokenConfig { coin: "hteth:tst".into(), contract: contract.clone(), decimals: 18 };
    (contract, token)
}

#[tokio::test]
async fn erc20_transfers_are_the_tokens_coin_with_their_own_list() {
    let anvil = Anvil::start().await;
    let (contract, token) = deploy_token(&anvil, &word_number(1_000_000 * ONE_ETH)).await;
    let c = chain_fixture_on(anvil, |c| c.chains.get_mut("hteth").unwrap().tokens.push(token)).await;
    let call = |from: &str, to: &str, amount: u128| json!({ "from": from, "to": contract, "data": format!("0xa9059cbb{}{}", word_address(to), word_number(amount)) });
    let inbound = c.anvil.rpc("eth_sendTransaction", json!([call(RICH, WATCHED, 5 * ONE_ETH)])).await;
    let outbound = c.anvil.rpc("eth_sendTransaction", json!([call(WATCHED, OTHER, 2 * ONE_ETH)])).await;
    c.anvil.mine(3).await;
    c.caught_up().await;
    let path = format!("/api/v2/hteth:tst/wallet/{WALLET}/transfer");
    let listed = expect_json(c.app.get_auth(&path, &c.token).await, 200).await;
    let rows: Vec<(String, String, String)> = listed["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["coin"], "hteth:tst", "{t}");
            let s = |k: &str| t[k].as_str().unwrap_or_else(|| panic!("{k} in {t}")).to_string();
            (s("txid"), s("type"), s("valueString"))
        })
        .collect();
    let expected = [
        (outbound.as_str().unwrap().to_string(), "send".to_string(), format!("-{}", 2 * ONE_ETH)),
        (inbound.as_str().unwrap().to_string(), "receive".to_string(), (5 * ONE_ETH).to_string()),
    ];
    assert_eq!(rows, expected);
    // The chain coin's list holds only the ETH the token send paid in fees: no token amounts.
    let eth = c.transfers("").await;
    assert!(
        eth.iter().all(|t| t["coin"] == "hteth" && t["valueString"].as_str().unwrap().starts_with('-')),
        "{eth:?}"
    );
    // Notifications name the token's coin, confirmed in the end.
    let confirmed = || {
        c.receiver
            .received()
            .iter()
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
            .filter(|b| b["coin"] == "hteth:tst" && b["state"] == "confirmed")
            .count()
    };
    until("both token transfers confirmed", 20, || async { (confirmed() == 2).then_some(()) }).await;
    // The wallet's token balances are the node's `balanceOf`, confirmed once both confirmed.
    let call = json!({ "to": contract, "data": format!("0x70a08231{}", word_address(WATCHED)) });
    let held = hex_u128(&c.anvil.rpc("eth_call", json!([call, "latest"])).await);
    assert_eq!(held, 3 * ONE_ETH);
    // Without BitGo's allTokens=true the wallet carries no token balances.
    assert_eq!(c.wallet().await.get("tokens"), None);
    let tokens = until("the wallet's confirmed token balance", 20, || async {
        let path = format!("/api/v2/hteth/wallet/{WALLET}?allTokens=true");
        let w = expect_json(c.app.get_auth(&path, &c.token).await, 200).await;
        (w["tokens"]["hteth:tst"]["confirmedBalanceString"] == held.to_string())
            .then_some(w["tokens"].clone())
    })
    .await;
    assert_eq!(tokens["hteth:tst"]["balanceString"], held.to_string(), "{tokens}");
    assert_eq!(tokens["hteth:tst"]["spendableBalanceString"], held.to_string(), "{tokens}");
}

#[tokio::test]
async fn a_transaction_another_of_its_nonce_replaces_in_a_reorg_is_replaced() {
    let c = chain_fixture().await;
    c.anvil.mine(1).await;
    c.caught_up().await;
    let nonce = hex_u128(&c.anvil.rpc("eth_getTransactionCount", json!([RICH, "latest"])).await);
    let paid = c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    c.receiver.wait_for(1, 20).await;
    c.caught_up().await;
    // The block is replaced by one where the sender spent the same nonce elsewhere.
    let instead = json!({ "from": RICH, "to": OTHER, "value": "0x1", "nonce": format!("0x{nonce:x}"), "gas": "0x5208" });
    c.anvil.rpc("anvil_reorg", json!([1, [[instead, 0]]])).await;
    c.anvil.mine(1).await;
    until("the replaced notification", 20, || async {
        c.notified().into_iter().find(|(state, _, hash)| state == "replaced" && hash == &paid)
    })
    .await;
    c.caught_up().await;
    let listed = c.transfers("?state=replaced").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["txid"].as_str(), Some(paid.as_str()));
}

#[tokio::test]
async fn a_transaction_webhook_hears_of_each_transaction_once_at_inclusion() {
    let c = chain_fixture().await;
    let txs = TestReceiver::start().await;
    let hook = json!({ "type": "transaction", "url": txs.url });
    expect_json(
        c.app.post_auth(&format!("/api/v2/hteth/wallet/{WALLET}/webhooks"), &c.token, &hook).await,
        200,
    )
    .await;
    let paid = c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    let spent = c.anvil.send(WATCHED, OTHER, ONE_ETH / 2).await;
    c.anvil.mine(4).await;
    c.caught_up().await;
    txs.wait_for(2, 20).await;
    wait_until_idle(&c.app.state.store).await;
    let mut hashes: Vec<String> = txs
        .received()
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .map(|b| {
            assert_eq!(b["type"], "transaction", "{b}");
            b["hash"].as_str().unwrap().to_string()
        })
        .collect();
    hashes.sort();
    let mut want = vec![paid, spent];
    want.sort();
    assert_eq!(hashes, want, "each transaction once");
}

#[tokio::test]
async fn a_wallet_webhook_with_num_confirmations_hears_of_a_transfer_once_at_that_count() {
    let c = chain_fixture().await;
    let patient = TestReceiver::start().await;
    let hook = json!({ "type": "transfer", "url": patient.url, "numConfirmations": 2 });
    let made = expect_json(
        c.app.post_auth(&format!("/api/v2/hteth/wallet/{WALLET}/webhooks"), &c.token, &hook).await,
        200,
    )
    .await;
    assert_eq!(made["numConfirmations"], 2, "{made}");
    let txid = c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    c.anvil.mine(4).await;
    c.caught_up().await;
    // The webhook without a number heard both states; this one once, at two confirmations.
    c.receiver.wait_for(2, 20).await;
    let got = patient.wait_for(1, 20).await;
    wait_until_idle(&c.app.state.store).await;
    assert_eq!(patient.received().len(), 1, "{got:?}");
    let b: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!((b["hash"].as_str(), b["confirmations"].as_u64()), (Some(txid.as_str()), Some(2)), "{b}");
    assert_eq!(c.notified().len(), 2);
}
