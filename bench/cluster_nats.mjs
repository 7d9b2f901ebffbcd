// The NATS JetStream side of bench/cluster.sh, with the `nats` client from
// npm (tests/node_modules). Three commands:
//
//   node bench/cluster_nats.mjs stream URLS REPLICAS
//     creates the stream "bench" (subjects bench.>, file storage,
//     num_replicas REPLICAS), retrying while the cluster elects its meta
//     leader (at most 60 s); prints the stream leader's server name.
//   node bench/cluster_nats.mjs pub URL PUBLISHERS SECONDS BATCH PAYLOAD OUT
//     PUBLISHERS connections to URL, each publishing BATCH messages at a
//     time with acks (all BATCH in flight, then all BATCH acks awaited: the
//     twin of one queen push of BATCH items) for SECONDS; writes to OUT one
//     line "acked seconds" and then one batch latency in ms per line.
//   node bench/cluster_nats.mjs failover URLS NAMES PIDS PAYLOAD
//     finds the stream leader's server (NAMES[i] runs as PIDS[i]), starts
//     two publish loops (one message, ack awaited, 500 ms timeout, 1 ms
//     pause after an error) on each other server, kill -9s the leader once every loop has an ack, and
//     prints "ms=T errors=E": T from the kill to the first ack of a publish
//     sent after it.
import { createRequire } from 'node:module'
import { writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(path.join(here, '..', 'tests', 'package.json'))
const { connect, StorageType } = require('nats')

const [cmd, ...args] = process.argv.slice(2)
const enc = new TextEncoder()
const now = () => performance.now()
const sleep = ms => new Promise(r => setTimeout(r, ms))
const deadline = (ms, what) => {
  const t = now() + ms
  return () => { if (now() > t) throw new Error(`bench/cluster_nats: ${what} timed out`) }
}

async function streamLeader (jsm) {
  // A server outside a cluster has no cluster block: it is the leader.
  const info = await jsm.streams.info('bench')
  if (!info.cluster) return '(single)'
  return info.cluster.leader || ''
}

if (cmd === 'stream') {
  const [urls, replicas] = args
  const check = deadline(60000, 'stream create')
  let nc = null
  for (;;) {
    try {
      nc = nc || await connect({ servers: urls.split(','), timeout: 2000 })
      const jsm = await nc.jetstreamManager({ timeout: 2000 })
      await jsm.streams.add({
        name: 'bench',
        subjects: ['bench.>'],
        storage: StorageType.File,
        num_replicas: Number(replicas)
      })
      let leader = ''
      while (!(leader = await streamLeader(jsm))) { check(); await sleep(50) }
      console.log(leader)
      break
    } catch (e) {
      if (now() > 0 && process.env.BENCH_DEBUG) console.error(e.message)
      check()
      await sleep(200)
    }
  }
  await nc.close()
} else if (cmd === 'pub') {
  const [url, pubs, secs, batch, payload, out] = args
  const data = enc.encode(payload)
  const n = Number(batch)
  const stop = now() + Number(secs) * 1000
  const lat = []
  let acked = 0
  const t0 = now()
  // Each publisher sends its batch as plain publishes with a reply subject
  // under its own inbox and counts the stream's acks there (the client's
  // js.publish() arms a timer and a promise per message, which made the
  // client, not the servers, the bottleneck); an ack with an error, or a
  // batch not fully acked in 10 s, fails the run.
  const one = async i => {
    const nc = await connect({ servers: [url] })
    const inbox = `_INBOX.bench${i}.${process.pid}`
    let want = 0
    let wake = null
    const sub = nc.subscribe(`${inbox}.*`, {
      callback: (err, m) => {
        if (err) throw err
        if (m.data.length === 0 || m.data[2] === 101) { // {"error":...
          throw new Error(`bench/cluster_nats: bad ack ${new TextDecoder().decode(m.data)}`)
        }
        if (--want === 0 && wake) wake()
      }
    })
    await nc.flush()
    let seq = 0
    while (now() < stop) {
      const t0 = now()
      want = n
      let timer = null
      const done = new Promise((resolve, reject) => {
        wake = resolve
        timer = setTimeout(() => reject(new Error('bench/cluster_nats: acks missing after 10 s')), 10000)
      })
      for (let k = 0; k < n; k++) nc.publish(`bench.p${(i + k) % 4}`, data, { reply: `${inbox}.${seq++}` })
      await done
      clearTimeout(timer)
      lat.push(now() - t0)
      acked += n
    }
    sub.unsubscribe()
    await nc.close()
  }
  await Promise.all(Array.from({ length: Number(pubs) }, (_, i) => one(i)))
  const el = (now() - t0) / 1000
  writeFileSync(out, [`${acked} ${el}`, ...lat.map(x => x.toFixed(3))].join('\n') + '\n')
} else if (cmd === 'failover') {
  const [urls, names, pids, payload] = args.map((a, i) => i < 3 ? a.split(',') : a)
  const data = enc.encode(payload)
  const nc = await connect({ servers: urls })
  const jsm = await nc.jetstreamManager()
  const leader = await streamLeader(jsm)
  const li = names.indexOf(leader)
  if (li < 0) throw new Error(`bench/cluster_nats: stream leader "${leader}" unknown`)
  await nc.close()
  const check = deadline(60000, 'failover')
  let killedAt = 0
  let first = 0
  let errors = 0
  const warm = new Set()
  const loop = async (url, id) => {
    const c = await connect({ servers: [url], maxReconnectAttempts: -1 })
    const js = c.jetstream({ timeout: 500 })
    while (!first) {
      check()
      const sent = now()
      try {
        await js.publish('bench.failover', data)
        warm.add(id)
        if (killedAt && sent >= killedAt && !first) first = now()
      } catch (e) {
        if (killedAt) errors++
        await sleep(1) // "no responders" is immediate: do not spin the CPU the cluster needs
      }
    }
    await c.close()
  }
  const loops = []
  urls.forEach((u, i) => {
    if (i !== li) loops.push(loop(u, `${i}a`), loop(u, `${i}b`))
  })
  while (warm.size < loops.length) { check(); await sleep(5) }
  await sleep(200)
  killedAt = now()
  process.kill(Number(pids[li]), 'SIGKILL')
  await Promise.all(loops)
  console.log(`ms=${(first - killedAt).toFixed(1)} errors=${errors} leader=${leader}`)
} else {
  console.error('usage: cluster_nats.mjs stream|pub|failover ...')
  process.exit(2)
}
