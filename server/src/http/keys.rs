//! API keys: creating, listing and revoking them (`engram keys`), and
//! checking the key a request presents (`engram serve`).
//!
//! A key is `egk_` followed by 64 lower-case hex digits: 32 random bytes
//! from the operating system. Its id is its first 8 hex digits (so a key
//! shows its own id). The key file (default `DIR/keys.json`) stores, per
//! key, its id, the SHA-256 of the whole key, what it grants and when it
//! was created or revoked:
//!
//! ```json
//! {"version": 1, "keys": [
//!   {"id": "3f9a0c1d", "sha256": "…", "scope": "tenant", "tenant": "acme",
//!    "principal": "support-bot", "role": "agent", "labels": ["support"],
//!    "created_at": "2026-12-01T10:00:00.000Z"},
//!   {"id": "77b2e410", "sha256": "…", "scope": "store", "created_at": "…"}]}
//! ```
//!
//! A `tenant` key acts as one principal of one tenant, with its role and
//! labels ([`Grant::principal`]); the `store` key is the store operator
//! (store-wide operations only: backup, compaction, verify, store stats). The file is
//! rewritten whole, atomically and durably (temporary file, fsync, rename,
//! directory fsync), readable by its owner only; writers take a lock file
//! beside it. A running server notices a changed file on the next request,
//! so created and revoked keys apply at once.
//!
//! This module must never store, log or print a key after [`create`]
//! returned it, and never compare key material in time that depends on
//! its content.

use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use engram_engine::Principal;
use engram_engine::time::{Clock, SystemClock, format_rfc3339};
use engram_storage::files::{read_all, write_private_durable};
use engram_storage::{Backend, FsBackend};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::http::error::{ServerError, ServerResult};

/// Every key starts with this.
pub const KEY_PREFIX: &str = "egk_";
/// Random bytes in a key.
pub const KEY_SECRET_BYTES: usize = 32;
/// Hex digits of a key id (the first digits of the key).
pub const KEY_ID_CHARS: usize = 8;
/// Name of the key file in the data directory.
pub const KEY_FILE_NAME: &str = "keys.json";
/// Layout version of the key file.
pub const KEY_FILE_VERSION: u32 = 1;
/// How long a key command waits for another one holding the key file lock.
pub const KEY_FILE_LOCK_WAIT_MS: u64 = 5_000;

/// What a tenant key may do inside its tenant (the authorization matrix
/// decides the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The tenant administrator.
    Admin,
    /// A person holding the `reviewer` role.
    Reviewer,
    /// A person.
    User,
    /// A model or agent (procedural records it writes need review).
    Agent,
}

impl Role {
    /// Parses `admin`, `reviewer`, `user`, `agent`.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "reviewer" => Some(Role::Reviewer),
            "user" => Some(Role::User),
            "agent" => Some(Role::Agent),
            _ => None,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Reviewer => "reviewer",
            Role::User => "user",
            Role::Agent => "agent",
        }
    }
}

/// What a key grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "lowercase")]
pub enum Grant {
    /// The store operator: store-wide operations, no tenant's records.
    Store,
    /// One principal of one tenant.
    Tenant {
        /// The tenant.
        tenant: String,
        /// The principal id.
        principal: String,
        /// Its role.
        role: Role,
        /// Labels the key holds on top of the store's grants.
        #[serde(default)]
        labels: Vec<String>,
    },
}

impl Grant {
    /// The engine principal a tenant key acts as: user => a person, agent
    /// => a model writer, reviewer => a person with the `reviewer` role,
    /// admin => the tenant admin under the key's principal name; each with
    /// the key's labels. `None` for the store key.
    pub fn principal(&self) -> Option<Principal> {
        let Grant::Tenant {
            tenant,
            principal,
            role,
            labels,
        } = self
        else {
            return None;
        };
        let p = match role {
            Role::User => Principal::user(tenant, principal),
            Role::Agent => Principal::model(tenant, principal),
            Role::Reviewer => Principal::user(tenant, principal)
                .with_role(engram_engine::principal::ROLE_REVIEWER),
            Role::Admin => Principal::admin_named(tenant, principal),
        };
        Some(p.with_labels(labels.iter().cloned()))
    }
}

