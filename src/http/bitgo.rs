//! BitGo's own paths (docs/decisions.md#bitgos-paths-and-password-form). The official SDK calls `/api/v1/...` and
//! `/api/auth/v1/...` for what Custodian serves under `/api/v2`: each such path is routed to the
//! same handler as its `/api/v2` twin, and its OpenAPI entry is the twin's, under its own path
//! and operation id. The SDK's `ping` and `client/constants` have handlers of their own.

use axum::{
    routing::{delete, get, post, MethodRouter},
    Json, Router,
};
use serde::Serialize;
use utoipa::{
    openapi::{path::HttpMethod, OpenApi, PathItem},
    ToSchema,
};

use super::handlers::{identity, keychains, login, passkeys, sessions};
use crate::AppState;

/// `(BitGo's path, its /api/v2 twin, method, handler)`.
fn twins() -> Vec<(&'static str, &'static str, HttpMethod, MethodRouter<AppState>)> {
    use HttpMethod::{Delete, Get, Post};
    vec![
        ("/api/auth/v1/accesstoken", "/api/v2/user/accesstoken", Post, post(identity::create_access_token)),
        // BitGo's example scripts log in here (`bitgo.url('/user/login', 2)`) with the plain password.
        ("/api/v2/user/login", "/api/v2/internal/user/login", Post, post(login::login)),
        ("/api/v1/user/session", "/api/v2/user/session", Get, get(sessions::session)),
        ("/api/v1/user/unlock", "/api/v2/user/unlock", Post, post(sessions::unlock)),
        ("/api/v1/user/lock", "/api/v2/user/lock", Post, post(sessions::lock)),
        ("/api/v1/user/logout", "/api/v2/user/logout", Get, get(sessions::logout)),
        ("/api/v1/user/me", "/api/v2/user/me", Get, get(identity::me)),
        ("/api/v1/user/settings", "/api/v2/user/settings", Get, get(keychains::user_settings)),
        ("/api/v1/user/otp/{id}", "/api/v2/user/otp/{id}", Delete, delete(passkeys::remove_device)),
        ("/api/v1/user/accesstoken", "/api/v2/user/accesstoken", Get, get(sessions::list_tokens)),
        (
            "/api/v1/user/accesstoken/{id}",
            "/api/v2/user/accesstoken/{id}",
            Delete,
            delete(sessions::revoke_token),
        ),
        ("/api/v1/user/extendtoken", "/api/v2/user/extendtoken", Post, post(sessions::extend_token)),
    ]
}

/// Routes BitGo's paths on `router` and describes them in `doc` (after the `/api/v2` routes).
pub fn add(mut router: Router<AppState>, doc: &mut OpenApi) -> Router<AppState> {
    for (path, twin, method, handler) in twins() {
        router = router.route(path, handler);
        let operation = doc.paths.paths.get_mut(twin).and_then(|item| operation_mut(item, &method).clone());
        if let Some(mut op) = operation {
            op.operation_id = op.operation_id.map(|id| format!("{id}_bitgo"));
            op.summary = Some(format!("BitGo's path for {} {twin}.", method_name(&method)));
            let item = doc.paths.paths.entry(path.to_string()).or_default();
            *operation_mut(item, &method) = Some(op);
        }
    }
    router
}

fn operation_mut<'a>(
    item: &'a mut PathItem,
    method: &HttpMethod,
) -> &'a mut Option<utoipa::openapi::path::Operation> {
    match method {
        HttpMethod::Post => &mut item.post,
        HttpMethod::Delete => &mut item.delete,
        _ => &mut item.get,
    }
}

fn method_name(method: &HttpMethod) -> &'static str {
    match method {
        HttpMethod::Post => "POST",
        HttpMethod::Delete => "DELETE",
        _ => "GET",
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Ping {
    /// Always `service is ok!`, as BitGo answers.
    pub status: String,
    /// `test` or `production` (the `environment` setting).
    pub environment: String,
}

/// BitGo's liveness answer for the SDK's `ping()`. Unlike `/health` it does not ask the
/// database: it says the API answers.
#[utoipa::path(get, path = "/api/v1/ping", tag = "operations",
    responses((status = 200, description = "The API answers", body = Ping)))]
pub async fn ping(axum::extract::State(state): axum::extract::State<AppState>) -> Json<Ping> {
    Json(Ping { status: "service is ok!".into(), environment: state.config.environment.as_str().into() })
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClientConstants {
    /// Seconds the SDK may keep these before fetching them again.
    pub ttl: u64,
    /// Custodian's constants: the server's name and version, the auth versions it accepts, and
    /// `mpc.bitgoPublicKey` (see [`MPC_PLACEHOLDER_KEY`]). BitGo's fee and coin tables are not
    /// served; the SDK falls back to its built-in values.
    pub constants: serde_json::Value,
}

/// An OpenPGP public key served as `constants.mpc.bitgoPublicKey`. Custodian does no MPC
/// (TSS), but BitGoJS reads this key, without awaiting it, whenever it builds a pending approval
/// of a TSS-capable coin (hteth), and an absent key is an unhandled rejection that ends a Node
/// process. Its private key was discarded when it was made (docs/decisions.md#withdrawals), so
/// nothing encrypted to it can be read by anyone.
pub const MPC_PLACEHOLDER_KEY: &str = include_str!("mpc_placeholder.asc");

/// What the SDK fetches at construction (`fetchConstants`). Needs no authentication.
#[utoipa::path(get, path = "/api/v1/client/constants", tag = "operations",
    responses((status = 200, description = "The constants and how long to keep them", body = ClientConstants)))]
pub async fn client_constants() -> Json<ClientConstants> {
    Json(ClientConstants {
        ttl: 3600,
        constants: serde_json::json!({
            "server": "custodian",
            "version": env!("CARGO_PKG_VERSION"),
            "authVersions": [1, 2, 3],
            "mpc": { "bitgoPublicKey": MPC_PLACEHOLDER_KEY },
        }),
    })
}
