//! Compiles meshflow's own gRPC APIs in `proto/` with the protoc shipped by
//! `protoc-bin-vendored`, so a fresh machine needs no system protoc; and records the git
//! commit for `meshflow --version` (`MESHFLOW_COMMIT`; how it is found: build/git_commit.rs).

#[path = "build/git_commit.rs"]
mod git_commit;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Safe here: build scripts are single-threaded.
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .compile_protos(&["proto/meshflow/debug/v1/debug.proto"], &["proto"])?;

    println!("cargo:rerun-if-changed=build/git_commit.rs");
    println!("cargo:rerun-if-env-changed=MESHFLOW_COMMIT");
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let from_env = std::env::var("MESHFLOW_COMMIT").ok();
    let (commit, watch) = git_commit::commit_of(&root, from_env.as_deref());
    // Rebuild the version when HEAD moves, not on every build.
    for path in watch.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rustc-env=MESHFLOW_COMMIT={commit}");
    Ok(())
}
