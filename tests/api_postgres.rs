//! The integration suite of tests/api on PostgreSQL, each test in a database of its own,
//! created and dropped by the harness. Compiled when CUSTODIAN_TEST_POSTGRES_URL is set (an
//! admin URL, e.g. postgres://postgres@127.0.0.1:5432/postgres); see build.rs.
#![cfg(postgres_tests)]

/// The database every test of this binary runs on.
pub const BACKEND: common::Backend = common::Backend::Postgres;

#[path = "api/abuse.rs"]
mod abuse;
#[path = "api/attacks.rs"]
mod attacks;
#[path = "api/audit.rs"]
mod audit;
#[path = "api/bitgo.rs"]
mod bitgo;
#[path = "api/chain.rs"]
mod chain;
#[path = "api/chain_events.rs"]
mod chain_events;
#[path = "api/chain_faults.rs"]
mod chain_faults;
#[path = "api/chain_hostile.rs"]
mod chain_hostile;
#[path = "api/chain_pool.rs"]
mod chain_pool;
#[path = "api/cli.rs"]
mod cli;
#[path = "api/common.rs"]
mod common;
#[path = "api/connections.rs"]
mod connections;
#[path = "api/custody.rs"]
mod custody;
#[path = "api/custody_approvals.rs"]
mod custody_approvals;
#[path = "api/custody_faults.rs"]
mod custody_faults;
#[path = "api/custody_money.rs"]
mod custody_money;
#[path = "api/custody_scale.rs"]
mod custody_scale;
#[path = "api/custody_stuck.rs"]
mod custody_stuck;
#[path = "api/custody_tokens.rs"]
mod custody_tokens;
#[path = "api/delivery.rs"]
mod delivery;
#[path = "api/ecdh_login.rs"]
mod ecdh_login;
#[path = "api/errors.rs"]
mod errors;
#[path = "api/events.rs"]
mod events;
#[path = "api/hostile_node.rs"]
mod hostile_node;
#[path = "api/hsm.rs"]
mod hsm;
#[path = "api/identity.rs"]
mod identity;
#[path = "api/keychains.rs"]
mod keychains;
#[path = "api/litecoind.rs"]
mod litecoind;
#[path = "api/oauth.rs"]
mod oauth;
#[path = "api/operator.rs"]
mod operator;
#[path = "api/outage.rs"]
mod outage;
#[path = "api/passkeys.rs"]
mod passkeys;
#[path = "api/policy.rs"]
mod policy;
#[path = "api/policy_breaker.rs"]
mod policy_breaker;
#[path = "api/policy_enterprise.rs"]
mod policy_enterprise;
#[path = "api/policy_velocity.rs"]
mod policy_velocity;
#[path = "api/policy_webhook.rs"]
mod policy_webhook;
#[path = "api/procs.rs"]
mod procs;
#[path = "api/receiver.rs"]
mod receiver;
#[path = "api/records.rs"]
mod records;
#[path = "api/scaleout.rs"]
mod scaleout;
#[path = "api/sessions.rs"]
mod sessions;
#[path = "api/shared_limits.rs"]
mod shared_limits;
#[path = "api/signed.rs"]
mod signed;
#[path = "api/soft_passkey.rs"]
mod soft_passkey;
#[path = "api/sso.rs"]
mod sso;
#[path = "api/tokens.rs"]
mod tokens;
#[path = "api/utxo.rs"]
mod utxo;
#[path = "api/utxo_watch.rs"]
mod utxo_watch;
#[path = "api/wallets.rs"]
mod wallets;
#[path = "api/watchdog.rs"]
mod watchdog;
#[path = "api/webhooks.rs"]
mod webhooks;
