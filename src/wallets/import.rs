//! `custodian wallet import`: §2.1 records from a JSON array or NDJSON, validated one by one
//! and upserted in batches, each batch in one transaction. A bad record is reported with every
//! violation and skipped; it never aborts the import or half-writes a batch. Fields §2.1 does
//! not list are kept (docs/decisions.md#real-wallet-records), unless `strict`. A wallet's `coin` and `type` never change
//! unless `allow_identity_change`, which the audit log records.

use crate::model::audit::AuditType;
use serde::Serialize;
use serde_json::Value;

use crate::model::wallet::{validate, WalletRow};
use crate::{store::DynStore, types::WalletId};

/// Records per transaction.
pub const BATCH_SIZE: usize = 500;

/// How an import treats records.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// Refuse fields §2.1 does not list (`--strict`).
    pub strict: bool,
    /// Let a record change the `coin` or `type` of an existing wallet
    /// (`--allow-identity-change`).
    pub allow_identity_change: bool,
}

/// One violation of a rejected record.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Violation {
    /// The field at fault (empty for the record as a whole).
    pub field: String,
    pub reason: String,
}

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
    /// The first violation's field and reason (kept for readers of earlier summaries).
    pub field: String,
    pub reason: String,
    /// Every violation of the record.
    pub violations: Vec<Violation>,
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

/// Where a record came from.
#[derive(Debug, Clone, Copy)]
struct Source {
    index: Option<usize>,
    line: Option<usize>,
}

/// A record with where it came from.
struct Item {
    source: Source,
    parsed: Result<Value, String>,
}

fn items(text: &str) -> anyhow::Result<Vec<Item>> {
    if text.trim_start().starts_with('[') {
        let array: Vec<Value> = serde_json::from_str(text)
            .map_err(|e| anyhow::anyhow!("the file starts with '[' but is not a JSON array: {e}"))?;
        return Ok(array
            .into_iter()
            .enumerate()
            .map(|(i, v)| Item { source: Source { index: Some(i), line: None }, parsed: Ok(v) })
            .collect());
    }
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Item {
            source: Source { index: None, line: Some(i + 1) },
            parsed: serde_json::from_str(l).map_err(|e| format!("not valid JSON: {e}")),
        })
        .collect())
}

impl ImportSummary {
    fn reject(&mut self, source: Source, id: Option<String>, violations: Vec<Violation>) {
        let first =
            violations.first().cloned().unwrap_or(Violation { field: String::new(), reason: String::new() });
        self.rejected.push(Rejected {
            index: source.index,
            line: source.line,
            id,
            field: first.field,
            reason: first.reason,
            violations,
        });
    }
}

/// [`import_with`] with the default options.
pub async fn import(
    store: &DynStore,
    text: &str,
    progress: impl FnMut(usize, usize),
) -> anyhow::Result<ImportSummary> {
    import_with(store, text, ImportOptions::default(), progress).await
}

/// Imports `text` (a JSON array or NDJSON). `progress` is called with (done, total) after each
/// batch. Errors only when the text as a whole cannot be read or the database fails; then the
/// batches already committed stay, and the error says how far it got.
pub async fn import_with(
    store: &DynStore,
    text: &str,
    opts: ImportOptions,
    mut progress: impl FnMut(usize, usize),
) -> anyhow::Result<ImportSummary> {
    let items = items(text)?;
    let total = items.len();
    let mut summary = ImportSummary::default();
    let mut batch: Vec<(WalletRow, Source)> = Vec::with_capacity(BATCH_SIZE);
    let mut done = 0;
    for item in items {
        done += 1;
        let id =
            item.parsed.as_ref().ok().and_then(|v| v.get("id")).and_then(Value::as_str).map(str::to_string);
        let row = match item.parsed {
            Ok(v) => validate(&v, opts.strict).map_err(|errors| {
                errors.into_iter().map(|e| Violation { field: e.field, reason: e.reason }).collect()
            }),
            Err(e) => Err(vec![Violation { field: String::new(), reason: e }]),
        };
        match row {
            Ok(row) => batch.push((row, item.source)),
            Err(violations) => summary.reject(item.source, id, violations),
        }
        if batch.len() == BATCH_SIZE {
            flush(store, &mut batch, &mut summary, done, opts).await?;
            progress(done, total);
        }
    }
    flush(store, &mut batch, &mut summary, done, opts).await?;
    progress(total, total);
    Ok(summary)
}

/// `coin` and `type` of a stored record.
fn identity(row: &WalletRow) -> (String, Option<String>) {
    let t = serde_json::from_str::<Value>(&row.record)
        .ok()
        .and_then(|r| r.get("type").and_then(Value::as_str).map(str::to_string));
    (row.coin.to_string(), t)
}

/// The batch's records that would change an existing wallet's `coin` or `type`, with why.
async fn identity_changes(
    store: &DynStore,
    batch: &[(WalletRow, Source)],
) -> anyhow::Result<Vec<Vec<Violation>>> {
    let ids: Vec<WalletId> = batch.iter().map(|(w, _)| w.id.clone()).collect();
    let stored: std::collections::HashMap<WalletId, (String, Option<String>)> =
        store.wallets_by_ids(&ids, true).await?.iter().map(|w| (w.id.clone(), identity(w))).collect();
    Ok(batch
        .iter()
        .map(|(w, _)| {
            let Some((coin, typ)) = stored.get(&w.id) else { return Vec::new() };
            let (new_coin, new_type) = identity(w);
            let mut v = Vec::new();
            if *coin != new_coin {
                v.push(Violation {
                    field: "coin".into(),
                    reason: format!("a wallet's coin never changes: stored {coin}, given {new_coin} (--allow-identity-change overrides)"),
                });
            }
            if *typ != new_type {
                let show = |t: &Option<String>| t.clone().unwrap_or_else(|| "none".into());
                v.push(Violation {
                    field: "type".into(),
                    reason: format!("a wallet's type never changes: stored {}, given {} (--allow-identity-change overrides)", show(typ), show(&new_type)),
                });
            }
            v
        })
        .collect())
}

async fn flush(
    store: &DynStore,
    batch: &mut Vec<(WalletRow, Source)>,
    summary: &mut ImportSummary,
    done: usize,
    opts: ImportOptions,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let changes = identity_changes(store, batch).await?;
    let mut rows = Vec::with_capacity(batch.len());
    let mut entries = Vec::new();
    for ((row, source), change) in batch.drain(..).zip(changes) {
        if change.is_empty() {
            rows.push(row);
        } else if opts.allow_identity_change {
            let e = crate::audit::EntryExt::data(
                crate::audit::entry(AuditType::WalletIdentityChanged),
                serde_json::json!({ "changes": change.iter().map(|c| &c.reason).collect::<Vec<_>>(), "by": "operator" }),
            );
            entries.push(crate::audit::EntryExt::wallet(e, Some(&row.id)));
            rows.push(row);
        } else {
            summary.reject(source, Some(row.id.to_string()), change);
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = rows.iter().map(|w| w.id.as_str()).collect();
    entries.push(crate::audit::EntryExt::data(
        crate::audit::entry(AuditType::WalletImported),
        serde_json::json!({ "walletIds": ids, "by": "operator" }),
    ));
    let (inserted, updated) = store.upsert_wallets(&rows, &entries).await.map_err(|e| {
        anyhow::anyhow!(
            "database error in the batch ending at record {done}: {e} ({} imported, {} updated before it)",
            summary.imported,
            summary.updated
        )
    })?;
    summary.imported += inserted;
    summary.updated += updated;
    Ok(())
}
