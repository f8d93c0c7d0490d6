//! Route handlers with their request and response DTOs, one file per capability. A handler
//! extracts typed values, calls one domain function, and shapes the response.

pub mod approvals;
pub mod audit;
pub mod chain;
pub mod custody;
pub mod events;
pub mod identity;
pub mod keychains;
pub mod login;
pub mod passkeys;
pub mod policy;
pub mod sessions;
pub mod sso;
pub mod utxo;
pub mod wallets;
pub mod webhook_admin;
pub mod webhooks;
