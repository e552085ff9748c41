// End-to-end Compare mode: `tensormorph serve A B` on stories260K (F32) and its Q4_K_M quantization
// (same tensor names) in headless Debian Chromium via playwright-core: the most-changed table, the
// A | B | A−B heatmaps kept in step, and the block view's values against both files.
// Usage: node tests/browser/compare.test.mjs TENSORMORPH_BINARY ARTIFACT_DIR
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const require = createRequire(path.join(root, 'web/package.json'));
const { chromium } = require('playwright-core');
const binary = path.resolve(process.argv[2] || 'build/release/tensormorph');
const artifacts = path.resolve(process.argv[3] || 'build/browser-artifacts');
fs.mkdirSync(artifacts, { recursive: true });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tm-compare-'));
const data = path.resolve(root, '../shared/testdata');
const files = [path.join(data, 'real/stories260K.gguf'), path.join(data, 'gguf-ref/stories260K-Q4_K_M.gguf')].map((f) => {
  const copy = path.join(work, path.basename(f));
  fs.copyFileSync(f, copy);
  return copy;
});

let passed = 0, failed = 0;
function check(ok, what) { if (ok) { passed++; console.log(`ok: ${what}`); } else { failed++; console.log(`FAILED: ${what}`); } }

// The F32 values of a tensor of a GGUF file (F32 tensors only), in row-major order.
function ggufF32(file, name) {
  const b = fs.readFileSync(file);
  let at = 8;
  const u64 = () => { const v = Number(b.readBigUInt64LE(at)); at += 8; return v; };
  const u32 = () => { const v = b.readUInt32LE(at); at += 4; return v; };
  const str = () => { const n = u64(); const s = b.toString('utf8', at, at + n); at += n; return s; };
  const tensors = u64(), kvs = u64();
  const sizes = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (type) => {
    if (type === 8) str();
    else if (type === 9) { const t = u32(), n = u64(); for (let i = 0; i < n; ++i) skip(t); } else at += sizes[type];
  };
  let alignment = 32;
  for (let i = 0; i < kvs; ++i) { const key = str(), type = u32(); if (key === 'general.alignment') { alignment = b.readUInt32LE(at); } skip(type); }
  const infos = [];
  for (let i = 0; i < tensors; ++i) {
    const n = str(), dims = u32(), shape = [];
    for (let d = 0; d < dims; ++d) shape.push(u64());
    infos.push({ name: n, shape, type: u32(), offset: u64() });
  }
  const base = Math.ceil(at / alignment) * alignment;
  const info = infos.find((t) => t.name === name);
  const count = info.shape.reduce((x, y) => x * y, 1);
  return { values: new Float32Array(b.buffer.slice(b.byteOffset + base + info.offset, b.byteOffset + base + info.offset + 4 * count)), cols: info.shape[0] };
}

