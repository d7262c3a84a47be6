//! Encoding the messages a server sends: a typed message into its frame.

use super::*;

impl ServerMessage {
    /// Appends the message as one frame (size field included).
    pub fn encode(&self, buf: &mut BytesMut) {
        use ServerMessage as M;
        let command = self.command();
        if let M::Deliver {
            subscription_id,
            committed_chunk_id,
            chunk,
        } = self
        {
            encode_deliver_header(buf, *subscription_id, *committed_chunk_id, chunk.len());
            buf.put_slice(chunk);
            return;
        }
        let key = match self {
            M::Tune { .. }
            | M::Close { .. }
            | M::Heartbeat
            | M::MetadataUpdate { .. }
            | M::PublishConfirm { .. }
            | M::PublishError { .. }
            | M::ConsumerUpdate { .. }
            | M::RouteResponse {
                request_key: true, ..
            }
            | M::PartitionsResponse {
                request_key: true, ..
            } => command.key(),
            _ => command.response_key(),
        };
        let start = wire::begin_frame(buf, key, 1);
        self.encode_body(buf);
        wire::end_frame(buf, start);
    }

    /// The message's fields, in wire order.
    ///
    /// One piece on purpose: each arm writes one message's fields in wire
    /// order; splitting the arms apart would only scatter the wire format.
    fn encode_body(&self, buf: &mut BytesMut) {
        use ServerMessage as M;
        use wire::{put_string, put_strings};
        match self {
            M::PeerPropertiesResponse {
                correlation_id,
                code,
                properties,
            } => {
                put_head(buf, *correlation_id, *code);
                wire::put_properties(buf, properties);
            }
            M::SaslHandshakeResponse {
                correlation_id,
                code,
                mechanisms,
            } => {
                put_head(buf, *correlation_id, *code);
                put_strings(buf, mechanisms);
            }
            M::SaslAuthenticateResponse {
                correlation_id,
                code,
                challenge,
            } => {
                put_head(buf, *correlation_id, *code);
                if let Some(ch) = challenge {
                    let ch = &ch[..ch.len().min(usize::from(u16::MAX))];
                    buf.put_u16(ch.len() as u16);
                    buf.put_slice(ch);
                }
            }
            M::Tune {
                frame_max,
                heartbeat,
            } => {
                buf.put_u32(*frame_max);
                buf.put_u32(*heartbeat);
            }
            M::OpenResponse {
                correlation_id,
                code,
                properties,
            } => {
                put_head(buf, *correlation_id, *code);
                put_optional_properties(buf, properties);
            }
            M::Close {
                correlation_id,
                code,
                reason,
            } => {
                put_head(buf, *correlation_id, *code);
                put_string(buf, reason);
            }
            M::CloseResponse {
                correlation_id,
                code,
            }
            | M::Response {
                correlation_id,
                code,
                ..
            } => put_head(buf, *correlation_id, *code),
            M::Heartbeat | M::Deliver { .. } => {}
            M::QueryPublisherSequenceResponse {
                correlation_id,
                code,
                sequence: n,
            }
            | M::QueryOffsetResponse {
                correlation_id,
                code,
                offset: n,
            } => {
                put_head(buf, *correlation_id, *code);
                buf.put_u64(*n);
            }
            M::MetadataResponse {
                correlation_id,
                brokers,
                streams,
            } => {
                buf.put_u32(*correlation_id);
                put_metadata(buf, brokers, streams);
            }
            M::MetadataUpdate { code, stream } => {
                buf.put_u16(code.as_u16());
                put_string(buf, stream);
            }
            M::PublishConfirm {
                publisher_id,
                publishing_ids,
            } => {
                buf.put_u8(*publisher_id);
                wire::put_count(buf, publishing_ids.len());
                for id in publishing_ids {
                    buf.put_u64(*id);
                }
            }
            M::PublishError {
                publisher_id,
                errors,
            } => {
                buf.put_u8(*publisher_id);
                wire::put_count(buf, errors.len());
                for e in errors {
                    buf.put_u64(e.publishing_id);
                    buf.put_u16(e.code.as_u16());
                }
            }
            M::CreditResponse {
                code,
                subscription_id,
            } => {
                buf.put_u16(code.as_u16());
                buf.put_u8(*subscription_id);
            }
            M::RouteResponse {
                correlation_id,
                code,
                streams,
                ..
            }
            | M::PartitionsResponse {
                correlation_id,
                code,
                streams,
                ..
            } => {
                put_head(buf, *correlation_id, *code);
                put_strings(buf, streams);
            }
            M::ConsumerUpdate {
                correlation_id,
                subscription_id,
                active,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*subscription_id);
                buf.put_u8(u8::from(*active));
            }
            M::ExchangeCommandVersionsResponse {
                correlation_id,
                code,
                commands,
            } => {
                put_head(buf, *correlation_id, *code);
                put_command_versions(buf, commands);
            }
            M::StreamStatsResponse {
                correlation_id,
                code,
                stats,
            } => {
                put_head(buf, *correlation_id, *code);
                wire::put_count(buf, stats.len());
                for (k, v) in stats {
                    put_string(buf, k);
                    buf.put_i64(*v);
                }
            }
            M::ResolveOffsetSpecResponse {
                correlation_id,
                code,
                offset,
            } => {
                put_head(buf, *correlation_id, *code);
                offset.put(buf);
            }
        }
    }
}

/// A correlation id and a response code, the start of most responses.
fn put_head(buf: &mut BytesMut, correlation_id: u32, code: ResponseCode) {
    buf.put_u32(correlation_id);
    buf.put_u16(code.as_u16());
}

/// A metadata response's body after its correlation id: the brokers, then
/// each stream's code, leader and replicas.
fn put_metadata(buf: &mut BytesMut, brokers: &[Broker], streams: &[StreamMetadata]) {
    wire::put_count(buf, brokers.len());
    for b in brokers {
        buf.put_u16(b.reference);
        wire::put_string(buf, &b.host);
        buf.put_u32(b.port);
    }
    wire::put_count(buf, streams.len());
    for m in streams {
        wire::put_string(buf, &m.name);
        buf.put_u16(m.code.as_u16());
        buf.put_u16(m.leader);
        wire::put_count(buf, m.replicas.len());
        for r in &m.replicas {
            buf.put_u16(*r);
        }
    }
}
