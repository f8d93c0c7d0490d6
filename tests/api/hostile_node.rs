//! A hostile JSON-RPC node: a proxy in front of a real anvil that passes requests through
//! unless told to lie, as a misbehaving provider or a load balancer behind it does: a `null`
//! receipt, an empty log list, a 50 MiB answer, another chain's id, a block held back, one
//! transaction of a batch refused.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{body::Bytes, extract::State, response::IntoResponse, routing::post, Router};
use serde_json::{json, Value};
use tokio::sync::Notify;

/// What the proxy does to the next requests.
#[derive(Default)]
pub struct Lies {
    /// The next this many `eth_getTransactionReceipt` answers are `null`.
    pub null_receipts: usize,
    /// The next this many `eth_getLogs` answers are `[]`.
    pub empty_logs: usize,
    /// `eth_blockNumber` answers a string of this many bytes (not a number).
    pub huge_head: Option<usize>,
    /// `eth_chainId` answers this instead.
    pub chain_id: Option<u64>,
    /// `eth_getBlockByNumber` for this height or above waits until released.
    pub hold_from: Option<u64>,
    /// `txpool_content` answers an empty pool.
    pub empty_pool: bool,
    /// `txpool_content` answers a pool of about this many bytes (padding, no transaction).
    pub huge_pool: Option<usize>,
    /// Answers come as a chunked body without a length, as a streaming provider sends them.
    pub stream_answers: bool,
    /// Requests of these methods wait until released, before they reach the node.
    pub hold_methods: Vec<&'static str>,
    /// Requests of these methods reach the node, and their answers wait until released.
    pub hold_answers_of: Vec<&'static str>,
    /// The next batch of `eth_sendRawTransaction` calls has its call at this index answered
    /// with an error (`message`) instead of reaching the node; the rest pass.
    pub refuse_in_batch: Option<(usize, &'static str)>,
    /// The next this many `eth_sendRawTransaction` calls are answered with this error without
    /// reaching the node.
    pub refuse_sends: (usize, &'static str),
    /// The next this many `eth_sendRawTransaction` calls reach the node, which takes them, and
    /// are answered "insufficient funds" all the same.
    pub take_then_refuse: usize,
    /// The next this many receipts that exist, asked alone (the signer's way; the chain watcher
    /// asks a block's in a batch), are answered with `status: 0x0` (reverted).
    pub reverted_receipts: usize,
    /// The next this many `eth_getTransactionCount(.., "pending")` answers are this much higher
    /// than the node's.
    pub pending_nonce_plus: (usize, u64),
    /// The next this many `eth_getTransactionByHash` answers are `null`.
    pub null_tx_by_hash: usize,
}

/// The error a call of `method` is answered with instead of reaching the node, if any.
fn refusal(l: &mut Lies, method: &str) -> Option<&'static str> {
    match method {
        "eth_sendRawTransaction" if l.refuse_sends.0 > 0 => {
            l.refuse_sends.0 -= 1;
            Some(l.refuse_sends.1)
        }
        _ => None,
    }
}

/// The node's `answer` to `call`, changed when told to lie about it.
fn tamper(l: &mut Lies, call: &Value, mut answer: Value, lone: bool) -> Value {
    match call["method"].as_str().unwrap_or_default() {
        "eth_sendRawTransaction" if l.take_then_refuse > 0 && answer.get("result").is_some() => {
            l.take_then_refuse -= 1;
            json!({ "jsonrpc": "2.0", "id": call["id"], "error": { "code": -32000, "message": "insufficient funds for gas * price + value" } })
        }
        "eth_getTransactionReceipt" if lone && l.reverted_receipts > 0 && answer["result"].is_object() => {
            l.reverted_receipts -= 1;
            answer["result"]["status"] = json!("0x0");
            answer
        }
        "eth_getTransactionCount" if l.pending_nonce_plus.0 > 0 && call["params"][1] == "pending" => {
            let n = answer["result"]
                .as_str()
                .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok());
            if let Some(n) = n {
                l.pending_nonce_plus.0 -= 1;
                answer["result"] = json!(format!("0x{:x}", n + l.pending_nonce_plus.1));
            }
            answer
        }
        _ => answer,
    }
}

