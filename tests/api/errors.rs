//! The §7 error body and request-id contract for every kind of bad request.

use serde_json::{json, Value};

use crate::common::*;

#[tokio::test]
async fn health_answers_ok() {
    let app = spawn_app().await;
    let res = app.client.get(app.url("/health")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], "ok");
}

#[tokio::test]
async fn health_is_503_when_the_database_does_not_answer() {
    let app = spawn_app().await;
    app.state.store.close().await;
    let res = app.client.get(app.url("/health")).send().await.unwrap();
    let body = assert_error(res, 503, "ServiceUnavailable").await;
    assert_eq!(body["error"], "database unavailable", "the cause stays in the log");
}

#[tokio::test]
async fn unknown_route_is_404_with_error_body() {
    let app = spawn_app().await;
    let res = app.client.get(app.url("/api/v2/nope")).send().await.unwrap();
    assert_error(res, 404, "NotFound").await;
}

#[tokio::test]
async fn wrong_method_is_405_with_error_body() {
    let app = spawn_app().await;
    let res = app.client.get(app.url("/api/v2/internal/user/login")).send().await.unwrap();
    assert_error(res, 405, "MethodNotAllowed").await;
}

#[tokio::test]
async fn malformed_json_is_400() {
    let app = spawn_app().await;
    let res = app
        .client
        .post(app.url("/api/v2/internal/user/login"))
        .header("content-type", "application/json")
        .body("{\"email\": ")
        .send()
        .await
        .unwrap();
    assert_error(res, 400, "MalformedJson").await;
}

#[tokio::test]
async fn missing_or_wrong_content_type_is_415() {
    let app = spawn_app().await;
    let body = r#"{"email":"a@b.co","password":"x","otp":"1"}"#;
    let res = app.client.post(app.url("/api/v2/internal/user/login")).body(body).send().await.unwrap();
    assert_error(res, 415, "UnsupportedMediaType").await;
    let res = app
        .client
        .post(app.url("/api/v2/internal/user/login"))
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_error(res, 415, "UnsupportedMediaType").await;
}

#[tokio::test]
async fn field_of_wrong_type_is_400_naming_it() {
    let app = spawn_app().await;
    let res =
        app.post("/api/v2/internal/user/login", &json!({ "email": 5, "password": "x", "otp": "1" })).await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "email");
    let res = app.post("/api/v2/internal/user/login", &json!({ "password": "x" })).await;
    let body = assert_error(res, 400, "MissingField").await;
    assert_eq!(body["context"]["field"], "email");
    // A repeated field is refused, not read twice (docs/decisions.md, Performance).
    let res = app
        .client
        .post(app.url("/api/v2/internal/user/login"))
        .header("content-type", "application/json")
        .body(r#"{"email":"a@example.com","email":"b@example.com","password":"x","otp":"1"}"#)
        .send()
        .await
        .unwrap();
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "email");
}

