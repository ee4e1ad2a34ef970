// node-postgres through mzproxy: run by TestDrivers as
// `node check.js <connection string> <table>` (npm ci in this folder first).
//
// pg sends parameterized queries with the extended protocol; a query with a
// name is prepared once per connection and reused.
'use strict';
const { Client } = require('pg');

function check(cond, what) {
  if (!cond) {
    console.error('FAILED: ' + what);
    process.exit(1);
  }
}

async function expectCode(client, sql, code) {
  try {
    await client.query(sql);
    check(false, sql + ' succeeded');
  } catch (e) {
    check(e.code === code, sql + ': code ' + e.code + ', want ' + code);
  }
}

async function main() {
  const [url, table] = process.argv.slice(2);
  const client = new Client({ connectionString: url });
  await client.connect();

  let res = await client.query('SELECT $1::int + $2 AS sum, $3 || \'x\' AS s, $4::text AS n', [40, 2, "it's", null]);
  check(res.rows[0].sum === 42 && res.rows[0].s === "it'sx" && res.rows[0].n === null, 'parameters');

  // Simple protocol (no parameters), several statements in one string.
  res = await client.query('SELECT 1 AS a; SELECT 2 AS b');
  check(Array.isArray(res) && res[1].rows[0].b === 2, 'multi-statement');

  await client.query(`CREATE TABLE ${table} (id int PRIMARY KEY, name text)`);
  for (let i = 0; i < 10; i++) {
    await client.query({ name: 'ins', text: `INSERT INTO ${table} VALUES ($1, $2)`, values: [i, 'n' + i] });
  }
  for (let i = 0; i < 10; i++) {
    res = await client.query({ name: 'byid', text: `SELECT name FROM ${table} WHERE id = $1`, values: [i] });
    check(res.rows[0].name === 'n' + i, 'prepared ' + i);
  }

  await expectCode(client, `INSERT INTO ${table} VALUES (1, 'dup')`, '23505');
  await expectCode(client, 'SELECT 1/0', '22012');
  await expectCode(client, 'SELECT * FROM no_such_table_node', '42P01');

  await client.query('BEGIN');
  await client.query(`DELETE FROM ${table}`);
  await client.query('ROLLBACK');
  res = await client.query(`SELECT count(*)::int AS n FROM ${table}`);
  check(res.rows[0].n === 10, 'rollback');
  await client.query('BEGIN');
  await client.query(`UPDATE ${table} SET name = upper(name) WHERE id < $1`, [5]);
  await client.query('COMMIT');
  res = await client.query(`SELECT count(*)::int AS n FROM ${table} WHERE name LIKE 'N%'`);
  check(res.rows[0].n === 5, 'commit');

  // An error inside a transaction aborts it until ROLLBACK.
  await client.query('BEGIN');
  await expectCode(client, 'SELECT 1/0', '22012');
  await expectCode(client, 'SELECT 1', '25P02');
  await client.query('ROLLBACK');

  // Notices arrive as events.
  const notices = [];
  client.on('notice', (n) => notices.push(n.message));
  await client.query("DO $$ BEGIN RAISE NOTICE 'hello from DO'; END $$");
  check(notices.includes('hello from DO'), 'notice');

  // Concurrent queries are queued by the client on one connection.
  const all = await Promise.all([...Array(20).keys()].map((i) => client.query('SELECT $1::int * 3 AS v', [i])));
  check(all.every((r, i) => r.rows[0].v === i * 3), 'queued queries');

  await client.end();
  console.log('OK');
}

main().catch((e) => {
  console.error('FAILED:', e);
  process.exit(1);
});
