//! A wallet's Policy page (docs/policy.md): its rules and its enterprise's, their history, the loosenings waiting
//! for approval, and a dry-run form that says what the rules would make of a withdrawal.
//! Visible to whoever may see the wallet; rules are written through the API.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use super::{error_response, html, layout, Form, Session};
use crate::{
    custody::{
        approvals,
        policy::{enterprise as policy_enterprise, rules as policy_rules},
        withdrawal::RecipientRequest,
    },
    error::{Error, ErrorName},
    model::custody::{ApprovalState, ApprovalSubject},
    types::WalletId,
    AppState,
};

/// The dry-run form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct DryRunForm {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub amount: String,
}

/// `GET /console/wallets/{id}/policy`.
pub async fn page(State(state): State<AppState>, session: Session, Path(id): Path<String>) -> Response {
    render(&state, &session, &id, None).await
}

/// `POST /console/wallets/{id}/policy/evaluate`: the page with the dry run's answer.
pub async fn evaluate(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<DryRunForm>,
) -> Response {
    let Form { session, fields } = form;
    render(&state, &session, &id, Some(&fields)).await
}

async fn render(state: &AppState, session: &Session, id: &str, dry: Option<&DryRunForm>) -> Response {
    let Ok(wallet) = id.parse::<WalletId>() else {
        return error_response(Error::not_found(ErrorName::WalletNotFound).into(), Some(session));
    };
    let row = match crate::wallets::wallet_row(&state.wallets, &session.auth, &wallet).await {
        Ok(row) => row,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let record: Value = serde_json::from_str(row.record.as_str()).unwrap_or_default();
    let rules = match policy_enterprise::all_rules(&state.custody, &row, &record).await {
        Ok(rules) => rules,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let history = policy_rules::history(&state.custody, &session.auth, &row.coin, &row.id).await;
    let q = approvals::ListQuery {
        wallet: Some(row.id.clone()),
        state: Some(ApprovalState::Pending),
        ..Default::default()
    };
    let waiting = approvals::list(&state.custody, &session.auth, &q).await;
    let (history, waiting) = match (history, waiting) {
        (Ok(h), Ok(w)) => (h, w),
        (Err(e), _) | (_, Err(e)) => return error_response(e.into(), Some(session)),
    };
    let answer = match dry {
        Some(f) => {
            let recipient = RecipientRequest {
                address: f.address.trim().to_string(),
                amount: Value::String(f.amount.trim().to_string()),
                token_name: None,
            };
            Some(policy_rules::dry_run(&state.custody, &session.auth, &row.coin, &row.id, &[recipient]).await)
        }
        None => None,
    };
    // The dry run refuses only a bad recipient: a 400, as the API answers.
    let status = if matches!(answer, Some(Err(_))) { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    let body = html! {
        section.panel #policy {
            h2 { "Policy of " a href={ "/console/wallets/" (row.id.as_str()) } { (row.id.as_str()) } }
            p.muted { "Every rule is evaluated and a deny wins; a tightening applies at once, a loosening waits for other admins. Rules are written through the API (docs/policy.md)." }
            @if rules.is_empty() { p.muted #no-rules { "No rules: every withdrawal waits only for the wallet's approvers." } }
            @else {
                div.table-wrap { table #rules {
                    thead { tr { th { "Rule" } th { "Of" } th { "Type" } th { "Condition" } th { "Action" } th { "Locked from" } } }
                    tbody { @for r in &rules {
                        @let v = r.to_json();
                        tr data-rule-id=(r.id) {
                            td.mono { (r.id) }
                            td { @if r.id.starts_with(policy_enterprise::PREFIX) { "the enterprise" } @else { "the wallet" } }
                            td { (r.kind().as_str()) }
                            td.mono { (v["condition"].to_string()) }
                            td { (v["action"]["type"].as_str().unwrap_or_default()) @if !r.user_ids.is_empty() { " by " (r.user_ids.len()) " named" } }
                            td { @if let Some(at) = r.lock_date { (layout::time_s(at)) } }
                        }
                    } }
                } }
            }
        }
        (dry_run(session, &row.id, dry, answer.as_ref()))
        section.panel #pending-changes {
            h3 { "Changes waiting for approval" }
            @let changes: Vec<_> = waiting.iter().filter_map(|a| match &a.subject { ApprovalSubject::PolicyRule(r) => Some((a, r)), _ => None }).collect();
            @if changes.is_empty() { p.muted { "None." } }
            @for (a, r) in &changes {
                div.change data-approval-id=(a.id.as_str()) {
                    p { (r.reason) " " a href="/console/approvals" { "answer" } }
                }
            }
        }
        (history_table(&history))
    };
    html(status, layout::page(Some(session), "Policy", "/console/wallets", body))
}

/// The dry-run form, and its answer when one was asked.
fn dry_run(
    session: &Session,
    wallet: &WalletId,
    asked: Option<&DryRunForm>,
    answer: Option<&Result<Value, Error>>,
) -> Markup {
    html! {
        section.panel #dry-run {
            h3 { "What would happen?" }
            form.stack method="post" action={ "/console/wallets/" (wallet.as_str()) "/policy/evaluate" } {
                (layout::csrf(session))
                label { "To address" input name="address" id="dry-address" value=(asked.map(|a| a.address.as_str()).unwrap_or_default()) required; }
                label { "Amount (base units)" input name="amount" id="dry-amount" inputmode="numeric" value=(asked.map(|a| a.amount.as_str()).unwrap_or_default()) required; }
                button type="submit" { "Evaluate" }
            }
            @match answer {
                Some(Ok(v)) => {
                    div #dry-answer {
                        p { "Outcome: " (layout::badge(v["outcome"].as_str().unwrap_or_default())) " · approvals required: " (v["approvalsRequired"].to_string()) }
                        @if let Some(reasons) = v["reasons"].as_array() {
                            ul.reasons { @for r in reasons { li { (r.as_str().unwrap_or_default()) } } }
                        }
                    }
                }
                Some(Err(e)) => { p.field-error #dry-answer { (e.to_string()) } }
                None => {}
            }
        }
    }
}

/// The wallet's policy history, newest first.
fn history_table(history: &[crate::model::audit::AuditEntry]) -> Markup {
    html! {
        section.panel #history {
            h3 { "History" }
            @if history.is_empty() { p.muted { "No change yet." } }
            @else {
                div.table-wrap { table {
                    thead { tr { th { "When" } th { "What" } th { "Rule" } th { "By" } } }
                    tbody { @for e in history {
                        tr {
                            td { (layout::time_s(e.date_ms / 1000)) }
                            td { (e.entry_type.as_str()) }
                            td.mono { (e.data["ruleId"].as_str().unwrap_or_default()) }
                            td.mono { (e.user_id.as_ref().map(|u| u.as_str()).unwrap_or_default()) }
                        }
                    } }
                } }
            }
        }
    }
}
