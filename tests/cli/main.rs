//! The `engram` binary: the README's demo, setup commands, and output on
//! a terminal.
//!
//! One test binary per area (each links the whole engine once).

mod bench;
mod demo;
mod setup;
mod terminal;
