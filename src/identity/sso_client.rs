//! The identity providers' side of single sign-on (docs/sso.md#the-provider): the HTTP client
//! every call to a provider goes through (the SSRF guard, no redirects, bounded in time and
//! number), and a provider discovered as an `openidconnect` client.

use std::{sync::Arc, time::Duration};

use openidconnect::{
    core::{CoreClient, CoreProviderMetadata},
    AdditionalClaims, ClientId, ClientSecret, IssuerUrl, RedirectUrl,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::Semaphore;

use super::{sso_settings, Identity};
use crate::{
    config::Config,
    error::{Error, ErrorName, Result},
    net::Guard,
    store::SsoSettingRow,
};

/// The HTTP client for identity providers: no redirects, no proxy, the SSRF guard of deliveries
/// (`delivery.allowed_cidrs`), `sso.concurrency` calls at once, each within `sso.timeout_ms`.
pub struct Providers {
    pub(super) http: Guarded,
    slots: Semaphore,
    timeout: Duration,
}

/// The HTTP client `openidconnect` calls: names are checked by the guarded resolver, and a URL
/// whose host is an address (which no resolver sees) by the same guard, before any connection;
/// so neither the issuer an admin sets nor the endpoints its discovery names reach a private
/// address unless `delivery.allowed_cidrs` allows it.
pub(super) struct Guarded {
    http: reqwest::Client,
    guard: Arc<Guard>,
    /// Largest answer read from a provider, bytes (`sso.max_answer_bytes`): a hostile one's
    /// endless body is cut off, not held.
    max_bytes: usize,
}

impl<'c> openidconnect::AsyncHttpClient<'c> for Guarded {
    type Error = openidconnect::HttpClientError<reqwest::Error>;
    type Future = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = std::result::Result<openidconnect::HttpResponse, Self::Error>>
                + Send
                + 'c,
        >,
    >;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        use openidconnect::HttpClientError;
        Box::pin(async move {
            let other = |e: String| HttpClientError::Other(e);
            let url = url::Url::parse(&request.uri().to_string()).map_err(|e| other(e.to_string()))?;
            crate::net::check_literal(&self.guard, &url).map_err(|e| other(e.to_string()))?;
            let (parts, body) = request.into_parts();
            let sent = self.http.request(parts.method, url).headers(parts.headers).body(body).send().await;
            let mut res = sent.map_err(|e| HttpClientError::Reqwest(Box::new(e.without_url())))?;
            let mut answer = openidconnect::http::Response::builder().status(res.status());
            for (name, value) in res.headers() {
                answer = answer.header(name, value);
            }
            let mut bytes = Vec::new();
            while let Some(chunk) =
                res.chunk().await.map_err(|e| HttpClientError::Reqwest(Box::new(e.without_url())))?
            {
                if bytes.len() + chunk.len() > self.max_bytes {
                    return Err(other(format!(
                        "the provider's answer is over {} bytes (sso.max_answer_bytes)",
                        self.max_bytes
                    )));
                }
                bytes.extend_from_slice(&chunk);
            }
            answer.body(bytes).map_err(HttpClientError::Http)
        })
    }
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers").field("timeout", &self.timeout).finish()
    }
}

impl Providers {
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let guard = Arc::new(Guard { allowed: config.delivery.allowed_cidrs.clone() });
        let timeout = Duration::from_millis(config.sso.timeout_ms);
        let agent = concat!("Custodian-SSO/", env!("CARGO_PKG_VERSION"));
        let http = Guarded {
            http: crate::delivery::ssrf::guarded_client(guard.clone(), agent, timeout)?,
            guard,
            max_bytes: config.sso.max_answer_bytes,
        };
        let slots = Semaphore::new(usize::try_from(config.sso.concurrency).unwrap_or(1));
        Ok(Self { http, slots, timeout })
    }

    /// `call`, once a slot is free, within the timeout (the wait included). A provider's error
    /// text is cut to 200 characters: it is not ours to copy whole into a page or the log.
    pub(super) async fn bounded<T, E: std::error::Error>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = std::result::Result<T, E>>,
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let _slot = match tokio::time::timeout_at(deadline, self.slots.acquire()).await {
            Ok(Ok(slot)) => slot,
            _ => return Err(failed(&format!("{what}: no free slot to call the provider"))),
        };
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(failed(&format!("{what}: {}", crate::text::clip(chain(&e), 300)))),
            Err(_) => Err(failed(&format!("{what}: the provider did not answer in time"))),
        }
    }

    /// The provider of `row`, discovered now, as a client sending the browser back to
    /// `redirect_uri`.
    pub(super) async fn client(
        &self,
        svc: &Identity,
        row: &SsoSettingRow,
        redirect_uri: &str,
    ) -> Result<Client> {
        let issuer =
            IssuerUrl::new(row.issuer.clone()).map_err(|_| failed("the provider's issuer is not a URL"))?;
        let metadata =
            self.bounded("discovery", CoreProviderMetadata::discover_async(issuer, &self.http)).await?;
        let secret = sso_settings::secret_of(svc, row)?;
        let redirect = RedirectUrl::new(redirect_uri.to_string()).map_err(|e| Error::Internal(e.into()))?;
        Ok(CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(row.client_id.clone()),
            Some(ClientSecret::new(secret)),
        )
        .set_redirect_uri(redirect))
    }
}

pub(super) type Client = CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// Userinfo claims beyond the standard ones (the groups claim is named by the setting).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Extra {
    #[serde(flatten)]
    pub(super) rest: Map<String, Value>,
}

impl AdditionalClaims for Extra {}

/// An error and its sources, `: `-joined (`openidconnect`'s own text says little alone).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

pub(super) fn failed(why: &str) -> Error {
    Error::Unauthenticated { name: ErrorName::SsoFailed, message: format!("single sign-on failed: {why}") }
}
