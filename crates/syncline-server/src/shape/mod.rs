//! Shapes: definitions, handles, the metadata kept beside each log, and the registry of live
//! shapes that requests and the pipeline share.

mod definition;
mod handle;
mod meta;
mod registry;
mod writer;

pub use definition::{LogMode, Replica, ShapeDefinition};
pub use handle::{mint as mint_handle, observe as observe_handle};
pub use meta::{MetaDir, ShapeMeta};
pub use registry::{Registry, Shape, ShapeState};
pub use writer::{ShapeWriter, SharedWriter};
