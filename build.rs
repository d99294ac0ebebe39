//! Compiles meshflow's own gRPC APIs in `proto/` with the protoc shipped by
//! `protoc-bin-vendored`, so a fresh machine needs no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Safe here: build scripts are single-threaded.
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .compile_protos(&["proto/meshflow/debug/v1/debug.proto"], &["proto"])?;
    Ok(())
}
