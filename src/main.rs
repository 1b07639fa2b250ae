//! The `engram` binary: see `engram --help` and the README.

fn main() -> std::process::ExitCode {
    engram_server::main_entry()
}