/// One key as the file stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyEntry {
    /// The key's first 8 hex digits.
    pub id: String,
    /// Hex SHA-256 of the whole key (`egk_…`).
    pub sha256: String,
    /// What it grants.
    #[serde(flatten)]
    pub grant: Grant,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it was revoked, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    version: u32,
    keys: Vec<KeyEntry>,
}

/// The key file of the store in `data_dir`, unless configured elsewhere.
pub fn default_key_file(data_dir: &Path) -> PathBuf {
    data_dir.join(KEY_FILE_NAME)
}

fn key_err(path: &Path, reason: impl Into<String>) -> ServerError {
    ServerError::KeyFile {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn sha256_hex(key: &str) -> String {
    engram_engine::db::hex(&Sha256::digest(key.as_bytes()))
}

fn read_file(path: &Path) -> ServerResult<KeyFile> {
    let Some(bytes) = read_all(&FsBackend, path).map_err(|e| key_err(path, e.to_string()))? else {
        return Ok(KeyFile {
            version: KEY_FILE_VERSION,
            keys: Vec::new(),
        });
    };
    let damaged = |e: String| {
        key_err(
            path,
            format!("damaged ({e}); restore it, or move it away and create keys again"),
        )
    };
    // strictly: a key repeated in an entry (`"revoked_at"` twice, the
    // second null) would otherwise be read as its last value, leaving a
    // key valid that an editor meant to revoke
    let text = std::str::from_utf8(&bytes).map_err(|e| damaged(format!("not UTF-8: {e}")))?;
    let raw = engram_query::strict::parse(text).map_err(|e| {
        damaged(match e {
            Ok((field, why)) => format!("{field}: {why}"),
            Err(e) => e.to_string(),
        })
    })?;
    check_entry_fields(&raw).map_err(damaged)?;
    let f: KeyFile = serde_json::from_value(raw).map_err(|e| damaged(e.to_string()))?;
    if f.version != KEY_FILE_VERSION {
        return Err(key_err(
            path,
            format!(
                "version {} is not supported by this build (it reads version {KEY_FILE_VERSION})",
                f.version
            ),
        ));
    }
    check_entry_values(&f.keys).map_err(damaged)?;
    // `revoke` marks one entry and `authenticate` takes the first live one:
    // a second entry of the same id would keep a revoked key valid, so a
    // file holding one is refused (failing closed) rather than read.
    let mut ids = std::collections::HashSet::new();
    if let Some(dup) = f.keys.iter().find(|k| !ids.insert(k.id.as_str())) {
        return Err(key_err(
            path,
            format!(
                "key id '{}' appears more than once; keep one entry for it (a revoked key's \
                 revoked_at must stay on the entry that remains)",
                dup.id
            ),
        ));
    }
    Ok(f)
}

/// Refuses a key entry holding a field its scope does not have (a
/// misspelt `revoked_at` would leave a revoked key valid; a store key with
/// tenant fields reads as a tenant key to whoever edits the file). The
/// entries' fields are flattened, which serde cannot check by itself.
fn check_entry_fields(raw: &serde_json::Value) -> Result<(), String> {
    const COMMON: [&str; 5] = ["id", "sha256", "scope", "created_at", "revoked_at"];
    const TENANT: [&str; 4] = ["tenant", "principal", "role", "labels"];
    let Some(keys) = raw.get("keys").and_then(|k| k.as_array()) else {
        return Ok(()); // the typed read names what is wrong
    };
    for (n, entry) in keys.iter().enumerate() {
        let Some(fields) = entry.as_object() else {
            continue;
        };
        let tenant_scope = match fields.get("scope").and_then(|s| s.as_str()) {
            Some("tenant") => true,
            Some("store") => false,
            _ => continue, // the typed read names the scope
        };
        let has = |f: &str| COMMON.contains(&f) || (tenant_scope && TENANT.contains(&f));
        if let Some(f) = fields.keys().find(|f| !has(f)) {
            let id = fields.get("id").and_then(|i| i.as_str()).unwrap_or("?");
            return Err(format!(
                "key entry {} (id '{id}'): field `{f}` is not one a{} key has",
                n + 1,
                if tenant_scope { " tenant" } else { " store" }
            ));
        }
    }
    Ok(())
}

/// Refuses an entry whose values are not of the form `keys create`
/// writes: an id of 8 hex digits, a SHA-256 of 64, RFC 3339 times. (Such
/// an entry matched no key anyway; read strictly, the file says it was
/// edited by hand rather than failing one key without a word.)
fn check_entry_values(keys: &[KeyEntry]) -> Result<(), String> {
    // (lower-case, as written; the values are never echoed: a key pasted
    // into a field by mistake must not reach the log)
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let time = |s: &str| engram_engine::time::parse_rfc3339(s).is_ok();
    for (n, k) in keys.iter().enumerate() {
        let wrong = if !hex(&k.id, 8) {
            Some(("id", "8 lower-case hex digits"))
        } else if !hex(&k.sha256, 64) {
            Some(("sha256", "64 lower-case hex digits"))
        } else if !time(&k.created_at) {
            Some(("created_at", "an RFC 3339 time"))
        } else if k.revoked_at.as_deref().is_some_and(|r| !time(r)) {
            Some(("revoked_at", "an RFC 3339 time"))
        } else {
            None
        };
        if let Some((field, want)) = wrong {
            return Err(format!(
                "key entry {}: `{field}` must be {want}, as `engram keys create` writes it",
                n + 1
            ));
        }
        // (a name a session may not have: `keys create` refuses it; a
        // revoked key's are left as they are, as it grants nothing)
        if let Err(e) = check_grant_names(&k.grant)
            && k.revoked_at.is_none()
        {
            return Err(format!(
                "key entry {}: {e}, as `engram keys create` checks it",
                n + 1
            ));
        }
    }
    Ok(())
}

/// The names a tenant key carries (tenant, principal, labels), by the
/// rules a session's names follow: `keys create` refuses a key of other
/// names, and a key file holding one (edited by hand) is read as damaged.
fn check_grant_names(grant: &Grant) -> engram_engine::Result<()> {
    if let Grant::Tenant {
        tenant,
        principal,
        labels,
        ..
    } = grant
    {
        engram_engine::model::check_identifier("tenant", tenant)?;
        engram_engine::model::check_identifier("principal", principal)?;
        for l in labels {
            engram_engine::model::check_identifier("label", l)?;
        }
    }
    Ok(())
}

/// The file `path` names, through symbolic links (a key file may be a
/// link to one kept elsewhere: it is written, and locked, where it is, so
/// the server reading the target sees a revocation; replacing the link
/// would leave the target unchanged).
pub(crate) fn followed(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    // (a bound, for a loop of links: the system refuses it when read)
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&p) {
                Ok(target) => {
                    p = match p.parent() {
                        Some(dir) if target.is_relative() => dir.join(target),
                        _ => target,
                    }
                }
                Err(_) => break,
            },
            _ => break,
        }
    }
    p
}

