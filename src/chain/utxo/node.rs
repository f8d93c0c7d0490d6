//! A Bitcoin-family node (Bitcoin Core, Litecoin Core) read over its JSON-RPC (docs/chains.md#utxo-chains):
//! the service's own HTTP client (rustls), every request bounded in time, every answer in
//! size, and the node's error text clipped before it goes anywhere. The URL and credentials
//! are never logged.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::params::Network;
use crate::chain::node::NodeError;

/// Largest answer read for a block with its transactions (`getblock` verbosity 2), bytes.
pub const MAX_BLOCK_BYTES: usize = 64 << 20;
/// Largest answer read for any other method, bytes.
pub const MAX_OTHER_BYTES: usize = 4 << 20;

/// Base units (satoshis, litoshis) per coin: amounts are read as decimal text, never floats.
const UNITS_PER_COIN: u64 = 100_000_000;

/// A node and how to reach it.
pub struct UtxoNode {
    http: reqwest::Client,
    url: url::Url,
    auth: Credentials,
    /// Largest mempool answer read, bytes.
    mempool_max_bytes: usize,
}

/// How the node knows us: its `rpcuser`/`rpcpassword`, or its cookie file (`__cookie__` and a
/// password the node writes at each start), read at each request so a restarted node's new
/// cookie is taken.
#[derive(Clone)]
pub enum Credentials {
    None,
    Password { user: String, password: String },
    Cookie(std::path::PathBuf),
}

impl Credentials {
    /// The user and password to send. Errors: a cookie file that cannot be read (its path is
    /// the operator's; its content is never shown).
    fn pair(&self) -> Result<Option<(String, String)>, NodeError> {
        match self {
            Credentials::None => Ok(None),
            Credentials::Password { user, password } => Ok(Some((user.clone(), password.clone()))),
            Credentials::Cookie(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    NodeError::new(format!("rpc_cookie_file {}: {}", path.display(), e.kind()))
                })?;
                let (user, password) = text.trim().split_once(':').ok_or_else(|| {
                    NodeError::new(format!("rpc_cookie_file {}: not user:password", path.display()))
                })?;
                Ok(Some((user.to_string(), password.to_string())))
            }
        }
    }
}

/// What `getblockchaininfo` says of the node's chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ChainInfo {
    /// `main`, `test` or `regtest`.
    pub chain: String,
    /// The height of its best block.
    pub blocks: u64,
    pub bestblockhash: String,
}

impl ChainInfo {
    /// The network the node is on, if it is one of ours.
    pub fn network(&self) -> Option<Network> {
        match self.chain.as_str() {
            "main" => Some(Network::Mainnet),
            "test" => Some(Network::Testnet),
            "regtest" => Some(Network::Regtest),
            _ => None,
        }
    }
}

/// An output being spent: the transaction and its output's position.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OutPoint {
    pub txid: String,
    pub vout: u32,
}

/// An input of a transaction: the output it spends (`None` for a coinbase) and its sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub prev: Option<OutPoint>,
    pub sequence: u32,
}

/// An output of a transaction: its value in base units and its script (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub n: u32,
    pub value: u64,
    pub script: String,
}

/// A transaction as the watcher reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UtxoTx {
    pub txid: String,
    pub inputs: Vec<Input>,
    pub outputs: Vec<Output>,
}

impl UtxoTx {
    /// Whether it signals replace-by-fee (BIP 125): an input's sequence below `0xfffffffe`.
    pub fn signals_rbf(&self) -> bool {
        self.inputs.iter().any(|i| i.prev.is_some() && i.sequence < 0xffff_fffe)
    }
}

/// A block with its transactions.
#[derive(Debug, Clone)]
pub struct UtxoBlock {
    pub hash: String,
    pub height: u64,
    /// `None` for the genesis block.
    pub parent: Option<String>,
    /// Unix seconds.
    pub time: i64,
    pub txs: Vec<UtxoTx>,
}

/// `value` (a decimal number of coins, as the node writes it) in base units. Errors: anything
/// but a non-negative number with at most 8 decimals that fits.
pub fn base_units(value: &Value) -> Result<u64, NodeError> {
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return Err(NodeError::new("an amount is not a number")),
    };
    let bad = || NodeError::new(format!("amount {text} is not a base-unit amount"));
    let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 8 {
        return Err(bad());
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let frac: u64 = format!("{frac:0<8}").parse().map_err(|_| bad())?;
    let whole: u64 = whole.parse().map_err(|_| bad())?;
    whole.checked_mul(UNITS_PER_COIN).and_then(|w| w.checked_add(frac)).ok_or_else(bad)
}

