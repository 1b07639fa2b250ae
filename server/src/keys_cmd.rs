//! `engram serve` and `engram keys` on the command line: arguments, and
//! printing what the key commands did.
//!
//! A key is printed once, by `keys create`, on stdout (and nowhere else);
//! `keys list` shows ids, scopes, principals and roles, never hashes.
//! This module must never print a key anywhere but in `keys create`'s
//! answer, nor write the key file except through `crate::http::keys`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::cli::{CliError, CliResult};
use crate::http::keys::{self, Grant, KeyEntry, Role};

/// `engram serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7878, or the config's
    /// `listen`] (`127.0.0.1:0` picks a free port; the line
    /// `listening on http://ADDR` on stdout says which).
    #[arg(long)]
    pub listen: Option<String>,
    /// TOML configuration: listen address, key file, limits (see docs/server.md).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The key file (default: the `key_file` of --config, else keys.json in
    /// --data), as `engram keys --key-file` takes it.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
}

/// `engram keys`.
#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Create an API key and print it once (only its SHA-256 is stored).
    Create(CreateArgs),
    /// List keys: id, scope, tenant, principal, role, labels (never the keys).
    List(KeyFileArgs),
    /// Revoke a key by id; a running server refuses it from its next request.
    Revoke {
        /// The key id (its first 8 hex digits; see `engram keys list`).
        id: String,
        #[command(flatten)]
        file: KeyFileArgs,
    },
}

