// Runs SQL on DuckDB (npm @duckdb/node-api) for deploy/terraform's query
// tests (athena_test.go). Reads a JSON object on stdin:
//
//   {"statements": ["SET ...", "COPY ..."], "queries": {"name": "SELECT ..."}}
//
// runs the statements in order (any error ends the run, exit 1), then each
// query, and prints one JSON object: for every query either
// {"columns": [...], "types": [...], "rows": [[...], ...]} or {"error": "..."}.
// Values are DuckDB's JSON forms (BIGINT and HUGEINT as strings).
import { DuckDBInstance } from '@duckdb/node-api';

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const input = JSON.parse(Buffer.concat(chunks).toString('utf8'));

const db = await DuckDBInstance.create(':memory:');
const conn = await db.connect();
for (const sql of input.statements ?? []) {
  try {
    await conn.run(sql);
  } catch (e) {
    process.stderr.write(`statement failed: ${e.message}\n${sql}\n`);
    process.exit(1);
  }
}
const out = {};
for (const [name, sql] of Object.entries(input.queries ?? {})) {
  try {
    const r = await conn.runAndReadAll(sql);
    out[name] = { columns: r.columnNames(), types: r.columnTypes().map(String), rows: r.getRowsJson() };
  } catch (e) {
    out[name] = { error: e.message };
  }
}
process.stdout.write(JSON.stringify(out));
