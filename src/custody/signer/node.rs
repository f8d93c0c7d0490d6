//! What the signer asks of an Ethereum node (docs/withdrawals.md#signing-and-broadcast): the
//! address's pending nonce, the next block's base fee, gas, and sending raw transactions, with
//! the node's refusals sorted into what the signer does next.

use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_rpc_types_eth::{FeeHistory, TransactionReceipt, TransactionRequest};
use async_trait::async_trait;

use crate::chain::node::{EthNode, NodeError};

/// Why a node refused a raw transaction.
#[derive(Debug)]
pub enum SendRefusal {
    /// It has it already, or its nonce is used: look up what was mined.
    Known,
    /// Its fees are too low to replace or enter the pool.
    Underpriced,
    /// The address cannot pay value plus gas.
    InsufficientFunds,
    /// Anything else, or the node is away: try again later.
    Other(NodeError),
}

/// A mined transaction's receipt, as the signer needs it.
#[derive(Debug, Clone, Default)]
pub struct Mined {
    pub block: u64,
    pub success: bool,
    /// Its ERC-20 `Transfer` logs: (contract, from, to, value in base units); at most
    /// [`MAX_RECEIPT_TRANSFERS`] read.
    pub transfers: Vec<(Address, Address, Address, U256)>,
}

/// `Transfer` logs read from one receipt: a withdrawal's transaction logs one.
pub const MAX_RECEIPT_TRANSFERS: usize = 16;

/// The ERC-20 `Transfer` logs of `r`, at most [`MAX_RECEIPT_TRANSFERS`].
fn transfers_of(r: &TransactionReceipt) -> Vec<(Address, Address, Address, U256)> {
    use alloy_sol_types::SolEvent;
    r.inner
        .logs()
        .iter()
        .filter_map(|log| {
            let t = crate::chain::node::Transfer::decode_log(&log.inner).ok()?;
            Some((log.address(), t.from, t.to, t.value))
        })
        .take(MAX_RECEIPT_TRANSFERS)
        .collect()
}

#[async_trait]
pub trait SendNode: Send + Sync {
    async fn chain_id(&self) -> Result<u64, NodeError>;
    /// The node's head block.
    async fn head(&self) -> Result<u64, NodeError>;
    /// `eth_getTransactionCount(address, "pending")`.
    async fn pending_nonce(&self, address: Address) -> Result<u64, NodeError>;
    /// `eth_getTransactionCount(address, "latest")`: the address's mined transactions.
    async fn latest_nonce(&self, address: Address) -> Result<u64, NodeError>;
    /// The next block's base fee, wei per gas (`eth_feeHistory`).
    async fn next_base_fee(&self) -> Result<u128, NodeError>;
    /// `eth_estimateGas` of a call.
    async fn estimate_gas(
        &self,
        from: Address,
        to: Address,
        value: U256,
        data: Bytes,
    ) -> Result<u64, NodeError>;
    /// Whether `address` holds code at the latest block (`eth_getCode`).
    async fn has_code(&self, address: Address) -> Result<bool, NodeError>;
    /// `eth_sendRawTransaction`.
    async fn send_raw(&self, raw: &[u8]) -> Result<B256, SendRefusal>;
    /// `eth_sendRawTransaction` of each of `raws`, in one JSON-RPC batch in their order (a node
    /// runs a batch's calls in order: geth one after another, anvil starting each in turn), so
    /// an address's transactions reach it in nonce order in one round trip. One outcome per
    /// raw transaction, in the same order; a batch the node fails as a whole fails each.
    async fn send_raw_all(&self, raws: &[&[u8]]) -> Vec<Result<B256, SendRefusal>>;
    /// The receipt of `hash`, when it is mined.
    async fn mined(&self, hash: B256) -> Result<Option<Mined>, NodeError>;
    /// Whether the node knows `hash` at all (pool or chain).
    async fn knows(&self, hash: B256) -> Result<bool, NodeError>;
}

/// Sorts a node's refusal by its message: geth's, anvil's and Erigon's spellings.
pub fn classify(e: NodeError) -> SendRefusal {
    let text = e.to_string().to_ascii_lowercase();
    if text.contains("already known") || text.contains("nonce too low") || text.contains("known transaction")
    {
        SendRefusal::Known
    } else if text.contains("underpriced")
        || text.contains("fee too low")
        || text.contains("max fee per gas less than block base fee")
    {
        SendRefusal::Underpriced
    } else if text.contains("insufficient funds") {
        SendRefusal::InsufficientFunds
    } else {
        SendRefusal::Other(e)
    }
}

/// `eth_getTransactionCount(address, tag)` (`pending` or `latest`).
async fn transaction_count(node: &EthNode, address: Address, tag: &str) -> Result<u64, NodeError> {
    let n: U256 = node.call("eth_getTransactionCount", (address, tag)).await?;
    u64::try_from(n).map_err(|_| NodeError::new("eth_getTransactionCount: out of range"))
}

#[async_trait]
impl SendNode for EthNode {
    async fn chain_id(&self) -> Result<u64, NodeError> {
        crate::chain::node::ChainNode::chain_id(self).await
    }

    async fn head(&self) -> Result<u64, NodeError> {
        crate::chain::node::ChainNode::head(self).await
    }

    async fn pending_nonce(&self, address: Address) -> Result<u64, NodeError> {
        transaction_count(self, address, "pending").await
    }

    async fn latest_nonce(&self, address: Address) -> Result<u64, NodeError> {
        transaction_count(self, address, "latest").await
    }

    async fn next_base_fee(&self) -> Result<u128, NodeError> {
        let h: FeeHistory = self.call("eth_feeHistory", (U256::from(1), "latest", Vec::<f64>::new())).await?;
        h.base_fee_per_gas.last().copied().ok_or_else(|| NodeError::new("eth_feeHistory: no base fee"))
    }

    async fn estimate_gas(
        &self,
        from: Address,
        to: Address,
        value: U256,
        data: Bytes,
    ) -> Result<u64, NodeError> {
        let call = TransactionRequest::default().from(from).to(to).value(value).input(data.into());
        let gas: U256 = self.call("eth_estimateGas", (call,)).await?;
        u64::try_from(gas).map_err(|_| NodeError::new("eth_estimateGas: out of range"))
    }

    async fn has_code(&self, address: Address) -> Result<bool, NodeError> {
        let code: Bytes = self.call("eth_getCode", (address, "latest")).await?;
        Ok(!code.is_empty())
    }

    async fn send_raw(&self, raw: &[u8]) -> Result<B256, SendRefusal> {
        self.call("eth_sendRawTransaction", (Bytes::copy_from_slice(raw),)).await.map_err(classify)
    }

    async fn send_raw_all(&self, raws: &[&[u8]]) -> Vec<Result<B256, SendRefusal>> {
        self.batch("eth_sendRawTransaction", raws.iter().map(|raw| (Bytes::copy_from_slice(raw),)))
            .await
            .into_iter()
            .map(|sent| sent.map_err(classify))
            .collect()
    }

    async fn mined(&self, hash: B256) -> Result<Option<Mined>, NodeError> {
        let r: Option<TransactionReceipt> = self.call("eth_getTransactionReceipt", (hash,)).await?;
        Ok(r.and_then(|r| {
            Some(Mined { block: r.block_number?, success: r.status(), transfers: transfers_of(&r) })
        }))
    }

    async fn knows(&self, hash: B256) -> Result<bool, NodeError> {
        let tx: Option<serde_json::Value> = self.call("eth_getTransactionByHash", (hash,)).await?;
        Ok(tx.is_some_and(|t| !t.is_null()))
    }
}