/// Where the keys are.
#[derive(Args, Debug)]
pub struct KeyFileArgs {
    /// The key file (default: keys.json in --data).
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `engram keys create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The store-wide admin key (backup, compaction, verify, store stats): no tenant.
    #[arg(long, conflicts_with_all = ["tenant", "principal", "role", "label"])]
    pub admin: bool,
    /// Tenant of the key's principal.
    #[arg(long, required_unless_present = "admin")]
    pub tenant: Option<String>,
    /// Principal the key acts as.
    #[arg(long, required_unless_present = "admin")]
    pub principal: Option<String>,
    /// Role: admin (the tenant admin), reviewer, user (default) or agent
    /// (a model writer: procedural records it writes need review).
    #[arg(long, default_value = "user")]
    pub role: String,
    /// Access label the key holds (repeatable), on top of the store's grants.
    #[arg(long = "label")]
    pub label: Vec<String>,
    #[command(flatten)]
    pub file: KeyFileArgs,
}

/// `engram serve`.
pub fn serve(ctx: &crate::cli::Ctx, a: ServeArgs) -> CliResult {
    let served = crate::http::serve::serve(
        &ctx.data,
        ctx.embedder.as_deref(),
        a.config.as_deref(),
        (a.listen.as_deref(), a.key_file.as_deref()),
    );
    match served {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // The server's stderr is its log, one JSON object per line: the
        // reason it cannot serve (a port in use, a locked store, a damaged
        // key file or configuration) is one more line of it.
        Err(e) => {
            crate::http::logging::log(
                "error",
                "cannot serve",
                &[("error", serde_json::json!(e.to_string()))],
            );
            Ok(ExitCode::from(1))
        }
    }
}

/// Whether stdout is the null device (where a closed stdout is, too: the
/// Rust runtime opens /dev/null for a standard descriptor it finds closed).
fn stdout_is_null() -> bool {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else {
            return true;
        };
        let (Ok(out), Ok(null)) = (
            std::fs::File::from(fd).metadata(),
            std::fs::metadata("/dev/null"),
        ) else {
            return false;
        };
        out.file_type().is_char_device() && out.rdev() == null.rdev()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

fn key_file(data: &Path, a: &KeyFileArgs) -> Result<PathBuf, CliError> {
    use engram_engine::store_dir::{BACKUP_FILE, DirKind, classify, refuse_unfinished};
    if let Some(k) = &a.key_file {
        return Ok(k.clone());
    }
    refuse_unfinished(&engram_storage::FsBackend, data)?;
    match classify(&engram_storage::FsBackend, data)? {
        // a backup is not a store: nothing is written into it
        DirKind::Store | DirKind::Unmarked if data.join(BACKUP_FILE).exists() => {
            Err(CliError::Message(format!(
                "{} is a backup, not a store: keys belong to the store it is restored into",
                data.display()
            )))
        }
        // a store this build cannot read (a newer format, a damaged
        // marker): refused as every other command refuses it, nothing
        // written beside it
        DirKind::Store => {
            engram_engine::store_dir::check_marker(&engram_storage::FsBackend, data)?;
            Ok(keys::default_key_file(data))
        }
        DirKind::Unmarked => Ok(keys::default_key_file(data)),
        _ => Err(CliError::Message(format!(
            "no store at {} (create one with `engram init`, or pass --key-file)",
            data.display()
        ))),
    }
}

/// The directories a store's maintenance owns (compaction, rebuild,
/// repair and restore replace or remove them).
const OWNED_DIRS: [&str; 6] = [
    "log",
    "derived",
    "quarantine",
    "compact.staging",
    "log.restore",
    "log.old",
];

/// Refuses a key file to be created inside one of a store's own
/// directories ([`OWNED_DIRS`]): it would be replaced or removed with
/// them. A store's root, a directory of the operator's inside it, or any
/// place outside a store is fine. (Listing and revoking read and write a
/// key file wherever it is, so one written there can be moved.)
fn refuse_owned_dir(path: &Path) -> Result<(), CliError> {
    use engram_engine::store_dir::MARKER_FILE;
    use engram_storage::Backend;
    // where the file would really be: the part of the path that exists
    // resolved as the system does (links, then `..`), then `..` taken
    // lexically in the rest
    let joined = std::env::current_dir().unwrap_or_default().join(path);
    let abs = engram_engine::store_dir::absolute(&engram_storage::FsBackend.real_path(&joined));
    for store in abs.ancestors().skip(1) {
        if !store.join(MARKER_FILE).exists() {
            continue;
        }
        // a file of the store's own in its root (the ledger, the
        // settings, a restore's marker: `keys create` wrote a key file
        // over a store file that did not exist yet, and the store no longer
        // opened)
        let in_root = abs.strip_prefix(store).ok().and_then(|r| {
            let mut parts = r.components();
            let only = parts.next()?;
            parts
                .next()
                .is_none()
                .then(|| only.as_os_str().to_str())
                .flatten()
        });
        if let Some(name) = in_root.filter(|n| is_store_file_name(n)) {
            return Err(CliError::Message(format!(
                "--key-file {}: {name} is a file of the store at {} itself; name the key file otherwise (a store's is keys.json in its root)",
                path.display(),
                store.display()
            )));
        }
        let below = abs.strip_prefix(store).ok().and_then(|r| {
            let mut parts = r.components();
            let first = parts.next()?;
            // (the file itself in the root is not below a directory)
            parts.next()?;
            first.as_os_str().to_str()
        });
        if let Some(dir) = below.filter(|d| OWNED_DIRS.contains(d)) {
            return Err(CliError::Message(format!(
                "--key-file {}: inside {dir}/ of the store at {}, which its maintenance replaces; keep a key file outside a store's own directories (a store's is keys.json in its root)",
                path.display(),
                store.display()
            )));
        }
    }
    Ok(())
}

/// Whether a store gives a file of its root this name (or a directory:
/// [`OWNED_DIRS`]).
fn is_store_file_name(name: &str) -> bool {
    use engram_engine::store_dir::{BACKUP_FILE, MARKER_FILE, PARTIAL_BACKUP_FILE, is_owned_name};
    is_owned_name(name)
        || OWNED_DIRS.contains(&name)
        || [MARKER_FILE, "LOCK", BACKUP_FILE, PARTIAL_BACKUP_FILE].contains(&name)
}

fn describe(k: &KeyEntry) -> String {
    let state = match &k.revoked_at {
        Some(t) => format!("  REVOKED {t}"),
        None => String::new(),
    };
    match &k.grant {
        Grant::Store => format!("{}  store admin  created {}{state}", k.id, k.created_at),
        Grant::Tenant {
            tenant,
            principal,
            role,
            labels,
        } => format!(
            // (names quoted as JSON strings: a quote or a comma inside one
            // reads as part of it, never as the next field or label)
            "{}  tenant {} principal {} role {}{}  created {}{state}",
            k.id,
            quoted(tenant),
            quoted(principal),
            role.name(),
            if labels.is_empty() {
                String::new()
            } else {
                let each: Vec<String> = labels.iter().map(|l| quoted(l)).collect();
                format!(" labels {}", each.join(", "))
            },
            k.created_at
        ),
    }
}

/// `s` as a JSON string: in quotes, with quotes and control characters
/// escaped.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The public view of an entry (no hash).
fn public(k: &KeyEntry) -> serde_json::Value {
    let mut v = serde_json::to_value(k).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("sha256");
    }
    v
}

/// `engram keys ...`.
pub fn keys(data: &Path, cmd: KeysCommand) -> CliResult {
    let err = CliError::from;
    match cmd {
        KeysCommand::Create(a) => {
            let path = key_file(data, &a.file)?;
            // the path, and the file it names through links (a link to a
            // file not there yet led into a store's log/)
            refuse_owned_dir(&path)?;
            refuse_owned_dir(&keys::followed(&path))?;
            let grant = if a.admin {
                Grant::Store
            } else {
                let role = Role::parse(&a.role).ok_or_else(|| {
                    CliError::Message(format!(
                        "--role {}: expected admin, reviewer, user or agent",
                        a.role
                    ))
                })?;
                Grant::Tenant {
                    tenant: a.tenant.unwrap_or_default(),
                    principal: a.principal.unwrap_or_default(),
                    role,
                    // (a label named twice is one label)
                    labels: a.label.into_iter().fold(Vec::new(), |mut v, l| {
                        if !v.contains(&l) {
                            v.push(l);
                        }
                        v
                    }),
                }
            };
            // A stdout that discards what is written to it (`>/dev/null`;
            // a closed one, `>&-`, which the runtime opens on /dev/null)
            // would show the key to nobody.
            if stdout_is_null() {
                return Err(CliError::Message(
                    "stdout is /dev/null (or was closed): the new key would be shown to nobody; \
                     no key was created"
                        .into(),
                ));
            }
            let (key, entry) = keys::create(&path, grant).map_err(err)?;
            let shown = if a.file.json {
                let mut v = public(&entry);
                v["key"] = key.into();
                crate::output::try_emit(format_args!("{v}"))
            } else {
                crate::output::try_emit(format_args!("{key}"))
            };
            // The secret is shown only here: a key whose secret nobody
            // received is revoked at once, not left active and unknown.
            if let Err(e) = shown {
                let id = &entry.id;
                return Err(CliError::Message(match keys::revoke(&path, id) {
                    Ok(_) => format!(
                        "cannot write the new key to stdout ({e}); key {id} was revoked at once, \
                         so no active key is left that nobody holds; run the command again with \
                         a writable stdout"
                    ),
                    Err(r) => format!(
                        "cannot write the new key to stdout ({e}), and revoking it failed ({r}): \
                         revoke it with `engram keys revoke {id}`"
                    ),
                }));
            }
            if !a.file.json {
                crate::eoutln!(
                    "created key {} ({}); it is shown only now: store it safely",
                    entry.id,
                    describe(&entry)
                        .split_once("  ")
                        .map_or("", |x| x.1)
                        .split("  created")
                        .next()
                        .unwrap_or("")
                );
            }
        }
        KeysCommand::List(a) => {
            let path = key_file(data, &a)?;
            let all = keys::list(&path).map_err(err)?;
            if a.json {
                let v: Vec<_> = all.iter().map(public).collect();
                crate::outln!("{}", serde_json::Value::Array(v));
            } else {
                for k in &all {
                    crate::outln!("{}", describe(k));
                }
                crate::errln!("{} key(s) in {}", all.len(), path.display());
            }
        }
        KeysCommand::Revoke { id, file } => {
            let path = key_file(data, &file)?;
            let was_revoked = keys::list(&path)
                .map_err(err)?
                .iter()
                .any(|k| k.id == id && k.revoked_at.is_some());
            let k = keys::revoke(&path, &id).map_err(err)?;
            crate::output::change_made(format!("key {id} is revoked"));
            if file.json {
                crate::outln!("{}", public(&k));
            } else if was_revoked {
                crate::outln!("already revoked, nothing changed: {}", describe(&k));
            } else {
                crate::outln!("revoked {}", describe(&k));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name holding a quote or a comma reads as one name: a tenant named
    /// `t' principal 'x` printed like a key of principal `x`, and one label
    /// `a,b` like two.
    #[test]
    fn listed_names_read_as_one_name_each() {
        let entry = |tenant: &str, labels: &[&str]| KeyEntry {
            id: "00c6ff04".into(),
            sha256: String::new(),
            grant: Grant::Tenant {
                tenant: tenant.into(),
                principal: "p3".into(),
                role: Role::User,
                labels: labels.iter().map(|l| l.to_string()).collect(),
            },
            created_at: "2026-12-07T04:24:06.209Z".into(),
            revoked_at: None,
        };
        let tricky = describe(&entry("t' principal 'x", &["a,b"]));
        assert!(
            tricky.contains(r#"tenant "t' principal 'x" principal "p3""#),
            "{tricky}"
        );
        assert_ne!(
            describe(&entry("t", &["a,b"])),
            describe(&entry("t", &["a", "b"]))
        );
    }
}
