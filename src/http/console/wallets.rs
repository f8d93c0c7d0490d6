//! A wallet's page (docs/chains.md): its label and balances and, when its coin is a watched
//! chain, its token balances, addresses and transfers, filtered by coin and state and paged.
//! Visible to whoever may see the wallet through the API.

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
};
use maud::{html, Markup};
use serde::Deserialize;

use super::{error_response, html, layout, opt, FieldError, Session};
use crate::{
    chain::{self, WalletView},
    custody::{history, withdrawal::has_permission},
    error::{Error, ErrorName},
    model::chain::{TransferState, PENDING_HEIGHT},
    model::custody::Withdrawal,
    store::TransferFilter,
    types::{Coin, WalletId},
    AppState,
};

/// The page's filters and paging, as the query string gives them.
#[derive(Debug, Default, Deserialize)]
pub struct WalletQuery {
    pub coin: Option<String>,
    pub state: Option<String>,
    #[serde(rename = "prevId")]
    pub prev_id: Option<String>,
}

async fn view(state: &AppState, session: &Session, id: &str, q: &WalletQuery) -> Result<WalletView, Error> {
    let id: WalletId = id.parse().map_err(|_| Error::not_found(ErrorName::WalletNotFound))?;
    let coin = opt::<Coin>("coin", q.coin.as_deref())?;
    let state_filter = match q.state.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(TransferState::parse(s).ok_or_else(|| {
            Error::invalid_field("state", "must be unconfirmed, confirmed, removed or replaced")
        })?),
    };
    let filter = TransferFilter { state: state_filter, ..Default::default() };
    // Transfer ids are 32 hex digits: anything longer is no cursor.
    let after = q.prev_id.as_deref().map(str::trim).filter(|p| !p.is_empty() && p.len() <= 64);
    chain::wallet_view(&state.chains, &session.auth, &id, coin.as_ref(), &filter, after).await
}

/// The wallet page.
pub async fn page(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<WalletQuery>,
) -> Response {
    render(&state, &session, &id, &q, None).await
}

/// The wallet page, with `withdraw_error` beside the Withdraw form's field when a withdrawal
/// was refused.
pub async fn render(
    state: &AppState,
    session: &Session,
    id: &str,
    q: &WalletQuery,
    withdraw_error: Option<FieldError>,
) -> Response {
    let v = match view(state, session, id, q).await {
        Ok(v) => v,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let custody = custodial(state, session, &v).await;
    let status = withdraw_error.as_ref().map_or(StatusCode::OK, |e| e.status);
    let b = &v.wallet.balances;
    let units =
        |u: &Option<crate::types::BaseUnits>| u.as_ref().map(|u| u.to_string()).unwrap_or_else(|| "–".into());
    let body = html! {
        section.panel #wallet {
            h2 { (if v.label.is_empty() { "Wallet" } else { v.label.as_str() }) " " (layout::badge(v.wallet.coin.as_str())) }
            dl.facts {
                dt { "Id" } dd.mono { (v.wallet.id.as_str()) }
                @if let Some(e) = &v.wallet.enterprise { dt { "Enterprise" } dd.mono { (e.as_str()) } }
                @if custody.is_some() { dt { "Policy" } dd { a #policy-link href={ "/console/wallets/" (v.wallet.id.as_str()) "/policy" } { "Rules, history and a dry run" } } }
            }
            div.cards {
                div.card #wallet-balance { div.value.mono { (units(&b.balance)) } div.label { "Balance (base units)" } }
                div.card #wallet-confirmed { div.value.mono { (units(&b.confirmed)) } div.label { "Confirmed" } }
                div.card #wallet-spendable { div.value.mono { (units(&b.spendable)) } div.label { "Spendable" } }
            }
            @if !v.watched {
                p.muted { "Its coin is not a watched chain: balances are as imported or set, and it has no addresses or transfers here (docs/chains.md)." }
            }
            @if !v.tokens.is_empty() {
                h3 { "Tokens" }
                div.table-wrap { table #tokens {
                    thead { tr { th { "Token" } th { "Balance" } th { "Confirmed" } th { "Spendable" } } }
                    tbody { @for (coin, balance, confirmed, spendable) in &v.tokens {
                        tr { td { (coin) } td.num { (balance) } td.num { (confirmed) } td.num { (spendable) } }
                    } }
                } }
            }
        }
        @if let Some((withdrawals, spender)) = &custody {
            @if *spender { (withdraw_form(session, &v.wallet.id, &v.coins.iter().skip(1).map(|c| c.as_str()).collect::<Vec<_>>(), withdraw_error.as_ref())) }
            (recent_withdrawals(withdrawals))
        }
        @if v.watched {
            (addresses(&v))
            (transfers(&v, q))
        }
    };
    html(status, layout::page(Some(session), "Wallet", "/console/wallets", body))
}

/// A custodial wallet's latest withdrawals and whether the user may spend from it; `None` for
/// any other wallet.
async fn custodial(state: &AppState, session: &Session, v: &WalletView) -> Option<(Vec<Withdrawal>, bool)> {
    let record: serde_json::Value = serde_json::from_str(v.wallet.record.as_str()).unwrap_or_default();
    if record.get("type").and_then(|t| t.as_str()) != Some("custodial") {
        return None;
    }
    let spender = has_permission(&record, session.auth.user.id.as_str(), &["spend", "admin"]);
    let found = history::list(&state.custody, &session.auth, &v.wallet.id, None, RECENT_WITHDRAWALS).await;
    Some((found.unwrap_or_default().into_iter().map(|r| r.withdrawal).collect(), spender))
}

/// Withdrawals a custodial wallet's page lists (the newest).
pub const RECENT_WITHDRAWALS: u32 = 20;

fn recent_withdrawals(list: &[Withdrawal]) -> Markup {
    html! {
        section.panel {
            h3 { "Withdrawals" }
            @if list.is_empty() { p.muted { "None yet." } }
            @else {
                div.table-wrap { table #withdrawals {
                    thead { tr { th { "Created" } th { "Amount (base units)" } th { "To" } th { "State" } th {} } }
                    tbody { @for w in list {
                        tr data-tx-request-id=(w.id.as_str()) {
                            td { (layout::time_s(w.created_at)) }
                            td.num { (w.total().to_string()) " " (w.token.as_ref().map_or(&w.coin, |t| &t.coin).as_str()) }
                            td.mono { @for r in &w.recipients { (r.address.to_checksum(None)) } }
                            td { (layout::badge(w.state.as_str())) }
                            td { a href={ "/console/withdrawals/" (w.id.as_str()) } { "Timeline" } }
                        }
                    } }
                } }
            }
        }
    }
}

