//! `GET /console/chains` (service admins, docs/chains.md): each watched chain's checkpoint,
//! the node's head and the lag, the last reorg, a halt and how to clear it, what is watched,
//! and the latest transfers.

use axum::{extract::State, http::StatusCode, response::Response};
use maud::html;

use super::{error_response, html, layout, Session};
use crate::{chain, AppState};

/// The Chains page.
pub async fn page(State(state): State<AppState>, session: Session) -> Response {
    let views = match chain::views(&state.chains, &session.auth).await {
        Ok(v) => v,
        Err(e) => return error_response(e.into(), Some(&session)),
    };
    let at = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_else(|| "–".into());
    let body = html! {
        @if views.is_empty() {
            p.muted { "No chain is configured. Add a " code { "[chains.<coin>]" } " section to the configuration file (docs/chains.md)." }
        }
        @for v in &views {
            section.panel id={ "chain-" (v.status.chain) } {
                h2 { (v.status.chain) " " @if v.status.halted.is_some() { (layout::badge("halted")) } @else { (layout::badge("active")) } }
                @if let Some(why) = &v.status.halted { p.error { "Stopped: " (why) } }
                @if let Some(why) = &v.status.error { p.error id="chain-error" { "The last round failed, retrying: " (why) } }
                div.cards {
                    div.card id="chain-height" { div.value { (at(v.status.height)) } div.label { "Block read" } }
                    div.card id="chain-head" { div.value { (at(v.status.node_head)) } div.label { "Node's head" } }
                    div.card id="chain-lag" { div.value { (v.status.lag()) } div.label { "Lag, blocks" } }
                    div.card id="chain-speed" { div.value { (v.status.blocks_per_second.map(|r| format!("{r:.1}")).unwrap_or_else(|| "–".into())) } div.label { "Blocks/s" } }
                    div.card { div.value { (at(v.status.last_reorg_depth)) } div.label { "Last reorg depth" } }
                    div.card { div.value { (v.wallets) } div.label { "Wallets" } }
                    div.card { div.value { (v.added_addresses) } div.label { "Added addresses" } }
                }
                p.muted {
                    "Confirmed at " (v.confirmations) " blocks; reorgs followed up to " (v.reorg_depth) " blocks deep."
                    @if let Some(t) = v.status.last_reorg_at { " Last reorg " (layout::time_s(t)) "." }
                }
                h3 { "Latest transfers" }
                @if v.recent.is_empty() { p.muted { "None yet." } }
                @else {
                    div.table-wrap { table.transfers {
                        thead { tr { th { "Height" } th { "Coin" } th { "Wallet" } th { "Transaction" } th { "Value (base units)" } th { "State" } } }
                        tbody { @for t in &v.recent {
                            tr {
                                td.num { @if t.height == crate::model::chain::PENDING_HEIGHT { span.muted { "pending" } } @else { (t.height) } }
                                td { (t.coin.as_str()) }
                                td.mono { a href={ "/console/wallets/" (t.wallet_id.as_str()) } { (t.wallet_id.as_str()) } }
                                td.mono { (layout::truncated(&t.txid, 20)) }
                                td.num { (t.value) }
                                td { (layout::badge(t.state.as_str())) }
                            }
                        } }
                    } }
                }
            }
        }
    };
    html(StatusCode::OK, layout::page(Some(&session), "Chains", "/console/chains", body))
}
