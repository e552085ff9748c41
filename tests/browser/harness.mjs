// What every browser test shares: the real `tensormorph serve` on a free port with its own settings
// file, Debian's Chromium through playwright-core, checks that count, pages that fail on any
// console error or uncaught exception, screenshots kept as artifacts, and the reference readers
// that take values straight from the files.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

export const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const require = createRequire(path.join(root, 'web/package.json'));
export const { chromium } = require('playwright-core');
export const binary = path.resolve(process.argv[2] || 'build/release/tensormorph');
export const artifacts = path.resolve(process.argv[3] || 'build/browser-artifacts');
export const shared = path.resolve(root, '../shared/testdata');
fs.mkdirSync(artifacts, { recursive: true });

let passed = 0, failed = 0;
/** Counts and prints one check. */
export function check(ok, what) { if (ok) { passed++; console.log(`ok: ${what}`); } else { failed++; console.log(`FAILED: ${what}`); } }

/** A scratch directory removed at the end. */
export const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tm-browser-'));
const servers = [];

/** Starts `tensormorph serve ARGS...` with its own settings file; resolves {url, config, child}. */
export function serve(args, settings = {}) {
  const config = path.join(work, `settings-${servers.length}.json`);
  fs.writeFileSync(config, JSON.stringify(settings));
  const child = spawn(binary, ['serve', ...args, '--port', '0', '--web', path.join(root, 'web/dist')], {
    env: { ...process.env, TENSORMORPH_CONFIG: config }, stdio: ['ignore', 'pipe', 'inherit'],
  });
  servers.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => { out += d; const m = out.match(/http:\/\/\S+\//); if (m) resolve({ url: m[0], config, child }); });
    child.on('exit', (code) => reject(new Error(`serve exited with ${code}`)));
    setTimeout(() => reject(new Error('serve printed no URL in 60 s')), 60000);
  });
}

/** Waits until every checkpoint a server serves has its index (statistics come from it). */
export async function indexed(url) {
  for (let i = 0; i < 600; ++i) {
    const { checkpoints } = await (await fetch(url + 'api/checkpoints')).json();
    if (checkpoints.every((c) => c.index !== 'building')) return checkpoints;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the index was not built within 60 s');
}

/** GET a JSON route of a server. */
export async function getJson(url, route) {
  const res = await fetch(url + route.replace(/^\//, ''));
  return res.json();
}

export const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });

/** A page whose console errors and uncaught exceptions fail the test, unless `allowed(text)`
 *  says the error was provoked on purpose (a refused request the test asked for). */
export async function newPage({ width = 1440, height = 900, allowed = () => false, downloads = false } = {}) {
  const context = await browser.newContext({ viewport: { width, height }, acceptDownloads: downloads });
  const page = await context.newPage();
  page.on('pageerror', (e) => check(false, `no uncaught exception (${e.message})`));
  page.on('console', (m) => { if (m.type() === 'error' && !allowed(m.text())) check(false, `no console error (${m.text()})`); });
  return page;
}

/** Saves a screenshot of the page under the artifacts directory. */
export async function shot(page, name) { await page.screenshot({ path: path.join(artifacts, `${name}.png`) }); }

/** Waits until the tensor heatmap shows every tile of its current view. */
export async function heatmapLoaded(page) {
  await page.waitForFunction(() => window.__tm && window.__tm.viewer && window.__tm.viewer.world.getItemCount() > 0 &&
    window.__tm.viewer.world.getItemAt(0).getFullyLoaded(), null, { timeout: 30000 });
}

/** Ends the test: stops the servers and the browser, prints the tally, exits 0 only when every
 *  check passed (and at least one ran). */
export async function finish(error) {
  if (error) { failed++; console.log('FAILED: ' + (error.stack || error)); }
  await browser.close();
  for (const s of servers) s.kill('SIGTERM');
  fs.rmSync(work, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 && passed > 0 ? 0 : 1);
}

// ---- reference readers: values straight from the files ----------------------------------------

/** Every element of a safetensors tensor (BF16, F16 or F32) of a demo-style sharded set, as float32. */
export function safetensorsValues(dir, tensor) {
  const index = JSON.parse(fs.readFileSync(path.join(dir, 'model.safetensors.index.json')));
  const file = fs.readFileSync(path.join(dir, index.weight_map[tensor]));
  const headerLength = Number(file.readBigUInt64LE(0));
  const info = JSON.parse(file.subarray(8, 8 + headerLength).toString())[tensor];
  const begin = 8 + headerLength + info.data_offsets[0], bytes = info.data_offsets[1] - info.data_offsets[0];
  if (info.dtype === 'F32') return new Float32Array(file.buffer.slice(file.byteOffset + begin, file.byteOffset + begin + bytes));
  const n = bytes / 2, bits = new Uint32Array(n);
  if (info.dtype !== 'BF16') throw new Error(`reference reader: ${info.dtype}`);
  for (let i = 0; i < n; ++i) bits[i] = file.readUInt16LE(begin + 2 * i) << 16;
  return new Float32Array(bits.buffer);
}

/** numpy.quantile(finite values as float64, p) with its default linear interpolation. */
export function referenceQuantile(values, p) {
  const v = Array.from(values).filter(Number.isFinite).sort((a, b) => a - b);
  const h = (v.length - 1) * p;
  if (h >= v.length - 1) return v[v.length - 1];
  const lo = Math.floor(h), t = h - lo, a = v[lo], b = v[lo + 1], diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

/** The F32 values of a tensor of a GGUF file (F32 tensors only), row-major, and its row length. */
export function ggufF32(file, name) {
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
  for (let i = 0; i < kvs; ++i) { const key = str(), type = u32(); if (key === 'general.alignment') alignment = b.readUInt32LE(at); skip(type); }
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

/** A point on the tensor heatmap over element (row, col) of its view, zoomed to the deepest level. */
export async function zoomOnto(page, row, col) {
  return page.evaluate(({ row, col }) => {
    const { viewer, OpenSeadragon } = window.__tm;
    const vp = viewer.viewport, ppe = window.__tm.pixelsPerElement;
    const image = new OpenSeadragon.Point(col * ppe + ppe / 2, row * ppe + ppe / 2);
    const point = vp.imageToViewportCoordinates(image);
    vp.zoomTo(vp.imageToViewportZoom(1.0), point, true);
    vp.panTo(point, true);
    const px = vp.imageToViewerElementCoordinates(image), box = viewer.canvas.getBoundingClientRect();
    return { x: box.left + px.x, y: box.top + px.y };
  }, { row, col });
}