function serve() {
  const child = spawn(binary, ['serve', ...files, '--port', '0', '--web', path.join(root, 'web/dist')], {
    env: { ...process.env, TENSORMORPH_CONFIG: path.join(work, 'settings.json') }, stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => { out += d; const m = out.match(/http:\/\/\S+\//); if (m) resolve({ url: m[0], child }); });
    child.on('exit', (code) => reject(new Error(`serve exited with ${code}`)));
    setTimeout(() => reject(new Error('serve printed no URL in 30 s')), 30000);
  });
}

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
let server = null;
try {
  server = await serve();
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  page.on('pageerror', (e) => { failed++; console.log('FAILED: page error:', e.message); });
  await page.goto(server.url);
  await page.waitForSelector('.tensor');
  await page.click('#mode-compare');
  await page.waitForSelector('#diff-table tr.matched');

  // The table: every tensor, most changed first by rel_fro, the unquantized norms identical.
  const rows = await page.$$eval('#diff-table tbody tr.matched', (trs) => trs.map((tr) => ({ name: tr.dataset.name, cells: [...tr.cells].map((c) => c.textContent) })));
  check(rows.length === 48, `the table lists the 48 matched tensors (${rows.length})`);
  const relFro = rows.map((r) => Number(r.cells[3]));
  check(relFro.every((v, i) => i === 0 || !(v > relFro[i - 1])), 'most changed first by rel_fro');
  check(rows.filter((r) => r.cells.at(-1).includes('identical')).length === 11, 'the 11 F32 norms are marked identical');
  check((await page.textContent('#cmp-summary')).includes('48 matched'), 'the summary says 48 matched');
  await page.click('#diff-table th[data-metric="cosine"]');
  await page.waitForFunction(() => window.__tm.compare.diff && window.__tm.compare.diff.sort === 'cosine');
  check(await page.$eval('#diff-table th.sorted', (th) => th.dataset.metric) === 'cosine', 'clicking a header sorts by that metric');

  // One tensor: three heatmaps.
  const tensor = 'blk.0.attn_q.weight';
  await page.click(`#diff-table tr.matched[data-name="${tensor}"]`);
  const loaded = () => page.waitForFunction(() => {
    const v = window.__tm.compare.viewers;
    return ['a', 'b', 'd'].every((k) => v[k] && v[k].world.getItemCount() > 0 && v[k].world.getItemAt(0).getFullyLoaded());
  }, null, { timeout: 20000 });
  await loaded();
  check(true, 'A, B and A−B heatmaps load');
  const [lo, hi] = [Number(await page.inputValue('#cmp-lo')), Number(await page.inputValue('#cmp-hi'))];
  const row = await page.evaluate(() => window.__tm.compare.row);
  check(lo === -hi && hi === row.max_abs, `the A−B range is centred on zero, ±max|a−b| (${lo} … ${hi})`);
  await page.screenshot({ path: path.join(artifacts, 'compare-1-overview.png') });

  // Pan and zoom A: B and A−B follow.
  // (Zoomed and panned through A's viewport, as its mouse handlers do; the others must follow.)
  const home = await page.evaluate(() => window.__tm.compare.viewers.a.viewport.getZoom(true));
  await page.evaluate(() => {
    const vp = window.__tm.compare.viewers.a.viewport;
    vp.zoomBy(3, undefined, true);
    const c = vp.getCenter(true);
    c.x += 0.04;
    c.y += 0.03;
    vp.panTo(c, true);
    vp.applyConstraints(true);
  });
  await page.waitForTimeout(600);
  const views = await page.evaluate(() => {
    const v = window.__tm.compare.viewers;
    return Object.fromEntries(['a', 'b', 'd'].map((k) => { const c = v[k].viewport.getCenter(true); return [k, { zoom: v[k].viewport.getZoom(true), x: c.x, y: c.y }]; }));
  });
  const close = (p, r) => Math.abs(p.zoom - r.zoom) < 1e-6 * r.zoom && Math.abs(p.x - r.x) < 1e-6 && Math.abs(p.y - r.y) < 1e-6;
  check(views.a.zoom > 2 * home, `A zoomed in (zoom ${views.a.zoom}, home ${home})`);
  check(close(views.b, views.a) && close(views.d, views.a), `B and A−B follow A's zoom and pan (${JSON.stringify(views)})`);
  await loaded();
  await page.screenshot({ path: path.join(artifacts, 'compare-2-zoomed.png') });

  // The quantization view: Q5_0 measured against the F32 original.
  await page.waitForFunction(() => window.__tm.compare.quant && window.__tm.compare.quant.quantized, null, { timeout: 20000 });
  const quant = await page.evaluate(() => window.__tm.compare.quant);
  check(quant.quantized === 'Q5_0' && quant.reference === 'F32', `quantization figures for Q5_0 against F32 (${quant.quantized}, ${quant.reference})`);
  check((await page.textContent('#quant-figures')).includes('p99'), 'the figures show RMSE, max, p95 and p99');
  check(await page.$('#quant-histogram canvas') !== null, 'the error histogram is drawn');

  // Click a cell of the A−B heatmap: its block, with decoded and reference values and the errors.
  const target = await page.evaluate(() => {
    const v = window.__tm.compare.viewers.d, vp = v.viewport;
    const c = vp.viewportToImageCoordinates(vp.getCenter(true));
    const ppe = window.__tm.compare.row.zoom.pixels_per_element;
    const row = Math.floor(c.y / ppe), col = Math.floor(c.x / ppe);
    const cell = vp.viewportToImageCoordinates(vp.getCenter(true));
    cell.x = col * ppe + ppe / 2;
    cell.y = row * ppe + ppe / 2;
    const p = vp.imageToViewerElementCoordinates(cell);
    const r = v.canvas.getBoundingClientRect();
    return { row, col, x: r.left + p.x, y: r.top + p.y };
  });
  if (![target.x, target.y].every(Number.isFinite)) throw new Error('no cell to click: ' + JSON.stringify(target));
  await page.mouse.click(target.x, target.y);
  await page.waitForFunction(() => window.__tm.compare.block, null, { timeout: 10000 });
  const block = await page.evaluate(() => window.__tm.compare.block);
  check(block.row === target.row && block.cols[0] <= target.col && target.col < block.cols[1], `the block holds the clicked cell (${target.row}, ${target.col})`);
  const f32 = ggufF32(files[0], tensor);
  const want = Array.from({ length: 32 }, (_, i) => f32.values[block.row * f32.cols + block.cols[0] + i]);
  check(block.reference.every((v, i) => v === want[i]), 'the block\'s reference values are the F32 file\'s');
  check(block.error.every((e, i) => Math.fround(block.decoded[i] - block.reference[i]) === e), 'each error is decoded − reference');
  check(block.fields.d !== undefined && block.quants.every((qv, i) => Math.fround(Math.fround(qv) * block.fields.d) === block.decoded[i]),
    'each decoded value is its quant times d');
  const shownRows = await page.$$eval('#block-values tbody tr', (trs) => trs.length);
  check(shownRows === 32, `the block view lists 32 elements (${shownRows})`);
  check((await page.textContent('#block-fields')).includes('d'), 'the block view shows the scale d');
  await page.screenshot({ path: path.join(artifacts, 'compare-3-block.png') });
} catch (e) {
  failed++;
  console.log('FAILED: ' + (e.stack || e));
} finally {
  await browser.close();
  if (server) server.child.kill('SIGTERM');
  fs.rmSync(work, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
