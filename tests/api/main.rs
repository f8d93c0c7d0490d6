//! One integration-test binary: the real server over real HTTP.

mod cli;
mod common;
mod errors;
mod identity;
mod receiver;
mod tokens;
mod wallets;
mod webhooks;
