//! The domain's records and their rules: what a webhook, a notification, a wallet and an audit
//! entry are, independent of where they are kept. A leaf below the capabilities and the store:
//! the store converts its rows into these records and holds no business rule, and the domain
//! modules (`webhooks`, `notifications`, `wallets`, `audit`) work on them. It depends only on
//! `types` and `digest`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

pub mod audit;
pub mod chain;
pub mod custody;
pub mod keychain;
pub mod notification;
pub mod oauth;
pub mod passkey;
pub mod token;
pub mod wallet;
pub mod webhook;