fn write_file(path: &Path, f: &KeyFile) -> ServerResult<()> {
    let mut text = serde_json::to_string_pretty(f).map_err(|e| key_err(path, e.to_string()))?;
    text.push('\n');
    write_private_durable(&FsBackend, path, text.as_bytes())
        .map_err(|e| key_err(path, e.to_string()))
}

/// Runs `f` on the key file under its lock (`<file>.lock`), writing the
/// file back if `f` says so.
fn with_locked_file<T>(
    path: &Path,
    f: impl FnOnce(&mut KeyFile) -> ServerResult<(T, bool)>,
) -> ServerResult<T> {
    let path = &followed(path);
    // what would fail under the lock fails before it, leaving no lock
    // file beside something that is no key file (a directory, a store's
    // own file, a missing directory)
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => return Err(key_err(path, "not a file (a directory?)")),
        Ok(_) => drop(read_file(path)?),
        // (a loop of links, no permission, a file where a directory is)
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(key_err(path, e.to_string()));
        }
        Err(_)
            if !path
                .parent()
                .is_none_or(|d| d.as_os_str().is_empty() || d.is_dir()) =>
        {
            return Err(key_err(path, "its directory does not exist"));
        }
        Err(_) => {}
    }
    let mut lock_name = path.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock_path = PathBuf::from(lock_name);
    let deadline = Instant::now() + Duration::from_millis(KEY_FILE_LOCK_WAIT_MS);
    let _guard = loop {
        match FsBackend.try_lock(&lock_path) {
            Ok(Some(g)) => break g,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                return Err(key_err(path, "locked by another key command; try again"));
            }
            Err(e) => return Err(key_err(&lock_path, e.to_string())),
        }
    };
    let mut file = read_file(path)?;
    let (out, changed) = f(&mut file)?;
    if changed {
        write_file(path, &file)?;
    }
    Ok(out)
}

