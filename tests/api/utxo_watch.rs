//! The UTXO watcher against Litecoin Core in regtest (litecoind.rs): receives to each chain
//! code, a send with change, RBF and `bumpfee`, a 2-block reorg, and the balances and
//! unspents against the node's own view (`scantxoutset`). docs/chains.md#utxo-chains.

use bitcoin::{bip32::Xpriv, secp256k1::Secp256k1, NetworkKind};
use serde_json::{json, Value};

use crate::common::*;
use crate::litecoind::Litecoind;
use crate::receiver::TestReceiver;
use custodian::chain::utxo::{
    address::{derive, ChainCode, Derived, WalletKeys},
    params::{Family, Network},
};
use custodian::config::{ChainConfig, ChainFamily, Config, Secret};

/// A wallet whose three keys the test holds, watched by the service, with Litecoin Core's
/// legacy wallet `ours` able to sign for the addresses the test asks it to.
pub struct Watched {
    pub node: Litecoind,
    pub app: TestApp,
    pub token: String,
    pub wallet: String,
    pub receiver: TestReceiver,
    pub miner: String,
    masters: Vec<Xpriv>,
    keys: WalletKeys,
}

/// The node as chain `tltc` of the config: regtest, 2 confirmations, polled every 50 ms.
pub fn watch(c: &mut Config, node: &Litecoind) {
    crate::webhooks::fast(c);
    // The tests poll the API for what the watcher wrote.
    c.rate_limit.requests = 100_000;
    let chain = ChainConfig {
        family: ChainFamily::Utxo,
        rpc_url: node.rpc_url.clone(),
        network: Some(Network::Regtest),
        rpc_user: Some("custodian".into()),
        rpc_password: Some(Secret("custodian".into())),
        confirmations: 2,
        reorg_depth: 8,
        poll_interval_ms: 50,
        start_block: Some(0),
        ..ChainConfig::default()
    };
    c.chains.insert("tltc".into(), chain);
}

pub fn ltc(base_units: u64) -> f64 {
    base_units as f64 / 1e8
}

impl Watched {
    /// A node with 101 blocks mined to its wallet `miner`, the service watching it, and
    /// Alice's wallet of three keychains with a transfer webhook to a receiver.
    pub async fn start() -> Watched {
        let node = Litecoind::start();
        node.rpc("createwallet", json!(["miner"])).await;
        node.rpc("createwallet", json!(["ours"])).await;
        let miner = node.wallet_rpc("miner", "getnewaddress", json!([])).await.as_str().unwrap().to_string();
        node.rpc("generatetoaddress", json!([101, miner])).await;
        let app = spawn_app_with(|c| watch(c, &node)).await;
        let alice = app.create_user("alice@example.com").await;
        let acme = app.create_enterprise("Acme", &[(&alice, true)]).await;
        let token = app.login(&alice).await;
        let secp = Secp256k1::new();
        let masters: Vec<Xpriv> =
            (0..3u8).map(|i| Xpriv::new_master(NetworkKind::Main, &[60 + i; 32]).unwrap()).collect();
        let pubs: Vec<String> =
            masters.iter().map(|m| bitcoin::bip32::Xpub::from_priv(&secp, m).to_string()).collect();
        let mut ids = Vec::new();
        for (p, source) in pubs.iter().zip(["user", "backup", "bitgo"]) {
            let body = json!({ "pub": p, "source": source });
            let k = expect_json(app.post_auth("/api/v2/tltc/key", &token, &body).await, 200).await;
            ids.push(k["id"].as_str().unwrap().to_string());
        }
        let add = json!({ "label": "LTC", "enterprise": acme, "m": 2, "n": 3, "keys": ids });
        let w = expect_json(app.post_auth("/api/v2/tltc/wallet/add", &token, &add).await, 200).await;
        let wallet = w["id"].as_str().unwrap().to_string();
        let receiver = TestReceiver::start().await;
        let hook = json!({ "type": "transfer", "url": receiver.url });
        expect_json(
            app.post_auth(&format!("/api/v2/tltc/wallet/{wallet}/webhooks"), &token, &hook).await,
            200,
        )
        .await;
        let keys = WalletKeys::parse([&pubs[0], &pubs[1], &pubs[2]]).unwrap();
        Watched { node, app, token, wallet, receiver, miner, masters, keys }
    }

