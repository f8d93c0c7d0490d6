//! `[chains.<coin>]`: the nodes the chain watcher follows (docs/chains.md): Ethereum's
//! JSON-RPC, or a Bitcoin-family node's (`family = "utxo"`, docs/chains.md#utxo-chains).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One watched chain, keyed by its BitGo coin name (`eth`, `hteth`, ...).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ChainConfig {
    /// Which kind of node: `ethereum` (the default) or `utxo` (Bitcoin Core, Litecoin Core).
    pub family: ChainFamily,
    /// The node's JSON-RPC endpoint over http(s). It may carry a provider's key, so it is never
    /// logged.
    pub rpc_url: String,
    /// Ethereum: the node's `eth_chainId`, checked at start (1 mainnet, 17000 Holesky, 31337
    /// anvil). Unused for a UTXO chain.
    pub chain_id: u64,
    /// A UTXO chain's network (`mainnet`, `testnet`, `regtest`), checked against
    /// `getblockchaininfo` at start and every minute.
    pub network: Option<Network>,
    /// A UTXO node's `rpcuser` (with `rpc_password`).
    pub rpc_user: Option<String>,
    /// A UTXO node's `rpcpassword`: a secret, never logged nor shown.
    pub rpc_password: Option<Secret>,
    /// A UTXO node's cookie file (`<datadir>/.cookie`), read at each connection, instead of a
    /// user and password.
    pub rpc_cookie_file: Option<std::path::PathBuf>,
    /// Blocks (the including one counted) after which a transfer is `confirmed`.
    pub confirmations: u64,
    /// Block headers kept to detect a reorg; a deeper reorg stops the watcher.
    pub reorg_depth: u64,
    /// How often the node is asked for its head, milliseconds.
    pub poll_interval_ms: u64,
    /// The first block read when the chain has no checkpoint yet; `None`: the node's head.
    /// Also spelt `start_height`.
    #[serde(alias = "start_height")]
    pub start_block: Option<u64>,
    /// Blocks read per round while catching up (the backfill batch).
    pub batch_blocks: u64,
    /// Blocks read from the node ahead of the one being processed, concurrently: a bound on
    /// the requests one watcher keeps in flight (each block is its transactions, the receipts
    /// of the watched ones and the token logs).
    pub read_ahead: u64,
    /// Longest time one node request may take, seconds.
    pub rpc_timeout: u64,
    /// How long a watcher's hold on the chain lasts without renewal, milliseconds: another
    /// process takes the chain over this long after the holder died.
    pub lease_ms: u64,
    /// Whether to read the node's pending pool (`txpool_content`) at the head, so a transfer is
    /// `unconfirmed` before its block. A node that does not expose it is skipped (asked again
    /// each [`crate::chain::watcher::POOL_RETRY`]).
    pub pending_pool: bool,
    /// Largest pending-pool answer read, bytes: a larger one is dropped unread for that round
    /// (metric `custodian_chain_pool_dropped_total`), so a huge pool cannot take the process's
    /// memory.
    pub pool_max_bytes: u64,
    /// Most transfers new to the pending pool announced `unconfirmed` per round; the rest wait
    /// for a later round or their block (metric `custodian_chain_pool_deferred_total`), so a
    /// lying pool cannot flood every receiver.
    pub pool_max_new: u64,
    /// ERC-20 tokens whose `Transfer` logs are read.
    pub tokens: Vec<TokenConfig>,
}

impl Default for ChainConfig {
    fn default() -> Self {
        Self {
            family: ChainFamily::Ethereum,
            rpc_url: String::new(),
            chain_id: 0,
            network: None,
            rpc_user: None,
            rpc_password: None,
            rpc_cookie_file: None,
            confirmations: 12,
            reorg_depth: 64,
            poll_interval_ms: 1000,
            start_block: None,
            batch_blocks: 100,
            read_ahead: 16,
            rpc_timeout: 10,
            lease_ms: 15_000,
            pending_pool: true,
            pool_max_bytes: 8 << 20,
            pool_max_new: 500,
            tokens: Vec::new(),
        }
    }
}

/// Which network of a coin: the `network` of a chain's configuration. BitGo's test coins
/// (`tbtc`, `tltc`) are `testnet`; a node in `regtest` differs only in its bech32 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    Mainnet,
    Testnet,
    Regtest,
}

/// The kind of node a chain is read from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ChainFamily {
    #[default]
    Ethereum,
    /// Bitcoin and its family, read over Bitcoin Core's JSON-RPC.
    Utxo,
}

/// A secret setting: shown as `***` by `Debug`, so a logged configuration never holds it.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl ChainConfig {
    /// Whether the chain is a UTXO one.
    pub fn is_utxo(&self) -> bool {
        self.family == ChainFamily::Utxo
    }
}

/// An ERC-20 token of a chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The token's coin name, `<chain coin>:<ticker>` (`hteth:usdc`).
    pub coin: String,
    /// The contract address, `0x` and 40 hex digits.
    pub contract: String,
    /// The token's decimals (informational: amounts stay in base units).
    pub decimals: u8,
}

/// Ethereum coins the watcher knows how to read, as BitGo names them.
pub const WATCHABLE_COINS: &[&str] = &["eth", "hteth", "teth", "gteth"];

