//! The `engram` binary: see `engram --help` and the README.

// A recall allocates a few dozen small buffers (hits, manifest, candidate
// lists); with the system allocator that was about 30% of a filtered
// recall's time on small eligible sets (docs/benchmarks.md). The library
// leaves the allocator to the program that embeds it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    engram_server::main_entry()
}
