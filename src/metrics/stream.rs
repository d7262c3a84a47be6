//! The RabbitMQ stream protocol's counters, as rabbitmq_stream exports
//! them: its traffic under `protocol="stream"` (the master bumps those
//! through [`global_stream`] and [`global_stream_by_queue`] handles) and
//! its `rabbitmq_global_stream_error_*_total`, which the stream connection
//! task bumps for each error it sends an open connection.

use stablemq_protocol::stream::ResponseCode;

/// The protocol label of the RabbitMQ stream protocol.
const STREAM_PROTOCOL: &str = "stream";
/// The queue type label of a stream.
pub(super) const STREAM_QUEUE: &str = "rabbit_stream_queue";

/// A `rabbitmq_global_*` counter of the stream protocol.
pub fn global_stream(name: &'static str) -> metrics::Counter {
    metrics::counter!(name, "protocol" => STREAM_PROTOCOL)
}

/// A `rabbitmq_global_*` counter of the stream protocol on streams (the
/// only queue type it reads).
pub fn global_stream_by_queue(name: &'static str) -> metrics::Counter {
    metrics::counter!(name, "protocol" => STREAM_PROTOCOL, "queue_type" => STREAM_QUEUE)
}

/// The stream protocol's error counters (rabbitmq_stream's
/// `rabbitmq_global_stream_error_*_total`), by the response code they count.
/// StableMQ counts each error it sends an open connection with that code: a
/// response, a failed publishing id, a metadata update for a deleted stream, a
/// close (not a failed login or vhost open, which RabbitMQ 3.10 does not
/// count either).
const STREAM_ERRORS: [(ResponseCode, &str); 17] = [
    (
        ResponseCode::StreamDoesNotExist,
        "rabbitmq_global_stream_error_stream_does_not_exist_total",
    ),
    (
        ResponseCode::SubscriptionIdAlreadyExists,
        "rabbitmq_global_stream_error_subscription_id_already_exists_total",
    ),
    (
        ResponseCode::SubscriptionIdDoesNotExist,
        "rabbitmq_global_stream_error_subscription_id_does_not_exist_total",
    ),
    (
        ResponseCode::StreamAlreadyExists,
        "rabbitmq_global_stream_error_stream_already_exists_total",
    ),
    (
        ResponseCode::StreamNotAvailable,
        "rabbitmq_global_stream_error_stream_not_available_total",
    ),
    (
        ResponseCode::SaslMechanismNotSupported,
        "rabbitmq_global_stream_error_sasl_mechanism_not_supported_total",
    ),
    (
        ResponseCode::AuthenticationFailure,
        "rabbitmq_global_stream_error_authentication_failure_total",
    ),
    (
        ResponseCode::SaslError,
        "rabbitmq_global_stream_error_sasl_error_total",
    ),
    (
        ResponseCode::SaslChallenge,
        "rabbitmq_global_stream_error_sasl_challenge_total",
    ),
    (
        ResponseCode::SaslAuthenticationFailureLoopback,
        "rabbitmq_global_stream_error_sasl_authentication_failure_loopback_total",
    ),
    (
        ResponseCode::VirtualHostAccessFailure,
        "rabbitmq_global_stream_error_vhost_access_failure_total",
    ),
    (
        ResponseCode::UnknownFrame,
        "rabbitmq_global_stream_error_unknown_frame_total",
    ),
    (
        ResponseCode::FrameTooLarge,
        "rabbitmq_global_stream_error_frame_too_large_total",
    ),
    (
        ResponseCode::InternalError,
        "rabbitmq_global_stream_error_internal_error_total",
    ),
    (
        ResponseCode::AccessRefused,
        "rabbitmq_global_stream_error_access_refused_total",
    ),
    (
        ResponseCode::PreconditionFailed,
        "rabbitmq_global_stream_error_precondition_failed_total",
    ),
    (
        ResponseCode::PublisherDoesNotExist,
        "rabbitmq_global_stream_error_publisher_does_not_exist_total",
    ),
];

/// Count `n` errors of the stream protocol sent with `code` (OK and codes
/// RabbitMQ keeps no counter for, such as no offset, count nothing).
pub fn stream_errors(code: ResponseCode, n: u64) {
    if let Some((_, name)) = STREAM_ERRORS.iter().find(|(c, _)| *c == code) {
        metrics::counter!(*name, "protocol" => STREAM_PROTOCOL).increment(n);
    }
}

/// The error counters' help texts, RabbitMQ 3.10's: "Total number of
/// commands failed with" and the name in words, except for one.
pub(super) fn describe_errors() {
    for (code, name) in STREAM_ERRORS {
        let help = match code {
            ResponseCode::StreamDoesNotExist => {
                "Total number of commands rejected with stream does not exist error".to_string()
            }
            _ => {
                let words = name
                    .trim_start_matches("rabbitmq_global_stream_error_")
                    .trim_end_matches("_total")
                    .replace('_', " ");
                format!("Total number of commands failed with {words}")
            }
        };
        metrics::describe_counter!(name, help);
    }
}

/// Create the error counters at zero, as RabbitMQ 3.10 does at boot.
pub(super) fn register_error_zeroes() {
    for (code, _) in STREAM_ERRORS {
        stream_errors(code, 0);
    }
}
