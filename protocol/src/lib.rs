//! stub: replaced by the protocol helper; keep these re-exports.
pub use amq_protocol::protocol::{self as methods, AMQPClass, BasicProperties};
pub use amq_protocol::types::{self, AMQPValue, FieldArray, FieldTable, LongString, ShortString};