/// Creates a key granting `grant`, stores its hash in the key file at
/// `path`, and returns the key (the only time it exists outside the
/// caller's hands) with its entry.
pub fn create(path: &Path, grant: Grant) -> ServerResult<(String, KeyEntry)> {
    check_grant_names(&grant).map_err(|e| ServerError::KeyUsage(e.to_string()))?;
    with_locked_file(path, |file| {
        // A principal writes as a model (agent keys) or as a person, never
        // both: the matrix knows a record's writer by name, so a user key
        // of the name an agent key has would correct (approved at once)
        // what that model wrote and a reviewer approved.
        let is_model = |g: &Grant| {
            matches!(
                g,
                Grant::Tenant {
                    role: Role::Agent,
                    ..
                }
            )
        };
        if let Grant::Tenant {
            tenant, principal, ..
        } = &grant
            && let Some(other) = file.keys.iter().find(|k| {
                matches!(&k.grant, Grant::Tenant { tenant: t, principal: p, .. }
                    if t == tenant && p == principal)
                    && is_model(&k.grant) != is_model(&grant)
            })
        {
            return Err(ServerError::KeyUsage(format!(
                "principal '{principal}' of tenant '{tenant}' has key {} as {} (revoked or not): a principal writes as a model (role agent) or as a person, never both; name this key's principal otherwise",
                other.id,
                if is_model(&other.grant) {
                    "an agent"
                } else {
                    "a person"
                }
            )));
        }
        let key = loop {
            let mut secret = [0u8; KEY_SECRET_BYTES];
            getrandom::fill(&mut secret).map_err(|e| {
                key_err(
                    path,
                    format!("no randomness from the operating system: {e}"),
                )
            })?;
            let key = format!("{KEY_PREFIX}{}", engram_engine::db::hex(&secret));
            // ids are 32 bits: draw again on the rare collision
            if !file.keys.iter().any(|k| k.id == key_id_of(&key)) {
                break key;
            }
        };
        let entry = KeyEntry {
            id: key_id_of(&key).to_string(),
            sha256: sha256_hex(&key),
            grant,
            created_at: format_rfc3339(SystemClock.now_ms()),
            revoked_at: None,
        };
        file.keys.push(entry.clone());
        Ok(((key, entry), true))
    })
}

/// Every key of the file (revoked ones included).
pub fn list(path: &Path) -> ServerResult<Vec<KeyEntry>> {
    Ok(read_file(path)?.keys)
}

/// Revokes key `id`; it is refused from the next request on.
pub fn revoke(path: &Path, id: &str) -> ServerResult<KeyEntry> {
    // (said before any lock file is made beside a file that is not there)
    if !followed(path).exists() {
        return Err(key_err(path, "no key file here: there is no key to revoke"));
    }
    with_locked_file(path, |file| {
        let Some(k) = file.keys.iter_mut().find(|k| k.id == id) else {
            return Err(ServerError::KeyUsage(format!(
                "no key with id '{id}' (see `engram keys list`)"
            )));
        };
        if k.revoked_at.is_some() {
            return Ok((k.clone(), false));
        }
        k.revoked_at = Some(format_rfc3339(SystemClock.now_ms()));
        Ok((k.clone(), true))
    })
}

/// The id a key shows (its first hex digits); empty for a malformed key.
fn key_id_of(key: &str) -> &str {
    key.strip_prefix(KEY_PREFIX)
        .and_then(|s| s.get(..KEY_ID_CHARS))
        .unwrap_or("")
}

/// Whether `key` has the shape of a key (prefix, 64 lower-case hex digits).
fn well_formed(key: &str) -> bool {
    key.strip_prefix(KEY_PREFIX).is_some_and(|s| {
        s.len() == 2 * KEY_SECRET_BYTES && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Identity of the key file on disk, to notice when it was replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    modified_ns: i128,
    /// The inode's change time: an edit in place that keeps the length
    /// and puts the modification time back still moves it.
    changed_ns: i128,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        inode: m.ino(),
        len: m.len(),
        modified_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        changed_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    })
}

