// Lazy history from node's drivers: node lazy17.js <pg|postgres> <url>, run
// by TestOutside17LazyHistoryDrivers (integration/outside17_test.go; the
// cases are those of testdata/python/lazy17.py). batch: node-postgres
// sends three queries without waiting (queued on the client), postgres.js
// pipelines them on its one connection; copy: not run here (neither
// driver has COPY FROM STDIN without another package).
'use strict';
const { Cases, expect } = require('./matrix');

const hidden = [
  'CREATE TABLE lz_src (k int)',
  'CREATE TABLE lz_audit (k int)',
  'CREATE TABLE lz_audit2 (k int)',
  `CREATE FUNCTION lz_copy() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN INSERT INTO lz_audit VALUES (NEW.k);
   IF NEW.k > 100 THEN INSERT INTO lz_audit2 VALUES (NEW.k); END IF; RETURN NEW; END $$`,
  'CREATE TRIGGER lz_src_audit AFTER INSERT ON lz_src FOR EACH ROW EXECUTE FUNCTION lz_copy()',
];

// db adapts a driver: query(text, values) -> rows as arrays; tx(fn) runs
// fn(query) in a block.
function pgDB(url) {
  const { Client } = require('pg');
  const client = new Client({ connectionString: url });
  const query = async (text, values) => (await client.query({ text, values, rowMode: 'array' })).rows;
  return {
    connect: () => client.connect(),
    query,
    tx: async (fn) => {
      await client.query('BEGIN');
      try {
        await fn(query);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK');
        throw e;
      }
    },
    many: (text, rows) => Promise.all(rows.map((r) => client.query(text, r))),
    end: () => client.end(),
  };
}

function postgresDB(url) {
  const postgres = require('postgres');
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const on = (q) => async (text, values) => q.unsafe(text, values || []).values();
  return {
    connect: async () => {},
    query: on(sql),
    tx: (fn) => sql.begin((t) => fn(on(t))),
    many: (text, rows) => Promise.all(rows.map((r) => sql.unsafe(text, r))),
    end: () => sql.end(),
  };
}

async function main() {
  const [driver, url] = process.argv.slice(2);
  const db = driver === 'pg' ? pgDB(url) : postgresDB(url);
  await db.connect();
  const cases = new Cases();
  const count = async (table) => Number((await db.query(`SELECT count(*) FROM ${table}`))[0][0]);

  await cases.run('first_write_in_block', async () => {
    await db.query('CREATE TABLE lz_block (k int)');
    await db.tx(async (q) => {
      for (const k of [1, 2]) await q('INSERT INTO lz_block VALUES ($1)', [k]);
    });
    const n = await count('lz_block');
    expect(n === 2, `rows ${n}`);
  });
  for (const s of hidden) await db.query(s);
  await cases.run('hidden_writer_autocommit', async () => {
    await db.query('INSERT INTO lz_src VALUES ($1)', [1]);
    const n = await count('lz_audit');
    expect(n === 1, `audit ${n}`);
  });
  await cases.run('hidden_writer_block', async () => {
    const insert = (q) => q('INSERT INTO lz_src VALUES ($1)', [101]);
    let code;
    try {
      await db.tx(insert);
    } catch (e) {
      code = e.code;
    }
    expect(code === '40001', `the first block: ${code}, want 40001`);
    await db.tx(insert);
    const n = await count('lz_audit2');
    expect(n === 1, `audit2 ${n}`);
  });
  await cases.run('batch', async () => {
    await db.query('CREATE TABLE lz_batch (k int)');
    await db.many('INSERT INTO lz_batch VALUES ($1)', [[1], [2], [3]]);
    const n = await count('lz_batch');
    expect(n === 3, `rows ${n}`);
  });
  await db.end();
  cases.finish();
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