#[tokio::test]
async fn body_over_one_mebibyte_is_413() {
    let app = spawn_app().await;
    let big = format!("{{\"email\":\"{}\",\"password\":\"x\"}}", "a".repeat(1024 * 1024 + 10));
    let res = app
        .client
        .post(app.url("/api/v2/internal/user/login"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_error(res, 413, "PayloadTooLarge").await;
}

#[tokio::test]
async fn request_id_is_echoed_or_generated() {
    let app = spawn_app().await;
    let res =
        app.client.get(app.url("/nowhere")).header("request-id", "client-chosen-id-42").send().await.unwrap();
    assert_eq!(res.headers()["request-id"], "client-chosen-id-42");
    let body = assert_error(res, 404, "NotFound").await;
    assert_eq!(body["requestId"], "client-chosen-id-42");

    let res = app.client.get(app.url("/health")).send().await.unwrap();
    let id = res.headers()["request-id"].to_str().unwrap().to_string();
    assert!(custodian::types::is_id(&id), "generated id {id:?} is 32 hex");
}

/// A client's request id is used only when it is at most 128 safe characters;
/// otherwise (64 KB, spaces, quotes) a generated one is echoed and logged instead.
#[tokio::test]
async fn oversized_or_unsafe_request_ids_are_replaced() {
    let app = spawn_app().await;
    let longest = "a".repeat(128);
    let res = app.client.get(app.url("/nowhere")).header("request-id", &longest).send().await.unwrap();
    assert_eq!(res.headers()["request-id"], longest.as_str(), "128 safe characters are kept");
    for bad in ["a".repeat(129), "x".repeat(64 * 1024), "two words".into(), "quote\"d".into()] {
        let res = app.client.get(app.url("/nowhere")).header("request-id", &bad).send().await.unwrap();
        let id = res.headers()["request-id"].to_str().unwrap().to_string();
        assert!(
            custodian::types::is_id(&id),
            "{} characters replaced by a generated id, got {id:?}",
            bad.len()
        );
        assert_eq!(assert_error(res, 404, "NotFound").await["requestId"], id.as_str());
    }
}

#[tokio::test]
async fn served_openapi_matches_committed_file() {
    let app = spawn_app().await;
    let served: Value = app.client.get(app.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json")).expect("openapi.json"),
    )
    .expect("committed openapi.json is JSON");
    assert!(
        served == committed,
        "openapi.json is stale: regenerate it with `cargo run -q -- openapi > openapi.json`"
    );
    assert_eq!(served["openapi"], "3.1.0");
    for path in [
        "/api/v2/internal/user/login",
        "/api/v2/user/accesstoken",
        "/api/v2/user/me",
        "/api/v2/internal/wallet",
        "/api/v2/{coin}/wallet/{walletId}/webhooks",
        "/api/v2/{coin}/webhooks",
        "/api/v2/enterprise/{enterpriseId}/webhooks",
        "/api/v2/webhook/{webhookId}/verify",
        "/api/v2/internal/events",
        "/health",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(served["paths"].get(path).is_some(), "{path} documented");
    }
}

#[tokio::test]
async fn nul_characters_are_refused_at_the_edge() {
    let app = spawn_app().await;
    let res = app
        .post(
            "/api/v2/internal/user/login",
            &json!({ "email": "a\u{0}@example.com", "password": "x", "otp": "1" }),
        )
        .await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "email");
    let user = app.create_user("nul@example.com").await;
    let token = app.login(&user).await;
    let res = app.create_token(&token, json!({ "label": "ok", "permittedWallets": ["a\u{0}"] })).await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "permittedWallets[0]");
    // Fields the server does not read are ignored, NUL or not.
    let res = app
        .post(
            "/api/v2/internal/user/login",
            &json!({ "email": user.email, "password": PASSWORD, "otp": "000000", "extra\u{0}": "x\u{0}" }),
        )
        .await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn bad_path_values_are_400_naming_the_parameter() {
    let app = spawn_app().await;
    let user = app.create_user("paths@example.com").await;
    let token = app.login(&user).await;
    let id = "0123456789abcdef0123456789abcdef";
    let client = reqwest::Client::new();
    let cases: Vec<(reqwest::Method, String, &str)> = vec![
        (reqwest::Method::GET, "/api/v2/BTC/webhooks".into(), "coin"),
        (reqwest::Method::GET, format!("/api/v2/btc/wallet/{}/webhooks", "0"), "walletId"),
        (reqwest::Method::GET, "/api/v2/enterprise/ACME/webhooks".into(), "enterpriseId"),
        (reqwest::Method::POST, "/api/v2/webhook/0/unblock".into(), "webhookId"),
        (
            reqwest::Method::GET,
            format!("/api/v2/webhook/{id}/notifications/{}/attempts", "x".repeat(32)),
            "notificationId",
        ),
        (reqwest::Method::POST, format!("/api/v2/internal/wallet/{}/balance", id.to_uppercase()), "walletId"),
    ];
    for (method, path, field) in cases {
        let res = client
            .request(method, app.url(&path))
            .bearer_auth(&token)
            .json(&json!({}))
            .send()
            .await
            .expect("request");
        let body = assert_error(res, 400, "InvalidField").await;
        assert_eq!(body["context"]["field"], field, "{path}: {body}");
    }
}

#[tokio::test]
async fn the_api_reference_is_served_and_committed_as_generated() {
    let app = spawn_app().await;
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).expect("docs/api.md");
    assert!(
        committed == custodian::http::reference_markdown(),
        "docs/api.md is stale: regenerate it with `cargo run -q -- openapi --markdown > docs/api.md`"
    );
    let doc: Value = app.client.get(app.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    let page = app.client.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let page = page.text().await.unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let heading = format!("{} {}", method.to_ascii_uppercase(), path);
            assert!(page.contains(&heading), "/docs lacks {heading}");
            assert!(committed.contains(&format!("### `{heading}`")), "docs/api.md lacks {heading}");
        }
    }
    for section in ["§2.1", "§4.3", "§4.10", "§7"] {
        assert!(committed.contains(&format!("| {section} |")), "docs/api.md maps {section}");
    }
}

#[tokio::test]
async fn the_front_page_points_to_the_console_and_the_reference() {
    let app = spawn_app().await;
    let res = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let body = res.text().await.unwrap();
    for link in ["href=\"/console\"", "href=\"/docs\"", "href=\"/openapi.json\"", "rel=\"icon\""] {
        assert!(body.contains(link), "the front page lacks {link}: {body}");
    }
    let icon = app.client.get(app.url("/favicon.ico")).send().await.unwrap();
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
}