    /// The wallet's address at `chain` and `index` as regtest writes it (the service writes
    /// BitGo's `tltc` testnet form: the same script).
    pub fn regtest(&self, chain: u32, index: u32) -> Derived {
        derive(&self.keys, ChainCode::new(chain).unwrap(), index, Family::Litecoin.params(Network::Regtest))
            .unwrap()
    }

    /// Derives the next address of `chain` through the API; its index.
    pub async fn derive(&self, chain: u32) -> u32 {
        let path = format!("/api/v2/tltc/wallet/{}/address", self.wallet);
        let a =
            expect_json(self.app.post_auth(&path, &self.token, &json!({ "chain": chain })).await, 200).await;
        u32::try_from(a["index"].as_u64().unwrap()).unwrap()
    }

    /// Litecoin Core's wallet `ours` gets the three child keys of `chain`/`index` and the
    /// multisig script, so it signs for that address as the wallet's owners would.
    pub async fn sign_for(&self, chain: u32, index: u32) {
        let secp = Secp256k1::new();
        let path: Vec<bitcoin::bip32::ChildNumber> = [0, 0, chain, index]
            .iter()
            .map(|&n| bitcoin::bip32::ChildNumber::from_normal_idx(n).unwrap())
            .collect();
        let children: Vec<Xpriv> =
            self.masters.iter().map(|m| m.derive_priv(&secp, &path).unwrap()).collect();
        for child in &children {
            let wif = bitcoin::PrivateKey::new(child.private_key, NetworkKind::Test).to_wif();
            self.node.wallet_rpc("ours", "importprivkey", json!([wif, "", false])).await;
        }
        let pubs: Vec<String> = children.iter().map(|c| c.to_priv().public_key(&secp).to_string()).collect();
        let kind = match chain / 10 {
            0 => "legacy",
            1 => "p2sh-segwit",
            _ => "bech32",
        };
        let made = self.node.wallet_rpc("ours", "addmultisigaddress", json!([2, pubs, "", kind])).await;
        assert_eq!(made["address"], self.regtest(chain, index).address.as_str());
    }

    /// Mines `blocks` to a fresh address of the miner's: each block differs from any mined
    /// before (a branch mined after `invalidateblock` must not be the invalidated one again).
    pub async fn mine(&self, blocks: u64) {
        let to = self.node.wallet_rpc("miner", "getnewaddress", json!([])).await;
        self.node.rpc("generatetoaddress", json!([blocks, to])).await;
    }

    pub async fn pay(&self, to: &str, units: u64, rbf: bool) -> String {
        let sent =
            self.node.wallet_rpc("miner", "sendtoaddress", json!([to, ltc(units), "", "", false, rbf])).await;
        sent.as_str().unwrap().to_string()
    }

    async fn checkpoint(&self) -> u64 {
        let s = custodian::chain::status(&self.app.state.chains).await.unwrap();
        s[0].height.unwrap_or(0)
    }

    /// Waits until the watcher has read the node's head.
    pub async fn caught_up(&self) {
        let head = self.node.rpc("getblockcount", json!([])).await.as_u64().unwrap();
        until("the watcher reaches the node's head", 30, || async {
            (self.checkpoint().await >= head).then_some(())
        })
        .await;
    }

