// Reads Parquet files with a real reader and prints what it saw as JSON, so
// tests/compat/test_parquet_readers.py can compare it with the records it
// wrote. Byte strings come back base64-encoded (exact bytes), integers and
// timestamps as decimal strings (exact µs).
//
//   node read_parquet.mjs duckdb FILE...     rows, schema, metadata, kv
//   node read_parquet.mjs hyparquet FILE...  rows
//   node read_parquet.mjs sql SQL            rows of one DuckDB query
import { DuckDBInstance } from '@duckdb/node-api'
import { asyncBufferFromFile, parquetReadObjects, parquetMetadataAsync } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'

const q = s => "'" + s.replaceAll("'", "''") + "'"

async function duckdb(conn, file) {
  const all = async sql => (await conn.runAndReadAll(sql)).getRowObjectsJson()
  const f = q(file)
  const rows = (await all(`SELECT to_base64(encode(partition)) AS p,
      "offset"::VARCHAR AS o, to_base64(encode(transaction_id)) AS t,
      epoch_us(ts)::VARCHAR AS ts, typeof(ts) AS ts_type,
      CASE WHEN payload IS NULL THEN NULL ELSE to_base64(encode(payload)) END AS pl
    FROM read_parquet(${f}, file_row_number = true) ORDER BY file_row_number`))
    .map(r => [r.p, r.o, r.t, r.ts, r.pl, r.ts_type])
  const schema = await all(`SELECT name, type, repetition_type, converted_type,
      logical_type, duckdb_type FROM parquet_schema(${f})`)
  const metadata = await all(`SELECT row_group_id, row_group_num_rows,
      path_in_schema, compression, encodings, stats_min_value, stats_max_value,
      stats_null_count FROM parquet_metadata(${f}) ORDER BY row_group_id, column_id`)
  const kv = (await all(`SELECT key::VARCHAR AS k, value::VARCHAR AS v
      FROM parquet_kv_metadata(${f})`)).map(r => [r.k, r.v])
  const file_meta = (await all(`SELECT created_by, format_version, num_rows,
      num_row_groups FROM parquet_file_metadata(${f})`))[0]
  return { rows, schema, metadata, kv, file_meta }
}

async function hyparquet(file) {
  const buf = await asyncBufferFromFile(file)
  const b64 = bytes => bytes && Buffer.from(bytes).toString('base64')
  const objs = await parquetReadObjects({
    file: buf, compressors,
    parsers: { stringFromBytes: b64, timestampFromMicroseconds: m => m.toString() },
  })
  const meta = await parquetMetadataAsync(buf)
  const rows = objs.map(r => [r.partition, r.offset.toString(), r.transaction_id,
    r.ts, r.payload ?? null])
  const kv = (meta.key_value_metadata || []).map(e => [e.key, e.value])
  return { rows, kv, row_groups: meta.row_groups.map(g => Number(g.num_rows)) }
}

const [mode, ...args] = process.argv.slice(2)
const out = {}
if (mode === 'hyparquet') {
  for (const f of args) out[f] = await hyparquet(f)
} else {
  const inst = await DuckDBInstance.create(':memory:')
  const conn = await inst.connect()
  await conn.run('SET threads=1')
  if (mode === 'sql') {
    out.rows = (await conn.runAndReadAll(args[0])).getRowObjectsJson()
  } else {
    for (const f of args) out[f] = await duckdb(conn, f)
  }
}
process.stdout.write(JSON.stringify(out))
