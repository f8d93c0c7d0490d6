//! ECDH keychains and the `ecdhKeychain` setting on BitGo's paths (BitGoJS's
//! `ensureEcdhKeychain`, driven for real in sdk-tests/): what is refused, and what is kept.

use serde_json::json;

use crate::common::*;

const XPUB: &str = "xpub661MyMwAqRbcErFqVXGiUFv9YeoPbhN72UiNCUdj9nj3T6M8h7iKNmbCYpMVWVZP7LA2ma3HWcPngz1gRTm4FPdtm9mHfrNvU93MCoszsGL";
const ENVELOPE: &str = r#"{"iv":"QKHEF2GNcwOJwy6+pwANRA==","v":1,"iter":10000,"ks":256,"ts":64,"mode":"ccm","adata":"","cipher":"aes","salt":"W2sVFvXDlOw=","ct":"8BTC"}"#;

#[tokio::test]
async fn an_ecdh_keychain_is_kept_and_chosen_and_bad_ones_are_refused() {
    let app = spawn_app().await;
    let user = app.create_user("keys@example.com").await;
    let token = app.login(&user).await;
    for (body, field) in [
        (json!({ "xpub": "xprv-or-anything", "encryptedXprv": ENVELOPE }), "xpub"),
        (json!({ "source": "user", "xpub": XPUB, "encryptedXprv": ENVELOPE }), "source"),
        (json!({ "xpub": XPUB, "encryptedXprv": "xprv in the clear" }), "encryptedXprv"),
        (json!({ "xpub": XPUB, "encryptedXprv": ENVELOPE, "isLedger": true }), "isLedger"),
    ] {
        let res = app.post_auth("/api/v1/keychain", &token, &body).await;
        let got = assert_error(res, 400, "InvalidField").await;
        assert_eq!(got["context"]["field"], field, "{got}");
    }
    // Only a keychain the user added can be their ecdhKeychain.
    let set = json!({ "settings": { "ecdhKeychain": XPUB } });
    assert_error(app.put_auth("/api/v2/user/settings", &token, &set).await, 404, "NotFound").await;
    let added = json!({ "xpub": XPUB, "encryptedXprv": ENVELOPE });
    let k = expect_json(app.post_auth("/api/v1/keychain", &token, &added).await, 200).await;
    assert_eq!((k["xpub"].as_str(), k["source"].as_str()), (Some(XPUB), Some("ecdh")), "{k}");
    let empty = expect_json(app.get_auth("/api/v1/user/settings", &token).await, 200).await;
    assert_eq!(empty, json!({ "settings": {} }));
    expect_json(app.put_auth("/api/v2/user/settings", &token, &set).await, 200).await;
    let settings = expect_json(app.get_auth("/api/v1/user/settings", &token).await, 200).await;
    assert_eq!(settings["settings"]["ecdhKeychain"], XPUB);
    let me = expect_json(app.get_auth("/api/v2/user/me", &token).await, 200).await;
    assert_eq!(me["user"]["ecdhKeychain"], XPUB, "{me}");
    // Another user's settings are their own.
    let other = app.create_user("other-keys@example.com").await;
    let other = app.login(&other).await;
    let theirs = expect_json(app.get_auth("/api/v2/user/settings", &other).await, 200).await;
    assert_eq!(theirs, json!({ "settings": {} }));
    assert_error(app.put_auth("/api/v2/user/settings", &other, &set).await, 404, "NotFound").await;
    let audit =
        app.raw_sql("SELECT type FROM audit_log WHERE type LIKE 'user.ecdh_keychain%' ORDER BY seq").await;
    assert_eq!(audit, ["user.ecdh_keychain_added", "user.ecdh_keychain_set"]);
}

/// A bearer session alone, once its login is no longer fresh, cannot change what seals the
/// user's future tokens (a thief's keychain would open every later login); with a fresh code
/// it can. A fresh login's session can (BitGoJS's `ensureEcdhKeychain` right after logging in).
#[tokio::test]
async fn ecdh_keychain_changes_need_a_fresh_factor_once_the_login_is_old() {
    let app = spawn_app_with(|c| c.login.fresh_factor_secs = 0).await;
    let user = app.create_user("stolen@example.com").await;
    let session = app.login(&user).await;
    let added = json!({ "xpub": XPUB, "encryptedXprv": ENVELOPE });
    assert_error(app.post_auth("/api/v1/keychain", &session, &added).await, 401, "InvalidOtp").await;
    let wrong = json!({ "xpub": XPUB, "encryptedXprv": ENVELOPE, "otp": "123456" });
    assert_error(app.post_auth("/api/v1/keychain", &session, &wrong).await, 401, "InvalidOtp").await;
    let empty = expect_json(app.get_auth("/api/v1/user/settings", &session).await, 200).await;
    assert_eq!(empty, json!({ "settings": {} }), "nothing was kept");
    let with_code = json!({ "xpub": XPUB, "encryptedXprv": ENVELOPE, "otp": "000000" });
    expect_json(app.post_auth("/api/v1/keychain", &session, &with_code).await, 200).await;
    let set = json!({ "settings": { "ecdhKeychain": XPUB } });
    assert_error(app.put_auth("/api/v2/user/settings", &session, &set).await, 401, "InvalidOtp").await;
    let set_with_code = json!({ "settings": { "ecdhKeychain": XPUB }, "otp": "000000" });
    expect_json(app.put_auth("/api/v2/user/settings", &session, &set_with_code).await, 200).await;
    let audit = app
        .raw_sql("SELECT type FROM audit_log WHERE type LIKE 'user.ecdh_keychain%' OR type = 'otp.failed' ORDER BY seq")
        .await;
    assert_eq!(
        audit.iter().filter(|t| t.starts_with("user.ecdh")).collect::<Vec<_>>(),
        ["user.ecdh_keychain_added", "user.ecdh_keychain_set"]
    );
    assert!(audit.len() >= 4, "the refused attempts are audited: {audit:?}");
}

/// The fresh-login window and the unlock window end on the service's clock: moved past each,
/// the change needs a code again.
#[tokio::test]
async fn the_fresh_login_and_unlock_windows_end_when_the_clock_passes_them() {
    let app = spawn_app().await;
    let user = app.create_user("windows@example.com").await;
    let session = app.login(&user).await;
    let added = json!({ "xpub": XPUB, "encryptedXprv": ENVELOPE });
    expect_json(app.post_auth("/api/v1/keychain", &session, &added).await, 200).await;
    let clock = app.state.store.clock();
    clock.advance(std::time::Duration::from_secs(301));
    let set = json!({ "settings": { "ecdhKeychain": XPUB } });
    assert_error(app.put_auth("/api/v2/user/settings", &session, &set).await, 401, "InvalidOtp").await;
    let unlock = json!({ "otp": "000000", "duration": 120 });
    expect_json(app.post_auth("/api/v2/user/unlock", &session, &unlock).await, 200).await;
    expect_json(app.put_auth("/api/v2/user/settings", &session, &set).await, 200).await;
    let view = expect_json(app.get_auth("/api/v2/user/session", &session).await, 200).await;
    assert!(view["session"]["unlock"].is_object(), "unlocked: {view}");
    clock.advance(std::time::Duration::from_secs(121));
    assert_error(app.put_auth("/api/v2/user/settings", &session, &set).await, 401, "InvalidOtp").await;
    let view = expect_json(app.get_auth("/api/v2/user/session", &session).await, 200).await;
    assert!(view["session"].get("unlock").is_none(), "the unlock has ended on the service's clock: {view}");
}