    pub async fn transfers(&self) -> Vec<Value> {
        let path = format!("/api/v2/tltc/wallet/{}/transfer", self.wallet);
        expect_json(self.app.get_auth(&path, &self.token).await, 200).await["transfers"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The transfer of `txid`, once the service has it in `state`.
    pub async fn transfer_in(&self, txid: &str, state: &str) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let all = self.transfers().await;
            if let Some(t) = all.iter().find(|t| t["txid"] == txid && t["state"] == state) {
                return t.clone();
            }
            let seen: Vec<(&Value, &Value)> = all.iter().map(|t| (&t["txid"], &t["state"])).collect();
            assert!(std::time::Instant::now() < deadline, "{txid} never {state}; transfers: {seen:?}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub async fn wallet_json(&self) -> Value {
        let path = format!("/api/v2/tltc/wallet/{}?expandBalance=true", self.wallet);
        expect_json(self.app.get_auth(&path, &self.token).await, 200).await
    }

    /// (state, valueString, hash) of every transfer notification so far, in arrival order.
    pub fn notified(&self) -> Vec<(String, String, String)> {
        crate::chain::transfer_notices(&self.receiver)
    }

    /// The node's unspent total over `addresses` (regtest form), base units: `scantxoutset`
    /// with at least `min_confirms` confirmations at the node's head.
    pub async fn node_balance(&self, addresses: &[String], min_confirms: u64) -> u64 {
        let descs: Vec<String> = addresses.iter().map(|a| format!("addr({a})")).collect();
        let scan = self.node.rpc("scantxoutset", json!(["start", descs])).await;
        let height = scan["height"].as_u64().unwrap();
        scan["unspents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| height + 1 - u["height"].as_u64().unwrap() >= min_confirms)
            .map(|u| custodian::chain::utxo::node::base_units(&u["amount"]).unwrap())
            .sum()
    }

    /// The wallet's balances as the API gives them: (balance, confirmed, spendable).
    pub async fn balances(&self) -> (u64, u64, u64) {
        let w = self.wallet_json().await;
        let n = |k: &str| w[k].as_str().unwrap_or_else(|| panic!("{k} in {w}")).parse::<u64>().unwrap();
        (n("balanceString"), n("confirmedBalanceString"), n("spendableBalanceString"))
    }
}

#[tokio::test]
async fn a_receive_to_each_chain_code_is_unconfirmed_then_confirmed_with_the_node_s_balances_and_unspents() {
    let w = Watched::start().await;
    assert_eq!(w.derive(10).await, 0);
    assert_eq!(w.derive(20).await, 0);
    w.caught_up().await;
    let amounts = [(0u32, 50_000_000u64), (10, 25_000_000), (20, 12_500_000)];
    let mut txids = Vec::new();
    for (chain, units) in amounts {
        txids.push(w.pay(&w.regtest(chain, 0).address, units, false).await);
    }
    // Not RBF: each is told `unconfirmed` from the mempool, with its exact value.
    w.receiver.wait_for(3, 30).await;
    let mut told = w.notified();
    told.sort();
    let mut want: Vec<_> = amounts
        .iter()
        .zip(&txids)
        .map(|((_, u), t)| ("unconfirmed".to_string(), u.to_string(), t.clone()))
        .collect();
    want.sort();
    assert_eq!(told, want);
    // Unconfirmed receives count in the balance only.
    let total: u64 = amounts.iter().map(|(_, u)| u).sum();
    until("the mempool's balance", 30, || async { (w.balances().await == (total, 0, 0)).then_some(()) })
        .await;
    // One block: one confirmation of two; the second confirms them.
    w.mine(1).await;
    w.caught_up().await;
    w.mine(1).await;
    w.receiver.wait_for(6, 30).await;
    let confirmed: Vec<_> = w.notified()[3..].iter().map(|(s, _, _)| s.clone()).collect();
    assert_eq!(confirmed, ["confirmed"; 3]);
    w.caught_up().await;
    let addresses: Vec<String> = amounts.iter().map(|(c, _)| w.regtest(*c, 0).address).collect();
    let node = w.node_balance(&addresses, 2).await;
    assert_eq!(node, total);
    assert_eq!(w.balances().await, (total, total, total));
    // Each transfer in BitGo's shape: its output to us with our chain and index.
    for ((chain, units), txid) in amounts.iter().zip(&txids) {
        let t = w.transfer_in(txid, "confirmed").await;
        assert_eq!(
            (t["type"].as_str(), t["valueString"].as_str()),
            (Some("receive"), Some(units.to_string().as_str()))
        );
        let ours: Vec<&Value> =
            t["outputs"].as_array().unwrap().iter().filter(|o| o["wallet"] == w.wallet.as_str()).collect();
        assert_eq!(ours.len(), 1, "{t}");
        assert_eq!(
            (ours[0]["chain"].as_u64(), ours[0]["index"].as_u64()),
            (Some(u64::from(*chain)), Some(0))
        );
        assert_eq!(ours[0]["value"].as_u64(), Some(*units));
        assert!(ours[0]["id"].as_str().unwrap().starts_with(&format!("{txid}:")));
        assert_eq!(t["entries"].as_array().unwrap().len(), 1, "{t}");
    }
    // Unspents: the three, filtered by value and confirmations, paged by outpoint.
    let path = format!("/api/v2/tltc/wallet/{}/unspents", w.wallet);
    let all = expect_json(w.app.get_auth(&path, &w.token).await, 200).await;
    let mut values: Vec<u64> =
        all["unspents"].as_array().unwrap().iter().map(|u| u["value"].as_u64().unwrap()).collect();
    values.sort();
    assert_eq!(values, [12_500_000, 25_000_000, 50_000_000]);
    let big = expect_json(w.app.get_auth(&format!("{path}?minValue=20000000"), &w.token).await, 200).await;
    assert_eq!(big["count"], 2);
    let deep = expect_json(w.app.get_auth(&format!("{path}?minConfirms=3"), &w.token).await, 200).await;
    assert_eq!(deep["count"], 0);
    let first = expect_json(w.app.get_auth(&format!("{path}?limit=2"), &w.token).await, 200).await;
    let next = first["nextBatchPrevId"].as_str().unwrap();
    let rest = expect_json(w.app.get_auth(&format!("{path}?prevId={next}"), &w.token).await, 200).await;
    assert_eq!(rest["count"], 1);
    assert_error(w.app.get_auth(&format!("{path}?prevId=nope"), &w.token).await, 400, "InvalidField").await;
    for bounded in ["minValue=10000000000000001", "minConfirms=1000001"] {
        assert_error(w.app.get_auth(&format!("{path}?{bounded}"), &w.token).await, 400, "InvalidField").await;
    }
    // No output's index is past u32: nothing comes after such a cursor of the last txid.
    let far = format!("{path}?prevId={}:9286372204", "f".repeat(64));
    assert_eq!(expect_json(w.app.get_auth(&far, &w.token).await, 200).await["count"], 0);
}

#[tokio::test]
async fn a_send_with_change_has_exact_entries_and_fee_and_the_node_s_balances() {
    let w = Watched::start().await;
    assert_eq!(w.derive(1).await, 0);
    assert_eq!(w.derive(20).await, 0);
    w.sign_for(0, 0).await;
    w.sign_for(20, 0).await;
    w.pay(&w.regtest(0, 0).address, 60_000_000, false).await;
    w.pay(&w.regtest(20, 0).address, 40_000_000, false).await;
    w.mine(2).await;
    w.caught_up().await;
    until("both receives", 30, || async { (w.balances().await.1 == 100_000_000).then_some(()) }).await;
    // Litecoin Core signs with the wallet's keys: 0.7 LTC out, change to our chain 1 address.
    let change = w.regtest(1, 0).address;
    let out = json!([{ w.miner.clone(): 0.7 }]);
    let raw = w.node.wallet_rpc("ours", "createrawtransaction", json!([[], out])).await;
    let funded = w
        .node
        .wallet_rpc(
            "ours",
            "fundrawtransaction",
            json!([raw, { "changeAddress": change, "replaceable": false }]),
        )
        .await;
    let fee = custodian::chain::utxo::node::base_units(&funded["fee"]).unwrap();
    let signed = w.node.wallet_rpc("ours", "signrawtransactionwithwallet", json!([funded["hex"]])).await;
    assert_eq!(signed["complete"], true, "{signed}");
    let txid = w.node.rpc("sendrawtransaction", json!([signed["hex"]])).await.as_str().unwrap().to_string();
    let t = w.transfer_in(&txid, "unconfirmed").await;
    let sent = 70_000_000 + fee;
    assert_eq!(t["type"], "send");
    assert_eq!(t["valueString"].as_str(), Some(format!("-{sent}").as_str()), "{t}");
    assert_eq!(t["feeString"].as_str(), Some(fee.to_string().as_str()), "{t}");
    let entry =
        |address: &str| t["entries"].as_array().unwrap().iter().find(|e| e["address"] == address).cloned();
    let paid = entry(&w.miner).expect("the payee's entry");
    assert_eq!((paid["valueString"].as_str(), paid["isChange"].as_bool()), (Some("70000000"), Some(false)));
    // The service writes the change address in BitGo's testnet form; same script.
    let change_tltc =
        derive(&w.keys, ChainCode::new(1).unwrap(), 0, Family::Litecoin.params(Network::Testnet)).unwrap();
    let back = entry(&change_tltc.address).expect("the change entry");
    assert_eq!(back["isChange"], true);
    assert_eq!(back["valueString"].as_str(), Some((100_000_000 - sent).to_string().as_str()));
    assert_eq!(t["inputs"].as_array().unwrap().len(), 2, "{t}");
    // Told once unconfirmed (not RBF), then confirmed; balances follow the node.
    until("the send's notification", 30, || async { w.notified().iter().any(|n| n.2 == txid).then_some(()) })
        .await;
    let (balance, confirmed, spendable) = w.balances().await;
    assert_eq!((balance, confirmed, spendable), (100_000_000 - sent, 100_000_000, 0));
    w.mine(2).await;
    w.transfer_in(&txid, "confirmed").await;
    w.caught_up().await;
    let addresses: Vec<String> =
        [(0, 0), (20, 0), (1, 0)].iter().map(|(c, i)| w.regtest(*c, *i).address).collect();
    let node = w.node_balance(&addresses, 2).await;
    assert_eq!(node, 100_000_000 - sent);
    assert_eq!(w.balances().await, (node, node, node));
    let states: Vec<String> = w.notified().into_iter().filter(|n| n.2 == txid).map(|n| n.0).collect();
    assert_eq!(states, ["unconfirmed", "confirmed"]);
}

#[tokio::test]
async fn an_rbf_receive_is_not_told_unconfirmed_and_its_replacement_is_confirmed() {
    let w = Watched::start().await;
    w.caught_up().await;
    let to = w.regtest(0, 0).address;
    let first = w.pay(&to, 30_000_000, true).await;
    // Recorded, quietly: §6 tells no `unconfirmed` of a replace-by-fee transaction.
    w.transfer_in(&first, "unconfirmed").await;
    let bumped = w.node.wallet_rpc("miner", "bumpfee", json!([first])).await;
    let second = bumped["txid"].as_str().unwrap().to_string();
    w.transfer_in(&first, "replaced").await;
    w.transfer_in(&second, "unconfirmed").await;
    w.mine(2).await;
    w.transfer_in(&second, "confirmed").await;
    wait_until_idle(&w.app.state.store).await;
    let told = w.notified();
    assert_eq!(told, [("confirmed".to_string(), "30000000".to_string(), second.clone())]);
    w.caught_up().await;
    assert_eq!(w.balances().await, (30_000_000, 30_000_000, 30_000_000));
}

#[tokio::test]
async fn a_two_block_reorg_sends_the_receive_back_to_the_mempool_and_a_new_branch_confirms_it() {
    let w = Watched::start().await;
    w.caught_up().await;
    let txid = w.pay(&w.regtest(0, 0).address, 80_000_000, false).await;
    w.receiver.wait_for(1, 30).await;
    w.mine(2).await;
    w.transfer_in(&txid, "confirmed").await;
    w.caught_up().await;
    let tip = w.node.rpc("getblockcount", json!([])).await.as_u64().unwrap();
    let included = w.node.rpc("getblockhash", json!([tip - 1])).await;
    // Both blocks go: the transaction is back in the node's mempool.
    w.node.rpc("invalidateblock", json!([included])).await;
    w.transfer_in(&txid, "unconfirmed").await;
    until("balances without the orphaned blocks", 30, || async {
        (w.balances().await == (80_000_000, 0, 0)).then_some(())
    })
    .await;
    // A new, longer branch includes it again.
    w.mine(3).await;
    w.transfer_in(&txid, "confirmed").await;
    w.caught_up().await;
    w.receiver.wait_for(5, 30).await;
    let states: Vec<String> = w.notified().into_iter().map(|n| n.0).collect();
    assert_eq!(states, ["unconfirmed", "confirmed", "removed", "unconfirmed", "confirmed"]);
    let node = w.node_balance(&[w.regtest(0, 0).address], 2).await;
    assert_eq!(node, 80_000_000);
    assert_eq!(w.balances().await, (node, node, node));
}

/// A watcher killed (kill -9) during a 500-block backfill: the process that takes over tells
/// every transfer once. Each transfer is first seen in a block, so (§6) it is told only as
/// `confirmed`, at 2 confirmations.
#[tokio::test]
async fn a_watcher_killed_mid_backfill_of_500_blocks_tells_every_transfer_once() {
    use crate::chain_faults::{backfill_reaches, events_by_key, status};
    use std::collections::HashSet;
    let node = Litecoind::start();
    node.rpc("createwallet", json!(["miner"])).await;
    node.rpc("createwallet", json!(["ours"])).await;
    let miner = node.wallet_rpc("miner", "getnewaddress", json!([])).await;
    node.rpc("generatetoaddress", json!([101, miner])).await;
    let watched = node.wallet_rpc("ours", "getnewaddress", json!(["", "legacy"])).await;
    let mut txids = HashSet::new();
    for _ in 0..25 {
        let t = node.wallet_rpc("miner", "sendtoaddress", json!([watched, 0.1, "", "", false, false])).await;
        txids.insert(t.as_str().unwrap().to_string());
        node.generate(20, &miner).await;
    }
    let head = node.rpc("getblockcount", json!([])).await.as_u64().unwrap();
    assert_eq!(head, 601);
    let cluster = crate::procs::Cluster::new(&[
        ("CUSTODIAN_CHAINS_TLTC_FAMILY", "utxo"),
        ("CUSTODIAN_CHAINS_TLTC_RPC_URL", node.rpc_url.as_str()),
        ("CUSTODIAN_CHAINS_TLTC_NETWORK", "regtest"),
        ("CUSTODIAN_CHAINS_TLTC_RPC_USER", "custodian"),
        ("CUSTODIAN_CHAINS_TLTC_RPC_PASSWORD", "custodian"),
        ("CUSTODIAN_CHAINS_TLTC_CONFIRMATIONS", "2"),
        ("CUSTODIAN_CHAINS_TLTC_START_BLOCK", "0"),
        ("CUSTODIAN_CHAINS_TLTC_BATCH_BLOCKS", "5"),
        ("CUSTODIAN_CHAINS_TLTC_READ_AHEAD", "5"),
        ("CUSTODIAN_CHAINS_TLTC_POLL_INTERVAL_MS", "50"),
        ("CUSTODIAN_CHAINS_TLTC_LEASE_MS", "1000"),
        ("CUSTODIAN_DELIVERY_ALLOWED_CIDRS", "127.0.0.1/32"),
        ("CUSTODIAN_DELIVERY_POLL_INTERVAL_MS", "50"),
    ])
    .await;
    let wallet = "7177c0117177c0117177c0117177c011";
    let record = json!([{
        "id": wallet, "label": "ltc", "coin": "tltc", "allowBackupKeySigning": false, "approvalsRequired": 1,
        "receiveAddress": { "address": watched }, "coinSpecific": {}, "deleted": false,
        "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false, "isCold": false,
        "startDate": "2025-01-01T00:00:00Z",
    }]);
    std::fs::write(cluster.dir.path().join("ltc.json"), record.to_string()).unwrap();
    let imported =
        cluster.cmd(&["wallet", "import", "ltc.json"]).stdout(std::process::Stdio::null()).status();
    assert!(imported.unwrap().success());
    let receiver = TestReceiver::start().await;
    // The hook exists before the watcher reads block 1: an API-only process registers it.
    let api = cluster.start_role("api").await;
    let token = cluster.login(&api.base).await;
    let hook = cluster
        .client
        .post(format!("{}/api/v2/tltc/wallet/{wallet}/webhooks", api.base))
        .bearer_auth(&token)
        .json(&json!({ "type": "transfer", "url": receiver.url }))
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 200);
    let mut first = cluster.start().await;
    until("the backfill is under way", 60, || async { (receiver.received().len() >= 5).then_some(()) }).await;
    first.kill();
    let at_kill = status(&cluster)["height"].as_u64().unwrap_or(0);
    assert!(at_kill < head, "killed before the end: {at_kill} of {head}");
    let _second = cluster.start().await;
    backfill_reaches(&cluster, head).await;
    let want: HashSet<(String, String)> =
        txids.iter().map(|t| (t.clone(), "confirmed".to_string())).collect();
    until_advancing("every transfer's notification", 30, || async {
        let keys = events_by_key(&receiver).1;
        (keys as u64, (keys >= want.len()).then_some(()))
    })
    .await;
    // Not waiting for the outbox to drain: what the killed process had in flight is sent
    // again once its lease ends, under the same idempotency key, which the count below dedupes.
    let (events, keys) = events_by_key(&receiver);
    assert_eq!(events, want);
    assert_eq!(keys, want.len(), "one idempotency key per transfer");
}

/// A node on another network than `network` is not read: the round fails, named in `/health`
/// and counted, and nothing is recorded.
#[tokio::test]
async fn a_node_on_another_network_is_not_read() {
    let node = Litecoind::start();
    let app = spawn_app_with(|c| {
        watch(c, &node);
        if let Some(chain) = c.chains.get_mut("tltc") {
            chain.network = Some(Network::Testnet);
        }
    })
    .await;
    let health = until("the wrong network named in /health", 30, || async {
        let res = app.client.get(app.url("/health")).send().await.unwrap();
        let body: Value = res.json().await.unwrap();
        let error = body["chains"][0]["error"].as_str().unwrap_or_default().to_string();
        error.contains("regtest").then_some(error)
    })
    .await;
    assert!(health.contains("Testnet"), "{health}");
    let s = custodian::chain::status(&app.state.chains).await.unwrap();
    assert_eq!(s[0].height, None, "no block was read");
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("custodian_chain_wrong_chain_total{coin=\"tltc\"}")),
        "{text}"
    );
}