/// `text`, one answer, tampered with as `call` says.
fn tampered(s: &Shared, call: &Value, text: String) -> String {
    match serde_json::from_str::<Value>(&text) {
        Ok(answer) => tamper(&mut s.inner.lock().unwrap().lies, call, answer, true).to_string(),
        Err(_) => text,
    }
}

#[derive(Default)]
struct Inner {
    lies: Lies,
    /// Methods (and block heights asked for) seen, in order.
    seen: Vec<(String, Option<u64>)>,
    /// Each batch request's first method and its number of calls, in order.
    batches: Vec<(String, usize)>,
}

#[derive(Clone)]
pub struct HostileNode {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    released: Arc<Notify>,
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    inner: Arc<Mutex<Inner>>,
    released: Arc<Notify>,
}

fn height_of(req: &Value) -> Option<u64> {
    let tag = req["params"][0].as_str()?;
    u64::from_str_radix(tag.strip_prefix("0x")?, 16).ok()
}

/// The lie told for a call of `method` instead of passing it on, if any (a `result`).
fn lie(l: &mut Lies, method: &str) -> Option<Value> {
    match method {
        "eth_getTransactionReceipt" if l.null_receipts > 0 => {
            l.null_receipts -= 1;
            Some(Value::Null)
        }
        "eth_getTransactionByHash" if l.null_tx_by_hash > 0 => {
            l.null_tx_by_hash -= 1;
            Some(Value::Null)
        }
        "eth_getLogs" if l.empty_logs > 0 => {
            l.empty_logs -= 1;
            Some(json!([]))
        }
        "eth_blockNumber" => l.huge_head.map(|n| Value::String("9".repeat(n))),
        "eth_chainId" => l.chain_id.map(|id| json!(format!("0x{id:x}"))),
        "txpool_content" if l.empty_pool => Some(json!({ "pending": {}, "queued": {} })),
        "txpool_content" if l.huge_pool.is_some() => {
            Some(json!({ "pending": {}, "queued": {}, "padding": "x".repeat(l.huge_pool.unwrap_or(0)) }))
        }
        _ => None,
    }
}

async fn handle(State(s): State<Arc<Shared>>, body: Bytes) -> axum::response::Response {
    let stream = s.inner.lock().unwrap().lies.stream_answers;
    let text = answer(&s, body).await;
    if !stream {
        return text.into_response();
    }
    let chunk = futures_util::stream::once(async move { Ok::<_, std::io::Error>(text) });
    axum::body::Body::from_stream(chunk).into_response()
}

async fn answer(s: &Shared, body: Bytes) -> String {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Value::Array(calls) = req {
        return batch(s, calls).await;
    }
    let method = req["method"].as_str().unwrap_or_default().to_string();
    let height = (method == "eth_getBlockByNumber").then(|| height_of(&req)).flatten();
    let (lie, refused) = {
        let mut i = s.inner.lock().unwrap();
        i.seen.push((method.clone(), height));
        (lie(&mut i.lies, &method), refusal(&mut i.lies, &method))
    };
    if let Some(result) = lie {
        return json!({ "jsonrpc": "2.0", "id": req["id"], "result": result }).to_string();
    }
    if let Some(message) = refused {
        return json!({ "jsonrpc": "2.0", "id": req["id"], "error": { "code": -32000, "message": message } })
            .to_string();
    }
    s.hold_while(|l| {
        matches!((l.hold_from, height), (Some(from), Some(h)) if h >= from)
            || l.hold_methods.contains(&method.as_str())
    })
    .await;
    let answer = tampered(s, &req, s.forward(body.to_vec(), &req["id"]).await);
    s.hold_while(|l| l.hold_answers_of.contains(&method.as_str())).await;
    answer
}

