//! The SSRF guard at delivery (docs/decisions.md#webhooks): names are resolved once by [`GuardedResolver`],
//! which refuses any address `crate::net::Guard` does not permit; the HTTP client connects only
//! to the addresses it returned, so a second DNS answer (rebinding) cannot redirect a checked
//! request. Literal addresses are checked with `check_literal` (also at registration).

use std::{net::SocketAddr, sync::Arc};

pub use crate::net::{check_literal, Guard, Refused};

/// A DNS resolver for the HTTP client that refuses a name when any address it resolves to is
/// not permitted by the [`Guard`].
pub struct GuardedResolver {
    pub guard: Arc<Guard>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(Box::new(Refused::NoAddress(host)) as Box<dyn std::error::Error + Send + Sync>);
            }
            if let Some(bad) = addrs.iter().find(|a| !guard.permits(a.ip())) {
                return Err(Box::new(Refused::Blocked { host, ip: bad.ip() }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An HTTP client for URLs a customer names (a policy webhook, an identity provider): every
/// name resolved through [`GuardedResolver`], no redirects followed, no proxy, `timeout` to
/// connect, sending `user_agent`.
pub fn guarded_client(
    guard: Arc<Guard>,
    user_agent: &str,
    timeout: std::time::Duration,
) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(user_agent)
        .connect_timeout(timeout)
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver { guard }))
        .build()
}
