//! The command line's grammar: every subcommand and flag, with the help text `--help` prints.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::types::{BaseUnits, Coin, EnterpriseId, TokenId, WalletId};

#[derive(Debug, Parser)]
#[command(name = "custodian", version, about = "Wallet-custody service API")]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Settings every subcommand takes (flags > environment > file > defaults).
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// TOML configuration file.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Database URL, e.g. sqlite://data/custodian.db [env: CUSTODIAN_DATABASE_URL].
    #[arg(long, global = true, value_name = "URL")]
    pub database: Option<String>,
    /// test or production [env: CUSTODIAN_ENVIRONMENT].
    #[arg(long, global = true, value_name = "ENV")]
    pub environment: Option<String>,
    /// File with the 32-byte master key as 64 hex characters [env: CUSTODIAN_SECRET_KEY_FILE].
    #[arg(long, global = true, value_name = "FILE")]
    pub secret_key_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API.
    Serve {
        /// Address to listen on [env: CUSTODIAN_LISTEN] [default: 127.0.0.1:3080].
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// api (HTTP API only), worker (webhook delivery, with /health and /metrics) or all
        /// [env: CUSTODIAN_ROLE] [default: all].
        #[arg(long, value_name = "ROLE")]
        role: Option<String>,
        /// A chain setting, repeatable: `--chain hteth.rpc_url=http://127.0.0.1:8545 --chain
        /// hteth.chain_id=31337` is `[chains.hteth]` with those keys (docs/chains.md)
        /// [env: CUSTODIAN_CHAINS_<COIN>_<KEY>].
        #[arg(long = "chain", value_name = "COIN.KEY=VALUE")]
        chain: Vec<String>,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Print the OpenAPI 3.1 document (or, with --markdown, the API reference of docs/api.md).
    Openapi {
        /// Print the API reference as Markdown instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Manage users.
    #[command(subcommand)]
    User(UserCommand),
    /// Manage enterprises.
    #[command(subcommand)]
    Enterprise(EnterpriseCommand),
    /// Manage wallet records.
    #[command(subcommand)]
    Wallet(WalletCommand),
    /// The chain watcher: status and resync (docs/chains.md).
    #[command(subcommand)]
    Chain(ChainCommand),
    /// Withdrawals from custodial wallets (docs/withdrawals.md).
    #[command(subcommand)]
    Withdrawal(WithdrawalCommand),
    /// Keys this service holds for custodial wallets: their public parts.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Ingest events from upstream systems (chain indexers, the wallet platform).
    #[command(subcommand)]
    Event(EventCommand),
    /// Manage access token templates.
    #[command(subcommand, name = "token-template")]
    TokenTemplate(TemplateCommand),
    /// Check the audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// The service's ECDH key for BitGoJS's token issuance.
    #[command(subcommand)]
    Ecdh(EcdhCommand),
    /// Revoke or list access tokens (emergencies, audits).
    #[command(subcommand)]
    Token(TokenCommand),
    /// OpenID Connect signing keys.
    #[command(subcommand)]
    Oidc(OidcCommand),
    /// Register and manage OAuth 2.0 applications (docs/oauth.md).
    #[command(subcommand, name = "oauth-client")]
    OAuthClient(OAuthClientCommand),
    /// USD prices for the circuit breaker (docs/policy.md#circuit-breaker).
    #[command(subcommand)]
    Price(PriceCommand),
}

#[derive(Debug, Subcommand)]
pub enum PriceCommand {
    /// Set a coin's USD price (audited), for a coin without a `[prices.<coin>]` feed.
    Set {
        /// The coin, e.g. hteth or hteth:usdc.
        #[arg(long)]
        coin: Coin,
        /// US dollars per whole coin, decimal (3000.25).
        #[arg(long)]
        usd: String,
    },
    /// Print a coin's price as the circuit breaker reads it now.
    Show {
        #[arg(long)]
        coin: Coin,
    },
}

#[derive(Debug, Subcommand)]
pub enum OidcCommand {
    /// Add a new id_token signing key and retire the current one of its algorithm (it stays in
    /// the JWKS until the id_tokens it signed have expired).
    RotateKey {
        /// ES256 (the default) or RS256.
        #[arg(long, default_value = "ES256")]
        alg: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum OAuthClientCommand {
    /// Register an application; a confidential one's secret is printed once.
    Create {
        #[arg(long)]
        name: String,
        /// A redirect URI, matched exactly: https, or http on a loopback address. Repeatable.
        #[arg(long = "redirect-uri", required = true)]
        redirect_uris: Vec<String>,
        /// A scope value the application may ask for. Repeatable.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// No secret (native and browser applications).
        #[arg(long)]
        public: bool,
        /// Let this confidential application leave PKCE out (BitGoJS's authenticateWithAuthCode
        /// sends no code_verifier). Every other application must use PKCE (S256).
        #[arg(long = "pkce-optional", conflicts_with = "public")]
        pkce_optional: bool,
        /// How its OpenID Connect id_tokens are signed: ES256 (the default) or RS256.
        #[arg(long = "id-token-alg")]
        id_token_alg: Option<String>,
        /// Print one JSON object {clientId, clientSecret?, name, redirectUris, scopes}.
        #[arg(long)]
        json: bool,
    },
    /// List the registered applications.
    List,
    /// Disable an application: its grants are revoked and every token it holds stops.
    Disable {
        #[arg(long)]
        id: String,
    },
    /// Enable a disabled application again (its old grants stay revoked).
    Enable {
        #[arg(long)]
        id: String,
    },
    /// Let a confidential application leave PKCE out (`--optional`: BitGoJS's
    /// authenticateWithAuthCode sends no code_verifier), or require it again (`--required`).
    Pkce {
        #[arg(long)]
        id: String,
        #[arg(long, conflicts_with = "required", required_unless_present = "required")]
        optional: bool,
        #[arg(long)]
        required: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the hash chain: prints `ok N entries`, or the first broken link and exits 1.
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user with a password and a new TOTP seed.
    Create {
        #[arg(long)]
        email: String,
        /// "First Last".
        #[arg(long)]
        name: Option<String>,
        /// Read the password from standard input instead of a no-echo prompt.
        #[arg(long)]
        password_stdin: bool,
        /// Make the user a service employee holding the service-admin permission.
        #[arg(long)]
        service_admin: bool,
        /// Print one JSON object {id, email, totpSecret, otpauthUri} and nothing else.
        #[arg(long)]
        json: bool,
    },
    /// Refuse the user's logins and revoke every token of theirs.
    Deactivate {
        #[arg(long)]
        email: String,
    },
    /// Let a deactivated user log in again.
    Activate {
        #[arg(long)]
        email: String,
    },
    /// Give the user a new TOTP secret; codes of the old one stop working at once.
    ResetOtp {
        #[arg(long)]
        email: String,
        /// Print one JSON object {id, email, totpSecret, otpauthUri}.
        #[arg(long)]
        json: bool,
    },
    /// Remove every passkey of the user (a lost authenticator); password and TOTP still work.
    RemovePasskeys {
        #[arg(long)]
        email: String,
    },
    /// Set the user's password.
    SetPassword {
        #[arg(long)]
        email: String,
        /// Read the password from standard input instead of a no-echo prompt.
        #[arg(long)]
        password_stdin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnterpriseCommand {
    /// Create an enterprise.
    Create {
        #[arg(long)]
        name: String,
        /// Keep an existing id (32 hex), e.g. when migrating; a new one is generated otherwise.
        #[arg(long)]
        id: Option<EnterpriseId>,
        /// Print {id, name} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a user to an enterprise (or change their admin flag).
    AddUser {
        #[arg(long)]
        enterprise: EnterpriseId,
        #[arg(long)]
        email: String,
        /// Make the user an admin of the enterprise.
        #[arg(long)]
        admin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum WalletCommand {
    /// Import §2.1 wallet records from a JSON array or NDJSON file ("-" for standard input).
    Import {
        file: PathBuf,
        /// Print the summary as one JSON object {imported, updated, rejected}.
        #[arg(long)]
        json: bool,
        /// Refuse fields the wallet record of §2.1 does not list (by default they are kept).
        #[arg(long)]
        strict: bool,
        /// Let a record change the coin or type of an existing wallet (audited).
        #[arg(long)]
        allow_identity_change: bool,
    },
    /// Set balances of a wallet (base units, decimal digits; only the ones given change).
    SetBalance {
        /// Wallet id.
        #[arg(long)]
        id: WalletId,
        #[arg(long, value_name = "BASE_UNITS")]
        balance: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        confirmed: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        spendable: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        staking: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        reward: Option<String>,
        /// USD cents.
        #[arg(long, value_name = "CENTS")]
        withdraw_hold_usd: Option<String>,
    },
    /// Watch one more address for a wallet of an Ethereum or UTXO coin (the chain watcher's next
    /// round picks it up).
    AddAddress {
        /// Wallet id.
        #[arg(long)]
        wallet: WalletId,
        /// Ethereum: 0x and 40 hex digits, mixed case a valid EIP-55 checksum. A UTXO coin: an
        /// address of its network (base58check or bech32).
        #[arg(long)]
        address: String,
        #[arg(long)]
        label: Option<String>,
    },
    /// Make a wallet whose key this service holds (docs/withdrawals.md): only `--custodial`.
    Create {
        /// A custodial wallet: a key made in the key store (`keys.backend`).
        #[arg(long)]
        custodial: bool,
        /// A chain this service watches (`[chains.<coin>]`), e.g. hteth.
        #[arg(long)]
        coin: Coin,
        #[arg(long)]
        enterprise: EnterpriseId,
        #[arg(long)]
        label: String,
        /// Approvals each withdrawal needs from wallet admins other than its initiator.
        #[arg(long, default_value_t = 1)]
        approvals_required: u32,
        /// Print the wallet record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a wallet's freeze before its time (audited; its admin webhooks are told).
    Unfreeze {
        /// Wallet id.
        #[arg(long)]
        wallet: WalletId,
    },
    /// Set a wallet's fee alerts (docs/chains.md): an alert left out is turned off.
    FeeAlerts {
        /// Wallet id.
        #[arg(long)]
        wallet: WalletId,
        /// `lowFee` when the average base fee of the last 10 blocks falls below this, wei.
        #[arg(long, value_name = "WEI")]
        low_fee: Option<BaseUnits>,
        /// `lowFeeAddressBalance` when the balance of the record's `coinSpecific.feeAddress`
        /// falls below this, wei.
        #[arg(long, value_name = "WEI")]
        low_fee_address_balance: Option<BaseUnits>,
    },
}

#[derive(Debug, Subcommand)]
pub enum EcdhCommand {
    /// Print the xpub of the service's ECDH key (made, and sealed under the master key, the
    /// first time): BitGoJS's `serverXpub` option.
    ShowXpub,
}

#[derive(Debug, Subcommand)]
pub enum ChainCommand {
    /// Each configured chain: checkpoint, node head, lag, last reorg, halt reason.
    Status {
        /// One JSON object per chain instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Restart a chain's watch at block HEIGHT, clearing a halt after a reorg deeper than
    /// reorg_depth.
    Resync {
        #[arg(long)]
        coin: String,
        #[arg(long, value_name = "HEIGHT")]
        from: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Fan one event out to every matching webhook, as POST /api/v2/internal/events does.
    Emit {
        /// File holding the event JSON object ("-" for standard input).
        #[arg(long, value_name = "FILE")]
        json_file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// Create a template from a JSON object of access token fields (§4.3).
    Create {
        /// File holding the JSON object ("-" for standard input).
        #[arg(long, value_name = "FILE")]
        json_file: PathBuf,
        /// Print {id, fields} as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Revoke one token, or every live token of a user (optionally only those created from
    /// addresses in a CIDR block); prints how many.
    Revoke {
        /// The token's id.
        #[arg(long, conflicts_with = "user", required_unless_present = "user")]
        id: Option<TokenId>,
        /// The user's email.
        #[arg(long)]
        user: Option<String>,
        /// Only tokens created from addresses in this block (with --user).
        #[arg(long, value_name = "CIDR", requires = "user")]
        created_from: Option<String>,
    },
    /// List a user's live tokens (never their secrets).
    List {
        #[arg(long)]
        user: String,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum WithdrawalCommand {
    /// Withdrawals, oldest first.
    List {
        /// Only this wallet's.
        #[arg(long)]
        wallet: Option<WalletId>,
        /// Only those in this state (pendingApproval, pendingDelivery, signed, delivered,
        /// rejected, canceled, failed).
        #[arg(long)]
        state: Option<String>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// One JSON txRequest per line.
        #[arg(long)]
        json: bool,
    },
    /// One withdrawal as its txRequest (JSON).
    Show { id: crate::types::TxRequestId },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Every key: id, backend, address and wallet (never the private part).
    List {
        /// At most this many (1 to 10000).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
}
