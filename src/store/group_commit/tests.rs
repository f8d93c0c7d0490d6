//! Tests of the group-commit writer on SQLite.

use super::*;
use crate::store::{sqlite::SqliteStore, EventStore};

fn event(id: &str) -> EventWrite {
    EventWrite {
        event_id: id.into(),
        body: "{}".into(),
        transfer_id: None,
        webhooks: vec![crate::types::test_id(id)],
        notifications: Vec::new(),
        payload: None,
    }
}

/// Results stored before the compact form (JSON text) and in it read back the same.
#[test]
fn stored_webhooks_read_back_in_both_forms() {
    let ids: Vec<WebhookId> = vec![crate::types::test_id("a"), crate::types::test_id("b")];
    assert_eq!(webhooks_of_stored(&stored_webhooks(&ids)).unwrap(), ids);
    assert_eq!(webhooks_of_stored(&stored_webhooks(&[])).unwrap(), Vec::<WebhookId>::new());
    let json =
        format!("{{\"eventId\":\"e\",\"notifications\":2,\"webhooks\":[\"{}\",\"{}\"]}}", ids[0], ids[1]);
    assert_eq!(webhooks_of_stored(&json).unwrap(), ids);
    assert!(webhooks_of_stored("{not json").is_err());
}

/// A store whose writer lingers long enough that writes made together are one round.
async fn lingering_store(dir: &tempfile::TempDir) -> SqliteStore {
    let mut config = crate::config::Config::default();
    config.ingest.linger_us = 2000;
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    SqliteStore::open(&url, &config).await.unwrap()
}

/// Makes the database refuse the event `bad`.
async fn refuse_bad(store: &SqliteStore) {
    sqlx::query(
        "CREATE TRIGGER refuse_bad BEFORE INSERT ON events WHEN NEW.event_id = 'bad' \
         BEGIN SELECT RAISE(ABORT, 'refused for the test'); END",
    )
    .execute(&store.pool)
    .await
    .unwrap();
}

async fn add_webhook(store: &SqliteStore, id: &str) {
    sqlx::query(
        "INSERT INTO webhooks (id, scope, user_id, type, url, created_at) \
         VALUES ($1, 'block', 'u1', 'block', 'https://example.com/hook', 0)",
    )
    .bind(crate::types::test_id::<WebhookId>(id).as_str())
    .execute(&store.pool)
    .await
    .unwrap();
}

/// An event the database refuses fails alone; the others of its batch are
/// stored, and a repeat of one of them in the same batch gets its result.
#[tokio::test]
async fn a_bad_event_fails_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = lingering_store(&dir).await;
    refuse_bad(&store).await;
    let (a, bad, b, again) = tokio::join!(
        store.record_event(event("a")),
        store.record_event(event("bad")),
        store.record_event(event("b")),
        store.record_event(event("a")),
    );
    assert!(bad.is_err(), "the refused event fails");
    assert_eq!(a.unwrap(), Recorded::Now { skipped: Vec::new() }, "stored");
    assert_eq!(b.unwrap(), Recorded::Now { skipped: Vec::new() }, "stored");
    assert_eq!(
        again.unwrap(),
        Recorded::Before(vec![crate::types::test_id("a")]),
        "the repeat gets the first result"
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(&store.pool).await.unwrap();
    assert_eq!(n, 2);
}

fn notification(id: &str, key: &str) -> Notification {
    Notification {
        id: crate::types::test_id(id),
        webhook_id: crate::types::test_id("w1"),
        event_id: None,
        notification_type: "block".into(),
        state: crate::model::notification::NotificationState::Pending,
        simulation: false,
        retries: 0,
        payload: "{}".into(),
        hash: Some("h".into()),
        idempotency_key: Some(key.into()),
        meta: serde_json::json!({}),
        next_attempt_at_ms: 0,
        lease_until_ms: 1,
        created_at_ms: 0,
        updated_at_ms: 0,
    }
}

struct NeverSuspend;

impl crate::store::SuspendPolicy for NeverSuspend {
    fn window_ms(&self) -> i64 {
        60_000
    }
    fn suspends(&self, _: crate::store::FailureFacts) -> bool {
        false
    }
}

