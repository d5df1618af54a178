//! Generated code for qtg's executor and signer protocols (`proto/`): prost messages, tonic
//! clients and servers, and proto3 canonical JSON (serde) for the HTTP transport.

pub mod executor {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/qtg.executor.v1.rs"));
        include!(concat!(env!("OUT_DIR"), "/qtg.executor.v1.serde.rs"));
    }
}

pub mod signer {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/qtg.signer.v1.rs"));
        include!(concat!(env!("OUT_DIR"), "/qtg.signer.v1.serde.rs"));
    }
}

pub mod convert;

/// The encoded descriptor set (gRPC reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/qtg_descriptor.bin"));
