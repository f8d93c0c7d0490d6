//! The operator's user and token commands (docs/decisions.md#token-and-session-lifecycle): `user deactivate | activate |
//! reset-otp | remove-passkeys | set-password` and `token revoke | list`, over `identity::user_admin`.

use serde_json::json;

use super::args::{TokenCommand, UserCommand};

use crate::{
    config::Config,
    identity::user_admin::{self, Revocation},
    types::Cidr,
    AppState,
};

/// `user deactivate`, `user activate`, `user reset-otp`, `user set-password`.
pub async fn user_command(config: Config, cmd: UserCommand) -> anyhow::Result<()> {
    let state = AppState::new(config).await?;
    let store = &state.store;
    match cmd {
        UserCommand::Deactivate { email } => {
            let (u, revoked) = user_admin::deactivate(store, &email, user_admin::By::Operator).await?;
            println!("{} is deactivated: logins refused, {revoked} tokens revoked", u.email);
        }
        UserCommand::Activate { email } => {
            let u = user_admin::activate(store, &email, user_admin::By::Operator).await?;
            println!("{} may log in again", u.email);
        }
        UserCommand::ResetOtp { email, json } => {
            let c =
                user_admin::reset_otp(store, &state.identity.key, &email, user_admin::By::Operator).await?;
            if json {
                println!("{}", serde_json::to_string(&c)?);
            } else {
                println!("New one-time password secret for {}: {}", c.email, c.totp_secret);
                println!("{}", super::qr(&c.otpauth_uri));
                println!("{}", c.otpauth_uri);
            }
        }
        UserCommand::RemovePasskeys { email } => {
            let (u, removed) = user_admin::remove_passkeys(store, &email, user_admin::By::Operator).await?;
            println!("{removed} passkeys of {} removed", u.email);
        }
        UserCommand::SetPassword { email, password_stdin } => {
            let password = super::read_password(password_stdin)?;
            let u = user_admin::set_password(store, &email, &password).await?;
            println!("password of {} set", u.email);
        }
        UserCommand::Create { .. } => anyhow::bail!("user create is handled by the caller"),
    }
    Ok(())
}

/// `token revoke`, `token list`.
pub async fn token_command(config: Config, cmd: TokenCommand) -> anyhow::Result<()> {
    let store = crate::store::open(&config).await?;
    match cmd {
        TokenCommand::Revoke { id, user, created_from } => {
            let which = match (id, user) {
                (Some(id), _) => Revocation::Id(id),
                (None, Some(email)) => {
                    let created_from = created_from
                        .map(|c| Cidr::parse(&c).map_err(|e| anyhow::anyhow!("--created-from: {e}")))
                        .transpose()?;
                    Revocation::User { email, created_from }
                }
                (None, None) => anyhow::bail!("give --id or --user"),
            };
            let n = user_admin::revoke(&store, which).await?;
            println!("{n} tokens revoked");
        }
        TokenCommand::List { user, json } => {
            let tokens = user_admin::tokens(&store, &user).await?;
            let rows: Vec<serde_json::Value> = tokens
                .iter()
                .map(|t| {
                    json!({
                        "id": t.id, "kind": t.kind.as_str(), "label": t.label, "created": crate::clock::iso(t.created_at),
                        "expires": crate::clock::iso(t.expires_at), "ip": t.ip,
                        "lastUsedAt": t.last_used_at.map(crate::clock::iso),
                        "scope": t.scopes.iter().map(|g| g.to_scope_string()).collect::<Vec<_>>(),
                    })
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string(&rows)?);
            } else {
                for r in &rows {
                    println!(
                        "{} {:8} {:20} expires {} last used {}",
                        r["id"].as_str().unwrap_or_default(),
                        r["kind"].as_str().unwrap_or_default(),
                        r["label"].as_str().unwrap_or("-"),
                        r["expires"].as_str().unwrap_or_default(),
                        r["lastUsedAt"].as_str().unwrap_or("never")
                    );
                }
            }
        }
    }
    Ok(())
}

/// `audit verify`: prints `ok N entries`, or fails (exit 1) naming the first broken link.
pub async fn audit_verify(config: Config) -> anyhow::Result<()> {
    let store = crate::store::open(&config).await?;
    let bar = super::progress_bar();
    let verified = crate::audit::verify(&store, |n| bar.set_position(n)).await?;
    bar.finish_and_clear();
    match verified {
        crate::audit::Verified::Ok(n) => {
            println!("ok {n} entries");
            Ok(())
        }
        crate::audit::Verified::Broken { seq, id, entries_before } => anyhow::bail!(
            "audit chain broken at entry {id} (position {seq}, after {entries_before} good entries): \
             its hash does not match its content and predecessor"
        ),
    }
}
