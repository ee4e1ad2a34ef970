// node-postgres through mzproxy: node pg_check.js <url> <table>, run by
// TestDriverMatrix (integration/driver_matrix_test.go says what each case
// does).
//
// pg sends a query with parameters as an unnamed statement (Parse, Bind,
// Describe, Execute, Sync in one batch, parameter types left to the
// server, values as text) and one without as a simple Query; a query with
// a name is parsed once per connection and then only bound. int8 values
// come back as strings.
'use strict';
const { Client } = require('pg');
const { Cases, expect, expectCode } = require('./matrix');

async function main() {
  const [url, table] = process.argv.slice(2);
  const client = new Client({ connectionString: url });
  await client.connect();
  const cases = new Cases();
  const one = async (text, values) => (await client.query({ text, values, rowMode: 'array' })).rows[0];
  const count = async () => Number((await one(`SELECT count(*) FROM ${table}`))[0]);
  let ts;

  await cases.run('ddl', () => client.query(`CREATE TABLE ${table} (k int PRIMARY KEY, v text)`));
  await cases.run('insert', async () => {
    for (const [k, v] of [[1, 'one'], [2, 'two'], [3, 'three']]) {
      const res = await client.query(`INSERT INTO ${table} VALUES ($1, $2)`, [k, v]);
      expect(res.rowCount === 1, 'rowCount ' + res.rowCount);
    }
  });
  await cases.run('update', async () => {
    const res = await client.query(`UPDATE ${table} SET v = $1 WHERE k = $2`, ['uno', 1]);
    expect(res.rowCount === 1, 'rowCount ' + res.rowCount);
  });
  await cases.run('select', async () => {
    const row = await one(`SELECT v FROM ${table} WHERE k = $1`, [1]);
    expect(row[0] === 'uno', 'got ' + row);
  });
  await cases.run('mz_now_param', async () => {
    const row = await one(`SELECT v, mz_now() FROM ${table} WHERE k = $1`, [1]);
    expect(row[0] === 'uno' && BigInt(row[1]) > 0n, 'got ' + row);
    ts = row[1];
  });
  await cases.run('plain_after_mz_now', async () => expect((await one('SELECT 1'))[0] === 1, 'SELECT 1'));
  await cases.run('param_after_mz_now', async () => expect((await one('SELECT $1::int', [42]))[0] === 42, 'SELECT 42'));
  await cases.run('as_of_param', async () => {
    await client.query(`UPDATE ${table} SET v = $1 WHERE k = $2`, ['eins', 1]);
    const row = await one(`SELECT v FROM ${table} WHERE k = $1 AS OF $2`, [1, ts]);
    expect(row && row[0] === 'uno', 'got ' + row);
  });
  await cases.run('as_of_at_least_param', async () => {
    const row = await one(`SELECT v FROM ${table} WHERE k = $1 AS OF AT LEAST $2`, [1, ts]);
    expect(row && (row[0] === 'uno' || row[0] === 'eins'), 'got ' + row);
  });
  await cases.run('mz_now_repeated', async () => {
    // Runs of reads of the present between writes (the read guard learns
    // the settled count of writes and reads through it).
    let last = 0n;
    for (let i = 0; i < 12; i++) {
      const want = 'r' + Math.floor(i / 4);
      if (i % 4 === 0) await client.query(`UPDATE ${table} SET v = $1 WHERE k = $2`, [want, 1]);
      const row = await one(`SELECT v, mz_now() FROM ${table} WHERE k = $1`, [1]);
      expect(row[0] === want && BigInt(row[1]) >= last, `read ${i}: got ${row}, want ${want} at or after ${last}`);
      last = BigInt(row[1]);
    }
    await client.query(`UPDATE ${table} SET v = $1 WHERE k = $2`, ['eins', 1]); // the later cases' row
  });
  await cases.run('rollback', async () => {
    await client.query('BEGIN');
    try {
      await client.query(`DELETE FROM ${table} WHERE k = $1`, [2]);
    } finally {
      await client.query('ROLLBACK');
    }
    expect((await count()) === 3, 'rows after the rollback');
  });
  await cases.run('unique_violation', async () => {
    await expectCode(() => client.query(`INSERT INTO ${table} VALUES ($1, $2)`, [1, 'dup']), '23505');
    expect((await count()) === 3, 'rows after the violation');
  });
  await cases.run('timeout', async () => {
    await client.query("SET statement_timeout = '100ms'");
    await expectCode(() => client.query('SELECT pg_sleep(5)'), '57014');
    await client.query('RESET statement_timeout');
    expect((await one('SELECT 1'))[0] === 1, 'SELECT 1 after the timeout');
  });

  await cases.run('named_statement', async () => {
    // Parsed on first use, then only bound: the mz_now() read twice.
    for (let i = 0; i < 2; i++) {
      const res = await client.query({ name: 'now', text: `SELECT v, mz_now() FROM ${table} WHERE k = $1`, values: [3], rowMode: 'array' });
      expect(res.rows[0][0] === 'three' && BigInt(res.rows[0][1]) > 0n, 'got ' + res.rows[0]);
    }
    expect((await one('SELECT $1::int + 1', [1]))[0] === 2, 'query after the named one');
  });
  await cases.run('notice', async () => {
    const notices = [];
    client.on('notice', (n) => notices.push(n.message));
    await client.query("DO $$ BEGIN RAISE NOTICE 'hello from DO'; END $$");
    expect(notices.includes('hello from DO'), 'notices ' + notices);
  });
  await cases.run('queued', async () => {
    // Concurrent queries are queued by the client on one connection.
    const all = await Promise.all([...Array(20).keys()].map((i) => one('SELECT $1::int * 3', [i])));
    expect(all.every((r, i) => r[0] === i * 3), 'queued queries');
  });

  await client.end();
  cases.finish();
}

main().catch((e) => {
  console.error('FAILED:', e);
  process.exit(1);
});
