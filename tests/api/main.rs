//! One integration-test binary: the real server over real HTTP, on SQLite. The same modules run
//! on PostgreSQL from tests/api_postgres.rs when CUSTODIAN_TEST_POSTGRES_URL is set.

/// The database every test of this binary runs on.
pub const BACKEND: common::Backend = common::Backend::Sqlite;

mod abuse;
mod attacks;
mod audit;
mod bitgo;
mod chain;
mod chain_events;
mod chain_faults;
mod chain_hostile;
mod chain_pool;
mod cli;
mod common;
mod connections;
mod custody;
mod custody_approvals;
mod custody_faults;
mod custody_money;
mod custody_scale;
mod custody_stuck;
mod custody_tokens;
mod delivery;
mod ecdh_login;
mod errors;
mod events;
mod hostile_node;
mod hsm;
mod identity;
mod keychains;
mod litecoind;
mod oauth;
mod operator;
mod passkeys;
mod policy;
mod policy_breaker;
mod policy_enterprise;
mod policy_velocity;
mod policy_webhook;
mod procs;
mod receiver;
mod records;
mod sessions;
mod signed;
mod soft_passkey;
mod sso;
mod tokens;
mod utxo;
mod utxo_watch;
mod wallets;
mod watchdog;
mod webhooks;
