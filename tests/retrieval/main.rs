//! Retrieval (basics and the forbidden-hit property), lineage as a
//! property against a model, and the embedded API.
//!
//! One test binary per area (each links the whole engine once).

#[path = "../common/mod.rs"]
mod common;

mod basics;
mod embedded_api;
mod forced_plan;
mod int8_walk;
mod isolation;
mod lineage_property;
mod locomo;
#[cfg(feature = "minilm")]
mod minilm;
