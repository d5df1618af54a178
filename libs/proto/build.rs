//! Compiles `proto/qtg/{executor,signer}/v1/*.proto` with the pure-Rust `protox` compiler (no
//! system protoc), generating prost messages, tonic services and pbjson serde impls (proto3
//! canonical JSON for the HTTP transport).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [root.join("qtg/executor/v1/executor.proto"), root.join("qtg/signer/v1/signer.proto")];
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let descriptors = protox::compile(&files, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out.join("qtg_descriptor.bin");
    std::fs::write(&descriptor_path, prost::Message::encode_to_vec(&descriptors))?;
    let config = prost_build::Config::new();
    tonic_prost_build::configure()
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .file_descriptor_set_path(&descriptor_path)
        .skip_protoc_run()
        .compile_with_config(config, &files, std::slice::from_ref(&root))?;
    let descriptor_bytes = std::fs::read(&descriptor_path)?;
    pbjson_build::Builder::new()
        .register_descriptors(&descriptor_bytes)?
        .extern_path(".google.protobuf", "::pbjson_types")
        .build(&[".qtg.executor.v1", ".qtg.signer.v1"])?;
    Ok(())
}
