// Smoke test of the RabbitMQ stream protocol with the npm client
// rabbitmq-stream-js-client (version pinned in package.json): publish 100
// messages and wait for their 100 confirms, then consume from first and count
// exactly 100, in order, offsets 0..99. Expectations recorded against RabbitMQ
// 3.10.8 (scripts/rabbitmq-node.sh start --stream).
//
// Prints `ok NAME` or `FAIL NAME: got ..., want ...` per case and exits 1 if
// any case failed. Every wait is bounded (10 s); the stream has a random
// suffix and is deleted at the end.
//
// Usage: node smoke.js STREAM_PORT [--exchange-command-versions] [--tls CA_FILE]
//        (after `npm ci` in this directory)
//
// --tls CA_FILE: connect over TLS (the stream protocol's TLS port), trusting
// the certificates CA_FILE signed; the client dials the leader or a replica
// that metadata names with the same settings, so metadata must name TLS
// listeners.
//
// RabbitMQ 3.10 has no ExchangeCommandVersions command (key 27), and every
// version of this client on npm (0.4.2, 0.6.1, 0.6.2, 1.0.0) sends it,
// unconditionally, as the last step of every connection's handshake. RabbitMQ
// 3.10.8 answers it like any unknown command, with a close (code 13, "unknown
// frame"), and the client, which has no decoder for a server-sent close, dies
// on an uncaught `Error: Unknown response 22` thrown from its socket handler.
// So by default this script replaces the client's
// Connection.exchangeCommandVersions with a no-op (the client then keeps no
// list of server command versions, which only its filtering and super-stream
// features consult). --exchange-command-versions keeps the client as it is:
// that run fails against RabbitMQ 3.10 (it would pass against a broker that
// answers key 27).

const crypto = require("crypto")
const rabbit = require("rabbitmq-stream-js-client")
const { Connection } = require("rabbitmq-stream-js-client/dist/connection")

const PORT = Number(process.argv[2])
const tlsAt = process.argv.indexOf("--tls")
const SSL = tlsAt > 0 ? { ca: require("fs").readFileSync(process.argv[tlsAt + 1]).toString() } : undefined
if (!process.argv.slice(3).includes("--exchange-command-versions")) {
  Connection.prototype.exchangeCommandVersions = async function () {
    return true
  }
}
const WAIT = 10000
const failed = []

function check(name, got, want) {
  const g = JSON.stringify(got, (_, v) => (typeof v === "bigint" ? v.toString() : v))
  const w = JSON.stringify(want, (_, v) => (typeof v === "bigint" ? v.toString() : v))
  if (g === w) {
    console.log(`ok ${name}`)
  } else {
    console.log(`FAIL ${name}: got ${g}, want ${w}`)
    failed.push(name)
  }
}

// Resolves when `done()` is true (checked on every call of the returned
// poke), or after WAIT.
function until(done) {
  let poke
  const p = new Promise((resolve) => {
    const timer = setTimeout(resolve, WAIT)
    poke = () => {
      if (done()) {
        clearTimeout(timer)
        resolve()
      }
    }
  })
  return [p, poke]
}

function bounded(promise, what) {
  return Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${WAIT} ms`)), WAIT)),
  ])
}

async function main() {
  const stream = `sp-js-smoke-${crypto.randomBytes(4).toString("hex")}`
  const client = await bounded(
    rabbit.connect({ hostname: "127.0.0.1", port: PORT, username: "guest", password: "guest", vhost: "/", ssl: SSL }),
    "connect"
  )
  try {
    await bounded(client.createStream({ stream }), "create stream")
    const publisher = await bounded(client.declarePublisher({ stream }), "declare publisher")
    const confirmed = []
    const errors = []
    const [allConfirmed, pokeConfirm] = until(() => confirmed.length + errors.length >= 100)
    publisher.on("publish_confirm", (err, ids) => {
      if (err) errors.push([err, ids])
      else confirmed.push(...ids)
      pokeConfirm()
    })
    for (let i = 0; i < 100; i++) {
      await bounded(publisher.send(Buffer.from(`m${i}`)), "send")
    }
    await bounded(publisher.flush(), "flush")
    await allConfirmed
    check("publish 100: 100 confirms, no errors", [confirmed.length, errors], [100, []])
    check("publish 100: the confirmed publishing ids are 1..100",
      confirmed.map(Number).sort((a, b) => a - b), Array.from({ length: 100 }, (_, i) => i + 1))

    const got = []
    const [allConsumed, pokeConsume] = until(() => got.length >= 100)
    const consumer = await bounded(
      client.declareConsumer({ stream, offset: rabbit.Offset.first() }, (message) => {
        got.push([Number(message.offset), message.content.toString()])
        pokeConsume()
      }),
      "declare consumer"
    )
    await allConsumed
    await new Promise((resolve) => setTimeout(resolve, 500)) // and nothing more
    check("consume from first: 100 messages", got.length, 100)
    check("consume from first: in order, offsets 0..99",
      got, Array.from({ length: 100 }, (_, i) => [i, `m${i}`]))
    await bounded(consumer.close(true), "close consumer")
    await bounded(publisher.close(true), "close publisher")
  } finally {
    try {
      await bounded(client.deleteStream({ stream }), "delete stream")
    } catch (e) {
      console.log(`cleanup: deleting ${stream}: ${e}`)
    }
    await bounded(client.close(), "close")
  }
}

main()
  .then(() => process.exit(failed.length ? 1 : 0))
  .catch((e) => {
    console.log(`FAIL smoke: ${e && e.stack ? e.stack : e}`)
    process.exit(1)
  })
