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

/// BitGo's utxo-lib (`getWalletAddress`, which BitGoJS's `wallet.createAddress` checks addresses
/// with): the address and scripts of each request `{xpubs, chain, index, network}`.
const UTXO_SCRIPT: &str = r#"
const utxolib = require('@bitgo/utxo-lib');
const out = JSON.parse(process.argv[1]).map(({ xpubs, chain, index, network }) => {
  const keys = new utxolib.bitgo.RootWalletKeys(xpubs.map((x) => utxolib.bip32.fromBase58(x)));
  const scripts = utxolib.bitgo.getWalletOutputScripts(keys, chain, index);
  return {
    address: utxolib.bitgo.getWalletAddress(keys, chain, index, utxolib.networks[network]),
    outputScript: scripts.scriptPubKey.toString('hex'),
    redeemScript: scripts.redeemScript?.toString('hex') ?? null,
    witnessScript: scripts.witnessScript?.toString('hex') ?? null,
  };
});
process.stdout.write(JSON.stringify(out));
"#;

#[test]
fn bitgo_s_utxo_lib_derives_the_addresses_custodian_derives() {
    use custodian::chain::utxo::{
        address::{derive, ChainCode, WalletKeys},
        params::{Family, Network},
    };
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk-tests");
    let secp = Secp256k1::new();
    let xpubs: Vec<String> = (0..3).map(|_| Xpub::from_priv(&secp, &master()).to_string()).collect();
    let keys = WalletKeys::parse([&xpubs[0], &xpubs[1], &xpubs[2]]).unwrap();
    let networks = [
        (Family::Litecoin, Network::Testnet, "litecoinTest"),
        (Family::Litecoin, Network::Mainnet, "litecoin"),
        (Family::Bitcoin, Network::Testnet, "testnet"),
        (Family::Bitcoin, Network::Mainnet, "bitcoin"),
    ];
    let mut asks = Vec::new();
    let mut ours = Vec::new();
    for (family, network, name) in networks {
        for chain in [0, 1, 10, 11, 20, 21] {
            for index in [0u32, 1, 7, 1_000_003, (1 << 31) - 1] {
                asks.push(json!({ "xpubs": xpubs, "chain": chain, "index": index, "network": name }));
                let d = derive(&keys, ChainCode::new(chain).unwrap(), index, family.params(network)).unwrap();
                ours.push(json!({ "address": d.address, "outputScript": d.output_script,
                    "redeemScript": d.redeem_script, "witnessScript": d.witness_script }));
            }
        }
    }
    let out = Command::new("node")
        .current_dir(sdk)
        .arg("-e")
        .arg(UTXO_SCRIPT)
        .arg(serde_json::Value::Array(asks.clone()).to_string())
        .output()
        .expect("run node");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(theirs.len(), ours.len());
    for ((ask, mine), bitgo) in asks.iter().zip(&ours).zip(&theirs) {
        assert_eq!(mine, bitgo, "{ask}");
    }
    // Chain codes BitGo has and Custodian does not derive, and hardened indexes, are refused.
    assert!(ChainCode::new(30).is_err() && ChainCode::new(2).is_err());
    let p = Family::Litecoin.params(Network::Testnet);
    assert!(derive(&keys, ChainCode::new(0).unwrap(), 1 << 31, p).is_err());
}
