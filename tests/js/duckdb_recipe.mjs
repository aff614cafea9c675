// Runs README.md's DuckDB recipe (its SQL block, extracted by
// tests/integration/recipes/recipes_test.cpp into RECIPE) through DuckDB's
// Node API and prints, as JSON, what `cumemtrace_summary` says for each
// TRACE: {"devices": {dev: [peak_allocated, leaked_bytes]}, "peak_allocated":
// N, "leaked_bytes": N}, and the highest point of `cumemtrace_allocated`.
//
//   node duckdb_recipe.mjs RECIPE TRACE...
import { readFileSync } from 'node:fs';
import { DuckDBInstance } from '@duckdb/node-api';

const [recipePath, ...traces] = process.argv.slice(2);
const connection = await (await DuckDBInstance.create(':memory:')).connect();
await connection.run(readFileSync(recipePath, 'utf8'));
const results = {};
for (const trace of traces) {
  const summary = await connection.runAndReadAll('SELECT * FROM cumemtrace_summary($path)', { path: trace });
  const result = { devices: {}, peak_allocated: null, leaked_bytes: null, over_time_max: {} };
  // 64-bit and 128-bit integers come back as BigInt: written as decimal
  // strings, then read as integers, so nothing is rounded through a double.
  for (const row of summary.getRowObjectsJson()) {
    if (row.dev === null) {
      result.peak_allocated = row.peak_allocated;
      result.leaked_bytes = row.leaked_bytes;
    } else {
      result.devices[row.dev] = [row.peak_allocated, row.leaked_bytes];
    }
  }
  const over_time = await connection.runAndReadAll(
    'SELECT dev, max(allocated) AS highest FROM cumemtrace_allocated($path) GROUP BY dev', { path: trace });
  for (const row of over_time.getRowObjectsJson()) result.over_time_max[row.dev] = row.highest;
  results[trace] = result;
}
process.stdout.write(JSON.stringify(results));