/// One answer's `result`, or its error (clipped by `NodeError`).
fn result_of<R: DeserializeOwned>(method: &str, answer: &mut Value) -> Result<R, NodeError> {
    if !answer["error"].is_null() {
        return Err(NodeError::new(format!("{method}: {}", answer["error"])));
    }
    // `get_mut`, not indexing: an answer that is not an object must not panic.
    let result = answer.get_mut("result").map(Value::take).unwrap_or_default();
    serde_json::from_value(result).map_err(|e| NodeError::new(format!("{method}: an unexpected answer: {e}")))
}

/// A transaction from the node's JSON (`getblock` verbosity 2, `getrawtransaction` verbose).
fn tx_of(v: &Value) -> Result<UtxoTx, NodeError> {
    let missing = |what: &str| NodeError::new(format!("a transaction without {what}"));
    let txid = v["txid"].as_str().ok_or_else(|| missing("txid"))?.to_string();
    let mut inputs = Vec::new();
    for i in v["vin"].as_array().ok_or_else(|| missing("vin"))? {
        let sequence =
            i["sequence"].as_u64().and_then(|s| u32::try_from(s).ok()).ok_or_else(|| missing("sequence"))?;
        let prev = match i.get("coinbase") {
            Some(_) => None,
            None => Some(OutPoint {
                txid: i["txid"].as_str().ok_or_else(|| missing("an input's txid"))?.to_string(),
                vout: i["vout"]
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| missing("an input's vout"))?,
            }),
        };
        inputs.push(Input { prev, sequence });
    }
    let mut outputs = Vec::new();
    for o in v["vout"].as_array().ok_or_else(|| missing("vout"))? {
        outputs.push(Output {
            n: o["n"].as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| missing("an output's n"))?,
            value: base_units(&o["value"])?,
            script: o["scriptPubKey"]["hex"]
                .as_str()
                .ok_or_else(|| missing("an output's script"))?
                .to_string(),
        });
    }
    Ok(UtxoTx { txid, inputs, outputs })
}

impl UtxoNode {
    /// A client of the node at `url` (http or https) with `auth`, each request bounded by
    /// `timeout`; the mempool's answer is capped at `mempool_max_bytes`.
    pub fn new(
        url: &str,
        auth: Credentials,
        timeout: Duration,
        mempool_max_bytes: usize,
    ) -> Result<Self, NodeError> {
        let (url, http) = crate::chain::node::node_client(url, timeout)?;
        Ok(Self { http, url, auth, mempool_max_bytes })
    }

    /// Posts `body` (one JSON-RPC request, or a batch of them) and reads the answer, at most
    /// `cap` bytes. A transport failure comes back without the URL; an answer that is not JSON
    /// comes back clipped with its HTTP status.
    async fn post(&self, what: &str, body: &Value, cap: usize) -> Result<Value, NodeError> {
        let fail = |e: reqwest::Error| NodeError::new(format!("{what}: {}", e.without_url()));
        let mut req = self.http.post(self.url.clone()).json(body);
        if let Some((user, password)) = self.auth.pair()? {
            req = req.basic_auth(user, Some(password));
        }
        let mut res = req.send().await.map_err(fail)?;
        let status = res.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = res.chunk().await.map_err(fail)? {
            if bytes.len() + chunk.len() > cap {
                return Err(NodeError::new(format!("{what}: the node's answer is over {cap} bytes")));
            }
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).map_err(|_| {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
            NodeError::new(format!("{what}: HTTP {}: {text}", status.as_u16()))
        })
    }

