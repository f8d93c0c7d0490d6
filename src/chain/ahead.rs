//! Reading ahead in a task of its own: a watcher's block reads run while it processes and
//! writes the blocks before them (the store's commit, the outbox), so the node is never idle
//! waiting for the watcher. Both families use it: Ethereum's blocks with their receipts and
//! logs (`fetch.rs`), UTXO blocks with their transactions.

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;

/// Items read ahead by their own task, handed over in the order the stream gives them; the
/// task stops when this is dropped.
pub struct Ahead<T> {
    rx: mpsc::Receiver<T>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Send + 'static> Ahead<T> {
    /// Drives `items` in a task, holding at most `waiting` read items not yet taken; the task
    /// ends after an item `last` says ends the reading (an error, the node's head moved back).
    pub fn spawn<S>(items: S, waiting: usize, last: fn(&T) -> bool) -> Self
    where
        S: Stream<Item = T> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(waiting.max(1));
        let task = tokio::spawn(async move {
            futures_util::pin_mut!(items);
            while let Some(item) = items.next().await {
                let end = last(&item);
                if tx.send(item).await.is_err() || end {
                    return;
                }
            }
        });
        Ahead { rx, task }
    }

    /// The items read so far, in order: waits for one, then takes those already read, up to
    /// `max`. Empty when every item was handed over.
    pub async fn next_run(&mut self, max: usize) -> Vec<T> {
        let Some(first) = self.rx.recv().await else { return Vec::new() };
        let mut run = vec![first];
        while run.len() < max {
            match self.rx.try_recv() {
                Ok(item) => run.push(item),
                Err(_) => break,
            }
        }
        run
    }
}

impl<T> Drop for Ahead<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
