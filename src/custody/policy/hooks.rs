//! `webhook` policy rules (docs/policy.md#webhook-rules): the proposed withdrawal is POSTed to
//! the operator's URL, signed with the enterprise's webhook secret (`X-Signature-SHA256`, as
//! notifications are), through the SSRF guard delivery uses. A `200` within
//! `withdrawals.policy_webhook_timeout_ms` passes; any other answer, no answer in time, a refused
//! address or no free slot (`withdrawals.policy_webhook_concurrency`) fires the rule: a policy
//! check fails closed.

use std::{sync::Arc, time::Duration};

use alloy_primitives::U256;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::custody::{
    policy::eval::Answers,
    policy::{Condition, Rule},
    Custody,
};
use crate::{
    config::Config,
    delivery::ssrf::Guard,
    model::custody::Recipient,
    types::{Coin, EnterpriseId, TxRequestId, UserId, WalletId},
};

/// Longest answer body read from a policy webhook, bytes (it is not kept; its status decides).
const MAX_ANSWER: usize = 4_096;

/// The HTTP client and the slots of policy webhook checks.
pub struct PolicyHooks {
    client: reqwest::Client,
    guard: Arc<Guard>,
    slots: Semaphore,
    timeout: Duration,
}

impl std::fmt::Debug for PolicyHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyHooks").field("timeout", &self.timeout).finish()
    }
}

impl PolicyHooks {
    /// From `withdrawals.policy_webhook_*` and `delivery.allowed_cidrs`.
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let guard = Arc::new(Guard { allowed: config.delivery.allowed_cidrs.clone() });
        let timeout = Duration::from_millis(config.withdrawals.policy_webhook_timeout_ms);
        let agent = concat!("Custodian-Policy/", env!("CARGO_PKG_VERSION"));
        let client = crate::delivery::ssrf::guarded_client(guard.clone(), agent, timeout)?;
        let slots =
            Semaphore::new(usize::try_from(config.withdrawals.policy_webhook_concurrency).unwrap_or(1));
        Ok(Self { client, guard, slots, timeout })
    }
}

/// What a policy webhook is told: the withdrawal proposed and where the check stands.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// `initiation`, `signing` or `dryRun`.
    pub stage: &'static str,
    pub wallet: &'a WalletId,
    pub coin: &'a Coin,
    pub enterprise: Option<&'a EnterpriseId>,
    /// None in a dry run.
    pub tx_request_id: Option<&'a TxRequestId>,
    pub initiator: &'a UserId,
    pub recipients: &'a [Recipient],
    /// Base units of `coin`.
    pub total: U256,
    /// The wallet's `approvalsRequired`; `None` before signing (the approvals were given).
    pub approvals_required: Option<u32>,
}

/// Asks the URL of every `webhook` rule among `rules`, side by side.
pub async fn ask(svc: &Custody, rules: &[Rule], asked: &Asked<'_>) -> Answers {
    let hooks: Vec<(&str, &str)> = rules
        .iter()
        .filter_map(|r| match &r.condition {
            Condition::Webhook(url) => Some((r.id.as_str(), url.as_str())),
            _ => None,
        })
        .collect();
    if hooks.is_empty() {
        return Answers::new();
    }
    let secret = match asked.enterprise {
        Some(e) => svc.webhooks.secrets.get(&svc.store, &svc.webhooks.key, e).await.ok().flatten(),
        None => None,
    };
    let secret = secret.map(|s| s.current);
    let secret = secret.as_deref();
    let checks = hooks.iter().map(|&(id, url)| async move {
        let verdict = one(svc, id, url, asked, secret).await;
        (id.to_string(), verdict.err().map(|why| format!("rule {id}: the policy webhook {why}")))
    });
    futures_util::future::join_all(checks).await.into_iter().collect()
}

/// One rule's check: `Ok` when its URL answered `200` in time.
async fn one(
    svc: &Custody,
    id: &str,
    url: &str,
    asked: &Asked<'_>,
    secret: Option<&str>,
) -> Result<(), String> {
    let hooks = &svc.policy_hooks;
    let mut body = json!({
        "type": "policyCheck", "stage": asked.stage, "ruleId": id, "walletId": asked.wallet.as_str(),
        "coin": asked.coin.as_str(), "enterpriseId": asked.enterprise.map(EnterpriseId::as_str),
        "txRequestId": asked.tx_request_id.map(TxRequestId::as_str), "initiator": asked.initiator.as_str(),
        "recipients": asked.recipients.iter().map(|r| json!({ "address": r.address.to_checksum(None), "amount": r.amount.to_string() })).collect::<Vec<Value>>(),
        "amount": asked.total.to_string(),
    });
    if let Some(n) = asked.approvals_required {
        body["approvalsRequired"] = json!(n);
    }
    let body = body.to_string();
    let parsed = url::Url::parse(url).map_err(|e| format!("URL does not parse: {e}"))?;
    crate::net::check_literal(&hooks.guard, &parsed)
        .map_err(|_| "address is refused by the SSRF guard".to_string())?;
    let ms = hooks.timeout.as_millis();
    let check = async {
        let _slot = hooks.slots.acquire().await.map_err(|_| "check was shut down".to_string())?;
        let mut req = hooks
            .client
            .post(parsed)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-timestamp", svc.store.clock().now().to_string());
        if let Some(s) = secret {
            req = req.header(
                "x-signature-sha256",
                crate::notifications::signing::bitgo_signature(s, body.as_bytes()),
            );
        }
        let mut res = req
            .body(body.clone())
            .send()
            .await
            .map_err(|e| format!("could not be reached: {}", e.without_url()))?;
        // Read a little of the body so the connection can be reused; the status decides.
        let mut read = 0;
        while read < MAX_ANSWER {
            match res.chunk().await {
                Ok(Some(c)) => read += c.len(),
                _ => break,
            }
        }
        match res.status().as_u16() {
            200 => Ok(()),
            other => Err(format!("answered {other}")),
        }
    };
    tokio::time::timeout(hooks.timeout, check).await.map_err(|_| format!("did not answer within {ms} ms"))?
}
