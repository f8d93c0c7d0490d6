//! Rules of the API that utoipa's derive cannot state, added to the generated OpenAPI document
//! so that it is exact: a client generated from it, or a fuzzer driven by it, sends nothing the
//! server refuses (docs/decisions.md#the-openapi-document). Each rule names the server check it mirrors; the constants come
//! from the domain, so the two cannot drift.

use serde_json::{json, Value};

use crate::{
    config::DEFAULT_BLOCK_WEBHOOK_COINS,
    identity::{
        login::OTP_DIGITS,
        scopes::Scope,
        tokens::{
            MAX_DURATION, MAX_IP_RESTRICT, MAX_PERMITTED, MAX_SCOPES, MAX_SPENDING_LIMITS, TEMPLATE_FIELDS,
        },
    },
    types::{COIN_PATTERN, ID_PATTERN as ID},
    webhooks::{
        event_fields::{known_fields, Kind},
        BLOCK_TYPES, ENTERPRISE_TYPES, MAX_CUSTOM_HEADERS, MAX_HEADER_VALUE_BYTES, MAX_TX_REQUEST_STATES,
        MAX_URL_LEN, RESERVED_HEADERS, TX_REQUEST_STATES, TX_REQUEST_TRANSACTION_STATES, WALLET_TYPES,
    },
};

/// Text without U+0000, which the server refuses in every string (`error::parse_value`).
const NO_NUL: &str = "^[^\\u0000]*$";
/// Text with at least one character that is not white space (labels are trimmed).
const NOT_BLANK: &str = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$";
/// An IPv4 address or CIDR block (IPv6 is accepted too; see the `anyOf`).
const IPV4_OR_CIDR: &str = "^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(/([0-9]|[12][0-9]|3[0-2]))?$";

/// Applies every rule to `doc`, the document as JSON.
pub fn refine(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    access_token_request(schemas);
    webhook_requests(schemas);
    event_request(schemas);
    let remove = &mut schemas["RemoveWebhookRequest"];
    // `{id}` wins over `type` and `url`, which may then be anything the body parses as
    // (`null` included); without an id, both must be strings.
    let text = json!({ "type": "string", "pattern": "^[^\\u0000]*$" });
    remove["anyOf"] = json!([
        { "required": ["id"] },
        { "required": ["type", "url"], "properties": { "type": text, "url": text } },
    ]);
    remove["properties"]["id"]["type"] = json!("string");
    for field in ["type", "url"] {
        remove["properties"][field]["type"] = json!(["string", "null"]);
    }
    // A balance is base units as digits, a JSON string or a whole number (`wallets::parse_balances`).
    if let Some(balances) = schemas["SetBalanceRequest"]["properties"].as_object_mut() {
        for balance in balances.values_mut() {
            *balance = kind_schema(Kind::BaseUnits { signed: false });
        }
    }
    // Confirmations are counted in 64 bits unsigned (`webhooks::events`).
    schemas["EventRequest"]["properties"]["confirmations"] =
        json!({ "type": ["integer", "null"], "minimum": 0, "maximum": u64::MAX });
    schemas["SetBalanceRequest"]["minProperties"] = json!(1);
    // BitGoJS's extension key: a Bitcoin P2PKH address, Base58 of 26 to 35 characters
    // (`identity::extension::parse_address`; the checksum is the server's to check).
    schemas["SessionLoginRequest"]["properties"]["extensionAddress"]["pattern"] =
        json!("^[13mn][1-9A-HJ-NP-Za-km-z]{25,34}$");
    // A wallet record holds the §2.1 fields and whatever else BitGo's record carried (docs/decisions.md#real-wallet-records).
    schemas["WalletLookupResponse"]["properties"]["wallets"]["items"]["additionalProperties"] = json!(true);
    for path in [
        "/api/v2/{coin}/wallet/{walletId}/webhooks",
        "/api/v2/{coin}/webhooks",
        "/api/v2/enterprise/{enterpriseId}/webhooks",
    ] {
        let level = match path {
            p if p.contains("/wallet/") => "WalletWebhookRequest",
            p if p.contains("/enterprise/") => "EnterpriseWebhookRequest",
            _ => "BlockWebhookRequest",
        };
        doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"] =
            json!({ "$ref": format!("#/components/schemas/{level}") });
    }
    // Optional bodies: absent, or the object (a JSON `null` is not taken).
    for (path, method, schema) in [
        ("/api/auth/v1/passkey/challenge", "post", "ChallengeRequest"),
        ("/api/v2/user/otp/{id}", "delete", "RemoveDeviceRequest"),
        ("/api/v1/user/otp/{id}", "delete", "RemoveDeviceRequest"),
    ] {
        let body = &mut doc["paths"][path][method]["requestBody"];
        body["content"]["application/json"]["schema"] =
            json!({ "$ref": format!("#/components/schemas/{schema}") });
        body["required"] = json!(false);
    }
    if let Some(schemas) = doc["components"]["schemas"].as_object_mut() {
        schemas.remove("CreateWebhookRequest");
    }
    // A block webhook names a known coin (`webhooks.coins`; the default list is shown).
    if let Some(params) = doc["paths"]["/api/v2/{coin}/webhooks"]["post"]["parameters"].as_array_mut() {
        for param in params.iter_mut().filter(|p| p["name"] == "coin") {
            param["schema"] = json!({ "type": "string", "enum": DEFAULT_BLOCK_WEBHOOK_COINS });
            param["description"] = json!("A coin of `webhooks.coins` (the default list is shown)");
        }
    }
    template_request(doc);
    query_flags(doc);
    shared_error_responses(doc);
    no_nul_strings(doc);
}

