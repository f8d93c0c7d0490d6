//! Writing a batch of delivery outcomes (`OutboxStore::complete`): the attempts, the
//! notifications' next states, and the webhooks' failure counters and suspensions.

use sqlx::{Encode, Executor, FromRow, IntoArguments, Type};

use super::{Completion, FailureFacts, NotificationState, Outcome, SuspendPolicy};
use crate::store::{
    sql::{placeholders, to_json, Dialect},
    webhooks::WebhookState,
    StoreResult,
};
use crate::types::WebhookId;

#[derive(FromRow)]
pub(super) struct FailureRow {
    failed_attempts_total: i64,
    counters_reset_at: i64,
    state: String,
}

/// Inserts the batch's attempts: multi-row inserts, skipping notifications removed meanwhile
/// (with their webhook).
pub(super) async fn insert_attempts<DB>(conn: &mut DB::Connection, outcomes: &[Outcome]) -> StoreResult<()>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
{
    for chunk in outcomes.chunks(500) {
        let values = (0..chunk.len())
            .map(|i| format!("({})", placeholders(i * 8 + 1, 8)))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO delivery_attempts (notification_id, webhook_id, started_at, duration_ms, \
             status_code, success, response_body, error) SELECT column1, column2, column3, column4, \
             column5, column6, column7, column8 FROM (VALUES {values}) AS v \
             WHERE EXISTS (SELECT 1 FROM notifications n WHERE n.id = v.column1)"
        );
        let mut q = sqlx::query(&sql);
        for a in chunk.iter().map(|o| &o.attempt) {
            q = q
                .bind(a.notification_id.as_str())
                .bind(a.webhook_id.as_str())
                .bind(a.started_at_ms)
                .bind(a.duration_ms)
                .bind(a.status_code.map(i64::from))
                .bind(a.success)
                .bind(a.response_body.as_deref())
                .bind(a.error.as_deref());
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Moves each notification on: processed, failed (one statement per final state), or pending
/// again at its retry time.
pub(super) async fn finish_notifications<DB>(
    conn: &mut DB::Connection,
    outcomes: &[Outcome],
    now_ms: i64,
) -> StoreResult<()>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
{
    let (mut delivered, mut failed) = (Vec::new(), Vec::new());
    for o in outcomes {
        let id = o.attempt.notification_id.as_str();
        match o.completion {
            Completion::Delivered => delivered.push(id),
            Completion::Failed => failed.push(id),
            Completion::Retry(at) => {
                sqlx::query(
                    "UPDATE notifications SET state = 'pending', retries = retries + 1, \
                     next_attempt_at = $1, lease_until = 0, updated_at = $2 WHERE id = $3",
                )
                .bind(at)
                .bind(now_ms)
                .bind(id)
                .execute(&mut *conn)
                .await?;
            }
        }
    }
    for (state, ids, retry_inc) in
        [(NotificationState::Processed, delivered, 0i64), (NotificationState::Failed, failed, 1)]
    {
        if !ids.is_empty() {
            sqlx::query(DB::FINISH)
                .bind(state.as_str())
                .bind(retry_inc)
                .bind(now_ms)
                .bind(to_json(&ids)?)
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

/// Per webhook in a batch, by webhook id: (id, a success reset the successive count, failures
/// after the last success, all failures). The order matters: processes completing batches
/// at the same time lock webhook rows in the same order, so they cannot deadlock.
pub(super) fn failure_counters(outcomes: &[Outcome]) -> Vec<(&WebhookId, bool, i64, i64)> {
    let mut counters: Vec<(&WebhookId, bool, i64, i64)> = Vec::new();
    for o in outcomes {
        let a = &o.attempt;
        let i = match counters.iter().position(|c| c.0 == &a.webhook_id) {
            Some(i) => i,
            None => {
                counters.push((&a.webhook_id, false, 0, 0));
                counters.len() - 1
            }
        };
        let c = &mut counters[i];
        if a.success {
            c.1 = true;
            c.2 = 0;
        } else {
            c.2 += 1;
            c.3 += 1;
        }
    }
    counters.sort_unstable_by_key(|c| c.0);
    counters
}

/// Whether an active webhook's failures now suspend it by `rule` (the delivery domain's).
pub(super) async fn should_suspend<DB>(
    conn: &mut DB::Connection,
    id: &str,
    now_ms: i64,
    rule: &dyn SuspendPolicy,
) -> StoreResult<bool>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> FailureRow: FromRow<'r, DB::Row>,
{
    let row: Option<FailureRow> =
        sqlx::query_as("SELECT failed_attempts_total, counters_reset_at, state FROM webhooks WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    let active = WebhookState::Active.as_str();
    let Some(row) = row.filter(|r| r.state == active) else { return Ok(false) };
    let since = (now_ms - rule.window_ms()).max(row.counters_reset_at);
    let recent: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM delivery_attempts WHERE webhook_id = $1 AND NOT success AND started_at >= $2",
    )
    .bind(id)
    .bind(since)
    .fetch_one(&mut *conn)
    .await?;
    Ok(rule.suspends(FailureFacts { in_window: recent, total: row.failed_attempts_total }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Attempt;

    fn outcome(webhook: &str, success: bool) -> Outcome {
        Outcome {
            attempt: Attempt {
                notification_id: crate::types::test_id("n"),
                webhook_id: crate::types::test_id(webhook),
                started_at_ms: 0,
                duration_ms: 0,
                status_code: None,
                success,
                response_body: None,
                error: None,
            },
            completion: if success { Completion::Delivered } else { Completion::Failed },
        }
    }

    #[test]
    fn counters_are_per_webhook_in_id_order() {
        let batch = [
            outcome("b", false),
            outcome("a", false),
            outcome("b", true),
            outcome("b", false),
            outcome("a", false),
        ];
        let (a, b): (WebhookId, WebhookId) = (crate::types::test_id("a"), crate::types::test_id("b"));
        assert_eq!(failure_counters(&batch), vec![(&a, false, 2, 2), (&b, true, 1, 2)]);
    }
}
