//! Litecoin Core (Debian's `litecoind`, installed by `.ci/run`) in regtest: the real node the
//! UTXO tests run against (docs/chains.md#utxo-chains). Each test starts its own in a temporary
//! data directory on free ports; it is stopped when dropped.

use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use custodian::chain::utxo::{
    address::{derive, ChainCode, WalletKeys},
    params::{Family, Network},
};

/// Where Debian puts the daemon itself (`/usr/bin/litecoind` is a wrapper).
const LITECOIND: &str = "/usr/lib/litecoin/litecoind";

/// A regtest node and its JSON-RPC address.
pub struct Litecoind {
    child: Child,
    _dir: tempfile::TempDir,
    pub rpc_url: String,
}

impl Drop for Litecoind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Litecoind {
    /// Starts a node and waits until it answers RPC.
    pub fn start() -> Litecoind {
        assert!(
            std::path::Path::new(LITECOIND).exists(),
            "litecoind is missing: apt-get install litecoind (as .ci/run does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let (rpc, p2p) = (free_port(), free_port());
        let args = [
            "-regtest".to_string(),
            format!("-datadir={}", dir.path().display()),
            format!("-rpcport={rpc}"),
            format!("-port={p2p}"),
            "-rpcuser=custodian".into(),
            "-rpcpassword=custodian".into(),
            "-rpcbind=127.0.0.1".into(),
            "-rpcallowip=127.0.0.1".into(),
            "-listen=0".into(),
            "-fallbackfee=0.0001".into(),
            // Litecoin Core refuses replace-by-fee replacements unless told (Bitcoin Core takes
            // them): the tests replace.
            "-mempoolreplacement=1".into(),
        ];
        let child =
            Command::new(LITECOIND).args(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let mut node = Litecoind { child, _dir: dir, rpc_url: format!("http://127.0.0.1:{rpc}") };
        // Up within a minute, or it says why it stopped (startup is not an outcome under test).
        for _ in 0..600 {
            if let Some(status) = node.child.try_wait().unwrap() {
                panic!("litecoind exited at start: {status}");
            }
            let ask = std::process::Command::new("litecoin-cli")
                .args([
                    "-regtest",
                    "-rpcuser=custodian",
                    "-rpcpassword=custodian",
                    &format!("-rpcport={rpc}"),
                ])
                .arg("getblockcount")
                .stderr(Stdio::null())
                .output();
            if ask.is_ok_and(|o| o.status.success()) {
                return node;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        node.child.kill().ok();
        panic!("litecoind did not answer RPC within a minute");
    }
    /// Mines `n` blocks to `to`. Litecoin's MWEB activates at regtest block 432, which must
    /// carry a peg-in: the wallet `miner` sends one to itself first.
    pub async fn generate(&self, n: u64, to: &Value) {
        const MWEB_FIRST: u64 = 432;
        let count = self.rpc("getblockcount", json!([])).await.as_u64().unwrap();
        if count < MWEB_FIRST && count + n >= MWEB_FIRST {
            let before = MWEB_FIRST - 1 - count;
            if before > 0 {
                self.rpc("generatetoaddress", json!([before, to])).await;
            }
            let mweb = self.wallet_rpc("miner", "getnewaddress", json!(["", "mweb"])).await;
            self.wallet_rpc("miner", "sendtoaddress", json!([mweb, 1])).await;
            self.rpc("generatetoaddress", json!([n - before, to])).await;
            return;
        }
        self.rpc("generatetoaddress", json!([n, to])).await;
    }

    /// One JSON-RPC call; its `result`.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        self.call(&self.rpc_url, method, params).await
    }

    /// One JSON-RPC call to the node's wallet `wallet`; its `result`.
    pub async fn wallet_rpc(&self, wallet: &str, method: &str, params: Value) -> Value {
        self.call(&format!("{}/wallet/{wallet}", self.rpc_url), method, params).await
    }

    async fn call(&self, url: &str, method: &str, params: Value) -> Value {
        let res = reqwest::Client::new()
            .post(url)
            .basic_auth("custodian", Some("custodian"))
            .json(&json!({ "jsonrpc": "1.0", "id": 1, "method": method, "params": params }))
            .send()
            .await
            .unwrap();
        let body: Value = res.json().await.unwrap();
        assert!(body["error"].is_null(), "{method}: {}", body["error"]);
        body["result"].clone()
    }
}

/// The same key with testnet version bytes: Litecoin Core in regtest reads only `tpub`s.
fn tpub(xpub: &bitcoin::bip32::Xpub) -> String {
    bitcoin::bip32::Xpub { network: bitcoin::NetworkKind::Test, ..*xpub }.to_string()
}

#[tokio::test]
async fn litecoin_core_derives_the_addresses_custodian_derives() {
    use bitcoin::{bip32::Xpriv, secp256k1::Secp256k1, NetworkKind};
    let node = Litecoind::start();
    let secp = Secp256k1::new();
    let xpubs: Vec<bitcoin::bip32::Xpub> = (0..3u8)
        .map(|i| {
            let master = Xpriv::new_master(NetworkKind::Main, &[i + 1; 32]).unwrap();
            bitcoin::bip32::Xpub::from_priv(&secp, &master)
        })
        .collect();
    let texts: Vec<String> = xpubs.iter().map(ToString::to_string).collect();
    let keys = WalletKeys::parse([&texts[0], &texts[1], &texts[2]]).unwrap();
    let params = Family::Litecoin.params(Network::Regtest);
    for chain in [0, 1, 10, 11, 20, 21] {
        // Litecoin Core's descriptor of the same script: `multi` keeps BitGo's key order.
        let multi = |index: u32| {
            let keys: Vec<String> =
                xpubs.iter().map(|x| format!("{}/0/0/{chain}/{index}", tpub(x))).collect();
            format!("multi(2,{})", keys.join(","))
        };
        for index in [0, 5, 1_000_003] {
            let descriptor = match chain / 10 {
                0 => format!("sh({})", multi(index)),
                1 => format!("sh(wsh({}))", multi(index)),
                _ => format!("wsh({})", multi(index)),
            };
            let info = node.rpc("getdescriptorinfo", json!([descriptor])).await;
            let theirs = node.rpc("deriveaddresses", json!([info["descriptor"]])).await;
            let ours = derive(&keys, ChainCode::new(chain).unwrap(), index, params).unwrap();
            assert_eq!(theirs, json!([ours.address]), "chain {chain} index {index}");
            let check = node.rpc("validateaddress", json!([ours.address])).await;
            assert_eq!(check["scriptPubKey"], json!(ours.output_script), "chain {chain} index {index}");
        }
    }
}

#[tokio::test]
async fn custodian_reads_litecoin_core_s_blocks_and_mempool_and_finds_a_wallet_s_receives_and_sends() {
    use custodian::chain::utxo::{
        effect::{effects, KnownOutput, Owner},
        node::{Credentials, UtxoNode},
    };
    use std::collections::HashMap;
    let node = Litecoind::start();
    let client = UtxoNode::new(
        &node.rpc_url,
        Credentials::Password { user: "custodian".into(), password: "custodian".into() },
        std::time::Duration::from_secs(10),
        1 << 20,
    )
    .unwrap();
    // The network is read: regtest is regtest, and not testnet (the watcher's refusal of
    // another network is utxo_watch.rs's).
    let info = client.chain_info().await.unwrap();
    assert_eq!((info.chain.as_str(), info.network()), ("regtest", Some(Network::Regtest)));
    assert_ne!(info.network(), Some(Network::Testnet));
    // The node's own wallet mines and pays.
    node.rpc("createwallet", json!(["miner"])).await;
    let miner = node.wallet_rpc("miner", "getnewaddress", json!([])).await;
    node.rpc("generatetoaddress", json!([101, miner])).await;
    let (p2sh, p2wsh) = wallet_litecoin_core_signs_for(&node).await;
    // Two receives: 1.5 LTC to the p2sh address signalling RBF, 0.25 to the p2wsh one not.
    let rbf =
        node.wallet_rpc("miner", "sendtoaddress", json!([p2sh.address, 1.5, "", "", false, true])).await;
    let plain =
        node.wallet_rpc("miner", "sendtoaddress", json!([p2wsh.address, 0.25, "", "", false, false])).await;
    let pool = client.mempool().await.unwrap();
    assert!(
        pool.contains(&rbf.as_str().unwrap().to_string())
            && pool.contains(&plain.as_str().unwrap().to_string())
    );
    assert!(client.transaction(rbf.as_str().unwrap()).await.unwrap().signals_rbf());
    assert!(!client.transaction(plain.as_str().unwrap()).await.unwrap().signals_rbf());
    // Mined: the block's effects on our wallet are the exact amounts, by output.
    node.rpc("generatetoaddress", json!([1, miner])).await;
    let hash = node.rpc("getbestblockhash", json!([])).await;
    let block = client.block(hash.as_str().unwrap()).await.unwrap();
    assert_eq!(block.height, 102);
    assert_eq!(block.parent, Some(client.block_hash(101).await.unwrap()));
    let wallet: custodian::types::WalletId = "0123456789abcdef0123456789abcdef".parse().unwrap();
    let owner = |a: &str| Owner { wallet: wallet.clone(), address: a.to_string(), position: None };
    let watched: HashMap<String, Owner> = HashMap::from([
        (p2sh.output_script.clone(), owner(&p2sh.address)),
        (p2wsh.output_script.clone(), owner(&p2wsh.address)),
    ]);
    let mut unspent = HashMap::new();
    let mut nets = Vec::new();
    for tx in &block.txs {
        for e in effects(tx, &watched, &unspent).unwrap() {
            nets.push(e.net());
            for leg in e.received {
                unspent.insert(
                    leg.outpoint,
                    KnownOutput { owner: owner(&leg.address), value: leg.value, height: 102, spent_by: None },
                );
            }
        }
    }
    nets.sort();
    assert_eq!(nets, [25_000_000, 150_000_000]);
    // A send from our wallet, signed by Litecoin Core with two of the three keys: its effect
    // spends both outputs it takes, and gets its change back if any.
    let balance = node.wallet_rpc("ours", "getbalance", json!([])).await;
    assert_eq!(balance.to_string(), "1.75000000");
    let sent = node.wallet_rpc("ours", "sendtoaddress", json!([miner, 1.7, "", "", true])).await;
    let tx = client.transaction(sent.as_str().unwrap()).await.unwrap();
    let e = effects(&tx, &watched, &unspent).unwrap();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].spent.iter().map(|l| l.value).sum::<u64>(), 175_000_000);
    // Subtracting the fee from the amount: everything left goes to the miner, none back to us.
    assert!(e[0].received.is_empty());
    assert_eq!(e[0].net(), -175_000_000);
}

/// Our wallet's first p2sh (chain 0) and p2wsh (chain 20) addresses on regtest, from three keys
/// the test holds, with Litecoin Core's wallet `ours` holding them too so that it signs as the
/// wallet's owners would.
async fn wallet_litecoin_core_signs_for(
    node: &Litecoind,
) -> (custodian::chain::utxo::address::Derived, custodian::chain::utxo::address::Derived) {
    use bitcoin::{bip32::Xpriv, secp256k1::Secp256k1, NetworkKind};
    let secp = Secp256k1::new();
    let masters: Vec<Xpriv> =
        (0..3u8).map(|i| Xpriv::new_master(NetworkKind::Test, &[40 + i; 32]).unwrap()).collect();
    let xpubs: Vec<String> = masters
        .iter()
        .map(|m| {
            bitcoin::bip32::Xpub { network: NetworkKind::Main, ..bitcoin::bip32::Xpub::from_priv(&secp, m) }
                .to_string()
        })
        .collect();
    let keys = WalletKeys::parse([&xpubs[0], &xpubs[1], &xpubs[2]]).unwrap();
    let params = Family::Litecoin.params(Network::Regtest);
    let p2sh = derive(&keys, ChainCode::new(0).unwrap(), 0, params).unwrap();
    let p2wsh = derive(&keys, ChainCode::new(20).unwrap(), 0, params).unwrap();
    // Litecoin Core (Debian's build has legacy wallets only, which spend a multisig only when
    // they hold every key) holds the three child keys and both multisig scripts: its own
    // addresses for them must be ours.
    node.rpc("createwallet", json!(["ours"])).await;
    for (chain, ours) in [(0u32, &p2sh), (20, &p2wsh)] {
        let path: Vec<bitcoin::bip32::ChildNumber> = [0, 0, chain, 0]
            .iter()
            .map(|&n| bitcoin::bip32::ChildNumber::from_normal_idx(n).unwrap())
            .collect();
        let children: Vec<Xpriv> = masters.iter().map(|m| m.derive_priv(&secp, &path).unwrap()).collect();
        for child in &children {
            node.wallet_rpc("ours", "importprivkey", json!([child.to_priv().to_wif(), "", false])).await;
        }
        let pubs: Vec<String> = children.iter().map(|c| c.to_priv().public_key(&secp).to_string()).collect();
        let kind = if chain == 0 { "legacy" } else { "bech32" };
        let made = node.wallet_rpc("ours", "addmultisigaddress", json!([2, pubs, "", kind])).await;
        assert_eq!(made["address"], ours.address.as_str(), "chain {chain}");
    }
    (p2sh, p2wsh)
}
