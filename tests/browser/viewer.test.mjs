// End-to-end: the real `tensormorph serve` on the demo checkpoint in headless Debian Chromium,
// driven by playwright-core. Usage: node tests/browser/viewer.test.mjs TENSORMORPH_BINARY ARTIFACT_DIR
import { spawn, execFileSync } from 'node:child_process';
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
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tm-browser-'));
const demo = path.join(work, 'demo');
execFileSync(binary, ['demo', demo], { stdio: 'ignore' });
const pluginDir = path.join(root, 'plugins/opencl/build');
const requireOpenCL = !!process.env.TM_REQUIRE_OPENCL;

let passed = 0, failed = 0;
const servers = [];
function check(ok, what) { if (ok) { passed++; console.log(`ok: ${what}`); } else { failed++; console.log(`FAILED: ${what}`); } }

// Starts a server with its own settings file; resolves its URL.
function serve(settings) {
  const config = path.join(work, `settings-${servers.length}.json`);
  fs.writeFileSync(config, JSON.stringify(settings));
  const child = spawn(binary, ['serve', demo, '--port', '0', '--web', path.join(root, 'web/dist'), '--plugin-dir', pluginDir], {
    env: { ...process.env, TENSORMORPH_CONFIG: config }, stdio: ['ignore', 'pipe', 'inherit'],
  });
  servers.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => { out += d; const m = out.match(/http:\/\/\S+\//); if (m) resolve({ url: m[0], config }); });
    child.on('exit', (code) => reject(new Error(`serve exited with ${code}`)));
    setTimeout(() => reject(new Error('serve printed no URL in 30 s')), 30000);
  });
}

// Every element of a BF16 tensor of the demo, read straight from its safetensors shard.
function referenceValues(tensor) {
  const index = JSON.parse(fs.readFileSync(path.join(demo, 'model.safetensors.index.json')));
  const file = fs.readFileSync(path.join(demo, index.weight_map[tensor]));
  const headerLength = Number(file.readBigUInt64LE(0));
  const info = JSON.parse(file.subarray(8, 8 + headerLength).toString())[tensor];
  const begin = 8 + headerLength + info.data_offsets[0], n = (info.data_offsets[1] - info.data_offsets[0]) / 2;
  const bits = new Uint32Array(n);
  for (let i = 0; i < n; ++i) bits[i] = file.readUInt16LE(begin + 2 * i) << 16;
  return new Float32Array(bits.buffer);
}

// numpy.quantile(finite values as float64, p) (its default, linear interpolation).
function referenceQuantile(values, p) {
  const v = Array.from(values).filter(Number.isFinite).sort((a, b) => a - b);
  const h = (v.length - 1) * p;
  if (h >= v.length - 1) return v[v.length - 1];
  const lo = Math.floor(h), t = h - lo, a = v[lo], b = v[lo + 1], diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

// The CPU reference: the element read straight from the safetensors shard (BF16 -> float32).
function referenceValue(tensor, row, col) {
  const index = JSON.parse(fs.readFileSync(path.join(demo, 'model.safetensors.index.json')));
  const file = fs.readFileSync(path.join(demo, index.weight_map[tensor]));
  const headerLength = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + headerLength).toString());
  const info = header[tensor];
  const at = 8 + headerLength + info.data_offsets[0] + (row * info.shape[1] + col) * 2;
  const f = new Float32Array(new Uint32Array([file.readUInt16LE(at) << 16]).buffer)[0];
  return f;
}

async function pickTensor(page, name) {
  await page.fill('#filter', name);
  await page.click(`.tensor[data-name="${name}"]`);
  await page.waitForFunction(() => window.__tm && window.__tm.viewer.world.getItemCount() > 0 && window.__tm.viewer.world.getItemAt(0).getFullyLoaded());
}

