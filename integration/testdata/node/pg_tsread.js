// node-postgres one-shot timestamped reads, repeated on one connection
// through mzproxy: each read a query with parameters (the unnamed
// statement parsed, bound, described and run in one batch, which the event
// loop serves by binding a statement of the proxy's from the text's third
// read on).
//
// node pg_tsread.js <url> <table>, run by
// TestLoopUnnamedTimestampedReadsRepeated
// (integration/loop_parse_read_test.go); the table has rows (1, 'one') and
// (2, 'two'), and a schema <table>_s has a table of its name with
// (1, 'uno') and (2, 'dos').
'use strict';
const { Client } = require('pg');
const { Cases, expect, expectCode } = require('./matrix');

async function main() {
  const [url, table] = process.argv.slice(2);
  const writer = new Client({ connectionString: url });
  const client = new Client({ connectionString: url });
  await writer.connect();
  await client.connect();
  const one = async (text, values) => (await client.query({ text, values, rowMode: 'array' })).rows[0];
  const stamped = `SELECT v, mz_now()::text FROM ${table} WHERE k = $1`;
  let last = 0n;
  const readAll = async (want) => {
    for (let i = 0; i < 8; i++) {
      const k = 1 + (i % 2);
      const [v, ts] = await one(stamped, [k]);
      expect(v === want[k - 1], `read ${i} of k = ${k}: ${v}, want ${want[k - 1]}`);
      expect(BigInt(ts) >= last, `mz_now() ${ts} after ${last}`);
      last = BigInt(ts);
    }
  };
  const cases = new Cases();
  await cases.run('reads', async () => {
    await readAll(['one', 'two']);
    const [past] = await one('SELECT mz_now()::text', []);
    await writer.query(`UPDATE ${table} SET v = 'eins' WHERE k = 1`);
    for (let i = 0; i < 6; i++) {
      const [v] = await one(`SELECT v FROM ${table} WHERE k = $1 AS OF $2`, [1, past]);
      expect(v === 'one', `AS OF read ${i}: ${v}, want one`);
    }
    for (let i = 0; i < 4; i++) {
      await expectCode(() => one(`SELECT nope, mz_now() FROM ${table} WHERE k = $1`, [1]), '42703');
    }
    const star = `SELECT *, mz_now()::text FROM ${table} WHERE k = $1`;
    for (let i = 0; i < 4; i++) {
      const row = await one(star, [2]);
      expect(row.length === 3 && row[1] === 'two', `SELECT *: ${row}`);
    }
    await client.query(`SET search_path = ${table}_s, public`);
    await readAll(['uno', 'dos']);
    await client.query('RESET search_path');
    await readAll(['eins', 'two']);
    await writer.query(`ALTER TABLE ${table} ADD COLUMN w int NOT NULL DEFAULT 7`);
    for (let i = 0; i < 4; i++) {
      const row = await one(star, [2]);
      expect(row.length === 4 && row[1] === 'two' && row[2] === 7, `SELECT * after ADD COLUMN: ${row}`);
    }
  });
  await client.end();
  await writer.end();
  cases.finish();
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
