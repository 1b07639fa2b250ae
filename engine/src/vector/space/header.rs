//! The header a vector space persists before its graph: whose space it
//! is and how far its file was durable, to check the snapshot still
//! matches the log at the next open.

use super::super::distance::Metric;

/// What a space persists next to its graph, to check it still matches the log.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SpaceHeader {
    pub tenant: String,
    pub model: String,
    pub dim: usize,
    pub metric: Metric,
    pub derived: bool,
    pub rows_synced: u64,
    pub last_row_record: [u8; 16],
}

/// The length of a tenant name or model id as the header stores it (both
/// are at most `NAME_BYTES_MAX` bytes).
fn name_len(s: &str) -> u32 {
    u32::try_from(s.len()).expect("names are at most NAME_BYTES_MAX bytes")
}

pub(super) fn encode_header(h: &SpaceHeader) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&name_len(&h.tenant).to_le_bytes());
    out.extend_from_slice(h.tenant.as_bytes());
    out.extend_from_slice(&name_len(&h.model).to_le_bytes());
    out.extend_from_slice(h.model.as_bytes());
    out.extend_from_slice(
        &u32::try_from(h.dim)
            .expect("dimensions <= VECTOR_DIM_MAX")
            .to_le_bytes(),
    );
    out.push(h.metric.code());
    out.push(h.derived as u8);
    out.extend_from_slice(&h.rows_synced.to_le_bytes());
    out.extend_from_slice(&h.last_row_record);
    out
}

pub(super) fn decode_header(b: &[u8]) -> Option<(SpaceHeader, &[u8])> {
    let t = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    let tenant = std::str::from_utf8(b.get(4..4 + t)?).ok()?.to_string();
    let b = &b[4 + t..];
    let n = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    let model = std::str::from_utf8(b.get(4..4 + n)?).ok()?.to_string();
    let mut p = 4 + n;
    let dim = u32::from_le_bytes(b.get(p..p + 4)?.try_into().ok()?) as usize;
    p += 4;
    let metric = Metric::from_code(*b.get(p)?)?;
    let derived = *b.get(p + 1)? != 0;
    p += 2;
    let rows_synced = u64::from_le_bytes(b.get(p..p + 8)?.try_into().ok()?);
    p += 8;
    let last_row_record: [u8; 16] = b.get(p..p + 16)?.try_into().ok()?;
    p += 16;
    Some((
        SpaceHeader {
            tenant,
            model,
            dim,
            metric,
            derived,
            rows_synced,
            last_row_record,
        },
        &b[p..],
    ))
}