/// The wallet reads' query flags take `true`/`false` and the spellings `flag` also reads
/// (`http::handlers::wallets::FLAG_TRUE`, `FLAG_FALSE`), so none of them is a schema violation.
fn query_flags(doc: &mut Value) {
    use crate::http::handlers::wallets::{FLAGS, FLAG_FALSE, FLAG_TRUE};
    let spellings: Vec<&str> = FLAG_TRUE.iter().chain(FLAG_FALSE).copied().collect();
    let schema = json!({ "anyOf": [{ "type": "boolean" }, { "type": "string", "enum": spellings }] });
    let Some(paths) = doc["paths"].as_object_mut() else { return };
    let operations = paths.values_mut().filter_map(Value::as_object_mut).flat_map(|p| p.values_mut());
    for param in operations.filter_map(|op| op.get_mut("parameters").and_then(Value::as_array_mut)).flatten()
    {
        if param["in"] == "query" && FLAGS.iter().any(|f| param["name"] == *f) {
            param["schema"] = schema.clone();
            let said = param["description"].as_str().unwrap_or_default();
            param["description"] =
                json!(format!("{said} `true` or `false`; also `1`, `0`, or a bare flag for true."));
        }
    }
}

/// The answers an operation may give because of its class, written once here instead of on
/// every handler: any request may outlive `request_timeout` (408) or arrive beyond
/// `max_in_flight_requests` (503 `ServerBusy`; login may also find password hashing full); an
/// authenticated one may be refused its token (401) or exceed its user's rate limit (429,
/// `rate_limit.*`); one that reads a JSON body may send too much (413) or not JSON (415). An
/// operation that says more about one of these keeps its own description.
fn shared_error_responses(doc: &mut Value) {
    let error = json!({ "application/json": { "schema": { "$ref": "#/components/schemas/ErrorResponse" } } });
    let Some(paths) = doc["paths"].as_object_mut() else { return };
    for item in paths.values_mut() {
        let Some(ops) = item.as_object_mut() else { continue };
        for op in ops.values_mut() {
            let authenticated = op.get("security").is_some();
            let json_body = op.pointer("/requestBody/content/application~1json").is_some();
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else { continue };
            let mut shared = vec![
                ("408", "The request took longer than `request_timeout` (RequestTimeout)"),
                ("503", "At capacity (ServerBusy), or the database does not answer; see Retry-After"),
            ];
            if authenticated {
                shared.push(("401", "Not authenticated"));
                shared.push((
                    "429",
                    "Over the user's rate limit (TooManyRequests); see Retry-After and RateLimit-*",
                ));
            }
            if json_body {
                shared.push(("413", "Body over 1 MiB"));
                shared.push(("415", "Body not JSON"));
            }
            for (code, description) in shared {
                responses
                    .entry(code)
                    .or_insert_with(|| json!({ "description": description, "content": error.clone() }));
            }
        }
    }
}

