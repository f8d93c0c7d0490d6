//! The node a chain is read from: alloy's JSON-RPC client over the service's own HTTP client
//! (rustls), so a node's URL, which often carries a provider's key, is never logged, every
//! request has a timeout and an answer is capped in size.
//!
//! [`ChainNode`] is what the watcher needs from a chain; Ethereum is its one implementation
//! (docs/decisions.md#watching-a-chain: UTXO chains add one, not a redesign).

use std::{task, time::Duration};

use alloy_json_rpc::{RequestPacket, ResponsePacket};
use alloy_primitives::{Address, B256, U256};
use alloy_rpc_client::RpcClient;
use alloy_rpc_types_eth::{
    Block, BlockTransactions, Filter, Log, Transaction, TransactionReceipt, TransactionTrait,
};
use alloy_transport::{TransportError, TransportErrorKind, TransportFut};
use async_trait::async_trait;

use crate::model::chain::BlockHead;

/// Largest answer read for a block with its transactions, bytes (a full block of a busy chain
/// is a few MiB).
pub const MAX_BLOCK_BYTES: usize = 32 << 20;
/// Largest answer read for a block's token logs, bytes.
pub const MAX_LOGS_BYTES: usize = 16 << 20;
/// Largest answer read for any other method (a head, a receipt, a balance), bytes.
pub const MAX_OTHER_BYTES: usize = 4 << 20;

/// The cap on a method's answer, bytes; `pool` is the pending pool's
/// (`chains.<coin>.pool_max_bytes`).
fn answer_cap(method: &str, pool: usize) -> usize {
    match method {
        "eth_getBlockByNumber" => MAX_BLOCK_BYTES,
        "eth_getLogs" => MAX_LOGS_BYTES,
        "txpool_content" => pool,
        _ => MAX_OTHER_BYTES,
    }
}

/// An answer larger than its method's cap: dropped unread.
#[derive(Debug, thiserror::Error)]
#[error("the node's answer is over {0} bytes")]
struct TooLarge(usize);

/// A failed node request, worded without the node's URL, and at most [`NodeError::MAX_BYTES`]
/// long: a hostile node's text reaches `/health`, the log and the console through it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("node: {0}")]
pub struct NodeError(String);

impl NodeError {
    /// The longest text kept of a node's error, bytes.
    pub const MAX_BYTES: usize = 256;

    pub fn new(text: impl Into<String>) -> Self {
        Self(crate::text::clip(text.into(), Self::MAX_BYTES))
    }
}

/// A block as the watcher reads it.
#[derive(Debug, Clone)]
pub struct NodeBlock {
    pub head: BlockHead,
    /// Unix seconds.
    pub time: i64,
    /// Wei; `None` before London.
    pub base_fee: Option<u128>,
    /// The bloom filter of every log in the block: says which logs cannot be there.
    pub logs_bloom: alloy_primitives::Bloom,
    pub txs: Vec<NodeTx>,
}

/// A transaction of a block.
#[derive(Debug, Clone)]
pub struct NodeTx {
    pub hash: B256,
    pub from: Address,
    pub to: Option<Address>,
    /// Wei.
    pub value: U256,
    pub nonce: u64,
}

impl NodeTx {
    /// The addresses the transaction touches: its sender, and its recipient or the contract it
    /// creates (CREATE: from the sender and nonce).
    pub fn touched(&self) -> [Address; 2] {
        [self.from, self.to.unwrap_or_else(|| self.from.create(self.nonce))]
    }
}

/// An ERC-20 `Transfer(from, to, value)` log.
#[derive(Debug, Clone)]
pub struct TokenLog {
    pub contract: Address,
    pub txid: B256,
    pub log_index: u64,
    pub block_hash: B256,
    pub from: Address,
    pub to: Address,
    pub value: U256,
}

