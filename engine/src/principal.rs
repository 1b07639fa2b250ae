//! Principals: who a session acts as.
//!
//! A session is bound to one principal, and the principal fixes the tenant:
//! nothing in a request can name another tenant. Embedded callers build the
//! principal themselves (the process is trusted, as with any embedded
//! database); the server derives it from the API key.
//!
//! What a principal may read is decided at read time from the store's grants
//! (so revocations apply to the very next read):
//! - a record with access labels `L1..Ln` is readable only by a principal
//!   holding *every* label (so the union of labels is the strictest access,
//!   which is what derived records get);
//! - an **admin** principal holds every label of its tenant and every role;
//! - a label revoked tenant-wide is held by nobody, admins included, until it
//!   is granted back tenant-wide.
//!
//! This module must never take a tenant or principal from record content.

use crate::model::WriterKind;

/// Role that may approve or reject review candidates.
pub const ROLE_REVIEWER: &str = "reviewer";
/// Role that may do everything in its tenant.
pub const ROLE_ADMIN: &str = "admin";

/// The identity a session acts as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    // (shared: every manifest names them)
    tenant: std::sync::Arc<str>,
    id: std::sync::Arc<str>,
    kind: WriterKind,
    admin: bool,
    /// Labels and roles its credential (an API key) grants, on top of the
    /// store's grants; tenant-wide revocations still apply.
    credential_labels: std::collections::BTreeSet<String>,
    credential_roles: std::collections::BTreeSet<String>,
}

impl Principal {
    /// A person.
    pub fn user(tenant: impl Into<String>, id: impl Into<String>) -> Self {
        Principal {
            tenant: tenant.into().into(),
            id: id.into().into(),
            kind: WriterKind::User,
            admin: false,
            credential_labels: Default::default(),
            credential_roles: Default::default(),
        }
    }

    /// A model or agent writer: procedural records it writes need review.
    pub fn model(tenant: impl Into<String>, id: impl Into<String>) -> Self {
        Principal {
            tenant: tenant.into().into(),
            id: id.into().into(),
            kind: WriterKind::Model,
            admin: false,
            credential_labels: Default::default(),
            credential_roles: Default::default(),
        }
    }

    /// A system adapter (telemetry, importer): may attribute records it
    /// writes to the principal that produced them (the `writer` field).
    pub fn system(tenant: impl Into<String>, id: impl Into<String>) -> Self {
        Principal {
            tenant: tenant.into().into(),
            id: id.into().into(),
            kind: WriterKind::System,
            admin: false,
            credential_labels: Default::default(),
            credential_roles: Default::default(),
        }
    }

    /// The tenant's administrator (what the operator CLI acts as by default).
    pub fn admin(tenant: impl Into<String>) -> Self {
        Principal {
            tenant: tenant.into().into(),
            id: ROLE_ADMIN.into(),
            kind: WriterKind::System,
            admin: true,
            credential_labels: Default::default(),
            credential_roles: Default::default(),
        }
    }

    /// The tenant's administrator acting under its own name (an admin API
    /// key names its principal).
    pub fn admin_named(tenant: impl Into<String>, id: impl Into<String>) -> Self {
        Principal {
            id: id.into().into(),
            ..Principal::admin(tenant)
        }
    }

    /// Adds labels the principal's credential grants (held on top of the
    /// store's grants, except while revoked tenant-wide).
    pub fn with_labels<I: IntoIterator<Item = String>>(mut self, labels: I) -> Self {
        self.credential_labels.extend(labels);
        self
    }

    /// Adds a role the principal's credential grants (`reviewer`, `admin`).
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.credential_roles.insert(role.into());
        self
    }

    /// Labels granted by the credential.
    pub fn credential_labels(&self) -> &std::collections::BTreeSet<String> {
        &self.credential_labels
    }

    /// Roles granted by the credential.
    pub fn credential_roles(&self) -> &std::collections::BTreeSet<String> {
        &self.credential_roles
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The principal id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The tenant, shared.
    pub(crate) fn tenant_shared(&self) -> std::sync::Arc<str> {
        self.tenant.clone()
    }

    /// The principal id, shared.
    pub(crate) fn id_shared(&self) -> std::sync::Arc<str> {
        self.id.clone()
    }

    /// Writer kind of records this principal writes itself.
    pub fn kind(&self) -> WriterKind {
        self.kind
    }

    /// Whether this is the tenant admin.
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Whether the `writer` field of records is honoured for this principal.
    pub fn may_attribute(&self) -> bool {
        self.admin || self.kind == WriterKind::System
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "principal '{}' of tenant '{}'", self.id, self.tenant)
    }
}
