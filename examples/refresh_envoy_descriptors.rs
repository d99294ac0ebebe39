//! Rewrites `src/debug/envoy_descriptors.bin` from envoy-types' `src/generated/types.bin`
//! (path in `ENVOY_TYPES_DESCRIPTORS`), dropping the comments. Run after upgrading
//! envoy-types; see `src/debug/envoy_json.rs`.

use prost::Message;
use prost_reflect::prost_types::FileDescriptorSet;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let src = std::env::var_os("ENVOY_TYPES_DESCRIPTORS")
        .ok_or("set ENVOY_TYPES_DESCRIPTORS to envoy-types' src/generated/types.bin")?;
    let bytes = std::fs::read(&src)?;
    let mut set = FileDescriptorSet::decode(bytes.as_slice())?;
    for f in &mut set.file {
        f.source_code_info = None;
    }
    let out = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/debug/envoy_descriptors.bin"
    );
    std::fs::write(out, set.encode_to_vec())?;
    eprintln!("wrote {out}");
    Ok(())
}