struct Loaded {
    stamp: Option<Stamp>,
    keys: Vec<KeyEntry>,
    /// Why the file as last read leaves no key valid (unreadable,
    /// damaged, removed), if it does.
    problem: Option<String>,
}

/// The keys a running server accepts, re-read whenever the file changes.
pub struct KeyStore {
    path: PathBuf,
    loaded: RwLock<Loaded>,
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("path", &self.path)
            .finish()
    }
}

impl KeyStore {
    /// Loads the key file at `path` (a missing file means no keys yet).
    pub fn open(path: &Path) -> ServerResult<KeyStore> {
        let st = stamp(path);
        let keys = read_file(path)?.keys;
        Ok(KeyStore {
            path: path.to_path_buf(),
            loaded: RwLock::new(Loaded {
                stamp: st,
                keys,
                problem: None,
            }),
        })
    }

    /// The key file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Ids of the active keys of `principal` in `tenant` that carry
    /// `label` among their labels, or `role` as their role: what a revoke
    /// of that label or role from the principal does not take away (a
    /// key's labels and role hold on top of the store's grants).
    pub fn carrying(
        &self,
        tenant: &str,
        principal: &str,
        label: Option<&str>,
        role: Option<&str>,
    ) -> Vec<String> {
        let _ = self.refresh();
        let Ok(l) = self.loaded.read() else {
            return Vec::new();
        };
        l.keys
            .iter()
            .filter(|k| k.revoked_at.is_none())
            .filter(|k| match &k.grant {
                Grant::Tenant {
                    tenant: t,
                    principal: p,
                    role: r,
                    labels,
                } => {
                    t == tenant
                        && p == principal
                        && (label.is_some_and(|x| labels.iter().any(|y| y == x))
                            || role.is_some_and(|x| r.name() == x))
                }
                Grant::Store => false,
            })
            .map(|k| k.id.clone())
            .collect()
    }

    /// Keys that are not revoked.
    pub fn n_active(&self) -> usize {
        self.loaded
            .read()
            .map(|l| l.keys.iter().filter(|k| k.revoked_at.is_none()).count())
            .unwrap_or(0)
    }

