//! Writing a batch of delivery outcomes (`OutboxStore::complete`): the attempts, the
//! notifications' next states, and the webhooks' failure counters and suspensions.
//!
//! A notification's successful attempt is kept on the notification itself (`delivered_at`,
//! `delivered_ms`, `delivered_status`, `delivered_body`; docs/decisions.md#performance-as-the-data-grows): a `delivery_attempts` row
//! and its three index entries were 210 of the 830 bytes each delivered event cost.
//! `delivery_attempts` holds failed attempts, and a success that found its notification
//! delivered already (a lease that ran out mid-attempt) or that a resend moved there.

use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{Completed, Completion, FailureFacts, Outcome, SuspendPolicy};

use crate::model::notification::NotificationState;
use crate::types::WebhookId;
use crate::{
    model::webhook::WebhookState,
    store::{
        sql::{to_json, Dialect},
        StoreResult,
    },
};

#[derive(FromRow)]
pub(in crate::store) struct FailureRow {
    failed_attempts_total: i64,
    counters_reset_at: i64,
    state: String,
}

/// A batch of outcomes for the group-commit writer to record with the events it writes
/// (`store::group_commit`): owned, it crosses to the writer's task.
pub(in crate::store) struct CompletionWrite {
    pub outcomes: std::sync::Arc<[Outcome]>,
    /// Unix ms.
    pub now_ms: i64,
    pub rule: std::sync::Arc<dyn SuspendPolicy>,
}

/// Writes `outcomes` in the caller's transaction (`OutboxStore::complete`): delivered
/// notifications marked so with their attempt, the other attempts as rows, the notifications'
/// next states, then per webhook its failure counters and a suspension by `rule`.
#[sql_bounds]
pub(in crate::store) async fn complete_tx<DB>(
    conn: &mut DB::Connection,
    outcomes: &[Outcome],
    now_ms: i64,
    rule: &dyn SuspendPolicy,
) -> StoreResult<Completed>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> FailureRow: FromRow<'r, DB::Row>,
{
    let rest = record_deliveries::<DB>(&mut *conn, outcomes, now_ms).await?;
    insert_attempts::<DB>(&mut *conn, &rest).await?;
    finish_notifications::<DB>(&mut *conn, &rest, now_ms).await?;
    // Webhook counters, one statement per webhook: failures after its last success in this
    // batch continue (or restart) the successive count.
    let mut completed = Completed::default();
    for Tally { webhook: id, last_success_ms, fails_after, fails } in failure_counters(outcomes) {
        let reset = last_success_ms.is_some();
        // A batch of successes on a webhook without failures changes nothing: no write.
        let changed = sqlx::query(
            "UPDATE webhooks SET successive_failed_attempts = CASE WHEN $1 THEN $2 \
             ELSE successive_failed_attempts + $2 END, \
             failed_attempts_total = failed_attempts_total + $3 WHERE id = $4 \
             AND NOT ($1 AND $2 = 0 AND $3 = 0 AND successive_failed_attempts = 0)",
        )
        .bind(reset)
        .bind(fails_after)
        .bind(fails)
        .bind(id)
        .execute(&mut *conn)
        .await?;
        if reset && DB::rows_affected(&changed) > 0 {
            completed.recovered.push(id.clone());
        }
        if let Some(at) = last_success_ms {
            // To the second: a webhook delivered to all the time writes this once a second.
            sqlx::query(
                "UPDATE webhooks SET last_delivered_at = $1 WHERE id = $2 \
                 AND (last_delivered_at IS NULL OR last_delivered_at < $1 - 1000)",
            )
            .bind(at)
            .bind(id)
            .execute(&mut *conn)
            .await?;
        }
        if fails > 0 && should_suspend::<DB>(&mut *conn, id, now_ms, rule).await? {
            sqlx::query("UPDATE webhooks SET state = 'suspended' WHERE id = $1")
                .bind(id)
                .execute(&mut *conn)
                .await?;
            completed.suspended.push(id.clone());
        }
    }
    Ok(completed)
}