/// `pool_max_new` bounds the mempool transactions read per round: the rest wait, counted, and
/// are read in later rounds.
#[tokio::test]
async fn pool_max_new_bounds_the_mempool_read_per_round() {
    let node = Litecoind::start();
    node.rpc("createwallet", json!(["miner"])).await;
    let miner = node.wallet_rpc("miner", "getnewaddress", json!([])).await;
    node.rpc("generatetoaddress", json!([101, miner])).await;
    // Four transactions wait in the mempool before the watcher first reaches the head.
    for _ in 0..4 {
        node.wallet_rpc("miner", "sendtoaddress", json!([miner, 0.01])).await;
    }
    let app = spawn_app_with(|c| {
        watch(c, &node);
        if let Some(chain) = c.chains.get_mut("tltc") {
            chain.pool_max_new = 1;
        }
    })
    .await;
    until("every transaction read, one a round", 30, || async {
        let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        let deferred = text
            .lines()
            .find(|l| l.starts_with("custodian_chain_pool_deferred_total{coin=\"tltc\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())?;
        // 4 new, then 3, 2, 1 left waiting: 3 + 2 + 1 deferred in all, and no more.
        (deferred == 6).then_some(())
    })
    .await;
}

/// `lowFee` on a UTXO chain: the node's `estimatesmartfee` falling below a wallet's threshold
/// (base units per 1000 virtual bytes) is told once, at the block where it crosses.
#[tokio::test]
async fn low_fee_is_told_once_when_the_node_s_estimate_falls_below_the_threshold() {
    use custodian::model::chain::FeeAlerts;
    let w = Watched::start().await;
    let wallet: custodian::types::WalletId = w.wallet.parse().unwrap();
    // A UTXO wallet has no fee address to watch.
    let both = FeeAlerts { low_fee: "50000".parse().ok(), low_fee_address_balance: "1".parse().ok() };
    let refused = custodian::chain::set_fee_alerts(&w.app.state.chains, None, &wallet, both).await;
    assert!(format!("{:?}", refused.unwrap_err()).contains("lowFeeAddressBalance"));
    let alerts = FeeAlerts { low_fee: "50000".parse().ok(), low_fee_address_balance: None };
    custodian::chain::set_fee_alerts(&w.app.state.chains, None, &wallet, alerts).await.unwrap();
    let told = TestReceiver::start().await;
    let hook = json!({ "type": "lowFee", "url": told.url });
    let path = format!("/api/v2/tltc/wallet/{}/webhooks", w.wallet);
    expect_json(w.app.post_auth(&path, &w.token, &hook).await, 200).await;
    let payee = w.node.wallet_rpc("miner", "getnewaddress", json!([])).await;
    // Blocks of transactions paying 0.001 LTC/kvB, then 0.0001: the node's estimate for two
    // blocks follows them down, through 0.0005 (50,000 litoshis per kvB).
    for fee in [0.001, 0.0001] {
        w.node.wallet_rpc("miner", "settxfee", json!([fee])).await;
        for _ in 0..7 {
            for _ in 0..3 {
                w.node.wallet_rpc("miner", "sendtoaddress", json!([payee, 0.01])).await;
            }
            w.mine(1).await;
            w.caught_up().await;
        }
    }
    let estimate = w.node.rpc("estimatesmartfee", json!([2])).await;
    let rate = custodian::chain::utxo::node::base_units(&estimate["feerate"]).unwrap();
    // The estimate comes from the node's fee buckets: near 10,000, not exactly it (10,003 seen).
    assert!((5_000..50_000).contains(&rate), "{estimate}");
    told.wait_for(1, 30).await;
    wait_until_idle(&w.app.state.store).await;
    let got = told.received();
    assert_eq!(got.len(), 1, "told once");
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(
        (body["type"].as_str(), body["wallet"].as_str()),
        (Some("lowFee"), Some(w.wallet.as_str())),
        "{body}"
    );
}

/// `transaction` (once per transaction and wallet), `address_confirmation` (an address's first
/// output, once) and `block` (at the webhook's `numConfirmations`) on a UTXO chain.
#[tokio::test]
async fn transaction_address_and_block_events_are_told_on_a_utxo_chain() {
    let w = Watched::start().await;
    w.caught_up().await;
    let rx = TestReceiver::start().await;
    let path = format!("/api/v2/tltc/wallet/{}/webhooks", w.wallet);
    for kind in ["transaction", "address_confirmation"] {
        expect_json(w.app.post_auth(&path, &w.token, &json!({ "type": kind, "url": rx.url })).await, 200)
            .await;
    }
    let block = json!({ "type": "block", "url": rx.url, "numConfirmations": 2 });
    expect_json(w.app.post_auth("/api/v2/tltc/webhooks", &w.token, &block).await, 200).await;
    let to = w.regtest(0, 0).address;
    let first = w.pay(&to, 10_000_000, false).await;
    let second = w.pay(&to, 20_000_000, false).await;
    w.mine(2).await;
    w.caught_up().await;
    rx.wait_for(5, 30).await;
    wait_until_idle(&w.app.state.store).await;
    let bodies: Vec<Value> = rx.received().iter().map(|r| serde_json::from_str(&r.body).unwrap()).collect();
    let of = |kind: &str| bodies.iter().filter(|b| b["type"] == kind).collect::<Vec<_>>();
    let mut hashes: Vec<&str> = of("transaction").iter().map(|b| b["hash"].as_str().unwrap()).collect();
    hashes.sort();
    let mut want = [first.as_str(), second.as_str()];
    want.sort();
    assert_eq!(hashes, want, "{bodies:?}");
    let confirmed = of("address_confirmation");
    assert_eq!(confirmed.len(), 1, "{bodies:?}");
    let tltc =
        derive(&w.keys, ChainCode::new(0).unwrap(), 0, Family::Litecoin.params(Network::Testnet)).unwrap();
    assert_eq!(confirmed[0]["address"], tltc.address.as_str());
    // Blocks 102 and 103 were mined: 101 and 102 reached two confirmations.
    let mut heights: Vec<u64> =
        of("block").iter().map(|b| b["height"].as_u64().unwrap_or_default()).collect();
    heights.sort();
    assert_eq!(heights, [101, 102], "{bodies:?}");
}
