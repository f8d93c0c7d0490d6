//! Users, passwords, TOTP, login, access tokens, scopes and the auth extractor.

pub mod auth;
pub mod login;
pub mod operator;
pub mod password;
pub mod rate_limit;
pub mod scopes;
pub mod sessions;
pub mod throttle;
pub mod tokens;
pub mod totp;
pub mod users;