/// §4.3 as `identity::tokens::validate` checks it.
fn access_token_request(schemas: &mut Value) {
    let s = &mut schemas["CreateAccessTokenRequest"];
    s["required"] = json!(["label", "otp"]);
    let p = &mut s["properties"];
    p["label"] = json!({ "type": "string", "pattern": NOT_BLANK, "maxLength": 256 });
    // Six digits, or a passkey assertion's JSON (`types::SecondFactor`).
    p["otp"] = json!({ "type": "string", "pattern": format!("^([0-9]{{{OTP_DIGITS}}}|\\{{.*)$"), "maxLength": 16384 });
    p["duration"]["minimum"] = json!(1);
    p["duration"]["maximum"] = json!(MAX_DURATION);
    p["enterprise"]["pattern"] = json!(ID);
    let names: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
    let context: Vec<&str> =
        Scope::ALL.iter().filter(|s| s.takes_wallet_context()).map(|s| s.as_str()).collect();
    let scope = format!("^({}|({}):[0-9a-f]{{32}})$", names.join("|"), context.join("|"));
    p["scope"]["items"] = json!({ "type": "string", "pattern": scope });
    p["scope"]["maxItems"] = json!(MAX_SCOPES);
    p["ipRestrict"]["items"] = json!({ "anyOf": [
        { "type": "string", "pattern": IPV4_OR_CIDR },
        { "type": "string", "format": "ipv6" },
    ] });
    p["ipRestrict"]["maxItems"] = json!(MAX_IP_RESTRICT);
    for list in ["permittedWallets", "permittedEnterprises"] {
        p[list]["items"] = json!({ "type": "string", "pattern": ID });
        p[list]["maxItems"] = json!(MAX_PERMITTED);
    }
    p["spendingLimits"]["maxItems"] = json!(MAX_SPENDING_LIMITS);
    let limit = &mut schemas["SpendingLimitRequest"]["properties"];
    limit["coin"]["pattern"] = json!(COIN_PATTERN);
    // Base units as digits, a JSON string or a whole number, as `token_request::base_units` reads them.
    let units = kind_schema(Kind::BaseUnits { signed: false });
    limit["txValueLimit"] = units.clone();
    schemas["AllErc20TokensLimit"]["properties"]["txValueLimit"] =
        json!({ "anyOf": [units, { "type": "null" }] });
}

