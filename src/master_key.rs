//! Encryption at rest of secrets that must be read back (TOTP seeds, webhook secrets) with
//! XChaCha20-Poly1305 under a 32-byte master key, and the key file that holds it.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{anyhow, bail, Context};
use chacha20poly1305::{
    aead::{Aead, KeyInit, Payload},
    XChaCha20Poly1305, XNonce,
};
use rand::{rngs::OsRng, RngCore};

use crate::config::{Config, Environment};

const NONCE_LEN: usize = 24;

/// The master key. Never logged: `Debug` prints nothing of it.
#[derive(Clone)]
pub struct MasterKey(XChaCha20Poly1305);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// Parses 64 hex characters (surrounding white space allowed).
    pub fn from_hex(text: &str) -> anyhow::Result<Self> {
        let bytes = hex::decode(text.trim()).map_err(|_| anyhow!("master key must be 64 hex characters"))?;
        if bytes.len() != 32 {
            bail!("master key must be 32 bytes (64 hex characters), got {}", bytes.len());
        }
        Ok(MasterKey(XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| anyhow!("bad key length"))?))
    }

    /// Encrypts `plain`; `aad` binds the ciphertext to its owner (e.g. `"totp:<userId>"`).
    /// Output: 24-byte nonce || ciphertext || tag.
    pub fn seal(&self, aad: &str, plain: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        let ct = self
            .0
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plain, aad: aad.as_bytes() })
            .map_err(|_| anyhow!("encryption failed"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Reverses [`MasterKey::seal`]; fails on a wrong key, a wrong `aad` or tampering.
    pub fn open(&self, aad: &str, sealed: &[u8]) -> anyhow::Result<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            bail!("sealed secret too short");
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        self.0
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: aad.as_bytes() })
            .map_err(|_| anyhow!("cannot decrypt a stored secret: wrong master key or corrupted data"))
    }

    /// Loads the configured key file. Without one: in production an error; in test a key is
    /// generated once beside the SQLite file (or in ./data) with mode 0600, and a warning logged.
    pub fn load(config: &Config) -> anyhow::Result<Self> {
        if let Some(path) = &config.secret_key_file {
            if config.environment == Environment::Production {
                refuse_shared_key_file(path)?;
            }
            return read_key_file(path);
        }
        if config.environment == Environment::Production {
            bail!("the production environment needs a master key: set --secret-key-file or CUSTODIAN_SECRET_KEY_FILE (a file of 64 hex characters, e.g. from `openssl rand -hex 32`)");
        }
        let path = default_key_path(&config.database_url);
        if path.exists() {
            return read_key_file(&path);
        }
        if let Some(dir) = path.parent() {
            crate::private_fs::create_private_dir(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        if !publish_private(&path, hex::encode(key).as_bytes())? {
            // Another process (or test) generated it first: use theirs, so all agree.
            return read_key_file(&path);
        }
        tracing::warn!(
            path = %path.display(),
            "no secret key file configured: generated one for the test environment; back it up, and configure secret_key_file in production"
        );
        Self::from_hex(&hex::encode(key))
    }
}

fn read_key_file(path: &Path) -> anyhow::Result<MasterKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read secret key file {}", path.display()))?;
    MasterKey::from_hex(&text).with_context(|| format!("secret key file {}", path.display()))
}

/// In production the master key file must be readable by its owner only (mode 0600 or
/// stricter), as ssh does for private keys.
fn refuse_shared_key_file(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .with_context(|| format!("cannot read secret key file {}", path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            bail!(
                "secret key file {} is readable by group or others (mode {:o}): run chmod 600 on it",
                path.display(),
                mode & 0o777
            );
        }
    }
    Ok(())
}

/// `master.key` beside the SQLite file, or `data/master.key` for other databases.
pub fn default_key_path(database_url: &str) -> PathBuf {
    if database_url.starts_with("sqlite:") {
        let db = crate::config::sqlite_path(database_url);
        let dir = Path::new(&db).parent().map(Path::to_path_buf).unwrap_or_default();
        return dir.join("master.key");
    }
    PathBuf::from("data").join("master.key")
}

/// Writes `bytes` to `path` (mode 0600) only if `path` does not exist yet, atomically: the
/// content goes to a unique temporary file first and is hard-linked into place, so a
/// concurrent reader never sees a partly written key. `Ok(false)`: someone else's file won.
fn publish_private(path: &Path, bytes: &[u8]) -> anyhow::Result<bool> {
    let mut suffix = [0u8; 8];
    OsRng.fill_bytes(&mut suffix);
    let tmp = path.with_extension(format!("tmp-{}", hex::encode(suffix)));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let written = opts
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .with_context(|| format!("cannot create {}", tmp.display()));
    let linked = written.and_then(|()| match std::fs::hard_link(&tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    });
    let _ = std::fs::remove_file(&tmp);
    linked
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes started together on one database must agree on the generated key.
    #[test]
    fn concurrent_first_loads_agree_on_one_generated_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/c.db", dir.path().display());
        let config = Config { database_url: url, ..Config::default() };
        let keys: Vec<MasterKey> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| MasterKey::load(&config))).collect();
            handles.into_iter().map(|h| h.join().expect("join").expect("load")).collect()
        });
        let sealed = keys[0].seal("aad", b"secret").expect("seal");
        for key in &keys {
            assert_eq!(key.open("aad", &sealed).expect("same key"), b"secret");
        }
        let left: Vec<_> =
            std::fs::read_dir(dir.path()).expect("dir").flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("master.key")], "no temporary files left");
    }
}
