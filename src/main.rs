//! The `runtape` binary; everything lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    runtape::cli::main()
}
