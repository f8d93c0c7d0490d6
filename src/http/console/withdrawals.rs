//! Moving money in the console (docs/withdrawals.md): the Approvals page (pending approvals of
//! the wallets the user sees, approved with a code or a passkey, or rejected), a withdrawal's
//! timeline, and the Withdraw form of a custodial wallet's page. Each calls the same domain
//! functions as the API, as the signed-in user.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::json;

use super::layout::Shown;
use super::{error_response, html, layout, Form, NoFields, Session};
use crate::{
    custody::{
        approvals::{
            self,
            shown::{shown_all, Shown as Seen},
            Answer,
        },
        history,
        withdrawal::{self, RecipientRequest, WithdrawalRequest},
    },
    error::{Error, ErrorName},
    identity::sessions,
    model::custody::{Approval, ApprovalState, ApprovalSubject, Withdrawal},
    types::{ApprovalId, Coin, TxRequestId, WalletId},
    AppState,
};

/// Approvals the page lists (the newest pending ones).
pub const PAGE: u32 = 100;

/// What a withdrawal pays, as a person reads it: the amount in the coin's units with the base
/// units beside it, and each payee, flagged when this wallet never paid it before.
fn pays(w: &Withdrawal, shown: Option<&Seen>) -> Markup {
    let coin = w.token.as_ref().map_or(&w.coin, |t| &t.coin);
    html! {
        @for r in &w.recipients {
            @if let Some(s) = shown {
                strong.amount { (s.amount) " " (coin.as_str()) } " "
                span.muted.base-units { "(" span.mono { (r.amount.to_string()) } " base units)" }
            } @else {
                span.mono { (r.amount.to_string()) } " " (coin.as_str())
            }
            " to " span.mono.payee { (r.address.to_checksum(None)) }
            @if shown.is_some_and(|s| s.first_time_payees.contains(&r.address)) {
                " " span.badge.bad.first-payee { "first payment to this address" }
            }
        }
    }
}

/// A person by name and email, their id on hover.
fn person(p: &crate::custody::approvals::shown::Person) -> Markup {
    html! { span.person title=(p.id.as_str()) { (p.label()) } }
}

/// A withdrawal's value as it was made: `$300.00 (3000 USD per coin)`.
fn usd(u: &crate::model::custody::UsdValue) -> String {
    format!("{} ({} USD per coin)", crate::custody::breaker::dollars(u.cents), u.rate)
}