/// What the watcher reads from a chain.
#[async_trait]
pub trait ChainNode: Send + Sync {
    async fn chain_id(&self) -> Result<u64, NodeError>;
    async fn head(&self) -> Result<u64, NodeError>;
    /// The canonical block at `height`, `None` above the head.
    async fn block(&self, height: u64) -> Result<Option<NodeBlock>, NodeError>;
    /// `Transfer` logs of `contracts` in the block with hash `block`.
    async fn token_logs(&self, block: B256, contracts: &[Address]) -> Result<Vec<TokenLog>, NodeError>;
    /// Whether each of `txs` (of the block with hash `block`) succeeded, and the fee it paid
    /// (wei), in their order: their receipts, asked in one JSON-RPC batch. No receipt, or one
    /// of another block, is an error: the block is incomplete and is read again, never passed
    /// (a load-balanced node may not have it yet).
    async fn outcomes(&self, txs: &[B256], block: B256) -> Result<Vec<(bool, U256)>, NodeError>;
    /// Wei held by `address` at `height` (`None`: the latest block).
    async fn balance(&self, address: Address, height: Option<u64>) -> Result<U256, NodeError>;
    /// The token balance (`balanceOf`) of `address` at `height`; 0 where the contract has no
    /// code yet at that height.
    async fn token_balance(
        &self,
        contract: Address,
        address: Address,
        height: Option<u64>,
    ) -> Result<U256, NodeError>;
    /// The executable transactions of the node's pending pool (`txpool_content`'s `pending`).
    async fn pending(&self) -> Result<PoolAnswer, NodeError>;
}

/// What the node answered for its pending pool.
#[derive(Debug)]
pub enum PoolAnswer {
    Txs(Vec<NodeTx>),
    /// The node refused the method: it does not expose its pool.
    Refused,
    /// The answer was over `pool_max_bytes` and was dropped unread.
    TooLarge,
}

/// An Ethereum JSON-RPC node.
pub struct EthNode {
    client: RpcClient,
}

/// A node's URL, parsed, and the HTTP client that reads it: every request within `timeout`, no
/// redirect followed. Errors name neither the URL nor its parts (it may hold a key).
pub fn node_client(url: &str, timeout: Duration) -> Result<(url::Url, reqwest::Client), NodeError> {
    let url = url::Url::parse(url).map_err(|_| NodeError::new("the RPC URL is not a URL"))?;
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| NodeError::new(e.without_url().to_string()))?;
    Ok((url, http))
}

impl EthNode {
    /// A client of the node at `url` (http or https), each request bounded by `timeout`.
    /// `pool_max_bytes` caps the pending pool's answer (the other methods' caps are fixed).
    pub fn new(url: &str, timeout: Duration, pool_max_bytes: usize) -> Result<Self, NodeError> {
        let (url, http) = node_client(url, timeout)?;
        let is_local = url.host_str().is_some_and(|h| h == "localhost" || h.starts_with("127."));
        Ok(Self { client: RpcClient::new(Transport { http, url, pool_max_bytes }, is_local) })
    }

    pub(crate) async fn call<P, R>(&self, method: &'static str, params: P) -> Result<R, NodeError>
    where
        P: alloy_json_rpc::RpcSend,
        R: alloy_json_rpc::RpcRecv,
    {
        self.client.request(method, params).await.map_err(|e| NodeError::new(format!("{method}: {e}")))
    }

    /// `method` once for each of `params`, in one JSON-RPC batch in their order: one answer per
    /// call, in the same order. A batch that fails as a whole (the node away, an answer over
    /// its cap or not JSON) fails every call; a call the node answers no item for fails alone.
    pub(crate) async fn batch<P, R>(
        &self,
        method: &'static str,
        params: impl IntoIterator<Item = P>,
    ) -> Vec<Result<R, NodeError>>
    where
        P: alloy_json_rpc::RpcSend,
        R: alloy_json_rpc::RpcRecv,
    {
        let fail = |e: TransportError| NodeError::new(format!("{method}: {e}"));
        let mut batch = self.client.new_batch();
        let waiters: Vec<_> = params.into_iter().map(|p| batch.add_call::<P, R>(method, &p)).collect();
        let sent = batch.send().await.map_err(fail);
        let mut out = Vec::with_capacity(waiters.len());
        for waiter in waiters {
            out.push(match (&sent, waiter) {
                (Err(e), _) => Err(e.clone()),
                (Ok(()), Err(e)) => Err(fail(e)),
                (Ok(()), Ok(w)) => w.await.map_err(fail),
            });
        }
        out
    }
}

fn tag(height: Option<u64>) -> String {
    height.map(|h| format!("0x{h:x}")).unwrap_or_else(|| "latest".into())
}

alloy_sol_types::sol! {
    event Transfer(address indexed from, address indexed to, uint256 value);
    function balanceOf(address owner) external view returns (uint256);
}

#[async_trait]
impl ChainNode for EthNode {
    async fn chain_id(&self) -> Result<u64, NodeError> {
        let id: U256 = self.call("eth_chainId", ()).await?;
        u64::try_from(id).map_err(|_| NodeError::new("eth_chainId: out of range"))
    }

