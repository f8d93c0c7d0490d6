//! `custodian oauth-client`: register and manage OAuth 2.0 applications (`crate::oauth::clients`).

use super::args::{OAuthClientCommand, OidcCommand};
use crate::config::Config;

/// `oauth-client create | list | disable | enable`.
pub async fn oauth_client(config: Config, cmd: OAuthClientCommand) -> anyhow::Result<()> {
    use crate::oauth::clients;
    use OAuthClientCommand as C;
    let store = crate::store::open(&config).await?;
    match cmd {
        C::Create { name, redirect_uris, scopes, public, pkce_optional, id_token_alg, json } => {
            let new = clients::NewClient { name, redirect_uris, scopes, public, id_token_alg, pkce_optional };
            let (c, secret) = clients::create(&store, new).await?;
            if json {
                let out = serde_json::json!({
                    "clientId": c.id, "clientSecret": secret, "name": c.name,
                    "redirectUris": c.redirect_uris, "scopes": c.scopes,
                });
                println!("{out}");
            } else {
                println!("Registered {} (client_id {})", c.name, c.id);
                match secret {
                    Some(s) => println!("client_secret (shown once, keep it safe): {s}"),
                    None => println!("public client: no secret"),
                }
            }
        }
        C::List => {
            for c in clients::list(&store).await? {
                let kind = if c.secret_hash.is_some() { "confidential" } else { "public" };
                let state = if c.disabled { "disabled" } else { "enabled" };
                println!(
                    "{}  {}  {kind}  {state}  {}  {}",
                    c.id,
                    c.name,
                    c.redirect_uris.join(","),
                    c.scopes.join(" ")
                );
            }
        }
        C::Disable { id } => {
            clients::set_disabled(&store, &parse_client_id(&id)?, true).await?;
            println!("{id} is disabled; its grants are revoked");
        }
        C::Enable { id } => {
            clients::set_disabled(&store, &parse_client_id(&id)?, false).await?;
            println!("{id} is enabled");
        }
        C::Pkce { id, optional, .. } => {
            clients::set_pkce_optional(&store, &parse_client_id(&id)?, optional).await?;
            println!("{id} {}", if optional { "may leave PKCE out" } else { "must use PKCE" });
        }
    }
    Ok(())
}

fn parse_client_id(id: &str) -> anyhow::Result<crate::types::AnyId> {
    id.trim().parse().map_err(|e| anyhow::anyhow!("--id: {e}"))
}

/// `oidc rotate-key`.
pub async fn oidc(config: Config, cmd: OidcCommand) -> anyhow::Result<()> {
    let OidcCommand::RotateKey { alg } = cmd;
    anyhow::ensure!(matches!(alg.as_str(), "ES256" | "RS256"), "--alg: ES256 or RS256");
    let state = crate::AppState::new(config).await?;
    let k = crate::oauth::oidc::add_key(&state.store, &state.identity.key, &alg, true).await?;
    println!("new {} key {}; the previous one stays published until its id_tokens expire", k.alg, k.kid);
    Ok(())
}