async fn approvals_page(state: &AppState, session: &Session, shown: Shown) -> Response {
    let q =
        approvals::ListQuery { state: Some(ApprovalState::Pending), limit: Some(PAGE), ..Default::default() };
    let found = match approvals::list(&state.custody, &session.auth, &q).await {
        Ok(found) => approvals::with_withdrawals(&state.custody, found).await,
        Err(e) => Err(e),
    };
    let found = match found {
        Ok(f) => f,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let seen = match shown_all(&state.custody, &found).await {
        Ok(s) => s,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let me = session.auth.user.id.clone();
    let error = shown.error();
    let body = html! {
        (layout::shown(&shown))
        p.muted { "Withdrawals and policy changes waiting for approval on the wallets and enterprises you can see. Approving needs a fresh one-time code or passkey; the initiator cannot approve their own, and may cancel it." }
        @if found.is_empty() { p.muted #no-approvals { "Nothing is waiting for approval." } }
        @for ((a, w), s) in found.iter().zip(&seen) {
            section.panel.approval data-approval-id=(a.id.as_str()) {
                h3 {
                    @match &a.subject { ApprovalSubject::Withdrawal(_) => "Withdrawal from ", ApprovalSubject::PolicyRule(_) => "Policy change on " }
                    @match (&a.wallet_id, &a.enterprise) {
                        (Some(w), _) => { a.wallet href={ "/console/wallets/" (w.as_str()) } { (s.as_ref().and_then(|s| s.wallet_label.as_deref()).unwrap_or(w.as_str())) } }
                        (None, e) => { "enterprise " span.enterprise { (e.as_ref().map_or("", |e| e.as_str())) } " (" (a.coin.as_str()) ")" }
                    }
                    " " (layout::badge(a.state.as_str()))
                }
                dl.facts {
                    @match &a.subject {
                        ApprovalSubject::Withdrawal(_) => {
                            dt { "Pays" } dd.pays { @if let Some(w) = w { (pays(w, s.as_ref())) } }
                            @if let Some(u) = w.as_ref().and_then(|w| w.usd.as_ref()) { dt { "Value" } dd.usd { (usd(u)) } }
                        }
                        ApprovalSubject::PolicyRule(r) => {
                            dt { "Change" } dd.reason { (r.reason) }
                            @if let Some(update) = &r.update { dt { "Rule after" } dd { code { (update.to_string()) } } }
                        }
                    }
                    @if !a.policy.reasons.is_empty() {
                        dt { "Policy" } dd { ul.reasons { @for reason in &a.policy.reasons { li { (reason) } } } }
                    }
                    dt { "Initiator" } dd.initiator {
                        @match s { Some(s) => (person(&s.initiator)), None => span.mono { (a.creator.as_str()) } }
                        @if a.creator == me { " (you)" }
                    }
                    @if let Some(s) = s.as_ref().filter(|s| !s.answered.is_empty()) {
                        dt { "Answered" } dd.answered { @for (p, answer) in &s.answered { (answer) " by " (person(p)) br; } }
                    }
                    dt { "Created" } dd { (layout::time_s(a.created_at)) }
                    dt { "Expires" } dd { (layout::time_s(a.expires_at)) }
                    dt { "Approvals" } dd.approvals { (a.resolvers.iter().filter(|r| r.resolution == "approved").count()) " of " (a.policy.approvals_required(a.approvals_required)) }
                    @if let Some(id) = a.tx_request_id() { dt { "Timeline" } dd { a href={ "/console/withdrawals/" (id.as_str()) } { (id.as_str()) } } }
                }
                (answer_forms(session, a, error))
            }
        }
    };
    html(shown.status(), layout::page(Some(session), "Approvals", "/console/approvals", body))
}

/// Approve (code or passkey) and reject; the initiator sees only Cancel.
fn answer_forms(session: &Session, a: &Approval, error: Option<&super::FieldError>) -> Markup {
    let otp_id = format!("otp-{}", a.id.as_str());
    let base = format!("/console/approvals/{}", a.id.as_str());
    if a.creator == session.auth.user.id {
        return layout::action_button(
            session,
            &format!("{base}/reject"),
            if a.tx_request_id().is_some() { "Cancel withdrawal" } else { "Cancel change" },
            "danger",
            Some(if a.tx_request_id().is_some() {
                "Cancel this withdrawal?"
            } else {
                "Cancel this policy change?"
            }),
        );
    }
    html! {
        form.stack.approve method="post" action={ (base) "/approve" } {
            (layout::csrf(session))
            label { "One-time code" input name="otp" id=(otp_id) inputmode="numeric" autocomplete="one-time-code" required; }
            button.secondary type="button" data-passkey-otp=(otp_id) { "Use a passkey instead" }
            (layout::field_error(error, "otp"))
            button type="submit" { "Approve" }
        }
        (layout::action_button(session, &format!("{base}/reject"), "Reject", "danger", Some("Reject this withdrawal? One rejection ends it.")))
    }
}

/// `GET /console/approvals`.
pub async fn page(State(state): State<AppState>, session: Session) -> Response {
    approvals_page(&state, &session, Shown::Nothing).await
}

/// The approve form's field.
#[derive(Debug, Default, Deserialize)]
pub struct ApproveForm {
    #[serde(default)]
    pub otp: String,
}

async fn answer(
    state: &AppState,
    session: &Session,
    id: &str,
    answer: Answer,
    otp: Option<&str>,
) -> Response {
    let result = match id.parse::<ApprovalId>() {
        Ok(id) => approvals::resolve(&state.custody, &session.auth, None, &id, answer, otp).await,
        Err(_) => Err(Error::not_found(ErrorName::ApprovalNotFound)),
    };
    let shown = Shown::of(result, |a| {
        let change = matches!(a.subject, ApprovalSubject::PolicyRule(_));
        Shown::Notice(match (answer, a.state, change) {
            (Answer::Approved, ApprovalState::Approved, false) => {
                "Approved: the withdrawal goes to the signer.".into()
            }
            (Answer::Approved, ApprovalState::Approved, true) => {
                "Approved: the policy change is applied.".into()
            }
            (Answer::Approved, _, _) => "Approved: it waits for more approvals.".into(),
            (Answer::Rejected, _, false) => "The withdrawal is rejected.".into(),
            (Answer::Rejected, _, true) => "The policy change is rejected.".into(),
        })
    });
    match shown {
        Ok(s) => approvals_page(state, session, s).await,
        Err(e) => error_response(e, Some(session)),
    }
}

/// `POST /console/approvals/{id}/approve`.
pub async fn approve(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<ApproveForm>,
) -> Response {
    answer(&state, &form.session, &id, Answer::Approved, Some(form.fields.otp.trim())).await
}

/// `POST /console/approvals/{id}/reject`.
pub async fn reject(State(state): State<AppState>, Path(id): Path<String>, form: Form<NoFields>) -> Response {
    answer(&state, &form.session, &id, Answer::Rejected, None).await
}

/// `GET /console/withdrawals/{id}`: a withdrawal's states, transactions (replacements too), and
/// the transfers the chain watcher recorded for them with their confirmations.
pub async fn timeline(State(state): State<AppState>, session: Session, Path(id): Path<String>) -> Response {
    let found = match id.parse::<TxRequestId>() {
        Ok(id) => history::timeline(&state.custody, &session.auth, &id).await,
        Err(_) => Err(Error::not_found(ErrorName::TxRequestNotFound)),
    };
    let t = match found {
        Ok(t) => t,
        Err(e) => return error_response(e.into(), Some(&session)),
    };
    let w = &t.record.withdrawal;
    let seen = match &t.approval {
        Some(a) => shown_all(&state.custody, &[(a.clone(), Some(w.clone()))])
            .await
            .ok()
            .and_then(|mut s| s.pop().flatten()),
        None => None,
    };
    let body = html! {
        section.panel #withdrawal {
            h2 { "Withdrawal " (layout::badge(w.state.as_str())) }
            dl.facts {
                dt { "txRequestId" } dd.mono { (w.id.as_str()) }
                dt { "Wallet" } dd { a.wallet href={ "/console/wallets/" (w.wallet_id.as_str()) } { (seen.as_ref().and_then(|s| s.wallet_label.as_deref()).unwrap_or(w.wallet_id.as_str())) } }
                dt { "Pays" } dd.pays { (pays(w, seen.as_ref())) }
                @if let Some(u) = &w.usd { dt { "Value" } dd.usd #usd { (usd(u)) } }
                dt { "From" } dd.mono { (w.from.to_checksum(None)) }
                @if let Some(n) = w.nonce { dt { "Nonce" } dd.mono #nonce { (n) } }
                @if let Some(b) = w.mined_block { dt { "Mined in block" } dd.mono #mined-block { (b) } }
                @if let Some(e) = &w.error { dt { "Error" } dd #withdrawal-error { (e) } }
            }
        }
        section.panel {
            h3 { "Timeline" }
            ol.timeline #timeline { @for (at, what) in steps(&t, seen.as_ref()) { li { (layout::time_s(at)) " " (what) } } }
        }
        (transactions(&t))
    };
    html(StatusCode::OK, layout::page(Some(&session), "Withdrawal", "/console/approvals", body))
}

/// The withdrawal's steps by time: initiated, each answer, each transaction signed, updated;
/// people by name and email when `shown` knows them.
fn steps(t: &history::Timeline, shown: Option<&Seen>) -> Vec<(i64, Markup)> {
    let w = &t.record.withdrawal;
    let who = |id: &crate::types::UserId| {
        let known = shown.and_then(|s| {
            std::iter::once(&s.initiator).chain(s.answered.iter().map(|(p, _)| p)).find(|p| &p.id == id)
        });
        match known {
            Some(p) => person(p),
            None => html! { span.mono { (id.as_str()) } },
        }
    };
    let mut out = vec![(w.created_at, html! { "initiated by " (who(&w.creator)) })];
    if let Some(a) = &t.approval {
        for r in &a.resolvers {
            let at = crate::clock::parse_iso(&r.date).unwrap_or(a.created_at);
            out.push((at, html! { (r.resolution) " by " (who(&r.user)) }));
        }
    }
    for (i, a) in t.record.attempts.iter().enumerate() {
        let what = if i == 0 { "signed" } else { "replaced with higher fees" };
        out.push((a.created_at, html! { (what) ": " span.mono { (a.hash.to_string()) } }));
    }
    out.push((w.updated_at, html! { "now " (layout::badge(w.state.as_str())) }));
    out.sort_by_key(|(at, _)| *at);
    out
}

fn transactions(t: &history::Timeline) -> Markup {
    let w = &t.record.withdrawal;
    html! {
        section.panel {
            h3 { "Transactions" }
            @if t.record.attempts.is_empty() { p.muted { "None signed yet." } }
            @else {
                div.table-wrap { table #attempts {
                    thead { tr { th { "Hash" } th { "maxFeePerGas (wei)" } th { "Tip (wei)" } th { "Signed" } th { "Transfer" } th { "Confirmations" } } }
                    tbody { @for a in &t.record.attempts {
                        @let hash = a.hash.to_string();
                        @let transfer = t.transfers.iter().find(|x| x.txid == hash);
                        tr data-hash=(hash) {
                            td.mono { (hash) @if Some(a.hash) == w.tx_hash { " " span.badge.wait { "current" } } }
                            td.num { (a.max_fee_per_gas) }
                            td.num { (a.priority_fee_per_gas) }
                            td { (layout::time_s(a.created_at)) }
                            td { @match transfer { Some(x) => (layout::badge(x.state.as_str())), None => span.muted { "not seen by the watcher" } } }
                            td.num { @if let Some(x) = transfer { (x.confirmations) } }
                        }
                    } }
                } }
            }
        }
    }
}

/// The Withdraw form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct WithdrawForm {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub amount: String,
    /// A token coin (`hteth:usdc`); blank for the chain's own coin.
    #[serde(default, rename = "tokenName")]
    pub token_name: String,
    #[serde(default)]
    pub comment: String,
    #[serde(default)]
    pub otp: String,
}

/// `POST /console/wallets/{id}/withdraw`: unlocks the session with the code unless it is
/// unlocked, then starts the withdrawal and shows its timeline. A refusal is shown on the
/// wallet's page beside its field.
pub async fn withdraw(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<WithdrawForm>,
) -> Response {
    let Form { session, fields } = form;
    let result = start(&state, &session, &id, &fields).await;
    match result {
        Ok(w) => Redirect::to(&format!("/console/withdrawals/{}", w.id.as_str())).into_response(),
        Err(e) => match super::FieldError::of(e) {
            Ok(mut fe) => {
                // The API names `recipients[0].address`; the form has one payee's fields.
                if let Some(field) = fe.field.strip_prefix("recipients[0].") {
                    fe.field = field.to_string();
                }
                // A wrong code names no field in the API; here it is the form's code.
                if fe.name == "InvalidOtp" {
                    fe.field = "otp".into();
                }
                super::wallets::render(&state, &session, &id, &Default::default(), Some(fe)).await
            }
            Err(e) => error_response(e, Some(&session)),
        },
    }
}

async fn start(state: &AppState, session: &Session, id: &str, f: &WithdrawForm) -> Result<Withdrawal, Error> {
    let wallet: WalletId = id.parse().map_err(|_| Error::not_found(ErrorName::WalletNotFound))?;
    let row = crate::wallets::wallet_row(&state.wallets, &session.auth, &wallet).await?;
    let now = state.store.clock().now();
    let unlocked = session.auth.token.unlock.as_ref().is_some_and(|u| u.expires > now);
    let otp = f.otp.trim();
    if !unlocked {
        sessions::unlock(&state.identity, &session.auth, otp, None).await?;
    }
    let token = f.token_name.trim();
    let coin: Coin = if token.is_empty() {
        row.coin.clone()
    } else {
        token.parse().map_err(|_| Error::invalid_field("tokenName", "an unknown token"))?
    };
    let req = WithdrawalRequest {
        recipients: vec![RecipientRequest {
            address: f.address.trim().to_string(),
            amount: json!(f.amount.trim()),
            token_name: None,
        }],
        comment: Some(f.comment.clone()),
        otp: unlocked.then(|| otp.to_string()),
        idempotency_key: None,
    };
    Ok(withdrawal::initiate(&state.custody, &session.auth, &coin, &wallet, &req).await?.withdrawal)
}