/// A JSON-RPC batch: every call counted; held while any of its methods is; each call lied
/// about as a lone request would be, and one send refused when told, those answers spliced
/// into the node's answers to the others, in their places.
async fn batch(s: &Shared, calls: Vec<Value>) -> String {
    let methods: Vec<String> =
        calls.iter().map(|c| c["method"].as_str().unwrap_or_default().to_string()).collect();
    let canned: Vec<Option<Value>> = {
        let mut i = s.inner.lock().unwrap();
        i.seen.extend(methods.iter().map(|m| (m.clone(), None)));
        i.batches.push((methods.first().cloned().unwrap_or_default(), calls.len()));
        let sends = methods.iter().all(|m| m == "eth_sendRawTransaction");
        let refused = match i.lies.refuse_in_batch {
            Some((at, message)) if sends && at < calls.len() => {
                i.lies.refuse_in_batch = None;
                Some((at, message))
            }
            _ => None,
        };
        calls
            .iter()
            .enumerate()
            .map(|(n, call)| {
                let method = call["method"].as_str().unwrap_or_default();
                let message = match refused {
                    Some((at, message)) if at == n => Some(message),
                    _ => refusal(&mut i.lies, method),
                };
                match message {
                    Some(message) => Some(
                        json!({ "jsonrpc": "2.0", "id": call["id"], "error": { "code": -32000, "message": message } }),
                    ),
                    None => lie(&mut i.lies, method)
                        .map(|result| json!({ "jsonrpc": "2.0", "id": call["id"], "result": result })),
                }
            })
            .collect()
    };
    let held = |of: &[&'static str]| methods.iter().any(|m| of.contains(&m.as_str()));
    s.hold_while(|l| held(&l.hold_methods)).await;
    let forwarded: Vec<&Value> =
        calls.iter().zip(&canned).filter(|(_, c)| c.is_none()).map(|(c, _)| c).collect();
    let mut answers: HashMap<String, Value> = HashMap::new();
    if !forwarded.is_empty() {
        let answer = s.forward(serde_json::to_vec(&forwarded).unwrap(), &Value::Null).await;
        let answered: Vec<Value> = serde_json::from_str(&answer).unwrap_or_default();
        let mut i = s.inner.lock().unwrap();
        for a in answered {
            let call = forwarded.iter().find(|c| c["id"] == a["id"]).copied().cloned().unwrap_or(Value::Null);
            answers.insert(a["id"].to_string(), tamper(&mut i.lies, &call, a, false));
        }
    }
    s.hold_while(|l| held(&l.hold_answers_of)).await;
    let out: Vec<Value> = calls
        .iter()
        .zip(canned)
        .filter_map(|(call, canned)| canned.or_else(|| answers.remove(&call["id"].to_string())))
        .collect();
    Value::Array(out).to_string()
}

impl Shared {
    /// `body` sent on to the node: its answer, or an error with `id` when it is away.
    async fn forward(&self, body: Vec<u8>, id: &Value) -> String {
        let answer = self
            .client
            .post(&self.upstream)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        match answer {
            Ok(res) => res.text().await.unwrap_or_default(),
            Err(_) => {
                json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32000, "message": "upstream away" } })
                    .to_string()
            }
        }
    }

    /// Waits while `held` says so of the lies.
    async fn hold_while(&self, held: impl Fn(&Lies) -> bool) {
        loop {
            if !held(&self.inner.lock().unwrap().lies) {
                return;
            }
            // Woken when the lies change; the timeout only paces the re-check of the hold.
            let released = self.released.notified();
            tokio::select! {
                _ = released => {}
                _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            }
        }
    }
}

impl HostileNode {
    /// A proxy to the node at `upstream` that tells no lie until told to.
    pub async fn start(upstream: &str) -> Self {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let released = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            client: reqwest::Client::new(),
            inner: inner.clone(),
            released: released.clone(),
        });
        let app = Router::new().route("/", post(handle)).with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url: format!("http://127.0.0.1:{port}/"), inner, released }
    }

    /// Changes what the proxy lies about.
    pub fn lie(&self, f: impl FnOnce(&mut Lies)) {
        f(&mut self.inner.lock().unwrap().lies);
        self.released.notify_waiters();
    }

    /// Whether a request for block `height` has arrived.
    pub fn asked_for_block(&self, height: u64) -> bool {
        self.inner.lock().unwrap().seen.iter().any(|(m, h)| m == "eth_getBlockByNumber" && *h == Some(height))
    }

    /// The number of calls in each batch request of `method` that arrived, in order.
    pub fn batch_sizes(&self, method: &str) -> Vec<usize> {
        self.inner.lock().unwrap().batches.iter().filter(|(m, _)| m == method).map(|(_, n)| *n).collect()
    }

    /// How many requests of `method` arrived.
    pub fn count(&self, method: &str) -> usize {
        self.inner.lock().unwrap().seen.iter().filter(|(m, _)| m == method).count()
    }
}
