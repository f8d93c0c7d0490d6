//! Multisig wallets of UTXO coins through the API (docs/chains.md#utxo-chains): keychains,
//! wallets of three of them, and addresses derived BitGo's way. The derivation itself is judged
//! by BitGo's utxo-lib (tests/sdk_interop.rs) and Litecoin Core (litecoind.rs).

use bitcoin::{
    bip32::{Xpriv, Xpub},
    secp256k1::Secp256k1,
    NetworkKind,
};
use serde_json::{json, Value};

use crate::common::*;
use custodian::chain::utxo::{
    address::{derive, ChainCode, WalletKeys},
    params::{Family, Network},
};

/// Three xpubs from fixed seeds `seed`, `seed + 1`, `seed + 2`.
fn xpubs(seed: u8) -> Vec<String> {
    let secp = Secp256k1::new();
    (0..3u8)
        .map(|i| {
            Xpub::from_priv(&secp, &Xpriv::new_master(NetworkKind::Main, &[seed + i; 32]).unwrap())
                .to_string()
        })
        .collect()
}

/// Alice administers Acme; her session and Acme's id.
async fn acme() -> (TestApp, String, String) {
    let app = spawn_app_with(|c| c.utxo.max_addresses_per_wallet = 5).await;
    let alice = app.create_user("alice@example.com").await;
    let acme = app.create_enterprise("Acme", &[(&alice, true)]).await;
    let token = app.login(&alice).await;
    (app, token, acme)
}

/// Adds keychains of `pubs` for the token's user: their ids.
async fn keychains(app: &TestApp, token: &str, pubs: &[String]) -> Vec<String> {
    let mut ids = Vec::new();
    for (p, source) in pubs.iter().zip(["user", "backup", "bitgo"]) {
        let k = expect_json(
            app.post_auth("/api/v2/tltc/key", token, &json!({ "pub": p, "source": source })).await,
            200,
        )
        .await;
        assert_eq!((k["pub"].as_str(), k["source"].as_str()), (Some(p.as_str()), Some(source)));
        ids.push(k["id"].as_str().unwrap().to_string());
    }
    ids
}

fn ours(pubs: &[String], chain: u32, index: u32) -> custodian::chain::utxo::address::Derived {
    let keys = WalletKeys::parse([&pubs[0], &pubs[1], &pubs[2]]).unwrap();
    derive(&keys, ChainCode::new(chain).unwrap(), index, Family::Litecoin.params(Network::Testnet)).unwrap()
}

