// Loaded by mocha (--require) before rabbitmq-stream-js-client's own tests,
// from the unpacked npm package's directory (scripts/stream-suites.sh). It
// points the tests at the broker the script started, as their CI's docker
// setup would be reached, without touching a test:
//
// - Their AMQP 0-9-1 helper (test/support/fake_data.ts, createAmqpClient)
//   dials port 5672 on the test node, fixed; amqplib's connect is wrapped so
//   that a URL for that port goes to RABBIT_MQ_AMQP_PORT (the broker's own,
//   a free port) instead. Every other URL is left as it is.
// - With STABLEMQ_JS_NO_COMMAND_VERSIONS=1 (the RabbitMQ 3.10 baseline), the
//   client's exchange command versions step is replaced by a no-op, as
//   compat-tests/js/stream/smoke.js does: 3.10 has no command 0x1b, closes
//   the connection on it, and the client dies on that close
//   ("Unknown response 22"), so without this no connection opens.
"use strict"

require("tsx/cjs")
const path = require("path")
const amqplib = require("amqplib")

const amqpPort = process.env.RABBIT_MQ_AMQP_PORT
if (amqpPort) {
  const connect = amqplib.connect
  amqplib.connect = function (url, ...rest) {
    if (typeof url === "string") {
      url = url.replace(/^(amqps?:\/\/[^/]*:)5672(\/|$)/, `$1${amqpPort}$2`)
    }
    return connect.call(this, url, ...rest)
  }
}

if (process.env.STABLEMQ_JS_NO_COMMAND_VERSIONS === "1") {
  const { Connection } = require(path.join(process.cwd(), "src", "connection"))
  Connection.prototype.exchangeCommandVersions = async function () {
    return true
  }
}
