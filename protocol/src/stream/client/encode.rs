//! Encoding the messages a client sends: a typed message into its frame.

use super::*;

impl ClientMessage {
    /// Appends the message as one frame (size field included).
    // One piece on purpose: after the frame's key and version, each arm writes
    // one message's fields in wire order; splitting the arms apart would only
    // scatter the wire format.
    pub fn encode(&self, buf: &mut BytesMut) {
        use ClientMessage as M;
        use wire::{put_nullable_string, put_properties, put_string, put_strings};
        let command = self.command();
        let (key, version) = match self {
            M::Tune {
                as_response: true, ..
            }
            | M::CloseResponse { .. }
            | M::ConsumerUpdateResponse { .. } => (command.response_key(), 1),
            M::Publish { version, .. } => (command.key(), *version),
            _ => (command.key(), 1),
        };
        let start = wire::begin_frame(buf, key, version);
        match self {
            M::PeerProperties {
                correlation_id,
                properties,
            } => {
                buf.put_u32(*correlation_id);
                put_properties(buf, properties);
            }
            M::SaslHandshake { correlation_id } => buf.put_u32(*correlation_id),
            M::SaslAuthenticate {
                correlation_id,
                mechanism,
                data,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, mechanism);
                wire::put_nullable_bytes(buf, data.as_deref());
            }
            M::Tune {
                frame_max,
                heartbeat,
                ..
            } => {
                buf.put_u32(*frame_max);
                buf.put_u32(*heartbeat);
            }
            M::Open {
                correlation_id,
                virtual_host,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, virtual_host);
            }
            M::Close {
                correlation_id,
                code,
                reason,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u16(*code);
                put_string(buf, reason);
            }
            M::CloseResponse {
                correlation_id,
                code,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u16(code.as_u16());
            }
            M::Heartbeat => {}
            M::CreateStream {
                correlation_id,
                stream,
                arguments,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, stream);
                put_properties(buf, arguments);
            }
            M::DeleteStream {
                correlation_id,
                stream,
            }
            | M::StreamStats {
                correlation_id,
                stream,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, stream);
            }
            M::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*publisher_id);
                put_string(buf, reference);
                put_string(buf, stream);
            }
            M::DeletePublisher {
                correlation_id,
                publisher_id,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*publisher_id);
            }
            M::Publish {
                version,
                publisher_id,
                messages,
            } => {
                buf.put_u8(*publisher_id);
                wire::put_count(buf, messages.len());
                for m in messages {
                    buf.put_u64(m.publishing_id);
                    if *version >= 2 {
                        put_nullable_string(buf, m.filter_value.as_deref());
                    }
                    m.entry.put(buf);
                }
            }
            M::QueryPublisherSequence {
                correlation_id,
                reference,
                stream,
            }
            | M::QueryOffset {
                correlation_id,
                reference,
                stream,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, reference);
                put_string(buf, stream);
            }
            M::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*subscription_id);
                put_string(buf, stream);
                offset.put(buf);
                buf.put_u16(*credit);
                if let Some(p) = properties {
                    put_properties(buf, p);
                }
            }
            M::Credit {
                subscription_id,
                credit,
            } => {
                buf.put_u8(*subscription_id);
                buf.put_u16(*credit);
            }
            M::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                put_string(buf, reference);
                put_string(buf, stream);
                buf.put_u64(*offset);
            }
            M::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*subscription_id);
            }
            M::Metadata {
                correlation_id,
                streams,
            } => {
                buf.put_u32(*correlation_id);
                put_strings(buf, streams);
            }
            M::Route {
                correlation_id,
                routing_key,
                super_stream,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, routing_key);
                put_string(buf, super_stream);
            }
            M::Partitions {
                correlation_id,
                super_stream: name,
            }
            | M::DeleteSuperStream {
                correlation_id,
                name,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, name);
            }
            M::ConsumerUpdateResponse {
                correlation_id,
                code,
                offset,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u16(code.as_u16());
                offset.put(buf);
            }
            M::ExchangeCommandVersions {
                correlation_id,
                commands,
            } => {
                buf.put_u32(*correlation_id);
                put_command_versions(buf, commands);
            }
            M::CreateSuperStream {
                correlation_id,
                name,
                partitions,
                binding_keys,
                arguments,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, name);
                put_strings(buf, partitions);
                put_strings(buf, binding_keys);
                put_properties(buf, arguments);
            }
            M::ResolveOffsetSpec {
                correlation_id,
                stream,
                offset,
                properties,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, stream);
                offset.put(buf);
                if let Some(p) = properties {
                    put_properties(buf, p);
                }
            }
        }
        wire::end_frame(buf, start);
    }
}
