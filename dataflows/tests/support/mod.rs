//! Shared harness of the dataflows integration tests: the `Mesh` (an engine plus what each
//! proxy holds) and the record builders. Test files include it with `mod support;` (a
//! directory test with `#[path = "../support/mod.rs"]`); each binary uses only part of it,
//! hence `dead_code` is allowed for the whole harness rather than item by item.

#![allow(dead_code)]

mod builders;
mod mesh;

// Not every test binary uses both.
#[allow(unused_imports)]
pub use builders::*;
#[allow(unused_imports)]
pub use mesh::*;
