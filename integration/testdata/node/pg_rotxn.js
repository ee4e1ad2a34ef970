// node-postgres read-only transactions through mzproxy, each read a query
// with parameters (the unnamed statement parsed, bound, described and run
// in one batch: the event loop serves the first one with the pin in front
// of its Parse).
//
// node pg_rotxn.js <url> <table>, run by TestLoopUnnamedParseReadOnlyTxn
// (integration/loop_parse_txn_test.go); the table has rows (1, v) and
// (2, 100).
'use strict';
const { Client } = require('pg');
const { Cases, expect, expectCode } = require('./matrix');

async function main() {
  const [url, table] = process.argv.slice(2);
  const writer = new Client({ connectionString: url });
  const client = new Client({ connectionString: url });
  await writer.connect();
  await client.connect();
  const read = `SELECT v FROM ${table} WHERE k = $1`;
  const stamped = `SELECT v, mz_now()::text FROM ${table} WHERE k = $1`;
  const one = async (text, k) => (await client.query({ text, values: [k], rowMode: 'array' })).rows[0];
  const current = async () => (await writer.query(`SELECT v FROM ${table} WHERE k = 1`)).rows[0].v;
  const bump = () => writer.query(`UPDATE ${table} SET v = v + 1 WHERE k = 1`);
  const cases = new Cases();

  await cases.run('txn', async () => {
    for (let i = 0; i < 6; i++) {
      const want = await current();
      await client.query('BEGIN');
      const [a] = await one(read, 1);
      await bump();
      const [b, ts1] = await one(stamped, 1);
      await bump();
      const [c] = await one(read, 1);
      const [other, ts2] = await one(stamped, 2);
      await client.query('COMMIT');
      expect(a === want && b === want && c === want && other === 100 && ts1 === ts2 && ts1,
        `reads ${[a, b, c, other]}, mz_now() ${ts1} and ${ts2}; want ${want} three times, 100, one timestamp`);
    }
  });
  await cases.run('error', async () => {
    await client.query('BEGIN');
    await expectCode(() => one(`SELECT 1 / (v - v) FROM ${table} WHERE k = $1`, 1), '22012');
    await expectCode(() => one(read, 1), '25P02');
    await client.query('ROLLBACK');
  });
  await cases.run('write', async () => {
    const want = await current();
    await client.query('BEGIN');
    expect((await one(read, 1))[0] === want, 'read before the write');
    await client.query({ text: `UPDATE ${table} SET v = v + 1 WHERE k = $1`, values: [1] });
    expect((await one(read, 1))[0] === want + 1, 'read after the write');
    await client.query('COMMIT');
    expect(await current() === want + 1, 'after COMMIT');
  });
  await cases.run('steady', async () => {
    // Transactions with no write between them: once the session's pins
    // agree, the event loop answers the BEGIN and sends it with the first
    // read as the proxy's BEGIN ISOLATION LEVEL REPEATABLE READ, behind a
    // Close of the unnamed statement (the BEGIN was a Query). The last
    // one sees a write acknowledged after its first read nowhere.
    const level = `SELECT current_setting('transaction_isolation') FROM ${table} WHERE k = $1`;
    for (let i = 0; i < 5; i++) {
      const want = await current();
      await client.query('BEGIN');
      const [a] = await one(read, 1);
      if (i === 4) {
        await bump();
      }
      const [b] = await one(read, 1);
      const [iso] = await one(level, 2);
      await client.query('COMMIT');
      expect(a === want && b === want && iso === 'repeatable read',
        `transaction ${i}: reads ${[a, b]}, transaction_isolation ${iso}; want ${want} twice, repeatable read`);
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
