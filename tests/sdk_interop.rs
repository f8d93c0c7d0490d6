//! BitGoJS itself (`@bitgo/sdk-api` in sdk-tests/, installed by `.ci/run`) opens what
//! Custodian's ECDH token issuance makes: an xprv sealed under the user's password, and a token
//! sealed under the secret the server derives from its own xprv and the user's xpub
//! (`identity::ecdh`). The SDK's `handleTokenIssuance` must return the token.

use std::process::Command;

use bitcoin::{
    bip32::{Xpriv, Xpub},
    secp256k1::Secp256k1,
    NetworkKind,
};
use custodian::identity::ecdh;
use rand::RngCore;
use serde_json::json;

const SCRIPT: &str = r#"
const { BitGoAPI } = require('@bitgo/sdk-api');
const args = JSON.parse(process.argv[1]);
const bitgo = new BitGoAPI({ env: 'custom', customRootURI: 'http://127.0.0.1:9', serverXpub: args.serverXpub });
process.stdout.write(bitgo.handleTokenIssuance(args.body, args.password).token);
"#;

fn master() -> Xpriv {
    let mut seed = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut seed);
    Xpriv::new_master(NetworkKind::Main, &seed).expect("a master key")
}

#[test]
fn bitgojs_opens_a_token_custodian_issues_over_ecdh() {
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk-tests");
    assert!(
        std::path::Path::new(sdk).join("node_modules/@bitgo/sdk-api").exists(),
        "BitGoJS is not installed: run `npm install` in sdk-tests/ (as .ci/run does)"
    );
    let secp = Secp256k1::new();
    let (server, client) = (master(), master());
    let password = "correct horse battery staple";
    let path = ecdh::fresh_path();
    let token = format!("v2x{}", hex::encode([0x5au8; 32]));
    let secret = ecdh::shared_secret(&server, &Xpub::from_priv(&secp, &client), &path).unwrap();
    let body = json!({
        "encryptedToken": ecdh::seal(&secret, &token),
        "derivationPath": ecdh::path_text(&path),
        "encryptedECDHXprv": ecdh::seal(password, &client.to_string()),
    });
    let args = json!({ "serverXpub": Xpub::from_priv(&secp, &server).to_string(), "body": body, "password": password });
    let out = Command::new("node")
        .current_dir(sdk)
        .args(["-e", SCRIPT, &args.to_string()])
        .output()
        .expect("node runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), token);
}