/// Inserts `outcomes`' attempts as `delivery_attempts` rows: multi-row inserts, skipping
/// notifications removed meanwhile (with their webhook).
#[sql_bounds]
async fn insert_attempts<DB>(conn: &mut DB::Connection, outcomes: &[&Outcome]) -> StoreResult<()> {
    for chunk in outcomes.chunks(500) {
        let values = (0..chunk.len())
            .map(|i| format!("({})", DB::row_params(i * 8 + 1, 8)))
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

/// Marks the delivered notifications of `outcomes` processed with their successful attempt on
/// the row, one statement per 500. Returns the outcomes left for attempt rows
/// ([`insert_attempts`]) and [`finish_notifications`]: those not delivered, and the delivered
/// ones it did not record so (their notification holds a success already, or is gone).
#[sql_bounds]
async fn record_deliveries<'o, DB>(
    conn: &mut DB::Connection,
    outcomes: &'o [Outcome],
    now_ms: i64,
) -> StoreResult<Vec<&'o Outcome>>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    let delivered: Vec<&Outcome> =
        outcomes.iter().filter(|o| o.completion == Completion::Delivered).collect();
    let mut recorded = std::collections::HashSet::with_capacity(delivered.len());
    for chunk in delivered.chunks(500) {
        let values = (0..chunk.len())
            .map(|i| format!("({})", DB::row_params(i * 5 + 2, 5)))
            .collect::<Vec<_>>()
            .join(", ");
        // Nameless on SQLite (`DB::row_params`), as each of the rows' parameters: sqlx asks SQLite
        // the name of every parameter, a scan of the names before it, quadratic in 2,500 of them.
        let sql = format!(
            "UPDATE notifications SET state = 'processed', lease_until = 0, updated_at = {}, \
             delivered_at = v.column2, delivered_ms = v.column3, delivered_status = v.column4, \
             delivered_body = v.column5 FROM (VALUES {values}) AS v \
             WHERE notifications.id = v.column1 AND notifications.delivered_at IS NULL RETURNING id",
            DB::row_params(1, 1)
        );
        let mut q = sqlx::query_as::<_, (String,)>(&sql).bind(now_ms);
        for a in chunk.iter().map(|o| &o.attempt) {
            q = q
                .bind(a.notification_id.as_str())
                .bind(a.started_at_ms)
                .bind(a.duration_ms)
                .bind(a.status_code.map(i64::from))
                .bind(a.response_body.as_deref());
        }
        recorded.extend(q.fetch_all(&mut *conn).await?.into_iter().map(|(id,)| id));
    }
    Ok(outcomes
        .iter()
        .filter(|o| {
            o.completion != Completion::Delivered || !recorded.contains(o.attempt.notification_id.as_str())
        })
        .collect())
}

/// Moves each of `outcomes`' notifications on: processed, failed (one statement per final
/// state), or pending again at its retry time.
#[sql_bounds]
async fn finish_notifications<DB>(
    conn: &mut DB::Connection,
    outcomes: &[&Outcome],
    now_ms: i64,
) -> StoreResult<()> {
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

/// One webhook's outcomes in a batch.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Tally<'o> {
    pub webhook: &'o WebhookId,
    /// The latest start (Unix ms) of a successful attempt: a success resets the successive count.
    pub last_success_ms: Option<i64>,
    /// Failures after the last success.
    pub fails_after: i64,
    /// All failures.
    pub fails: i64,
}

/// Per webhook in a batch, by webhook id. The order matters: processes completing batches at
/// the same time lock webhook rows in the same order, so they cannot deadlock.
pub(super) fn failure_counters(outcomes: &[Outcome]) -> Vec<Tally<'_>> {
    let mut counters: Vec<Tally> = Vec::new();
    for o in outcomes {
        let a = &o.attempt;
        let i = match counters.iter().position(|c| c.webhook == &a.webhook_id) {
            Some(i) => i,
            None => {
                counters.push(Tally {
                    webhook: &a.webhook_id,
                    last_success_ms: None,
                    fails_after: 0,
                    fails: 0,
                });
                counters.len() - 1
            }
        };
        let c = &mut counters[i];
        if a.success {
            c.last_success_ms = c.last_success_ms.max(Some(a.started_at_ms));
            c.fails_after = 0;
        } else {
            c.fails_after += 1;
            c.fails += 1;
        }
    }
    counters.sort_unstable_by_key(|c| c.webhook);
    counters
}

/// Whether an active webhook's failures now suspend it by `rule` (the delivery domain's).
#[sql_bounds]
async fn should_suspend<DB>(
    conn: &mut DB::Connection,
    id: &str,
    now_ms: i64,
    rule: &dyn SuspendPolicy,
) -> StoreResult<bool>
where
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
    use crate::model::notification::Attempt;

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
        assert_eq!(
            failure_counters(&batch),
            vec![
                Tally { webhook: &a, last_success_ms: None, fails_after: 2, fails: 2 },
                Tally { webhook: &b, last_success_ms: Some(0), fails_after: 1, fails: 2 },
            ]
        );
    }
}
