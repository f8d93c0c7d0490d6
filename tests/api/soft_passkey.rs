//! A software passkey for the tests: ES256 (P-256) with the `p256` crate, making what a browser
//! returns from `navigator.credentials.create()` (attestation `none`, WebAuthn §6.5.4) and
//! `.get()` (an assertion signed over `authenticatorData ‖ SHA-256(clientDataJSON)`, §6.3.3),
//! as JSON with base64url fields.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use p256_14::ecdsa::{signature::Signer, Signature, SigningKey};
use rand::RngCore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub struct SoftPasskey {
    key: SigningKey,
    pub credential_id: Vec<u8>,
    /// The user handle it was made with (base64url), as it answers.
    pub user_handle: String,
    pub counter: u32,
    pub rp_id: String,
    pub origin: String,
}

/// User present and user verified (WebAuthn §6.1 flags UP, UV).
const UP_UV: u8 = 0x01 | 0x04;
const ATTESTED: u8 = 0x40;

fn cbor_bytes(out: &mut Vec<u8>, b: &[u8]) {
    match b.len() {
        n if n < 24 => out.push(0x40 | n as u8),
        n if n < 256 => out.extend([0x58, n as u8]),
        n => out.extend([0x59, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(b);
}

fn cbor_text(out: &mut Vec<u8>, t: &str) {
    out.push(0x60 | t.len() as u8);
    out.extend_from_slice(t.as_bytes());
}

impl SoftPasskey {
    pub fn new(rp_id: &str, origin: &str) -> Self {
        let mut secret = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut secret);
        let key = SigningKey::from_slice(&secret).expect("a P-256 key");
        let mut credential_id = vec![0u8; 32];
        rand::thread_rng().fill_bytes(&mut credential_id);
        SoftPasskey {
            key,
            credential_id,
            user_handle: String::new(),
            counter: 0,
            rp_id: rp_id.into(),
            origin: origin.into(),
        }
    }

    fn auth_data(&self, flags: u8) -> Vec<u8> {
        let mut data = Sha256::digest(self.rp_id.as_bytes()).to_vec();
        data.push(flags);
        data.extend(self.counter.to_be_bytes());
        data
    }

    fn client_data(&self, kind: &str, challenge: &str) -> String {
        json!({ "type": kind, "challenge": challenge, "origin": self.origin, "crossOrigin": false })
            .to_string()
    }

    /// The COSE_Key of the public key (RFC 9053: kty EC2, alg ES256, crv P-256, x, y).
    fn cose_key(&self) -> Vec<u8> {
        // Uncompressed SEC1: 0x04 ‖ x ‖ y.
        let point = self.key.verifying_key().to_sec1_bytes();
        let (x, y) = (&point[1..33], &point[33..65]);
        let mut out = vec![0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21];
        cbor_bytes(&mut out, x);
        out.push(0x22);
        cbor_bytes(&mut out, y);
        out
    }

    /// The credential answering creation `options` (`{publicKey}`).
    pub fn register(&mut self, options: &Value) -> Value {
        let challenge = options["publicKey"]["challenge"].as_str().expect("challenge");
        self.user_handle = options["publicKey"]["user"]["id"].as_str().expect("user.id").to_string();
        let mut auth_data = self.auth_data(UP_UV | ATTESTED);
        auth_data.extend([0u8; 16]); // AAGUID
        auth_data.extend((self.credential_id.len() as u16).to_be_bytes());
        auth_data.extend(&self.credential_id);
        auth_data.extend(self.cose_key());
        let mut attestation = vec![0xa3];
        cbor_text(&mut attestation, "fmt");
        cbor_text(&mut attestation, "none");
        cbor_text(&mut attestation, "attStmt");
        attestation.push(0xa0);
        cbor_text(&mut attestation, "authData");
        cbor_bytes(&mut attestation, &auth_data);
        let id = B64URL.encode(&self.credential_id);
        json!({
            "id": id, "rawId": id, "type": "public-key", "extensions": {},
            "response": {
                "attestationObject": B64URL.encode(attestation),
                "clientDataJSON": B64URL.encode(self.client_data("webauthn.create", challenge)),
            },
        })
    }

    /// An assertion answering request `options` (`{publicKey}`), its counter one higher.
    pub fn assert(&mut self, options: &Value) -> Value {
        self.counter += 1;
        self.assert_with(options, self.counter, &self.origin.clone())
    }

    /// An assertion with the given counter and origin (for the refusals).
    pub fn assert_with(&self, options: &Value, counter: u32, origin: &str) -> Value {
        self.assertion(options, counter, origin, false)
    }

    /// An assertion made in a frame of another origin (`crossOrigin: true`).
    pub fn assert_in_frame(&self, options: &Value, counter: u32) -> Value {
        self.assertion(options, counter, &self.origin, true)
    }

    fn assertion(&self, options: &Value, counter: u32, origin: &str, cross_origin: bool) -> Value {
        let challenge = options["publicKey"]["challenge"].as_str().expect("challenge");
        let client_data =
            json!({ "type": "webauthn.get", "challenge": challenge, "origin": origin, "crossOrigin": cross_origin })
                .to_string();
        let mut auth_data = Sha256::digest(self.rp_id.as_bytes()).to_vec();
        auth_data.push(UP_UV);
        auth_data.extend(counter.to_be_bytes());
        let mut signed = auth_data.clone();
        signed.extend(Sha256::digest(client_data.as_bytes()));
        let signature: Signature = self.key.sign(&signed);
        let id = B64URL.encode(&self.credential_id);
        json!({
            "id": id, "rawId": id, "type": "public-key", "extensions": {},
            "response": {
                "authenticatorData": B64URL.encode(auth_data),
                "clientDataJSON": B64URL.encode(client_data),
                "signature": B64URL.encode(signature.to_der().as_bytes()),
                "userHandle": self.user_handle,
            },
        })
    }
}
