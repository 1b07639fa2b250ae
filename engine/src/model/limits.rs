/// Bytes of a record's text.
pub const TEXT_BYTES_MAX: usize = 1 << 20;
/// Bytes of a record's `data` in canonical JSON.
pub const DATA_BYTES_MAX: usize = 1 << 20;
/// Bytes of a name-like field (tenant, kind, label, principal, model id, ...).
pub const NAME_BYTES_MAX: usize = 256;
/// Bytes of the free-text reason or note of a lifecycle operation
/// (delete, retract, approve, reject): it is kept in the log for good.
pub const REASON_BYTES_MAX: usize = 4096;
/// Bytes of an external id.
pub const EXTERNAL_ID_BYTES_MAX: usize = 512;
/// Access labels on one record, scope labels on one record, aliases.
pub const LABELS_MAX: usize = 64;
/// Dimensions of a vector.
pub const VECTOR_DIM_MAX: usize = 4096;
/// Embeddings on one record (one per model).
pub const EMBEDDINGS_PER_RECORD_MAX: usize = 8;
/// Sources of one semantic record.
pub const SOURCES_MAX: usize = 1024;
/// Records in one atomic batch.
pub const BATCH_RECORDS_MAX: usize = 10_000;
/// Results of one retrieval.
pub const K_MAX: usize = 1000;
/// Bytes of a query text.
pub const QUERY_TEXT_BYTES_MAX: usize = 16 << 10;
/// Hops of graph expansion.
pub const GRAPH_DEPTH_MAX: usize = 4;
/// ef_search of the vector index.
pub const EF_MAX: usize = 10_000;
/// A retriever's fusion weight: large enough for any ratio worth
/// asking for, small enough that no sum of weighted scores overflows.
pub const WEIGHT_MAX: f64 = 1_000_000.0;
/// Bytes of a context budget.
pub const CONTEXT_BUDGET_BYTES_MAX: usize = 16 << 20;
/// Records in one store (dense record indexes are 32-bit; the top
/// values are reserved as "none" markers).
pub const RECORDS_MAX: usize = (u32::MAX - 1) as usize;