/// UTXO coins the watcher knows how to read (`family = "utxo"`).
pub const WATCHABLE_UTXO_COINS: &[&str] = &["btc", "tbtc", "ltc", "tltc"];

/// Whether the watcher can read `coin` (either family).
pub fn watchable(coin: &str) -> bool {
    WATCHABLE_COINS.contains(&coin) || WATCHABLE_UTXO_COINS.contains(&coin)
}

/// Checks a UTXO chain's own keys; errors name the key.
fn validate_utxo(coin: &str, c: &ChainConfig) -> Result<(), String> {
    let at = |key: &str| format!("invalid configuration: chains.{coin}.{key}");
    if !WATCHABLE_UTXO_COINS.contains(&coin) {
        return Err(format!(
            "invalid configuration: chains.{coin}: family = \"utxo\" is for {}",
            WATCHABLE_UTXO_COINS.join(", ")
        ));
    }
    let testnet = coin.starts_with('t');
    match c.network {
        None => return Err(format!("{}: must be set (mainnet, testnet or regtest)", at("network"))),
        Some(Network::Mainnet) if testnet => {
            return Err(format!("{}: {coin} is a test coin: testnet or regtest", at("network")))
        }
        Some(Network::Testnet | Network::Regtest) if !testnet => {
            return Err(format!("{}: {coin} is a main-network coin: mainnet", at("network")))
        }
        _ => {}
    }
    if c.rpc_cookie_file.is_some() && (c.rpc_user.is_some() || c.rpc_password.is_some()) {
        return Err(format!("{}: either a cookie file or rpc_user and rpc_password", at("rpc_cookie_file")));
    }
    // A user without a password is left to the watcher's start (`custodian chain status` reads
    // the file without the secret); a password without a user is a mistake.
    if c.rpc_password.is_some() && c.rpc_user.is_none() {
        return Err(format!("{}: needs rpc_user", at("rpc_password")));
    }
    if !c.tokens.is_empty() {
        return Err(format!("{}: a UTXO chain has no tokens", at("tokens")));
    }
    Ok(())
}

/// Checks every chain; errors are one line naming the key.
pub fn validate(chains: &BTreeMap<String, ChainConfig>) -> Result<(), String> {
    for (coin, c) in chains {
        let at = |key: &str| format!("invalid configuration: chains.{coin}.{key}");
        if c.is_utxo() {
            validate_utxo(coin, c)?;
        } else if !WATCHABLE_COINS.contains(&coin.as_str()) {
            return Err(format!(
                "invalid configuration: chains.{coin}: not an Ethereum coin this version watches (one of {}; {} with family = \"utxo\")",
                WATCHABLE_COINS.join(", "),
                WATCHABLE_UTXO_COINS.join(", ")
            ));
        }
        match url::Url::parse(&c.rpc_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            // The value is not echoed: an RPC URL often holds an API key.
            _ => return Err(format!("{}: must be an http:// or https:// URL", at("rpc_url"))),
        }
        if c.chain_id == 0 && !c.is_utxo() {
            return Err(format!("{}: must be set (the node's eth_chainId, e.g. 1 or 31337)", at("chain_id")));
        }
        if c.confirmations == 0 || c.confirmations > 10_000 {
            return Err(format!("{}: must be 1 to 10000", at("confirmations")));
        }
        if c.reorg_depth < 2 || c.reorg_depth > 10_000 {
            return Err(format!("{}: must be 2 to 10000", at("reorg_depth")));
        }
        if c.poll_interval_ms == 0 || c.batch_blocks == 0 || c.batch_blocks > 10_000 || c.rpc_timeout == 0 {
            return Err(format!(
                "{}, batch_blocks (1 to 10000) and rpc_timeout must be positive",
                at("poll_interval_ms")
            ));
        }
        if !(1_000..=600_000).contains(&c.lease_ms) {
            return Err(format!("{}: must be 1000 to 600000 (milliseconds)", at("lease_ms")));
        }
        if c.pool_max_bytes < 1024 || c.pool_max_bytes > 1 << 30 {
            return Err(format!("{}: must be 1024 to 1073741824 (bytes)", at("pool_max_bytes")));
        }
        if c.pool_max_new == 0 || c.pool_max_new > 10_000 {
            return Err(format!("{}: must be 1 to 10000", at("pool_max_new")));
        }
        if c.read_ahead == 0 || c.read_ahead > 64 {
            return Err(format!("{}: must be 1 to 64", at("read_ahead")));
        }
        for (i, t) in c.tokens.iter().enumerate() {
            let ticker = t.coin.strip_prefix(&format!("{coin}:"));
            if !ticker.is_some_and(|t| !t.is_empty() && t.len() <= 30)
                || t.coin.parse::<crate::types::Coin>().is_err()
            {
                return Err(format!(
                    "{}: must be {coin}:<ticker> in lower case",
                    at(&format!("tokens[{i}].coin"))
                ));
            }
            if crate::types::parse_eth_address(&t.contract).is_err() {
                return Err(format!(
                    "{}: must be 0x and 40 hex digits",
                    at(&format!("tokens[{i}].contract"))
                ));
            }
        }
    }
    Ok(())
}
