//! One integration-test binary: the real server over real HTTP.

mod cli;
mod common;
mod errors;
mod identity;
mod tokens;
mod wallets;