/// A token template holds only the §4.3 fields of `identity::tokens::TEMPLATE_FIELDS`, each as
/// the access token request has it or `null` (no default), and nothing else
/// (`identity::tokens::create_template`).
fn template_request(doc: &mut Value) {
    let token = &doc["components"]["schemas"]["CreateAccessTokenRequest"]["properties"];
    let properties: serde_json::Map<String, Value> = TEMPLATE_FIELDS
        .iter()
        .map(|f| (f.to_string(), json!({ "anyOf": [token[*f].clone(), { "type": "null" }] })))
        .collect();
    let schema = json!({ "type": "object", "properties": properties, "additionalProperties": false });
    doc["paths"]["/api/v2/user/accesstokentemplate"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"] = schema;
}

/// One request schema per level (§4.4, §4.6, §4.8): the level's types, and
/// `numConfirmations` for blocks and wallets (`webhooks::registration::create`).
fn webhook_requests(schemas: &mut Value) {
    let mut base = schemas["CreateWebhookRequest"].clone();
    let p = &mut base["properties"];
    p["url"]["pattern"] = json!(crate::webhooks::callback_url::URL_PATTERN);
    p["url"]["maxLength"] = json!(MAX_URL_LEN);
    p["label"]["maxLength"] = json!(250);
    let reserved: Vec<String> = RESERVED_HEADERS.iter().map(|h| any_case(h)).collect();
    p["customHttpHeaders"]["maxProperties"] = json!(MAX_CUSTOM_HEADERS);
    p["customHttpHeaders"]["propertyNames"] = json!({
        "type": "string",
        "pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
        "not": { "pattern": format!("^({})$", reserved.join("|")) },
    });
    p["customHttpHeaders"]["additionalProperties"] =
        json!({ "type": "string", "pattern": "^[\\t\\x20-\\x7e]*$", "maxLength": MAX_HEADER_VALUE_BYTES });
    for (list, states) in [
        ("txRequestStates", TX_REQUEST_STATES),
        ("txRequestTransactionStates", TX_REQUEST_TRANSACTION_STATES),
    ] {
        p[list]["items"] = json!({ "type": "string", "enum": states });
        p[list]["maxItems"] = json!(MAX_TX_REQUEST_STATES);
    }
    for (name, types) in [
        ("WalletWebhookRequest", WALLET_TYPES),
        ("BlockWebhookRequest", BLOCK_TYPES),
        ("EnterpriseWebhookRequest", ENTERPRISE_TYPES),
    ] {
        let mut s = base.clone();
        s["properties"]["type"]["enum"] = json!(types);
        if name == "EnterpriseWebhookRequest" {
            if let Some(props) = s["properties"].as_object_mut() {
                props.remove("numConfirmations");
            }
        } else {
            s["properties"]["numConfirmations"]["maximum"] = json!(crate::webhooks::MAX_NUM_CONFIRMATIONS);
        }
        schemas[name] = s;
    }
}

/// The event body (§4.11): each family of types names the id it fans out by
/// (`webhooks::events::ingest`).
fn event_request(schemas: &mut Value) {
    let s = &mut schemas["EventRequest"];
    let p = &mut s["properties"];
    p["walletId"]["pattern"] = json!(ID);
    p["enterpriseId"]["pattern"] = json!(ID);
    p["coin"]["pattern"] = json!(COIN_PATTERN);
    let all: Vec<&str> = WALLET_TYPES.iter().chain(BLOCK_TYPES).chain(ENTERPRISE_TYPES).copied().collect();
    p["type"]["enum"] = json!(all);
    // One branch per type and level: its routing id, and its known fields (`webhooks::event_fields`).
    let branches: Vec<Value> =
        [(WALLET_TYPES, "walletId"), (BLOCK_TYPES, "coin"), (ENTERPRISE_TYPES, "enterpriseId")]
            .iter()
            .flat_map(|(types, id)| types.iter().map(move |t| (*t, *id)))
            .map(|(t, id)| {
                let mut props = json!({ "type": { "const": t }, id: { "type": "string" } });
                for (name, kind) in known_fields(t) {
                    props[*name] = kind_schema(*kind);
                }
                json!({ "properties": props, "required": [id] })
            })
            .collect();
    // `anyOf`: `pendingapproval` has a wallet's branch and an enterprise's.
    s["anyOf"] = json!(branches);
}

/// The JSON Schema of a known event field's kind (`webhooks::event_fields::Kind`).
fn kind_schema(kind: Kind) -> Value {
    let text = json!({ "type": "string", "minLength": 1, "maxLength": 200 });
    let strings = json!({ "type": "array", "maxItems": 1000, "items": text });
    match kind {
        Kind::ObjectId => json!({ "type": "string", "pattern": "^([0-9a-f]{24}|[0-9a-f]{32})$" }),
        Kind::Text => text,
        Kind::WholeNumber => json!({ "type": "integer", "minimum": 0 }),
        Kind::BaseUnits { signed: true } => json!({ "anyOf": [
            { "type": "integer" }, { "type": "string", "pattern": "^-?[0-9]{1,100}$" } ] }),
        Kind::BaseUnits { signed: false } => json!({ "anyOf": [
            { "type": "integer", "minimum": 0 }, { "type": "string", "pattern": "^[0-9]{1,100}$" } ] }),
        Kind::OneOf(list) => json!({ "type": "string", "enum": list }),
        Kind::Strings => strings,
        Kind::TextOrStrings => json!({ "anyOf": [text, strings] }),
        Kind::Bool => json!({ "type": "boolean" }),
    }
}

/// A pattern matching `name` in any letter case (header names are case-insensitive).
fn any_case(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            } else {
                regex_escape(c)
            }
        })
        .collect()
}

fn regex_escape(c: char) -> String {
    if "\\^$.|?*+()[]{}-".contains(c) {
        format!("\\{c}")
    } else {
        c.to_string()
    }
}

/// Every string schema without a pattern, format or enum gets [`NO_NUL`].
fn no_nul_strings(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let is_string = match map.get("type") {
                Some(Value::String(t)) => t == "string",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
                _ => false,
            };
            let constrained =
                ["pattern", "format", "enum", "const", "$ref"].iter().any(|k| map.contains_key(*k));
            if is_string && !constrained {
                map.insert("pattern".into(), json!(NO_NUL));
            }
            for (k, x) in map.iter_mut() {
                // Examples and descriptions are data, not schemas.
                if k != "example" && k != "examples" && k != "description" {
                    no_nul_strings(x);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(no_nul_strings),
        _ => {}
    }
}