#[tokio::test]
async fn a_wallet_of_three_keychains_derives_bitgo_s_addresses_chain_by_chain() {
    let (app, token, acme) = acme().await;
    let pubs = xpubs(1);
    let keys = keychains(&app, &token, &pubs).await;
    let add = json!({ "label": "LTC cold", "enterprise": acme, "m": 2, "n": 3, "keys": keys });
    let wallet = expect_json(app.post_auth("/api/v2/tltc/wallet/add", &token, &add).await, 200).await;
    let id = wallet["id"].as_str().unwrap().to_string();
    assert_eq!((wallet["type"].as_str(), wallet["keys"].clone()), (Some("cold"), json!(keys)));
    // Its first receive address is chain 0, index 0.
    let first = ours(&pubs, 0, 0);
    assert_eq!(wallet["receiveAddress"]["address"], first.address.as_str());
    assert_eq!(wallet["receiveAddress"]["coinSpecific"]["redeemScript"], json!(first.redeem_script));
    // Each chain code counts its own indexes.
    let path = format!("/api/v2/tltc/wallet/{id}/address");
    for (chain, index) in [(0, 1), (10, 0), (10, 1), (20, 0)] {
        let a = expect_json(app.post_auth(&path, &token, &json!({ "chain": chain })).await, 200).await;
        let d = ours(&pubs, chain, index);
        assert_eq!(
            (a["chain"].as_u64(), a["index"].as_u64()),
            (Some(chain.into()), Some(index.into())),
            "{a}"
        );
        assert_eq!(a["address"], d.address.as_str());
        assert_eq!(a["coinSpecific"]["outputScript"], d.output_script.as_str());
        assert_eq!(a["coinSpecific"]["redeemScript"], json!(d.redeem_script));
        assert_eq!(a["coinSpecific"]["witnessScript"], json!(d.witness_script));
    }
    assert!(ours(&pubs, 20, 0).address.starts_with("tltc1"));
    // Listed, with their chains and scripts; paged by address.
    let listed =
        expect_json(app.get_auth(&format!("/api/v2/tltc/wallet/{id}/addresses"), &token).await, 200).await;
    let mut got: Vec<(u64, u64)> = listed["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["chain"].as_u64().unwrap(), a["index"].as_u64().unwrap()))
        .collect();
    got.sort();
    assert_eq!(got, [(0, 0), (0, 1), (10, 0), (10, 1), (20, 0)]);
    let page =
        expect_json(app.get_auth(&format!("/api/v2/tltc/wallet/{id}/addresses?limit=2"), &token).await, 200)
            .await;
    let next = page["nextBatchPrevId"].as_str().unwrap();
    let rest = expect_json(
        app.get_auth(&format!("/api/v2/tltc/wallet/{id}/addresses?prevId={next}"), &token).await,
        200,
    )
    .await;
    assert_eq!(rest["addresses"].as_array().unwrap().len(), 3);
    // The keychains read back through BitGo's keychain route.
    let k = expect_json(app.get_auth(&format!("/api/v2/tltc/key/{}", keys[2]), &token).await, 200).await;
    assert_eq!((k["pub"].as_str(), k["source"].as_str()), (Some(pubs[2].as_str()), Some("bitgo")));
    // utxo.max_addresses_per_wallet (5 here) bites, and nothing is added.
    let body =
        assert_error(app.post_auth(&path, &token, &json!({ "chain": 0 })).await, 400, "AddressLimitReached")
            .await;
    assert_eq!(body["context"]["max"], 5);
    let audit = app.raw_sql("SELECT data FROM audit_log WHERE type = 'wallet.address_added'").await;
    assert_eq!(audit.len(), 4, "{audit:?}");
}

#[tokio::test]
async fn bad_keychains_wallets_and_chain_codes_are_refused_and_change_nothing() {
    let (app, token, acme) = acme().await;
    let bob = app.create_user("bob@example.com").await;
    let bob_token = app.login(&bob).await;
    for (body, name) in [
        (json!({ "pub": "xpub-not" }), "InvalidField"),
        (json!({ "source": "user" }), "MissingField"),
        (json!({ "pub": xpubs(1)[0], "source": "cosigner" }), "InvalidField"),
    ] {
        assert_error(app.post_auth("/api/v2/tltc/key", &token, &body).await, 400, name).await;
    }
    let eth = app.post_auth("/api/v2/hteth/key", &token, &json!({ "pub": xpubs(1)[0] })).await;
    assert_error(eth, 400, "InvalidField").await;
    // Bob's keychain is not Alice's to use; neither is one a wallet names already.
    let mine = keychains(&app, &token, &xpubs(1)).await;
    let bobs = keychains(&app, &bob_token, &xpubs(4)).await;
    let add = |keys: Value| json!({ "label": "x", "enterprise": acme, "keys": keys });
    let res =
        app.post_auth("/api/v2/tltc/wallet/add", &token, &add(json!([mine[0], mine[1], bobs[2]]))).await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "keys");
    let res = app.post_auth("/api/v2/tltc/wallet/add", &token, &add(json!([mine[0], mine[1]]))).await;
    assert_error(res, 400, "InvalidField").await;
    let res = app
        .post_auth(
            "/api/v2/tltc/wallet/add",
            &token,
            &json!({ "label": "x", "enterprise": acme, "keys": mine, "m": 1 }),
        )
        .await;
    assert_error(res, 400, "InvalidField").await;
    assert!(app.raw_sql("SELECT id FROM wallets").await.is_empty());
    let w = expect_json(app.post_auth("/api/v2/tltc/wallet/add", &token, &add(json!(mine))).await, 200).await;
    let res = app.post_auth("/api/v2/tltc/wallet/add", &token, &add(json!(mine))).await;
    assert_error(res, 400, "InvalidField").await;
    // Bob is not in Acme: he may not make its wallets, nor see this one or its keychains.
    let res = app
        .post_auth(
            "/api/v2/tltc/wallet/add",
            &bob_token,
            &json!({ "label": "x", "enterprise": acme, "keys": bobs }),
        )
        .await;
    assert_ne!(res.status(), 200);
    let path = format!("/api/v2/tltc/wallet/{}/address", w["id"].as_str().unwrap());
    assert_error(app.post_auth(&path, &bob_token, &json!({ "chain": 0 })).await, 404, "WalletNotFound").await;
    assert_eq!(app.get_auth(&format!("/api/v2/tltc/key/{}", mine[0]), &bob_token).await.status(), 404);
    // Chain codes BitGo has that are not derived here, and ones that are no chain code.
    for chain in [2, 30, 40, 99] {
        let body =
            assert_error(app.post_auth(&path, &token, &json!({ "chain": chain })).await, 400, "InvalidField")
                .await;
        assert_eq!(body["context"]["field"], "chain");
    }
    assert_eq!(app.raw_sql("SELECT address FROM wallet_addresses").await.len(), 1, "the first address only");
    // An imported wallet whose keys are not keychains added here: nothing to derive from.
    let alice_id = expect_json(app.me(&token).await, 200).await["user"]["id"].as_str().unwrap().to_string();
    let imported = "00112233445566778899aabbccddeeff";
    app.import_wallet(imported, &acme, &[&alice_id]).await;
    let path = format!("/api/v2/tbtc/wallet/{imported}/address");
    assert_error(app.post_auth(&path, &token, &json!({})).await, 409, "WalletNotWatched").await;
}

