//! Custodian: a wallet-custody service API (see ../shared/spec/interface.md).
//! This crate builds the application from a [`config::Config`] and runs it on a bound listener.

use std::{future::Future, net::SocketAddr, sync::Arc};

use tokio::net::TcpListener;

pub mod cli;
pub mod config;
pub mod http;
pub mod identity;
pub mod ids;
pub mod secrets;
pub mod store;
pub mod wallets;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: store::DynStore,
    pub config: Arc<config::Config>,
    pub key: Arc<secrets::MasterKey>,
}

impl AppState {
    /// Opens the database (applying migrations) and loads the master key.
    pub async fn new(config: config::Config) -> anyhow::Result<Self> {
        let key = secrets::MasterKey::load(&config)?;
        let store = store::open(&config.database_url).await?;
        Ok(Self { store, config: Arc::new(config), key: Arc::new(key) })
    }

    /// The scope policy for this deployment.
    pub fn policy(&self) -> identity::scopes::Policy {
        identity::scopes::Policy { environment: self.config.environment }
    }
}

/// Serves the API on `listener` until `shutdown` completes, then finishes in-flight requests.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    identity::password::warm_up();
    let store = state.store.clone();
    let app = http::app(state);
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown)
        .await?;
    store.close().await;
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
