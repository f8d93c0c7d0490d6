//! Keys in an HSM: SoftHSM2 (Debian's `softhsm2`, installed by `.ci/run`) through PKCS#11,
//! its token made in a temporary folder once per test process.

use std::sync::OnceLock;

use cryptoki::{
    object::{Attribute, AttributeType, ObjectClass},
    session::UserType,
    types::AuthPin,
};
use serde_json::json;

use crate::chain::{ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::custodial_with;

pub const MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";
pub const TOKEN: &str = "custodian";
pub const PIN: &str = "1234";

/// Makes the SoftHSM2 token once (its folder lives as long as the process) and points
/// `SOFTHSM2_CONF` at it before any test loads the module.
pub fn softhsm() {
    static MADE: OnceLock<tempfile::TempDir> = OnceLock::new();
    MADE.get_or_init(|| {
        assert!(
            std::path::Path::new(MODULE).exists(),
            "SoftHSM2 is not installed ({MODULE}): apt-get install softhsm2 (as .ci/run does)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let tokens = dir.path().join("tokens");
        std::fs::create_dir(&tokens).expect("token folder");
        let conf = dir.path().join("softhsm2.conf");
        std::fs::write(
            &conf,
            format!("directories.tokendir = {}\nobjectstore.backend = file\n", tokens.display()),
        )
        .expect("conf");
        std::env::set_var("SOFTHSM2_CONF", &conf);
        let made = std::process::Command::new("softhsm2-util")
            .args(["--init-token", "--free", "--label", TOKEN, "--pin", PIN, "--so-pin", "5678"])
            .output()
            .expect("softhsm2-util");
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        dir
    });
}

fn hsm(c: &mut custodian::config::Config) {
    softhsm();
    c.keys.backend = "pkcs11".into();
    c.keys.pkcs11_module = Some(MODULE.into());
    c.keys.pkcs11_token = Some(TOKEN.into());
    let pin = std::env::temp_dir().join(format!("custodian-test-pin-{}", std::process::id()));
    std::fs::write(&pin, PIN).expect("pin file");
    c.keys.pkcs11_pin_file = Some(pin);
}

/// What the token itself says of the key whose `CKA_ID` is `id`: `types` of its private object,
/// then `others` of its public one, read through a session of the test's own.
async fn token_attributes(
    id: Vec<u8>,
    types: Vec<AttributeType>,
    others: Vec<AttributeType>,
) -> (Vec<Attribute>, Vec<Attribute>) {
    tokio::task::spawn_blocking(move || {
        let context = custodian::custody::pkcs11::context(std::path::Path::new(MODULE)).expect("context");
        let slot = context
            .get_slots_with_token()
            .expect("slots")
            .into_iter()
            .find(|s| context.get_token_info(*s).is_ok_and(|t| t.label().trim_end() == TOKEN))
            .expect("the token");
        let session = context.open_ro_session(slot).expect("session");
        // Login is the process's: the key store's session logged it in already.
        match session.login(UserType::User, Some(&AuthPin::new(PIN.into()))) {
            Ok(())
            | Err(cryptoki::error::Error::Pkcs11(cryptoki::error::RvError::UserAlreadyLoggedIn, _)) => {}
            Err(e) => panic!("login: {e}"),
        }
        let read = |class: ObjectClass, types: &[AttributeType]| {
            let found =
                session.find_objects(&[Attribute::Class(class), Attribute::Id(id.clone())]).expect("find");
            assert_eq!(found.len(), 1, "one {class} object for the key");
            session.get_attributes(found[0], types).expect("attributes")
        };
        (read(ObjectClass::PRIVATE_KEY, &types), read(ObjectClass::PUBLIC_KEY, &others))
    })
    .await
    .expect("the token's attributes")
}

#[tokio::test]
async fn a_withdrawal_signed_inside_the_hsm_is_mined_once() {
    let c = custodial_with(ONE_ETH, 1, hsm).await;
    assert_eq!(c.app.raw_sql("SELECT backend FROM custody_keys").await, ["pkcs11"]);
    // What the database holds is the key's id in the token, not key material.
    let handle = c.app.raw_sql("SELECT handle FROM custody_keys").await.remove(0);
    let key_id = c.wallet["keys"][0].as_str().unwrap();
    assert_eq!(hex::decode(handle).unwrap(), key_id.as_bytes());
    // The token holds a signing key and nothing more: read back from the token itself.
    use AttributeType as T;
    let (private, public) = token_attributes(
        key_id.as_bytes().to_vec(),
        vec![
            T::Sign,
            T::SignRecover,
            T::Decrypt,
            T::Unwrap,
            T::Derive,
            T::Sensitive,
            T::Extractable,
            T::Modifiable,
            T::Copyable,
        ],
        vec![T::Verify, T::VerifyRecover, T::Encrypt, T::Wrap, T::Derive],
    )
    .await;
    use Attribute as A;
    let want_private = [
        A::Sign(true),
        A::SignRecover(false),
        A::Decrypt(false),
        A::Unwrap(false),
        A::Derive(false),
        A::Sensitive(true),
        A::Extractable(false),
        A::Modifiable(false),
        A::Copyable(false),
    ];
    assert_eq!(private, want_private);
    assert_eq!(
        public,
        [A::Verify(true), A::VerifyRecover(false), A::Encrypt(false), A::Wrap(false), A::Derive(false)]
    );
    let before = c.anvil.balance(OTHER).await;
    let sent = c.withdraw(OTHER, "4242").await;
    let hash = sent["transactions"][0]["txHash"].as_str().unwrap();
    let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
    assert_eq!(receipt["from"].as_str().unwrap(), c.address().to_lowercase());
    assert_eq!(c.anvil.balance(OTHER).await, before + 4242);
}

#[tokio::test]
async fn a_signature_that_does_not_verify_is_made_again_and_never_sent() {
    let c = custodial_with(ONE_ETH, 1, hsm).await;
    // A second key in the token; the wallet's record is made to point at it, so the HSM signs
    // with a key that is not the wallet's address.
    let other = json!({ "label": "other", "enterprise": c.enterprise, "type": "custodial" });
    expect_json(c.app.post_auth("/api/v2/hteth/wallet/add", &c.alice_token, &other).await, 200).await;
    let key_id = c.wallet["keys"][0].as_str().unwrap();
    c.app
        .raw_sql(&format!(
            "UPDATE custody_keys SET handle = (SELECT handle FROM custody_keys WHERE id <> '{key_id}') WHERE id = '{key_id}'"
        ))
        .await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "1" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    until("three refused signatures, then more rounds", 30, || async {
        (metric_value(&c.app, "custodian_custody_signatures_unverified_total").await >= 6).then_some(())
    })
    .await;
    let id = pending["txRequestId"].as_str().unwrap();
    let t = c.tx_request(id).await;
    assert_eq!(t["state"], "pendingDelivery", "{t}");
    assert!(t["transactions"][0]["txHash"].is_null(), "{t}");
    let count = c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "pending"])).await;
    assert_eq!(count, "0x0", "nothing left the address");
    assert_eq!(metric_value(&c.app, "custodian_custody_broadcasts_total").await, 0);
}
