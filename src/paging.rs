//! Paging by id for every list: `limit` and `prevId` (the last id of the previous page), and a
//! `nextBatchPrevId` when there is more. Stores are asked for `limit + 1` rows so that the
//! extra one tells whether another page exists.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::{
    error::{Error, Result},
    types::AnyId,
};

/// Largest `limit` of a webhook or notification list.
pub const MAX_LIMIT: u32 = 500;
/// `limit` when none is given.
pub const DEFAULT_LIMIT: u32 = 100;

/// A checked page request.
#[derive(Debug, Clone)]
pub struct PageRequest {
    /// 1..=[`MAX_LIMIT`].
    pub limit: u32,
    /// Only ids greater than this one (32 hex).
    pub prev_id: Option<AnyId>,
}

impl PageRequest {
    /// Checks `limit` (1..=[`MAX_LIMIT`], default [`DEFAULT_LIMIT`]); `prevId` is parsed at the
    /// edge. Errors: `InvalidField` naming `limit`.
    pub fn new(limit: Option<u32>, prev_id: Option<AnyId>) -> Result<Self> {
        Self::bounded(limit, prev_id, DEFAULT_LIMIT, MAX_LIMIT)
    }

    /// [`PageRequest::new`] with a list's own default and largest `limit`.
    pub fn bounded(limit: Option<u32>, prev_id: Option<AnyId>, default: u32, max: u32) -> Result<Self> {
        let limit = limit.unwrap_or(default);
        if !(1..=max).contains(&limit) {
            return Err(Error::invalid_field("limit", format!("must be from 1 to {max}")));
        }
        Ok(PageRequest { limit, prev_id })
    }

    /// How many rows to ask the store for: one more than the page holds.
    pub fn fetch(&self) -> u32 {
        self.limit + 1
    }

    /// The page from rows fetched with [`PageRequest::fetch`], ordered by id.
    pub fn page<T>(&self, mut rows: Vec<T>, id: impl Fn(&T) -> &str) -> Page<T> {
        let limit = self.limit as usize;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next_batch_prev_id = if more { rows.last().map(|r| id(r).to_string()) } else { None };
        Page { items: rows, next_batch_prev_id }
    }
}

/// One page of a list.
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// The id to pass as `prevId` for the next page; `None` on the last page.
    pub next_batch_prev_id: Option<String>,
}