    async fn head(&self) -> Result<u64, NodeError> {
        let n: U256 = self.call("eth_blockNumber", ()).await?;
        u64::try_from(n).map_err(|_| NodeError::new("eth_blockNumber: out of range"))
    }

    async fn block(&self, height: u64) -> Result<Option<NodeBlock>, NodeError> {
        let block: Option<Block<Transaction>> =
            self.call("eth_getBlockByNumber", (tag(Some(height)), true)).await?;
        let Some(block) = block else { return Ok(None) };
        let h = &block.header;
        let txs = match &block.transactions {
            BlockTransactions::Full(txs) => txs.iter().map(node_tx).collect(),
            _ => return Err(NodeError::new("eth_getBlockByNumber: the node left out the transactions")),
        };
        if h.number != height {
            return Err(NodeError::new(format!(
                "eth_getBlockByNumber: asked for {height}, got {}",
                h.number
            )));
        }
        Ok(Some(NodeBlock {
            head: BlockHead { height, hash: h.hash.to_string(), parent_hash: h.parent_hash.to_string() },
            time: i64::try_from(h.timestamp).unwrap_or(i64::MAX),
            base_fee: h.base_fee_per_gas.map(u128::from),
            logs_bloom: h.logs_bloom,
            txs,
        }))
    }

    async fn token_logs(&self, block: B256, contracts: &[Address]) -> Result<Vec<TokenLog>, NodeError> {
        use alloy_sol_types::SolEvent;
        if contracts.is_empty() {
            return Ok(Vec::new());
        }
        let filter = Filter::new()
            .at_block_hash(block)
            .address(contracts.to_vec())
            .event_signature(Transfer::SIGNATURE_HASH);
        let logs: Vec<Log> = self.call("eth_getLogs", (filter,)).await?;
        let mut out = Vec::with_capacity(logs.len());
        for log in logs {
            // A log that is not a standard Transfer (an ERC-721 one has 4 topics) is not ours.
            let Ok(t) = Transfer::decode_log_data(log.data()) else { continue };
            let (Some(txid), Some(log_index)) = (log.transaction_hash, log.log_index) else { continue };
            if log.block_hash.is_some_and(|h| h != block) || log.removed {
                return Err(NodeError::new("eth_getLogs: a log of another block"));
            }
            out.push(TokenLog {
                contract: log.address(),
                txid,
                log_index,
                block_hash: log.block_hash.unwrap_or(block),
                from: t.from,
                to: t.to,
                value: t.value,
            });
        }
        Ok(out)
    }

    async fn outcomes(&self, txs: &[B256], block: B256) -> Result<Vec<(bool, U256)>, NodeError> {
        let receipts = self
            .batch::<_, Option<TransactionReceipt>>("eth_getTransactionReceipt", txs.iter().map(|tx| (*tx,)));
        let mut out = Vec::with_capacity(txs.len());
        for (tx, r) in txs.iter().zip(receipts.await) {
            let r = r?.ok_or_else(|| {
                NodeError::new(format!("eth_getTransactionReceipt: no receipt yet for {tx}"))
            })?;
            if r.block_hash.is_some_and(|h| h != block) {
                return Err(NodeError::new(format!(
                    "eth_getTransactionReceipt: {tx}'s receipt is of another block"
                )));
            }
            out.push((r.status(), U256::from(r.gas_used) * U256::from(r.effective_gas_price)));
        }
        Ok(out)
    }

    async fn balance(&self, address: Address, height: Option<u64>) -> Result<U256, NodeError> {
        self.call("eth_getBalance", (address, tag(height))).await
    }

    async fn token_balance(
        &self,
        contract: Address,
        address: Address,
        height: Option<u64>,
    ) -> Result<U256, NodeError> {
        use alloy_sol_types::SolCall;
        let data = balanceOfCall { owner: address }.abi_encode();
        let call = serde_json::json!({ "to": contract, "data": alloy_primitives::Bytes::from(data) });
        let answer: alloy_primitives::Bytes = self.call("eth_call", (call, tag(height))).await?;
        // No code at that height (the token is deployed later): nobody holds any of it yet.
        // Read as an error, the confirmed balance of a transfer made within `confirmations`
        // blocks of the deployment could never be read, and the watcher would stop there.
        if answer.is_empty() {
            return Ok(U256::ZERO);
        }
        balanceOfCall::abi_decode_returns(&answer).map_err(|e| NodeError::new(format!("balanceOf: {e}")))
    }