/// Delivery outcomes go with the events of the same round (SQLite); when a bad event fails
/// that round, the outcomes are still recorded (on their own) and the bad event fails alone.
#[tokio::test]
async fn outcomes_sharing_a_round_with_a_bad_event_are_still_recorded() {
    use crate::model::notification::Attempt;
    use crate::store::{Completion, OutboxStore, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let store = lingering_store(&dir).await;
    add_webhook(&store, "w1").await;
    let first = EventWrite { notifications: vec![notification("n1", "k1")], ..event("a") };
    store.record_event(first).await.unwrap();
    refuse_bad(&store).await;
    let delivered = Outcome {
        attempt: Attempt {
            notification_id: crate::types::test_id("n1"),
            webhook_id: crate::types::test_id("w1"),
            started_at_ms: 5,
            duration_ms: 1,
            status_code: Some(200),
            success: true,
            response_body: Some("ok".into()),
            error: None,
        },
        completion: Completion::Delivered,
    };
    let outcomes: std::sync::Arc<[Outcome]> = vec![delivered].into();
    let (completed, bad, b) = tokio::join!(
        store.complete(outcomes, 10, std::sync::Arc::new(NeverSuspend)),
        store.record_event(event("bad")),
        store.record_event(event("b")),
    );
    assert!(bad.is_err(), "the refused event fails");
    assert_eq!(b.unwrap(), Recorded::Now { skipped: Vec::new() }, "stored");
    let completed = completed.expect("the outcomes are recorded");
    assert!(completed.suspended.is_empty());
    let (state, at): (String, Option<i64>) =
        sqlx::query_as("SELECT state, delivered_at FROM notifications WHERE id = $1")
            .bind(crate::types::test_id::<crate::types::NotificationId>("n1").as_str())
            .fetch_one(&store.pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), at), ("processed", Some(5)));
}

/// A notification the outbox skips (its webhook and idempotency key are there
/// already) is reported, so that ingestion never hands an unwritten row to the engine.
#[tokio::test]
async fn notifications_skipped_by_their_idempotency_key_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = SqliteStore::open(&url, &crate::config::Config::default()).await.unwrap();
    add_webhook(&store, "w1").await;
    let first = EventWrite { notifications: vec![notification("n1", "k1")], ..event("a") };
    assert_eq!(store.record_event(first).await.unwrap(), Recorded::Now { skipped: Vec::new() });
    let second =
        EventWrite { notifications: vec![notification("n2", "k1"), notification("n3", "k2")], ..event("b") };
    assert_eq!(
        store.record_event(second).await.unwrap(),
        Recorded::Now { skipped: vec![crate::types::test_id("n2")] },
        "n2's key was taken by n1"
    );
    let ids: Vec<crate::types::NotificationId> =
        sqlx::query_scalar("SELECT id FROM notifications ORDER BY id").fetch_all(&store.pool).await.unwrap();
    let want: [crate::types::NotificationId; 2] = [crate::types::test_id("n1"), crate::types::test_id("n3")];
    assert_eq!(ids, want);
}

/// The writer keeps its connection between rounds on SQLite; closing the store still
/// completes (a closing pool waits for every connection it lent).
#[tokio::test]
async fn closing_the_store_is_not_held_by_the_writers_connection() {
    use crate::store::Store;
    let dir = tempfile::tempdir().unwrap();
    let store = lingering_store(&dir).await;
    store.record_event(event("a")).await.unwrap();
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), store.close()).await;
    assert!(closed.is_ok(), "close waited on the writer's kept connection");
}

/// The wallet lookup keeps its connections between reads on SQLite (the read lane); closing the
/// store still completes.
#[tokio::test]
async fn closing_the_store_is_not_held_by_the_read_lanes_connections() {
    use crate::store::{Store, WalletStore};
    let dir = tempfile::tempdir().unwrap();
    let store = lingering_store(&dir).await;
    let found = store.wallets_by_ids(&[crate::types::test_id("w1")], false).await.unwrap();
    assert!(found.is_empty());
    assert_eq!(store.lane.kept(), 1, "the lane keeps the lookup's connection");
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), store.close()).await;
    assert!(closed.is_ok(), "close waited on the read lane's kept connection");
}
