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
    /// One JSON-RPC call; its `result`.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        let res = reqwest::Client::new()
            .post(&self.rpc_url)
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
