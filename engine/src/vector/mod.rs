//! Vector search: distances ([`distance`]), the HNSW graph ([`hnsw`]) and
//! per-model vector spaces ([`space`]).
//!
//! This module must never decide which records are eligible; callers pass
//! the eligibility bitmap in.

pub mod distance;
pub mod hnsw;
pub mod precision;
pub mod quant;
pub mod space;
