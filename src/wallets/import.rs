//! `custodian wallet import`: §2.1 records from a JSON array or NDJSON, validated one by one
//! and upserted in batches, each batch in one transaction. A bad record is reported and
//! skipped; it never aborts the import or half-writes a batch.

use serde::Serialize;
use serde_json::Value;

use super::model::{validate, WalletRow};
use crate::store::DynStore;

/// Records per transaction.
pub const BATCH_SIZE: usize = 500;

/// One skipped record.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// 0-based position in a JSON array.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// 1-based line of an NDJSON file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The field at fault (empty for the record as a whole).
    pub field: String,
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ImportSummary {
    /// New wallets.
    pub imported: u64,
    /// Wallets that existed and were replaced.
    pub updated: u64,
    pub rejected: Vec<Rejected>,
}

/// A record with where it came from.
struct Item {
    index: Option<usize>,
    line: Option<usize>,
    parsed: Result<Value, String>,
}

fn items(text: &str) -> anyhow::Result<Vec<Item>> {
    if text.trim_start().starts_with('[') {
        let array: Vec<Value> = serde_json::from_str(text)
            .map_err(|e| anyhow::anyhow!("the file starts with '[' but is not a JSON array: {e}"))?;
        return Ok(array
            .into_iter()
            .enumerate()
            .map(|(i, v)| Item { index: Some(i), line: None, parsed: Ok(v) })
            .collect());
    }
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Item {
            index: None,
            line: Some(i + 1),
            parsed: serde_json::from_str(l).map_err(|e| format!("not valid JSON: {e}")),
        })
        .collect())
}

/// Imports `text` (a JSON array or NDJSON). `progress` is called with (done, total) after each
/// batch. Errors only when the text as a whole cannot be read or the database fails; then the
/// batches already committed stay, and the error says how far it got.
pub async fn import(
    store: &DynStore,
    text: &str,
    mut progress: impl FnMut(usize, usize),
) -> anyhow::Result<ImportSummary> {
    let items = items(text)?;
    let total = items.len();
    let mut summary = ImportSummary::default();
    let mut batch: Vec<WalletRow> = Vec::with_capacity(BATCH_SIZE);
    let mut done = 0;
    for item in items {
        done += 1;
        let id =
            item.parsed.as_ref().ok().and_then(|v| v.get("id")).and_then(Value::as_str).map(str::to_string);
        let row = match item.parsed {
            Ok(v) => validate(&v).map_err(|e| (e.field, e.reason)),
            Err(e) => Err((String::new(), e)),
        };
        match row {
            Ok(row) => batch.push(row),
            Err((field, reason)) => {
                summary.rejected.push(Rejected { index: item.index, line: item.line, id, field, reason })
            }
        }
        if batch.len() == BATCH_SIZE {
            flush(store, &mut batch, &mut summary, done).await?;
            progress(done, total);
        }
    }
    flush(store, &mut batch, &mut summary, done).await?;
    progress(total, total);
    Ok(summary)
}

async fn flush(
    store: &DynStore,
    batch: &mut Vec<WalletRow>,
    summary: &mut ImportSummary,
    done: usize,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = batch.iter().map(|w| w.id.as_str()).collect();
    let entry = crate::audit::EntryExt::data(
        crate::audit::entry("wallet.imported"),
        serde_json::json!({ "walletIds": ids, "by": "operator" }),
    );
    let (inserted, updated) = store.upsert_wallets(batch, &[entry]).await.map_err(|e| {
        anyhow::anyhow!(
            "database error in the batch ending at record {done}: {e} ({} imported, {} updated before it)",
            summary.imported,
            summary.updated
        )
    })?;
    summary.imported += inserted;
    summary.updated += updated;
    batch.clear();
    Ok(())
}