async function newestRecords(page, after) {
  return page.$$eval('#records tbody tr', (rows, after) => rows.map((r) => ({ seq: Number(r.cells[0].textContent), op: r.dataset.op, backend: r.dataset.backend, text: r.textContent })).filter((r) => r.seq > after), after);
}

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
try {
  const { url, config } = await serve({});
  const page = await browser.newPage({ viewport: { width: 1500, height: 900 } });
  page.on('pageerror', (e) => console.log('page error:', e.message));
  await page.goto(url);
  await page.waitForSelector('.tensor');
  check(await page.textContent('#compute-mode') === 'Compute: Auto', 'Compute panel starts at Compute: Auto');

  // Zoom to the deepest level over element (5, 7) and hover it.
  const tensor = 'model.layers.0.self_attn.q_proj.weight', row = 5, col = 7;
  await pickTensor(page, tensor);
  await page.screenshot({ path: path.join(artifacts, '1-overview.png') });
  // The Distribution panel: exact quantiles, equal to numpy's on the values read from the file.
  await page.waitForFunction((name) => window.__tm.quantiles && window.__tm.quantiles.tensor === name, tensor);
  const quantiles = await page.evaluate(() => window.__tm.quantiles);
  const values = referenceValues(tensor);
  for (const v of quantiles.quantiles) {
    const want = referenceQuantile(values, v.probability);
    check(v.linear === want, `quantile ${v.probability} is ${v.linear}, numpy's ${want}`);
  }
  check(await page.$$eval('#quantiles tbody tr', (rows) => rows.length) === quantiles.quantiles.length,
    'the quantile table shows every quantile');
  check(quantiles.robust_range[0] === referenceQuantile(values, 0.001) && quantiles.robust_range[1] === referenceQuantile(values, 0.999),
    `the robust range ${quantiles.robust_range} is the 0.1% and 99.9% quantiles`);
  await page.click('#robust');
  const r = Math.max(Math.abs(quantiles.robust_range[0]), Math.abs(quantiles.robust_range[1]));
  check(Number(await page.inputValue('#hi')) === r && Number(await page.inputValue('#lo')) === -r,
    `"robust range" sets the diverging colour range to +-${r} from the quantiles`);
  await page.waitForFunction(() => window.__tm.viewer.world.getItemCount() > 0 && window.__tm.viewer.world.getItemAt(0).getFullyLoaded());
  // The Outliers panel: the largest magnitude equals the file's; clicking it centres the heatmap on
  // that element, outlined.
  await page.waitForFunction((name) => window.__tm.outliers && window.__tm.outliers.tensor === name, tensor);
  const outliers = await page.evaluate(() => window.__tm.outliers);
  const largest = Array.from(values).filter(Number.isFinite).reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  check(Math.abs(outliers.top_k[0].value) === largest, `the first outlier |${outliers.top_k[0].value}| is the largest magnitude ${largest}`);
  const first = outliers.top_k[0];
  check(values[first.index] === first.value, `outlier 1 is element ${first.index} of the file (${values[first.index]})`);
  await page.click('#outliers tbody tr:first-child');
  await page.waitForSelector('#highlight');
  const centred = await page.evaluate(({ row, col }) => {
    const { viewer } = window.__tm;
    const c = viewer.viewport.viewportToImageCoordinates(viewer.viewport.getCenter(true));
    const ppe = window.__tm.pixelsPerElement;
    return { row: Math.floor(c.y / ppe), col: Math.floor(c.x / ppe) };
  }, first);
  check(centred.row === first.row && centred.col === first.col,
    `clicking outlier 1 centres the heatmap on (${first.row}, ${first.col}) (at ${centred.row}, ${centred.col})`);
  // Marginal strips: each row's and column's absmax, from tm.channel_stats@1, drawn beside the heatmap.
  await page.waitForFunction((name) => window.__tm.strips && window.__tm.strips.tensor === name, tensor);
  const strips = await page.evaluate(() => window.__tm.strips);
  const cols = strips.cols.length, rows = strips.rows.length;
  check(rows * cols === values.length, `the strips hold ${rows} rows and ${cols} columns`);
  let rowWant = 0;
  for (let c = 0; c < cols; ++c) rowWant = Math.max(rowWant, Math.abs(values[first.row * cols + c]));
  check(strips.rows[first.row] === rowWant, `row ${first.row}'s strip value ${strips.rows[first.row]} is its absmax ${rowWant}`);
  const inked = await page.evaluate(() => {
    const c = document.getElementById('strip-rows'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) ++n;
    return n;
  });
  check(inked > 0, `the row strip is drawn (${inked} pixels)`);
  // Dragging across the histogram zooms it into that range.
  const plot = await page.$('#histogram .u-over');
  const box = await plot.boundingBox();
  const rangeBefore = await page.textContent('#hist-range');
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction((text) => document.getElementById('hist-range').textContent !== text, rangeBefore);
  const rangeAfter = await page.textContent('#hist-range');
  const [a0, b0] = rangeBefore.split(' … ').map(Number), [a1, b1] = rangeAfter.split(' … ').map(Number);
  check(a1 > a0 && b1 < b0 && a1 < b1, `dragging over the histogram zooms it into the dragged range (${rangeBefore} -> ${rangeAfter})`);
  const target = await page.evaluate(({ row, col }) => {
    const { viewer, OpenSeadragon } = window.__tm;
    const vp = viewer.viewport;
    const image = new OpenSeadragon.Point(col * 32 + 16, row * 32 + 16);
    const point = vp.imageToViewportCoordinates(image);
    vp.zoomTo(vp.imageToViewportZoom(1.0), point, true);
    vp.panTo(point, true);
    const px = vp.imageToViewerElementCoordinates(image);
    const box = viewer.canvas.getBoundingClientRect();
    return { x: box.left + px.x, y: box.top + px.y };
  }, { row, col });
  await page.waitForFunction(() => window.__tm.viewer.world.getItemAt(0).getFullyLoaded());
  await page.mouse.move(target.x - 3, target.y - 3);
  await page.mouse.move(target.x, target.y);
  await page.waitForSelector('#hover-value');
  const hovered = { row: Number(await page.textContent('#hover-row')), col: Number(await page.textContent('#hover-col')), text: await page.textContent('#hover-value') };
  const want = referenceValue(tensor, row, col);
  check(hovered.row === row && hovered.col === col, `hover lands on element (${row}, ${col}) (got ${hovered.row}, ${hovered.col})`);
  check(Math.fround(parseFloat(hovered.text)) === want, `hovered value ${hovered.text} equals the reference ${want}`);
  // Magnified cells carry their exact values as text (fetched through tm.decode@1).
  await page.waitForFunction(({ row, col }) => {
    const s = window.__tm.shownValues;
    return s && s.drawn > 0 && row >= s.row && row < s.row + s.rows && col >= s.col && col < s.col + s.cols;
  }, { row, col }, { timeout: 15000 });
  const shown = await page.evaluate(({ row, col }) => {
    const s = window.__tm.shownValues;
    return { text: s.text[(row - s.row) * s.cols + (col - s.col)], drawn: s.drawn };
  }, { row, col });
  check(Math.fround(parseFloat(shown.text)) === want,
    `magnified cell (${row}, ${col}) is labelled ${shown.text}, the reference ${want} (${shown.drawn} values drawn)`);
  await page.screenshot({ path: path.join(artifacts, '2-deepest-hover.png') });

  // Prefer the OpenCL plugin: F32 tile statistics go there; then "never" it: they no longer do.
  const hasOpenCL = await page.$('input[data-kind="prefer"][data-backend^="opencl"]');
  if (!hasOpenCL) {
    check(!requireOpenCL, 'the OpenCL plugin is loaded (TM_REQUIRE_OPENCL)');
  } else {
    const backend = await hasOpenCL.getAttribute('data-backend');
    await hasOpenCL.check();
    await page.waitForFunction(() => document.querySelector('#compute-mode').textContent.includes('prefer='));
    await pickTensor(page, 'model.norm.weight');
    let last = Math.max(0, ...(await newestRecords(page, 0)).map((r) => r.seq));
    await page.click('#recompute');
    await page.waitForFunction((last) => [...document.querySelectorAll('#records tbody tr')].some((r) => Number(r.cells[0].textContent) > last && r.dataset.op === 'tm.tile_stats@1'), last);
    const before = (await newestRecords(page, last)).filter((r) => r.op === 'tm.tile_stats@1');
    check(before.some((r) => r.backend === backend), `with prefer=${backend}, tile statistics ran on it (${before.map((r) => r.backend)})`);
    await page.check(`input[data-kind="never"][data-backend="${backend}"]`);
    await page.waitForFunction(() => document.querySelector('#compute-mode').textContent.includes('never='));
    last = Math.max(0, ...(await newestRecords(page, 0)).map((r) => r.seq));
    await page.click('#recompute');
    await page.waitForFunction((last) => [...document.querySelectorAll('#records tbody tr')].some((r) => Number(r.cells[0].textContent) > last && r.dataset.op === 'tm.histogram@1'), last);
    const after = await newestRecords(page, last);
    check(after.length > 0 && after.every((r) => r.backend !== backend), `after never=${backend}, no new record names it as the backend (${after.map((r) => r.op + '@' + r.backend)})`);
    check(!fs.readFileSync(config, 'utf8').includes(backend), 'a toggle changes only the running server, not the settings file');
    await page.click('#save-default');
    await page.waitForFunction(() => document.querySelector('#save-note').textContent === 'saved as default', null, { timeout: 10000 }).catch(() => {});
    const persisted = JSON.parse(fs.readFileSync(config));
    check(JSON.stringify(persisted).includes(backend), '"Save as default" persists the constraint in the settings file');
    await page.screenshot({ path: path.join(artifacts, '3-compute-never.png') });
    // Back to automatic placement for the steps below.
    await page.uncheck(`input[data-kind="never"][data-backend="${backend}"]`);
    await page.uncheck(`input[data-kind="prefer"][data-backend="${backend}"]`);
    await page.waitForFunction(() => document.querySelector('#compute-mode').textContent === 'Compute: Auto');
  }

  // A toggle changes the running server only; "Save as default" writes what it runs with.
  await page.check('input[data-kind="prefer"][data-backend="cpu"]');
  await page.waitForFunction(() => document.querySelector('#compute-mode').textContent.includes('prefer=cpu'));
  const preferred = () => ((JSON.parse(fs.readFileSync(config)).compute || {}).prefer || []).includes('cpu');
  check(!preferred(), 'the prefer=cpu toggle leaves the settings file alone');
  await page.click('#save-default');
  await page.waitForFunction(() => document.querySelector('#save-note').textContent === 'saved as default', null, { timeout: 10000 }).catch(() => {});
  check(preferred(), '"Save as default" persists prefer=cpu in the settings file');
  await page.uncheck('input[data-kind="prefer"][data-backend="cpu"]');
  await page.waitForFunction(() => document.querySelector('#compute-mode').textContent === 'Compute: Auto');

  // The Compute panel's memory budget is applied by the running server (no restart); it reaches the
  // settings file only through "Save as default".
  await page.fill('#budget', '64G');
  await page.dispatchEvent('#budget', 'change');
  await page.waitForFunction(() => document.querySelector('#budget-note').textContent.length > 0, null, { timeout: 10000 }).catch(() => {});
  const note = await page.textContent('#budget-note');
  check(note === 'applies now', `the memory budget set in the Compute panel applies now (${note})`);
  const budgetBytes = String(64 * 2 ** 30);
  check(!fs.readFileSync(config, 'utf8').includes(budgetBytes), 'the memory budget alone does not change the settings file');
  await page.click('#save-default');
  await page.waitForFunction(() => document.querySelector('#save-note').textContent === 'saved as default', null, { timeout: 10000 }).catch(() => {});
  check(await page.textContent('#save-note') === 'saved as default', `"Save as default" reports success (${await page.textContent('#save-note')})`);
  check(fs.readFileSync(config, 'utf8').includes(budgetBytes), '"Save as default" persists the memory budget in the settings file');
  await page.fill('#budget', '');
  await page.dispatchEvent('#budget', 'change');

  // A foreign page cannot change the settings: its cross-origin POST is refused by the server.
  // Chromium's own private-network checks are switched off here, so the requests do reach it.
  const before = fs.readFileSync(config, 'utf8');
  const unguarded = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--no-first-run',
    '--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks'] });
  const foreign = await unguarded.newPage();
  await foreign.route('http://attacker.test/', (route) => route.fulfill({ contentType: 'text/html', body: '<!doctype html><title>x</title>' }));
  await foreign.goto('http://attacker.test/');
  const attempt = await foreign.evaluate(async (target) => {
    try {
      await fetch(target + 'api/settings', { method: 'POST', mode: 'no-cors', body: JSON.stringify({ key: 'compute.memory_budget', value: '1', persist: true }) });
      await fetch(target + 'api/compute', { method: 'POST', mode: 'no-cors', body: JSON.stringify({ never: ['cpu'], persist: true }) });
      return 'sent';
    } catch (e) { return String(e); }
  }, url);
  await new Promise((r) => setTimeout(r, 500));
  check(attempt === 'sent', `a cross-origin page's simple POSTs reach the server (${attempt})`);
  check(fs.readFileSync(config, 'utf8') === before, 'the server refuses them: the settings file is unchanged');
  const running = await (await fetch(url + 'api/settings')).json();
  check(running.running['compute.memory_budget'] !== '1', 'a cross-origin page does not change the running server either');
  await unguarded.close();

  // A memory budget the exact overview render exceeds: the consent dialog offers the sampled rung.
  const budgeted = await serve({ compute: { memory_budget_bytes: 285000 } });
  const page2 = await browser.newPage({ viewport: { width: 1500, height: 900 } });
  await page2.goto(budgeted.url);
  await page2.waitForSelector('.tensor');
  await page2.fill('#filter', 'embed_tokens');
  await page2.click('.tensor[data-name="model.embed_tokens.weight"]');
  await page2.waitForSelector('#consent[open]', { timeout: 20000 }).catch(() => {});
  // Exact quantiles of the embedding are over this budget too: both operations ask, one dialog at
  // a time, in the order their answers came. The quantiles' is declined, the render's taken.
  const quantilesAsking = () => page2.waitForFunction(() => document.querySelector('#consent').open &&
    document.querySelector('#consent-reason').textContent.startsWith('quantiles'), null, { timeout: 20000 }).then(() => true, () => false);
  let quantilesAsked = (await page2.textContent('#consent-reason').catch(() => '')).startsWith('quantiles');
  if (quantilesAsked) {
    await page2.click('#consent-cancel');
    await page2.waitForFunction(() => document.querySelector('#consent').open &&
      document.querySelector('#consent-reason').textContent.startsWith('tm.render'), null, { timeout: 20000 }).catch(() => {});
  }
  const open = await page2.$('#consent[open]');
  check(!!open, 'the consent dialog appears for a render over the memory budget');
  if (open) {
    const rung = await page2.getAttribute('#consent-rungs button', 'data-rung');
    check(rung === 'tm.render_tile_sampled@1', `the dialog offers the sampled rung (${rung})`);
    await page2.screenshot({ path: path.join(artifacts, '4-consent-dialog.png') });
    await page2.click('#consent-rungs button');
    await page2.waitForFunction(() => window.__tm.viewer.world.getItemCount() > 0 && window.__tm.viewer.world.getItemAt(0).getFullyLoaded());
    await page2.waitForFunction(() => [...document.querySelectorAll('#records tbody tr')].some((r) => r.dataset.op === 'tm.render_tile_sampled@1'), null, { timeout: 10000 }).catch(() => {});
    const sampled = await page2.$('#records tbody tr[data-op="tm.render_tile_sampled@1"]');
    check(!!sampled && (await sampled.textContent()).includes('consented'), 'after consent the sampled rung ran and its record says consented');
    await page2.screenshot({ path: path.join(artifacts, '5-after-consent.png') });
  }
  if (!quantilesAsked) quantilesAsked = await quantilesAsking();
  check(quantilesAsked, 'the quantiles over the memory budget ask for consent as well');

  // A time budget exact quantiles exceed: the dialog offers the ladder; the histogram rung answers
  // from the index, and the table marks its values approximate.
  // (A tensor no page has opened: quantiles already kept beside the index cost nothing and run.)
  const fresh = 'model.layers.1.mlp.gate_proj.weight', freshValues = referenceValues(fresh);
  const slow = await serve({ compute: { time_budget_seconds: 1e-9 } });
  const page3 = await browser.newPage({ viewport: { width: 1500, height: 900 } });
  page3.on('pageerror', (e) => console.log('page error:', e.message));
  await page3.goto(slow.url);
  await page3.waitForSelector('.tensor');
  await page3.fill('#filter', fresh);
  await page3.click(`.tensor[data-name="${fresh}"]`);
  await page3.waitForSelector('#consent[open]', { timeout: 20000 }).catch(() => {});
  check(!!(await page3.$('#consent[open]')), 'the consent dialog appears for quantiles over the time budget');
  const rungs = await page3.$$eval('#consent-rungs button', (bs) => bs.map((b) => b.dataset.rung));
  check(rungs.includes('histogram') && rungs.includes('sample') && !rungs.includes('tm.render_tile_sampled@1'),
    `the dialog offers the quantile ladder (${rungs})`);
  check((await page3.textContent('#quantiles tbody')).includes('need consent'), 'the table says the exact quantiles need consent');
  await page3.screenshot({ path: path.join(artifacts, '6-quantile-ladder.png') });
  if (rungs.includes('histogram')) {
    await page3.click('#consent-rungs button[data-rung="histogram"]');
    await page3.waitForFunction((name) => window.__tm.quantiles && window.__tm.quantiles.tensor === name, fresh, { timeout: 20000 }).catch(() => {});
    const approx = await page3.evaluate(() => window.__tm.quantiles);
    check(!!approx && approx.rung === 'histogram' && approx.exactness === 'approximate', 'after consent the histogram rung answered');
    if (approx) {
      const held = approx.quantiles.every((v) => v.interval && v.interval[0] <= referenceQuantile(freshValues, v.probability) &&
        referenceQuantile(freshValues, v.probability) <= v.interval[1]);
      check(held, 'each true quantile lies in the interval the histogram rung gives');
    }
    const cells = await page3.$$eval('#quantiles tbody td', (tds) => tds.map((td) => td.textContent));
    check(cells.length > 0 && cells.every((c) => c.startsWith('~')), 'the table marks every approximate value with ~');
    check((await page3.textContent('#quantiles-note')).includes('approximate'), 'the note under the table says approximate and why');
    await page3.screenshot({ path: path.join(artifacts, '7-quantiles-approximate.png') });
  }
} catch (e) {
  failed++;
  console.log('FAILED: ' + (e.stack || e));
} finally {
  await browser.close();
  for (const s of servers) s.kill('SIGTERM');
  fs.rmSync(work, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