    /// Re-reads the file if it changed. A file that became unreadable or
    /// damaged leaves no key valid (failing closed) until it is fixed;
    /// the error is returned for the log.
    fn refresh(&self) -> Result<(), String> {
        let now = stamp(&self.path);
        let current = self.loaded.read().map(|l| l.stamp).unwrap_or(None);
        if now == current {
            return Ok(());
        }
        let (keys, err) = match read_file(&self.path) {
            // a key file that was there and is gone: every key it held is
            // refused now, which an operator must hear about
            Ok(f) if now.is_none() && current.is_some() => (
                f.keys,
                Some(format!(
                    "{} was removed: no key is valid until it is back",
                    self.path.display()
                )),
            ),
            Ok(f) => (f.keys, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        if let Ok(mut l) = self.loaded.write() {
            *l = Loaded {
                stamp: now,
                keys,
                problem: err.clone(),
            };
        }
        err.map_or(Ok(()), Err)
    }

    /// Why no key is valid now, if the key file as it stands leaves none
    /// (unreadable, damaged, removed): `/readyz` is then not ready.
    pub fn file_problem(&self) -> Option<String> {
        let _ = self.refresh();
        self.loaded.read().ok().and_then(|l| l.problem.clone())
    }

    /// What `key` grants, or `None` for a malformed, unknown or revoked
    /// key. The stored hash is compared in constant time. The second
    /// value is a key-file problem to log, if one was found.
    pub fn authenticate(&self, key: &str) -> (Option<(String, Grant)>, Option<String>) {
        let problem = self.refresh().err();
        if !well_formed(key) {
            return (None, problem);
        }
        let id = key_id_of(key);
        let presented = Sha256::digest(key.as_bytes());
        let Ok(l) = self.loaded.read() else {
            return (None, problem);
        };
        let found = l
            .keys
            .iter()
            .find(|k| k.id == id && k.revoked_at.is_none())
            .and_then(|k| {
                let stored = decode_hex32(&k.sha256)?;
                bool::from(stored.ct_eq(presented.as_slice()))
                    .then(|| (k.id.clone(), k.grant.clone()))
            });
        (found, problem)
    }
}

fn decode_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant_grant(role: Role) -> Grant {
        Grant::Tenant {
            tenant: "acme".into(),
            principal: "ann".into(),
            role,
            labels: vec!["hr".into()],
        }
    }

    #[test]
    fn a_created_key_authenticates_and_only_its_hash_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let (key, entry) = create(&path, tenant_grant(Role::User)).unwrap();
        assert!(well_formed(&key), "{key}");
        assert_eq!(entry.id, &key[4..12]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&key[4..]), "the key itself is never stored");
        assert!(text.contains(&sha256_hex(&key)));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let store = KeyStore::open(&path).unwrap();
        let (found, problem) = store.authenticate(&key);
        assert!(problem.is_none());
        assert_eq!(found.unwrap().1, tenant_grant(Role::User));
        // same id, different secret
        let mut forged = key.clone();
        let last = if forged.ends_with('0') { "1" } else { "0" };
        forged.replace_range(forged.len() - 1.., last);
        assert!(store.authenticate(&forged).0.is_none());
        for bad in ["", "egk_", "Bearer x", &key[..20], &key.to_uppercase()] {
            assert!(store.authenticate(bad).0.is_none(), "{bad}");
        }
    }

    #[test]
    fn revoked_and_new_keys_apply_to_a_running_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let store = KeyStore::open(&path).unwrap();
        assert_eq!(store.n_active(), 0);
        let (k1, e1) = create(&path, Grant::Store).unwrap();
        assert_eq!(store.authenticate(&k1).0.unwrap().1, Grant::Store);
        revoke(&path, &e1.id).unwrap();
        assert!(store.authenticate(&k1).0.is_none());
        assert!(revoke(&path, "nope").is_err());
        assert_eq!(list(&path).unwrap().len(), 1);
    }

    #[test]
    fn a_damaged_key_file_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let (k, _) = create(&path, Grant::Store).unwrap();
        let store = KeyStore::open(&path).unwrap();
        assert!(store.authenticate(&k).0.is_some());
        std::fs::write(&path, b"{ not json").unwrap();
        let (found, problem) = store.authenticate(&k);
        assert!(found.is_none());
        assert!(problem.unwrap().contains("damaged"));
        assert!(KeyStore::open(&path).is_err());
    }

    #[test]
    fn a_field_a_key_entry_does_not_have_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let (k, _) = create(&path, tenant_grant(Role::User)).unwrap();
        create(&path, Grant::Store).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        let store = KeyStore::open(&path).unwrap();
        assert!(store.authenticate(&k).0.is_some());
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
            f(&mut v);
            std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        };
        // a misspelt revocation, which would leave the key valid
        edit(&|v| v["keys"][0]["revoked"] = "2026-01-01T00:00:00Z".into());
        let err = KeyStore::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("key entry 1") && err.contains("field `revoked`"),
            "{err}"
        );
        assert!(
            store.authenticate(&k).0.is_none(),
            "a damaged file fails closed"
        );
        // a store key carrying a tenant's fields
        edit(&|v| v["keys"][1]["tenant"] = "acme".into());
        let err = KeyStore::open(&path).unwrap_err().to_string();
        assert!(err.contains("not one a store key has"), "{err}");
        // a tenant key turned into a store key, its tenant fields left
        edit(&|v| v["keys"][0]["scope"] = "store".into());
        assert!(KeyStore::open(&path).is_err());
        // a name a session may not have (`keys create` refuses it): a key
        // appended as principal " x", or was a key of tenant ""
        for (field, value) in [
            ("principal", serde_json::json!(" x")),
            ("tenant", serde_json::json!("")),
            ("tenant", serde_json::json!("ac\u{7}me")),
            ("labels", serde_json::json!([""])),
            ("principal", serde_json::json!("p".repeat(100_000))),
        ] {
            let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
            v["keys"][0][field] = value.clone();
            std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
            let err = KeyStore::open(&path).unwrap_err().to_string();
            assert!(
                err.contains("damaged") && err.contains("key entry 1"),
                "{value}: {err}"
            );
            assert!(store.authenticate(&k).0.is_none(), "{value}");
        }
        // a revoked key's names are left as they are (it grants nothing)
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["keys"][0]["principal"] = " x".into();
        v["keys"][0]["revoked_at"] = "2026-01-01T00:00:00Z".into();
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        KeyStore::open(&path).expect("a revoked entry's names are not checked");
        std::fs::write(&path, &good).unwrap();
        assert!(store.authenticate(&k).0.is_some());
    }

    /// A key file that is a link to one kept elsewhere is written where
    /// it is: a revocation through the link reaches the file a server
    /// reads (it replaced the link, and the key stayed valid).
    #[test]
    fn a_linked_key_file_is_written_through_its_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("etc").join(KEY_FILE_NAME);
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        let (k, entry) = create(&target, tenant_grant(Role::User)).unwrap();
        let link = dir.path().join("store-keys.json");
        std::os::unix::fs::symlink("etc/keys.json", &link).unwrap();
        let served = KeyStore::open(&target).unwrap();
        revoke(&link, &entry.id).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(
            served.authenticate(&k).0.is_none(),
            "the revocation reached the target"
        );
        create(&link, tenant_grant(Role::Reviewer)).unwrap();
        assert_eq!(list(&target).unwrap().len(), 2);
        assert!(!dir.path().join("store-keys.json.lock").exists());
    }

    /// A key command refused for its path leaves no lock file behind.
    #[test]
    fn a_refused_key_file_leaves_no_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let not_keys = dir.path().join("ENGRAM");
        std::fs::write(&not_keys, "a store's marker").unwrap();
        for path in [
            dir.path().to_path_buf(),
            not_keys.clone(),
            dir.path().join("missing").join(KEY_FILE_NAME),
        ] {
            let e = create(&path, tenant_grant(Role::User))
                .unwrap_err()
                .to_string();
            let mut lock = path.as_os_str().to_owned();
            lock.push(".lock");
            assert!(!PathBuf::from(lock).exists(), "{}: {e}", path.display());
        }
        let e = create(
            &dir.path().join("missing").join(KEY_FILE_NAME),
            tenant_grant(Role::User),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("directory does not exist") && !e.contains(".lock"),
            "{e}"
        );
        // a loop of links: refused before any lock
        let (a, b) = (
            dir.path().join("loop-a.json"),
            dir.path().join("loop-b.json"),
        );
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        assert!(create(&a, tenant_grant(Role::User)).is_err());
        assert!(!dir.path().join("loop-a.json.lock").exists());
        assert!(!dir.path().join("loop-b.json.lock").exists());
        let absent = dir.path().join("absent.json");
        let e = revoke(&absent, "deadbeef").unwrap_err().to_string();
        assert!(e.contains("no key file"), "{e}");
        assert!(!dir.path().join("absent.json.lock").exists());
    }

    /// Values not of the form `keys create` writes make the whole file
    /// damaged, named in the log: an edited sha256, id or time used to be
    /// read, failing its own key without a word.
    #[test]
    fn a_value_not_of_the_written_form_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let (k, _) = create(&path, tenant_grant(Role::User)).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        let store = KeyStore::open(&path).unwrap();
        let secret = "egk_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for (field, value) in [
            ("sha256", "zz"),
            ("sha256", secret),
            ("id", "NOTHEX!!"),
            ("id", "3F9A0C1D"),
            ("created_at", "yesterday"),
            ("revoked_at", "last week"),
        ] {
            let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
            v["keys"][0][field] = value.into();
            std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
            let err = KeyStore::open(&path).unwrap_err().to_string();
            assert!(
                err.contains("damaged") && err.contains(&format!("`{field}`")),
                "{field}: {err}"
            );
            assert!(!err.contains(value), "the value is echoed: {err}");
            let (found, problem) = store.authenticate(&k);
            assert!(found.is_none(), "{field}");
            assert!(problem.is_some_and(|p| p.contains(field)), "{field}");
        }
        std::fs::write(&path, &good).unwrap();
        assert!(store.authenticate(&k).0.is_some());
    }

    /// A field repeated in an entry (the last value would win: a revoked
    /// key brought back by a second `"revoked_at": null`, a key moved to
    /// another tenant by a second `"tenant"`) fails closed.
    #[test]
    fn a_field_repeated_in_an_entry_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let (k, entry) = create(&path, tenant_grant(Role::User)).unwrap();
        revoke(&path, &entry.id).unwrap();
        let store = KeyStore::open(&path).unwrap();
        assert!(store.authenticate(&k).0.is_none());
        let revoked = std::fs::read_to_string(&path).unwrap();
        let at = revoked.find("\"revoked_at\"").unwrap();
        let end = at + revoked[at..].find(['\n', ',']).unwrap();
        let twice = format!(
            "{}, \"revoked_at\": null{}",
            &revoked[..end],
            &revoked[end..]
        );
        std::fs::write(&path, twice).unwrap();
        let err = KeyStore::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("damaged") && err.contains("revoked_at"),
            "{err}"
        );
        let (found, problem) = store.authenticate(&k);
        assert!(found.is_none(), "a revoked key came back");
        assert!(problem.is_some());
    }

    #[test]
    fn a_key_file_with_an_id_twice_fails_closed() {
        // an operator who copied an entry, then revoked the key: the copy
        // must not keep it valid
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let (k, e) = create(&path, Grant::Store).unwrap();
        let mut f = read_file(&path).unwrap();
        f.keys.push(f.keys[0].clone());
        write_file(&path, &f).unwrap();
        let err = KeyStore::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(&format!("key id '{}' appears more than once", e.id)),
            "{err}"
        );
        assert!(revoke(&path, &e.id).is_err());
        f.keys.pop();
        write_file(&path, &f).unwrap();
        let store = KeyStore::open(&path).unwrap();
        assert!(store.authenticate(&k).0.is_some());
        revoke(&path, &e.id).unwrap();
        let mut f = read_file(&path).unwrap();
        let mut live = f.keys[0].clone();
        live.revoked_at = None;
        f.keys.push(live);
        write_file(&path, &f).unwrap();
        let (found, problem) = store.authenticate(&k);
        assert!(found.is_none());
        assert!(problem.unwrap().contains("appears more than once"));
    }

    #[test]
    fn an_edit_in_place_that_keeps_length_and_mtime_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let (k, _) = create(&path, Grant::Store).unwrap();
        let store = KeyStore::open(&path).unwrap();
        assert!(store.authenticate(&k).0.is_some());
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        // past the file system's timestamp granularity
        std::thread::sleep(std::time::Duration::from_millis(30));
        // another hash of the same length, written over the old one
        let text = std::fs::read_to_string(&path).unwrap();
        let old = sha256_hex(&k);
        let edited = text.replace(&old, &"0".repeat(old.len()));
        assert_eq!(edited.len(), text.len());
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, edited.as_bytes()).unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        assert!(store.authenticate(&k).0.is_none());
    }

    #[test]
    fn a_principal_is_a_model_or_a_person_never_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        create(&path, tenant_grant(Role::Agent)).unwrap();
        // another agent key of the principal is fine
        create(&path, tenant_grant(Role::Agent)).unwrap();
        for role in [Role::User, Role::Reviewer, Role::Admin] {
            let e = create(&path, tenant_grant(role)).unwrap_err().to_string();
            assert!(e.contains("'ann'") && e.contains("never both"), "{e}");
        }
        // the name in another tenant is another principal
        create(
            &path,
            Grant::Tenant {
                tenant: "globex".into(),
                principal: "ann".into(),
                role: Role::User,
                labels: vec![],
            },
        )
        .unwrap();
        // and a person may hold several roles' keys
        let other = dir.path().join("other.json");
        create(&other, tenant_grant(Role::User)).unwrap();
        create(&other, tenant_grant(Role::Reviewer)).unwrap();
        assert!(create(&other, tenant_grant(Role::Agent)).is_err());
    }

    #[test]
    fn roles_map_to_engine_principals() {
        let p = tenant_grant(Role::Agent).principal().unwrap();
        assert_eq!(p.kind(), engram_engine::WriterKind::Model);
        assert!(p.credential_labels().contains("hr"));
        let p = tenant_grant(Role::Reviewer).principal().unwrap();
        assert!(p.credential_roles().contains("reviewer"));
        let p = tenant_grant(Role::Admin).principal().unwrap();
        assert!(p.is_admin());
        assert_eq!(p.id(), "ann");
        assert!(Grant::Store.principal().is_none());
        assert!(
            create(
                &std::env::temp_dir().join("unused-keys.json"),
                Grant::Tenant {
                    tenant: " bad".into(),
                    principal: "p".into(),
                    role: Role::User,
                    labels: vec![]
                }
            )
            .is_err()
        );
    }
}
