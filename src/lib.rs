//! Custodian: a wallet-custody service API (docs/api.md is its reference; `§` numbers in comments
//! are the sections it maps).
//! This crate builds the application from a [`config::Config`] and runs it on a bound listener.

use std::{future::Future, sync::Arc, time::Duration};

use tokio::net::TcpListener;

pub mod audit;
pub mod chain;
pub mod cli;
pub mod clock;
pub mod config;
pub mod custody;
pub mod delivery;
pub mod digest;
pub mod error;
pub mod grant;
pub mod http;
pub mod identity;
pub mod ids;
pub mod master_key;
pub mod metrics;
pub mod model;
pub mod net;
pub mod notifications;
pub mod oauth;
pub mod paging;
pub mod private_fs;
pub mod store;
pub mod text;
pub mod token_bucket;
pub mod types;
pub mod wallets;
pub mod webhooks;

/// What every handler shares: one `Arc`, so that the clones every request makes (extractors,
/// middleware) cost one atomic operation, not one per field (docs/decisions.md#performance).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`]: one handle per capability (each holding what its functions
/// use, docs/decisions.md#architecture), and what the HTTP layer and the engine need besides.
pub struct Shared {
    pub identity: identity::Identity,
    pub wallets: wallets::Wallets,
    pub webhooks: webhooks::Webhooks,
    /// The chain watcher's reads and operator actions.
    pub chains: chain::Chains,
    /// Custodial wallets, withdrawals, approvals and the signer.
    pub custody: custody::Custody,
    pub store: store::DynStore,
    pub config: Arc<config::Config>,
    pub metrics: Arc<metrics::Metrics>,
    /// The per-user API rate limit (`rate_limit.*`).
    pub rate_limit: Arc<identity::rate_limit::ApiRateLimiter>,
    /// What the delivery engine of this process uses, when it runs.
    pub delivery: delivery::Deps,
}

impl AppState {
    /// Opens the database (applying migrations) and loads the master key.
    // Long: every capability's handle, built once in the order they depend on each other.
    pub async fn new(config: config::Config) -> anyhow::Result<Self> {
        let key = Arc::new(master_key::MasterKey::load(&config)?);
        let store = store::open(&config).await?;
        let config = Arc::new(config);
        let policy = identity::scopes::Policy { environment: config.environment };
        // The port through which the domain reaches delivery (notifications::dispatch).
        let handoff = Arc::new(delivery::handoff::Handoff::default());
        let dispatch: Arc<dyn notifications::dispatch::Dispatch> = handoff.clone();
        let secrets = Arc::new(notifications::secret_cache::SecretCache::default());
        let metrics = Arc::new(metrics::Metrics::default());
        let wallets = wallets::Wallets { store: store.clone(), config: config.clone(), policy };
        let webhooks = webhooks::Webhooks {
            store: store.clone(),
            config: config.clone(),
            key: key.clone(),
            policy,
            operations: Arc::new(webhooks::limits::OperationLimiter::new(
                config.webhooks.operations_per_minute,
                (&store, config.rate_limit.shared),
                metrics.clone(),
            )),
            secrets: secrets.clone(),
            wallets: wallets.clone(),
            dispatch: dispatch.clone(),
            metrics: metrics.clone(),
            refusal_notes: Arc::default(),
            held: Arc::default(),
        };
        let chains = chain::Chains {
            store: store.clone(),
            config: config.clone(),
            wallets: wallets.clone(),
            webhooks: webhooks.clone(),
            metrics: metrics.clone(),
        };
        let identity = identity::Identity {
            store: store.clone(),
            config: config.clone(),
            key: key.clone(),
            policy,
            hashing: Arc::new(identity::password::HashLimiter::new(&config.login)),
            refused_clients: Arc::default(),
            throttle_notes: Arc::default(),
            otp_locks: Arc::default(),
            replay: Arc::new(identity::hmac_auth::ReplayMemory::new(config.tokens.hmac_read_replay_capacity)),
            dispatch: dispatch.clone(),
            server_ecdh: Arc::default(),
            webauthn: Arc::new(identity::webauthn::relying_party(&config.passkeys)?),
            sso: Arc::new(identity::sso::Providers::new(&config)?),
        };
        let custody = custody::Custody {
            store: store.clone(),
            config: config.clone(),
            wallets: wallets.clone(),
            identity: identity.clone(),
            keys: custody::Custody::key_store(&config, key.clone())?,
            metrics: metrics.clone(),
            webhooks: webhooks.clone(),
            wake: Arc::new(tokio::sync::watch::channel(0).0),
            policy_hooks: Arc::new(custody::policy::hooks::PolicyHooks::new(&config)?),
            feeds: Arc::new(custody::prices::Feeds::new(&config)?),
        };
        Ok(Self(Arc::new(Shared {
            identity,
            custody,
            webhooks,
            chains,
            wallets,
            rate_limit: Arc::new(identity::rate_limit::ApiRateLimiter::new(
                &config.rate_limit,
                &store,
                metrics.clone(),
            )),
            delivery: delivery::Deps {
                store: store.clone(),
                config: config.clone(),
                key,
                metrics: metrics.clone(),
                secrets,
                handoff,
            },
            metrics,
            store,
            config,
        })))
    }

    /// The scope policy for this deployment.
    pub fn policy(&self) -> identity::scopes::Policy {
        self.identity.policy
    }
}

/// How long shutting down waits for the store to close, after requests and workers finished.
pub const STORE_CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Serves the API on `listener` and runs the delivery engine until `shutdown` completes, then
/// finishes in-flight requests and deliveries.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    identity::password::warm_up();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let role = state.config.role;
    let engine = match role {
        config::Role::Api => None,
        _ => Some(delivery::Engine::new(state.delivery.clone())?.spawn(stop_rx.clone())),
    };
    // The chain watchers run where delivery runs; each chain's lease keeps one watcher per chain.
    let watchers = match role {
        config::Role::Api => Vec::new(),
        _ => chain::spawn::spawn_all(&state.chains, stop_rx.clone()),
    };
    // The signers run where delivery runs; a withdrawal is signed from one state once.
    let signers = match role {
        config::Role::Api => Vec::new(),
        _ => custody::signer::spawn_all(&state.custody, stop_rx.clone()),
    };
    let store = state.store.clone();
    let limits = http::connections::Limits::from_config(&state.config);
    let drain = Duration::from_secs(state.config.request_timeout + 5);
    let metrics = state.metrics.clone();
    let app = http::app_for(state, role != config::Role::Worker);
    http::connections::serve(listener, app, limits, metrics, stop_rx, drain).await;
    if let Some(engine) = engine {
        let _ = engine.await;
    }
    for w in watchers.into_iter().chain(signers) {
        let _ = w.await;
    }
    // A connection still lent when the store closes would hold the exit for ever: the store
    // is given a bound, then the process ends anyway (committed writes are on disk).
    if tokio::time::timeout(STORE_CLOSE_WAIT, store.close()).await.is_err() {
        tracing::warn!(
            seconds = STORE_CLOSE_WAIT.as_secs(),
            "the store did not close in time (a connection still lent); exiting anyway"
        );
    }
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C. The SIGTERM handler is registered when this is called (call
/// it before binding the listener), so a signal that arrives as soon as the port accepts
/// connections stops the server cleanly instead of killing it.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async move {
            match term {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
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
}