    /// One call: its `result`. The node's error (Bitcoin Core answers 500 with one) and any
    /// transport failure come back clipped and without the URL.
    async fn call<R: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        cap: usize,
    ) -> Result<R, NodeError> {
        let request = json!({ "jsonrpc": "1.0", "id": 1, "method": method, "params": params });
        let mut answer = self.post(method, &request, cap).await?;
        result_of(method, &mut answer)
    }

    pub async fn chain_info(&self) -> Result<ChainInfo, NodeError> {
        self.call("getblockchaininfo", json!([]), MAX_OTHER_BYTES).await
    }

    /// The hash of the best chain's block at `height`.
    pub async fn block_hash(&self, height: u64) -> Result<String, NodeError> {
        self.call("getblockhash", json!([height]), MAX_OTHER_BYTES).await
    }

    /// The hashes of the best chain's blocks at `heights`, in order, asked in one JSON-RPC
    /// batch (one request for a run of blocks). Errors: any one's error, an answer missing one.
    pub async fn block_hashes(&self, heights: &[u64]) -> Result<Vec<String>, NodeError> {
        let batch: Vec<Value> = heights
            .iter()
            .enumerate()
            .map(|(i, h)| json!({ "jsonrpc": "1.0", "id": i, "method": "getblockhash", "params": [h] }))
            .collect();
        let answer = self.post("getblockhash", &Value::Array(batch), MAX_OTHER_BYTES).await?;
        let Value::Array(answers) = answer else {
            return Err(NodeError::new("getblockhash: a batch answered by one answer"));
        };
        let mut hashes: Vec<Option<String>> = vec![None; heights.len()];
        for mut a in answers {
            let slot = a["id"].as_u64().and_then(|i| hashes.get_mut(usize::try_from(i).ok()?));
            let Some(slot) = slot else {
                return Err(NodeError::new("getblockhash: an answer to no request"));
            };
            *slot = Some(result_of("getblockhash", &mut a)?);
        }
        hashes
            .into_iter()
            .map(|h| h.ok_or_else(|| NodeError::new("getblockhash: a request unanswered")))
            .collect()
    }

    /// Block `hash` with its transactions. Errors: the node's, or an answer missing a field.
    pub async fn block(&self, hash: &str) -> Result<UtxoBlock, NodeError> {
        let v: Value = self.call("getblock", json!([hash, 2]), MAX_BLOCK_BYTES).await?;
        let missing = |what: &str| NodeError::new(format!("getblock: no {what}"));
        let txs =
            v["tx"].as_array().ok_or_else(|| missing("tx"))?.iter().map(tx_of).collect::<Result<_, _>>()?;
        Ok(UtxoBlock {
            hash: v["hash"].as_str().ok_or_else(|| missing("hash"))?.to_string(),
            height: v["height"].as_u64().ok_or_else(|| missing("height"))?,
            parent: v["previousblockhash"].as_str().map(str::to_string),
            time: v["time"].as_i64().ok_or_else(|| missing("time"))?,
            txs,
        })
    }

    /// The node's fee rate estimate for confirmation within `target` blocks
    /// (`estimatesmartfee`, economical), base units per 1000 virtual bytes; `None` while the
    /// node has too little data.
    pub async fn fee_rate(&self, target: u64) -> Result<Option<u64>, NodeError> {
        let v: Value = self.call("estimatesmartfee", json!([target]), MAX_OTHER_BYTES).await?;
        v.get("feerate").map(base_units).transpose()
    }

    /// The node's best block height.
    pub async fn block_count(&self) -> Result<u64, NodeError> {
        self.call("getblockcount", json!([]), MAX_OTHER_BYTES).await
    }

    /// The txids in the node's mempool; the answer is capped at the configured size.
    pub async fn mempool(&self) -> Result<Vec<String>, NodeError> {
        self.call("getrawmempool", json!([]), self.mempool_max_bytes).await
    }

    /// A transaction the node knows (its mempool, or with `-txindex` any).
    pub async fn transaction(&self, txid: &str) -> Result<UtxoTx, NodeError> {
        let v: Value = self.call("getrawtransaction", json!([txid, true]), MAX_OTHER_BYTES).await?;
        tx_of(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::{base_units, tx_of};
    use serde_json::json;

    /// A transaction missing any field the watcher reads fails (and with it its block, which is
    /// read again), rather than being taken as paying or spending nothing.
    #[test]
    fn an_incomplete_transaction_is_an_error_not_an_empty_one() {
        let whole = json!({
            "txid": "ab",
            "vin": [{ "txid": "cd", "vout": 1, "sequence": 4294967295u64 }],
            "vout": [{ "n": 0, "value": 0.5, "scriptPubKey": { "hex": "0014aa" } }],
        });
        let tx = tx_of(&whole).unwrap();
        assert_eq!((tx.inputs.len(), tx.outputs[0].value), (1, 50_000_000));
        for pointer in [
            "/txid",
            "/vin",
            "/vin/0/vout",
            "/vin/0/sequence",
            "/vout",
            "/vout/0/value",
            "/vout/0/scriptPubKey/hex",
        ] {
            let mut broken = whole.clone();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            let parent = if parent.is_empty() { &mut broken } else { broken.pointer_mut(parent).unwrap() };
            parent.as_object_mut().unwrap().remove(key);
            assert!(tx_of(&broken).is_err(), "without {pointer}");
        }
        // A coinbase input names no output.
        let coinbase = json!({ "txid": "ab", "vin": [{ "coinbase": "03", "sequence": 0 }], "vout": [] });
        assert_eq!(tx_of(&coinbase).unwrap().inputs[0].prev, None);
    }

    #[test]
    fn amounts_are_read_as_decimal_text_exactly() {
        let n = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        assert_eq!(base_units(&n("0.00000001")).unwrap(), 1);
        assert_eq!(base_units(&n("12.5")).unwrap(), 1_250_000_000);
        assert_eq!(base_units(&n("21000000.00000000")).unwrap(), 2_100_000_000_000_000);
        assert_eq!(base_units(&n("0.1")).unwrap(), 10_000_000);
        for bad in ["-1", "0.000000001", "1e3", "\"x\"", "null"] {
            assert!(base_units(&n(bad)).is_err(), "{bad}");
        }
        assert!(base_units(&json!("184467440737.09551616")).is_err(), "overflow");
    }
}