#[tokio::test]
async fn utxo_max_keychains_per_user_bites() {
    let app = spawn_app_with(|c| c.utxo.max_keychains_per_user = 2).await;
    let alice = app.create_user("alice@example.com").await;
    let token = app.login(&alice).await;
    for p in &xpubs(1)[..2] {
        expect_json(app.post_auth("/api/v2/tltc/key", &token, &json!({ "pub": p })).await, 200).await;
    }
    let res = app.post_auth("/api/v2/tltc/key", &token, &json!({ "pub": xpubs(1)[2] })).await;
    let body = assert_error(res, 400, "KeychainLimitReached").await;
    assert_eq!(body["context"]["max"], 2);
    assert_eq!(app.raw_sql("SELECT id FROM keychains").await.len(), 2);
}

#[tokio::test]
async fn concurrent_address_requests_get_distinct_indexes() {
    let (app, token, acme) = acme().await;
    let keys = keychains(&app, &token, &xpubs(7)).await;
    let add = json!({ "label": "LTC", "enterprise": acme, "keys": keys });
    let w = expect_json(app.post_auth("/api/v2/tltc/wallet/add", &token, &add).await, 200).await;
    let path = format!("/api/v2/tltc/wallet/{}/address", w["id"].as_str().unwrap());
    let body = json!({ "chain": 20 });
    let post = || app.post_auth(&path, &token, &body);
    let (a, b, c, d) = tokio::join!(post(), post(), post(), post());
    let mut indexes = Vec::new();
    for res in [a, b, c, d] {
        indexes.push(expect_json(res, 200).await["index"].as_u64().unwrap());
    }
    indexes.sort();
    assert_eq!(indexes, [0, 1, 2, 3]);
}

#[tokio::test]
async fn a_service_admin_imports_addresses_of_the_wallet_s_network_only() {
    use bitcoin::{Address, Network as BtcNetwork};
    use std::str::FromStr;
    let app = spawn_app_with(|c| c.utxo.max_addresses_per_wallet = 4).await;
    let root = app.create_user_with("root@example.com", true).await;
    let token = app.login(&root).await;
    let acme = app.create_enterprise("Acme", &[(&root, true)]).await;
    let (w1, w2) = ("00112233445566778899aabbccddee01", "00112233445566778899aabbccddee02");
    app.import_wallet(w1, &acme, &[&root.id]).await;
    app.import_wallet(w2, &acme, &[&root.id]).await;
    let (app, token) = (&app, &token);
    let add = |w: &str, address: &str| {
        let body = json!({ "address": address });
        let path = format!("/api/v2/internal/wallet/{w}/addresses");
        async move { app.post_auth(&path, token, &body).await }
    };
    // Testnet P2SH, P2PKH and P2WPKH (bech32 in upper case, kept in lower case).
    let good = [
        "2N2JD6wb56AfK4tfmM6PwdVmoYk2dCKf4Br",
        "mipcBbFg9gMiCh81Kj8tqqdgoZub1ZJRfn",
        "TB1QW508D6QEJXTDG4Y5R3ZARVARY0C5XW7KXPJZSX",
    ];
    for address in good {
        let a = expect_json(add(w1, address).await, 200).await;
        let lower = address.to_ascii_lowercase();
        let stored = if address.starts_with("TB1") { lower.as_str() } else { address };
        assert_eq!(a["address"], stored);
        // rust-bitcoin's own parser for Bitcoin's testnet gives the same output script.
        let theirs = Address::from_str(stored).unwrap().require_network(BtcNetwork::Testnet).unwrap();
        assert_eq!(a["coinSpecific"]["outputScript"], hex::encode(theirs.script_pubkey().as_bytes()));
    }
    // Again: not an error. Another wallet: in use.
    expect_json(add(w1, good[0]).await, 200).await;
    assert_error(add(w2, good[0]).await, 409, "AddressInUse").await;
    // Mainnet, Litecoin testnet, Ethereum, garbage: not this network's.
    for bad in [
        "3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy",
        "QVk4MvUu7Wb7tZ1wvAeiUvdF7wxhvpyLLK",
        "tltc1qw508d6qejxtdg4y5r3zarvary0c5xw7kx3a2c5",
        "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
        "2N2JD6wb56AfK4tfmM6PwdVmoYk2dCKf4Bs",
    ] {
        let body = assert_error(add(w1, bad).await, 400, "InvalidField").await;
        assert_eq!(body["context"]["field"], "address", "{bad}");
    }
    // utxo.max_addresses_per_wallet (4) counts imported ones too.
    expect_json(add(w1, "2MzQwSSnBHWHqSAqtTVQ6v47XtaisrJa1Vc").await, 200).await;
    assert_error(add(w1, "2NBFNJTktNa7GZusGbDbGKRZTxdK9VVez3n").await, 400, "AddressLimitReached").await;
    let listed =
        expect_json(app.get_auth(&format!("/api/v2/tbtc/wallet/{w1}/addresses"), token).await, 200).await;
    assert_eq!(listed["addresses"].as_array().unwrap().len(), 4);
    assert!(listed["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["coinSpecific"]["outputScript"].is_string()));
}
