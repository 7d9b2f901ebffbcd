// DuckDB's Parquet writer on the same rows as ours, for bench/parquet.sh.
// Loads SRC (our file) into a table (not timed), then times
// COPY t TO DST (FORMAT parquet, COMPRESSION codec) with SET threads=1 and
// prints "seconds=S bytes=B".
//   node bench/parquet_duckdb.mjs SRC DST zstd|snappy
import { createRequire } from 'node:module'
import { statSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(path.join(here, '..', 'tests', 'package.json'))
const { DuckDBInstance } = require('@duckdb/node-api')

const [src, dst, codec] = process.argv.slice(2)
const q = s => "'" + s.replaceAll("'", "''") + "'"
const inst = await DuckDBInstance.create(':memory:')
const conn = await inst.connect()
await conn.run('SET threads=1')
await conn.run(`CREATE TABLE t AS SELECT * FROM read_parquet(${q(src)})`)
const t0 = performance.now()
await conn.run(`COPY t TO ${q(dst)} (FORMAT parquet, COMPRESSION ${codec})`)
const s = (performance.now() - t0) / 1000
console.log(`seconds=${s.toFixed(6)} bytes=${statSync(dst).size}`)