    async fn pending(&self) -> Result<PoolAnswer, NodeError> {
        match self.client.request::<_, Pool>("txpool_content", ()).await {
            Ok(pool) => Ok(PoolAnswer::Txs(pool.pending.0)),
            // The node answered, refusing the method: it does not expose its pool.
            Err(alloy_json_rpc::RpcError::ErrorResp(_)) => Ok(PoolAnswer::Refused),
            Err(alloy_json_rpc::RpcError::Transport(kind))
                if kind.as_custom().is_some_and(|e| e.is::<TooLarge>()) =>
            {
                Ok(PoolAnswer::TooLarge)
            }
            Err(e) => Err(NodeError::new(format!("txpool_content: {e}"))),
        }
    }
}

/// `txpool_content`'s answer: by sender, by nonce. Only `pending` is read.
#[derive(Debug, serde::Deserialize)]
struct Pool {
    #[serde(default)]
    pending: PendingTxs,
}

/// The pool's transactions, each kept as the [`NodeTx`] the watcher needs as soon as it is
/// parsed. A pool of 100,000 (a 61 MB answer) held as alloy `Transaction`s in maps took the
/// server from 29 to 395 MiB, and 279 MiB stayed after; read this way, 178 MiB at the peak and
/// 68-79 after (docs/performance.md, the `pool` bench).
#[derive(Debug, Default)]
struct PendingTxs(Vec<NodeTx>);

impl<'de> serde::Deserialize<'de> for PendingTxs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// A map of maps (by sender, by nonce) whose leaves are transactions.
        struct Nested(usize);
        impl<'de> serde::de::Visitor<'de> for Nested {
            type Value = Vec<NodeTx>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("transactions by sender and by nonce")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Vec<NodeTx>, A::Error> {
                let mut out = Vec::new();
                while m.next_key::<serde::de::IgnoredAny>()?.is_some() {
                    match self.0 {
                        0 => out.push(node_tx(&m.next_value::<Transaction>()?)),
                        _ => out.extend(m.next_value_seed(Nested(self.0 - 1))?),
                    }
                }
                Ok(out)
            }
        }
        impl<'de> serde::de::DeserializeSeed<'de> for Nested {
            type Value = Vec<NodeTx>;
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<NodeTx>, D::Error> {
                d.deserialize_map(self)
            }
        }
        d.deserialize_map(Nested(1)).map(PendingTxs)
    }
}

fn node_tx(t: &Transaction) -> NodeTx {
    NodeTx {
        hash: *t.inner.tx_hash(),
        from: t.inner.signer(),
        to: t.to(),
        value: t.value(),
        nonce: t.nonce(),
    }
}

/// alloy's transport over the service's reqwest client.
#[derive(Clone)]
struct Transport {
    http: reqwest::Client,
    url: url::Url,
    pool_max_bytes: usize,
}

impl Transport {
    async fn send(self, req: RequestPacket) -> Result<ResponsePacket, TransportError> {
        // Errors without the URL: it may hold a key.
        let fail = |e: reqwest::Error| TransportErrorKind::custom_str(&e.without_url().to_string());
        // A batch is capped at the sum of its calls' caps, and at most a block's: a batch of
        // one block's receipts is bounded as the block is.
        let cap = match &req {
            RequestPacket::Single(r) => answer_cap(r.method(), self.pool_max_bytes),
            RequestPacket::Batch(_) => req
                .method_names()
                .map(|m| answer_cap(m, self.pool_max_bytes))
                .fold(0usize, usize::saturating_add)
                .min(MAX_BLOCK_BYTES),
        };
        let mut res = self.http.post(self.url).json(&req).send().await.map_err(fail)?;
        // An answer that says it is over the cap is dropped before a byte is read into memory.
        if res.content_length().is_some_and(|n| n > cap as u64) {
            return Err(TransportErrorKind::custom(TooLarge(cap)));
        }
        let status = res.status();
        let mut body = Vec::new();
        while let Some(chunk) = res.chunk().await.map_err(fail)? {
            if body.len() + chunk.len() > cap {
                return Err(TransportErrorKind::custom(TooLarge(cap)));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(TransportErrorKind::http_error(
                status.as_u16(),
                String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            ));
        }
        serde_json::from_slice(&body).map_err(|e| TransportError::deser_err(e, "the node's answer"))
    }
}

impl tower::Service<RequestPacket> for Transport {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _: &mut task::Context<'_>) -> task::Poll<Result<(), Self::Error>> {
        task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: RequestPacket) -> Self::Future {
        Box::pin(self.clone().send(req))
    }
}