/// The Withdraw form of a custodial wallet's page, for users with spend rights.
pub fn withdraw_form(
    session: &Session,
    wallet: &WalletId,
    tokens: &[&str],
    error: Option<&FieldError>,
) -> Markup {
    let fields = ["address", "amount", "tokenName", "comment", "otp"];
    let options: Vec<(&str, &str)> = tokens.iter().map(|t| (*t, *t)).collect();
    html! {
        section.panel #withdraw {
            h3 { "Withdraw" }
            p.muted { "The withdrawal waits for the wallet's approvers; your code also unlocks this session for spending." }
            (layout::form_error(error, &fields))
            form.stack method="post" action={ "/console/wallets/" (wallet.as_str()) "/withdraw" } {
                (layout::csrf(session))
                label { "To address" input name="address" id="withdraw-address" required; }
                (layout::field_error(error, "address"))
                label { "Amount (base units)" input name="amount" id="withdraw-amount" inputmode="numeric" required; }
                (layout::field_error(error, "amount"))
                @if !options.is_empty() { label { "Token (blank: the chain's coin) " (layout::select("tokenName", &options, None)) } }
                label { "Comment" input name="comment" id="withdraw-comment" maxlength="256"; }
                label { "One-time code" input name="otp" id="withdraw-otp" inputmode="numeric" autocomplete="one-time-code" required; }
                button.secondary type="button" data-passkey-otp="withdraw-otp" { "Use a passkey instead" }
                (layout::field_error(error, "otp"))
                button type="submit" { "Withdraw" }
            }
        }
    }
}

/// The wallet's addresses (the first [`chain::views::WALLET_ADDRESSES`]).
fn addresses(v: &WalletView) -> Markup {
    html! {
        section.panel {
            h3 { "Addresses" }
            @if v.addresses.is_empty() { p.muted { "None: the record names no address and none was added." } }
            @else {
                div.table-wrap { table #addresses {
                    thead { tr { th { "Address" } th { "Label" } } }
                    tbody { @for a in &v.addresses {
                        tr { td.mono { (a.address) } td { (a.label.as_deref().unwrap_or("")) } }
                    } }
                } }
                @if v.more_addresses {
                    p.muted { "The first " (chain::views::WALLET_ADDRESSES) " are shown; " code { "GET /api/v2/" (v.wallet.coin.as_str()) "/wallet/" (v.wallet.id.as_str()) "/addresses" } " pages through all." }
                }
            }
        }
    }
}

/// A page of the wallet's transfers, with the coin and state filters.
fn transfers(v: &WalletView, q: &WalletQuery) -> Markup {
    let base = format!("/console/wallets/{}", v.wallet.id.as_str());
    let states: Vec<(&str, &str)> = TransferState::ALL.iter().map(|s| (s.as_str(), s.as_str())).collect();
    let coins: Vec<(&str, &str)> = v.coins.iter().map(|c| (c.as_str(), c.as_str())).collect();
    let filters = layout::query(&[("coin", q.coin.as_deref()), ("state", q.state.as_deref())]);
    let paged = if filters.is_empty() { base.clone() } else { format!("{base}?{filters}") };
    html! {
        section.panel {
            h3 { "Transfers" }
            form.filters method="get" action=(base) {
                label { "Coin " (layout::select("coin", &coins, q.coin.as_deref())) }
                label { "State " (layout::select("state", &states, q.state.as_deref())) }
                button type="submit" { "Filter" }
            }
            @if v.transfers.is_empty() { p.muted { "None yet." } }
            @else {
                div.table-wrap { table #transfers {
                    thead { tr { th { "Height" } th { "Date" } th { "Transaction" } th { "Type" } th { "Value (base units)" } th { "Fee" } th { "Confirmations" } th { "State" } } }
                    tbody { @for t in &v.transfers {
                        tr data-transfer-id=(t.id) {
                            td.num { @if t.height == PENDING_HEIGHT { span.muted { "pending" } } @else { (t.height) } }
                            td { (layout::time_s(t.date)) }
                            td.mono { (layout::truncated(&t.txid, 20)) }
                            td { (t.kind()) }
                            td.num { (t.value) }
                            td.num { (t.fee) }
                            td.num { (t.confirmations) }
                            td { (layout::badge(t.state.as_str())) }
                        }
                    } }
                } }
                (layout::pager(&paged, "prevId", v.next.as_deref()))
            }
        }
    }
}
