// One operation split across two backends, as the viewer shows it: `tensormorph serve` with the
// tests' "twin" plugin (the CPU's kernels declared as a device beside the CPU, so the scheduler may
// share an operation between them) indexes a 64 MiB F32 matrix, large enough that a split pays on
// any machine. The Compute drawer's records, one row each, show the merge with its parts under it;
// the statistics equal the file's and the CPU alone's.
// Usage: node tests/browser/split.test.mjs TENSORMORPH_BINARY ARTIFACT_DIR
import fs from 'node:fs';
import path from 'node:path';

import { binary, check, finish, getJson, indexed, newPage, serve, shot, work } from './harness.mjs';

const twin = path.join(path.dirname(binary), 'tests/twin_plugin');

/** A safetensors file of one rows x cols F32 matrix of normal values (seeded); returns its values. */
function writeMatrix(file, name, rows, cols) {
  let seed = 12345;
  const uniform = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) + 0.5) / 2 ** 32;
  const values = new Float32Array(rows * cols);
  for (let i = 0; i < values.length; ++i) values[i] = 0.02 * Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
  let header = JSON.stringify({ [name]: { dtype: 'F32', shape: [rows, cols], data_offsets: [0, values.byteLength] } });
  header += ' '.repeat((8 - (header.length % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  fs.writeFileSync(file, Buffer.concat([length, Buffer.from(header), Buffer.from(values.buffer)]));
  return values;
}

try {
  check(fs.existsSync(twin), `the twin test plugin is built (${twin})`);
  const file = path.join(work, 'split.safetensors');
  const values = writeMatrix(file, 'big.weight', 4096, 4096);
  const { url } = await serve([file, '--plugin-dir', twin]);
  await indexed(url);

  // The records: one per part, then the merge on "cpu+twin".
  const { records } = await getJson(url, 'api/compute');
  const merges = records.filter((r) => r.op === 'tm.tile_stats@1' && r.split_part === 'merge');
  check(merges.length === 1 && merges[0].backend === 'cpu+twin', `indexing split tile statistics between cpu and twin (${merges.map((m) => m.backend)})`);
  const group = merges.length ? merges[0].split_group : -1;
  const parts = records.filter((r) => r.split_group === group && r.split_part !== 'merge');
  check(parts.length === 2 && parts.map((p) => p.backend).sort().join() === 'cpu,twin' && parts.every((p) => p.reason === 'split'),
    `one record per part, on each backend (${parts.map((p) => `${p.backend}: ${p.split_part}`).join('; ')})`);

  // The statistics of the split index are the file's.
  let min = Infinity, max = -Infinity;
  for (const v of values) { min = Math.min(min, v); max = Math.max(max, v); }
  const stats = await getJson(url, `api/stats?ckpt=0&tensor=big.weight`);
  check(stats.min === min && stats.max === max && stats.count === values.length,
    `min, max and count from the split index equal the file's (${stats.min} ${stats.max} ${stats.count})`);
  // And the float64 sums: recomputed on the CPU alone, the mean and deviation are the same numbers.
  const constrain = (only) => fetch(url + 'api/compute', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ only }) });
  const onlyCpu = await constrain(['cpu']);
  check(onlyCpu.ok, `the running server takes only=cpu (${onlyCpu.status})`);
  const whole = await getJson(url, `api/stats?ckpt=0&tensor=big.weight&recompute=1`);
  check(whole.source === 'computed' && whole.records.every((r) => r.backend === 'cpu') && whole.mean === stats.mean && whole.std === stats.std,
    `the CPU alone computes the same mean and deviation bit for bit (${whole.mean} ${whole.std} vs ${stats.mean} ${stats.std})`);
  await constrain([]);

  // The drawer: records "each", the merge row with its parts indented under it.
  const page = await newPage();
  await page.goto(url);
  await page.click('#compute-pill');
  await page.waitForSelector('#compute-summary .card');
  await page.click('#show-records');
  await page.waitForSelector('#records tbody tr');
  await page.click('#compute [role="radiogroup"][aria-label="records"] button[data-value="each"]');
  await page.fill('#records-filter', 'tm.tile_stats');
  await page.waitForFunction(() => [...document.querySelectorAll('#records tbody tr')].some((tr) => tr.textContent.includes('cpu+twin')));
  const rows = await page.$$eval('#records tbody tr', (trs) => trs.map((tr) => ({
    part: !!tr.querySelector('.split-part'), cells: [...tr.cells].map((c) => c.textContent) })));
  const at = rows.findIndex((r) => r.cells.some((c) => c === 'cpu+twin'));
  const under = rows.slice(at + 1, at + 3);
  check(at >= 0 && !rows[at].part && rows[at].cells.some((c) => c.startsWith('split: 2 parts at once')),
    `the merge row says how the operation was split (${at >= 0 ? rows[at].cells.join(' | ') : 'none'})`);
  check(under.length === 2 && under.every((r) => r.part && r.cells.some((c) => /^split part \d\/2: granules/.test(c))) &&
    under.map((r) => r.cells.find((c) => c === 'cpu' || c === 'twin')).sort().join() === 'cpu,twin',
    `its two parts are listed under it, marked as parts (${under.map((r) => r.cells.join(' | ')).join(' // ')})`);
  await shot(page, 'split-1-records');
  await finish();
} catch (e) {
  await finish(e);
}
