// End-to-end, the tensor view: `tensormorph serve` on the demo checkpoint and its GGUF twin in
// headless Debian Chromium. Exact values at deep zoom, statistics, quantiles and outliers against
// the file, jumps to the extreme and to the first NaN, the Compute drawer (constraints, records,
// budgets, persisting), the consent ladder for renders, quantiles and spectra, refused tiles shown
// with their reason, a foreign page kept out, and the Spectrum section (charts and metrics).
// Usage: node tests/browser/viewer.test.mjs TENSORMORPH_BINARY ARTIFACT_DIR
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { binary, check, chromium, finish, getJson, heatmapLoaded, indexed, newPage, referenceQuantile, root, safetensorsValues, serve, shot, work, zoomOnto } from './harness.mjs';

const demo = path.join(work, 'demo');
execFileSync(binary, ['demo', demo], { stdio: 'ignore' });
const twin = path.join(demo, 'demo-mixed-quant.gguf');
const pluginDir = path.join(root, 'plugins/opencl/build');
const requireOpenCL = !!process.env.TM_REQUIRE_OPENCL;
const requireWebGPU = !!process.env.TM_REQUIRE_WEBGPU;
// Errors provoked on purpose: the browser's note of a refused request, and OpenSeadragon's of a
// refused tile (the page shows both on the heatmap with their reason).
const refused = (text) => text.includes('status of 409') || text.includes('status of 422') || text.startsWith('Tile %s failed to load');

/** The records the drawer's poll has seen after sequence `after`. */
const recordsAfter = (page, after) => page.evaluate((after) => (window.__tm.compute ? window.__tm.compute.records.filter((r) => r.sequence > after) : []), after);
const lastSequence = (page) => page.evaluate(() => { const r = window.__tm.compute ? window.__tm.compute.records : []; return r.length ? r[r.length - 1].sequence : 0; });
async function openTensor(page, name) {
  await page.fill('#search', name);
  await page.click(`.tensor[data-name="${name}"]`);
  await page.fill('#search', '');
  await page.waitForFunction((n) => window.__tm.tensorInfo && window.__tm.tensorInfo.name === n, name);
  await heatmapLoaded(page);
}
// The Compute drawer covers the inspector: close it to recompute, open it again to read it.
async function recompute(page) {
  await page.keyboard.press('Escape');
  await page.click('#recompute');
  await page.click('#compute-pill');
  await page.waitForSelector('#backends');
}
async function setUse(page, backend, choice) {
  await page.click(`#backends tr[data-backend="${backend}"] button[data-value="${choice}"]`);
  await page.waitForFunction(({ backend, choice }) => {
    const c = window.__tm.compute.constraints;
    return choice === 'auto' ? !c.prefer.includes(backend) && !c.never.includes(backend) : c[choice].includes(backend);
  }, { backend, choice });
}

try {
  const { url, config } = await serve([demo, twin, '--plugin-dir', pluginDir]);
  await indexed(url);
  const page = await newPage();
  await page.goto(url);

  // The first view is the overview, and its most unusual tensor is the one holding NaN and Inf.
  await page.waitForSelector('#findings .finding');
  const firstFinding = await page.getAttribute('#findings .finding', 'data-name');
  check(firstFinding === 'model.layers.2.mlp.down_proj.weight', `the most unusual tensor is listed first (${firstFinding})`);
  await page.click('#findings .finding');
  await page.waitForFunction(() => window.__tm.tensorInfo && window.__tm.tensorInfo.name === 'model.layers.2.mlp.down_proj.weight');
  await heatmapLoaded(page);
  check(await page.isVisible('#tensor-view'), 'clicking it opens the tensor view');

  // Jump to the first NaN: element [7, 11] of the file, centred and outlined.
  await page.click('#jump-nonfinite');
  await page.waitForFunction(() => window.__tm.jumped && window.__tm.jumped.what === 'nonfinite');
  const jumped = await page.evaluate(() => window.__tm.jumped);
  check(jumped.kind === 'NaN' && jumped.coords[0] === 7 && jumped.coords[1] === 11, `"NaN/Inf" jumps to the first NaN at [7, 11] (${jumped.kind} at ${jumped.coords})`);
  await page.waitForSelector('#highlight');
  await page.waitForTimeout(700);
  const centre = await page.evaluate(() => {
    const { viewer } = window.__tm, c = viewer.viewport.viewportToImageCoordinates(viewer.viewport.getCenter(true));
    return { row: Math.floor(c.y / window.__tm.pixelsPerElement), col: Math.floor(c.x / window.__tm.pixelsPerElement) };
  });
  check(centre.row === 7 && centre.col === 11, `the heatmap is centred on it (${centre.row}, ${centre.col})`);
  await heatmapLoaded(page);
  await shot(page, 'tensor-1-jump-to-nan');

  // A weight matrix centred on zero: the statistics, quantiles and outliers equal the file's.
  const tensor = 'model.layers.0.self_attn.q_proj.weight', values = safetensorsValues(demo, tensor);
  await openTensor(page, tensor);
  check(await page.inputValue('#stat') === 'absmax', 'the default pixel statistic shows magnitudes (absmax)');
  await page.waitForFunction((name) => window.__tm.quantiles && window.__tm.quantiles.tensor === name, tensor);
  const quantiles = await page.evaluate(() => window.__tm.quantiles);
  check(quantiles.quantiles.every((v) => v.linear === referenceQuantile(values, v.probability)), 'every quantile equals numpy\'s on the file\'s values');
  check(await page.$$eval('#quantiles tr', (rows) => rows.length) === quantiles.quantiles.length, 'the quantile table shows every quantile');
  const finite = Array.from(values).filter(Number.isFinite);
  const stats = await page.$$eval('#stats td', (tds) => Object.fromEntries(tds.map((td) => [td.dataset.stat, td.textContent])));
  check(stats.count === finite.length.toLocaleString('en-US'), `the statistics show the exact count (${stats.count})`);
  check(/^\d[\d,]* \(/.test(stats.zeros), `zeros are a count with its share (${stats.zeros})`);

  await page.waitForFunction((name) => window.__tm.outliers && window.__tm.outliers.tensor === name, tensor);
  const outliers = await page.evaluate(() => window.__tm.outliers);
  const largest = finite.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  check(Math.abs(outliers.top_k[0].value) === largest, `the first outlier |${outliers.top_k[0].value}| is the largest magnitude ${largest}`);
  const first = outliers.top_k[0];
  await page.click('#outliers tbody tr:first-child');
  await page.waitForSelector('#highlight');
  await page.waitForTimeout(700);
  const atOutlier = await page.evaluate(() => {
    const { viewer } = window.__tm, c = viewer.viewport.viewportToImageCoordinates(viewer.viewport.getCenter(true));
    return { row: Math.floor(c.y / window.__tm.pixelsPerElement), col: Math.floor(c.x / window.__tm.pixelsPerElement) };
  });
  check(atOutlier.row === first.row && atOutlier.col === first.col, `clicking outlier 1 centres the heatmap on (${first.row}, ${first.col})`);
  await page.click('#jump-max');
  await page.waitForFunction(() => window.__tm.jumped && window.__tm.jumped.what === 'absmax');
  const max = await page.evaluate(() => window.__tm.jumped);
  check(max.matrix_row === first.row && max.matrix_col === first.col, `"max |x|" finds the same element (${max.matrix_row}, ${max.matrix_col})`);

  // Marginal strips: each row's absmax, drawn beside the heatmap.
  await page.waitForFunction((name) => window.__tm.strips && window.__tm.strips.tensor === name, tensor);
  const strips = await page.evaluate(() => window.__tm.strips);
  let rowWant = 0;
  for (let c = 0; c < strips.cols.length; ++c) rowWant = Math.max(rowWant, Math.abs(values[first.row * strips.cols.length + c]));
  check(strips.rows[first.row] === rowWant, `row ${first.row}'s strip value is its absmax ${rowWant}`);

  // The histogram: log counts by default, a drag zooms into the dragged range.
  await page.waitForSelector('#histogram .u-over');
  check(await page.isChecked('#hist-log'), 'the histogram counts are on a log scale by default');
  const ticks = await page.$$eval('#histogram .u-axis', (axes) => axes.map((a) => a.textContent).join(' '));
  check(!ticks.includes('0,000') && !/\b0\.000\b/.test(ticks), `axis labels are readable (${ticks.slice(0, 80)}…)`);
  const box = await (await page.$('#histogram .u-over')).boundingBox();
  const rangeOf = async () => (await page.textContent('#hist-range')).split(' · ')[0].split(' … ').map(Number);
  const before = await rangeOf();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction((t) => document.getElementById('hist-range').textContent.split(' · ')[0] !== t, (await page.textContent('#hist-range')).split(' · ')[0]);
  const after = await rangeOf();
  check(after[0] > before[0] && after[1] < before[1], `dragging over the histogram zooms into that range (${before} -> ${after})`);

  // Deepest zoom: the hovered element and the labelled cells equal the file.
  const row = 5, col = 7, want = values[row * 384 + col];
  const target = await zoomOnto(page, row, col);
  await heatmapLoaded(page);
  await page.mouse.move(target.x - 3, target.y - 3);
  await page.mouse.move(target.x, target.y);
  await page.waitForSelector('#hover-value');
  check(Number(await page.textContent('#hover-row')) === row && Number(await page.textContent('#hover-col')) === col, 'hover lands on the element under the mouse');
  check(Math.fround(parseFloat(await page.textContent('#hover-value'))) === want, `the hovered value equals the file's ${want}`);
  await page.waitForFunction(({ row, col }) => { const s = window.__tm.shownValues; return s && s.drawn > 0 && row >= s.row && row < s.row + s.rows && col >= s.col && col < s.col + s.cols; }, { row, col }, { timeout: 15000 });
  const label = await page.evaluate(({ row, col }) => { const s = window.__tm.shownValues; return s.text[(row - s.row) * s.cols + (col - s.col)]; }, { row, col });
  check(Math.fround(parseFloat(label)) === want, `the magnified cell is labelled ${label}, the file's value`);
  await shot(page, 'tensor-2-deepest-values');

  // A 1-D norm vector: folded into a near-square view with the rule stated; centred at 1.
  await openTensor(page, 'model.norm.weight');
  check((await page.textContent('#view-rule')).includes('Shown as'), `a 1-D tensor is shown folded, the rule stated (${await page.textContent('#view-rule')})`);
  check(await page.inputValue('#stat') === 'mean', 'a tensor centred far from zero defaults to its values around the centre');
  const [lo, hi] = [Number(await page.inputValue('#lo')), Number(await page.inputValue('#hi'))];
  check(lo < 1 && hi > 1 && lo > 0.5, `its default range surrounds 1 (${lo} … ${hi})`);
  await shot(page, 'tensor-3-folded-norm');

  // The Compute drawer: a summary first, then backends with one choice each, records on demand.
  await page.click('#compute-pill');
  await page.waitForSelector('#compute-summary .card');
  const pill = await page.textContent('#compute-pill');
  check(/^Auto.*cpu \d+/.test(pill), `the status pill says where operations ran (${pill})`);
  await page.click('#show-records');
  await page.waitForSelector('#records tbody tr');
  const tensorCells = await page.$$eval('#records tbody tr td:nth-child(2)', (tds) => tds.map((td) => td.textContent));
  check(tensorCells.some((t) => t.includes('model.')), 'placement records name their tensor');
  await page.fill('#records-filter', 'tm.render_tile');
  const filtered = await page.$$eval('#records tbody tr td:nth-child(3)', (tds) => tds.map((td) => td.textContent));
  check(filtered.length > 0 && filtered.every((t) => t.includes('render_tile')), `the records filter keeps matching operations (${filtered.length})`);
  const runs = await page.$$eval('#records tbody tr td:nth-child(4)', (tds) => tds.map((td) => Number(td.textContent)));
  check(runs.some((n) => n > 1), 'tiles of one tensor are grouped into one row with their run count');
  await shot(page, 'compute-1-drawer');

  // The WebGPU backend (lavapipe in CI) is listed with its device, placeable like any other.
  const webgpu = await page.$('#backends tr[data-backend^="webgpu"]');
  if (!webgpu) {
    check(!requireWebGPU, 'the WebGPU backend is listed (TM_REQUIRE_WEBGPU)');
  } else {
    const text = await webgpu.textContent();
    check(!/unavailable/i.test(text) || !requireWebGPU, `the WebGPU backend is available (${text.slice(0, 120)})`);
  }

  const opencl = await page.$('#backends tr[data-backend^="opencl"]');
  if (!opencl) {
    check(!requireOpenCL, 'the OpenCL plugin is loaded (TM_REQUIRE_OPENCL)');
  } else {
    const backend = await opencl.getAttribute('data-backend');
    await setUse(page, backend, 'prefer');
    check(await page.textContent('#compute-mode') !== 'Compute: Auto', 'a preference leaves Auto');
    let last = await lastSequence(page);
    await recompute(page);
    await page.waitForFunction((last) => window.__tm.compute.records.some((r) => r.sequence > last && r.op === 'tm.tile_stats@1'), last, { timeout: 20000 });
    const preferred = (await recordsAfter(page, last)).filter((r) => r.op === 'tm.tile_stats@1');
    check(preferred.some((r) => r.backend === backend && r.reason === 'preferred'), `with prefer=${backend}, tile statistics ran there, reason "preferred"`);
    await setUse(page, backend, 'never');
    const both = await page.$$eval(`#backends tr[data-backend="${backend}"] button.on`, (bs) => bs.map((b) => b.dataset.value));
    check(both.length === 1 && both[0] === 'never', `prefer and never cannot both be chosen (${both})`);
    last = await lastSequence(page);
    await recompute(page);
    await page.waitForFunction((last) => window.__tm.compute.records.some((r) => r.sequence > last && r.op === 'tm.tile_stats@1'), last, { timeout: 20000 });
    const after2 = await recordsAfter(page, last);
    check(after2.length > 0 && after2.every((r) => r.backend !== backend), `after never=${backend}, nothing runs there`);
    check(!fs.readFileSync(config, 'utf8').includes(backend), 'a choice changes only the running server');
    await page.click('#save-default');
    await page.waitForFunction(() => document.querySelector('#compute').textContent.includes('saved to'), null, { timeout: 10000 });
    check(fs.readFileSync(config, 'utf8').includes(backend), '"Save as default" writes it to the settings file');
    await setUse(page, backend, 'auto');
  }

  // Budgets apply to the running server now; only "Save as default" persists them.
  await page.fill('#budget-memory_budget', '64G');
  await page.press('#budget-memory_budget', 'Enter');
  await page.waitForFunction(() => document.querySelector('#compute').textContent.includes('applies now'), null, { timeout: 10000 });
  check(!fs.readFileSync(config, 'utf8').includes(String(64 * 2 ** 30)), 'the memory budget alone leaves the settings file alone');
  await page.click('#save-default');
  for (let i = 0; i < 50 && !fs.readFileSync(config, 'utf8').includes(String(64 * 2 ** 30)); ++i) await page.waitForTimeout(100);
  check(fs.readFileSync(config, 'utf8').includes(String(64 * 2 ** 30)), '"Save as default" persists the memory budget');
  await page.fill('#budget-memory_budget', '');
  await page.press('#budget-memory_budget', 'Enter');
  // Splitting one operation across backends is a running-server setting too.
  await page.click('#split-setting button[data-value="off"]');
  await page.waitForFunction(() => document.querySelector('#split-setting button[data-value="off"]').getAttribute('aria-checked') === 'true', null, { timeout: 10000 });
  const splitOff = await page.evaluate(() => fetch('/api/settings').then((r) => r.json()).then((s) => s.running['compute.split']));
  check(splitOff === 'off', `the split control sets compute.split on the running server (${splitOff})`);
  await page.click('#split-setting button[data-value="auto"]');
  await page.waitForFunction(() => document.querySelector('#split-setting button[data-value="auto"]').getAttribute('aria-checked') === 'true', null, { timeout: 10000 });
  await page.keyboard.press('Escape');

  // A foreign page cannot change the settings (Chromium's private-network checks are off here, so
  // its requests do reach the server, which refuses them).
  const unchanged = fs.readFileSync(config, 'utf8');
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
  check(attempt === 'sent' && fs.readFileSync(config, 'utf8') === unchanged, 'a cross-origin page\'s POSTs change nothing');
  check((await getJson(url, 'api/settings')).running['compute.memory_budget'] !== '1', 'nor the running server');
  await unguarded.close();

  // Everything excluded: each refused tile says why on the heatmap, with what to do.
  const blocked = await serve([demo, '--compute', 'never=cpu']);
  const page2 = await newPage({ allowed: refused });
  await page2.goto(`${blocked.url}?view=tensor&tensor=model.layers.1.self_attn.v_proj.weight`);
  await page2.waitForSelector('#tile-error', { timeout: 20000 });
  const why = await page2.textContent('#tile-error');
  check(why.includes('never') || why.includes('backend'), `a refused tile shows its reason (${why})`);
  check(!why.includes('UNIMPLEMENTED'), 'a refusal is not called UNIMPLEMENTED');
  // (Statistics come from the index an earlier server wrote; outliers must be computed.)
  await page2.waitForSelector('#outliers-panel .error-note');
  check((await page2.textContent('#outliers-panel .error-note')).includes('allow a backend'), 'the outliers panel shows its own failure and what to do');
  await shot(page2, 'tensor-4-refused');
  await page2.context().close();

  // A memory budget the exact render exceeds: the dialog offers the sampled rung; once chosen the
  // heatmap says it is approximate, and the drawer lists the consent.
  const budgeted = await serve([demo], { compute: { memory_budget_bytes: 285000 } });
  const page3 = await newPage({ allowed: refused });
  await page3.goto(`${budgeted.url}?view=tensor&tensor=model.embed_tokens.weight`);
  const answerDialog = async (op, choice) => {
    await page3.waitForFunction((op) => document.querySelector('#consent').open && document.querySelector('#consent-reason').textContent.includes(op), op, { timeout: 20000 });
    if (choice) await page3.click(`#consent-rungs button[data-rung="${choice}"]`); else await page3.click('#consent-cancel');
  };
  await page3.waitForSelector('#consent[open]', { timeout: 20000 });
  await shot(page3, 'tensor-5-consent-dialog');
  for (let asked = 0; asked < 2; ++asked) {
    const reason = await page3.textContent('#consent-reason');
    if (reason.includes('quantiles')) await answerDialog('quantiles', null);
    else await answerDialog('render', 'tm.render_tile_sampled@1');
    await page3.waitForTimeout(300);
    if (!(await page3.$('#consent[open]'))) break;
  }
  await page3.waitForSelector('#approx-badge', { timeout: 20000 });
  check((await page3.textContent('#approx-badge')).includes('Approximate'), 'after consent the heatmap says it is approximate');
  await heatmapLoaded(page3);
  await page3.click('#compute-pill');
  await page3.waitForSelector('#consents li', { timeout: 10000 });
  check((await page3.textContent('#consents')).includes('render_tile_sampled'), 'the drawer lists the consented operation');
  await shot(page3, 'tensor-6-approximate');
  await page3.context().close();

  // A time budget exact quantiles exceed: the ladder; the histogram rung answers, marked "~".
  const fresh = 'model.layers.1.mlp.gate_proj.weight', freshValues = safetensorsValues(demo, fresh);
  const slow = await serve([demo], { compute: { time_budget_seconds: 1e-9 } });
  const page4 = await newPage({ allowed: refused });
  await page4.goto(`${slow.url}?view=tensor&tensor=${fresh}`);
  await page4.waitForFunction(() => document.querySelector('#consent').open && document.querySelector('#consent-reason').textContent.includes('quantiles'), null, { timeout: 20000 });
  const rungs = await page4.$$eval('#consent-rungs button', (bs) => bs.map((b) => b.dataset.rung));
  check(rungs.includes('histogram') && rungs.includes('sample'), `the dialog offers the quantile ladder (${rungs})`);
  check((await page4.textContent('#quantiles-consent')).includes('consent'), 'the distribution panel says exact quantiles need consent');
  await page4.click('#consent-rungs button[data-rung="histogram"]');
  await page4.waitForFunction((name) => window.__tm.quantiles && window.__tm.quantiles.tensor === name, fresh, { timeout: 20000 });
  const approx = await page4.evaluate(() => window.__tm.quantiles);
  check(approx.rung === 'histogram' && approx.exactness === 'approximate', 'after consent the histogram rung answered');
  check(approx.quantiles.every((v) => v.interval && v.interval[0] <= referenceQuantile(freshValues, v.probability) && referenceQuantile(freshValues, v.probability) <= v.interval[1]),
    'each true quantile lies in the interval the histogram rung gives');
  const cells = await page4.$$eval('#quantiles td', (tds) => tds.map((td) => td.textContent));
  check(cells.length > 0 && cells.every((c) => c.startsWith('~')), 'the table marks every approximate value with ~');
  check((await page4.textContent('#quantiles-note')).includes('approximate'), 'the note says approximate and why');
  await shot(page4, 'tensor-7-quantiles-approximate');

  // The spectrum past the same budget: opening its section asks for consent with the spectrum's
  // ladder; the Gram rung answers, its metrics marked "~".
  await page4.click('#spectrum .section-toggle');
  await page4.waitForFunction(() => document.querySelector('#consent').open && document.querySelector('#consent-reason').textContent.includes('spectrum'), null, { timeout: 20000 });
  const spectrumRungs = await page4.$$eval('#consent-rungs button', (bs) => bs.map((b) => b.dataset.rung));
  check(['exact', 'gram', 'randomized'].every((r) => spectrumRungs.includes(r)), `the dialog offers the spectrum ladder (${spectrumRungs})`);
  check((await page4.textContent('#consent-rungs')).includes('Gram'), 'each rung says what it computes');
  check((await page4.textContent('#spectrum-consent')).includes('consent'), 'the spectrum section says the exact spectrum needs consent');
  await page4.click('#consent-rungs button[data-rung="gram"]');
  await page4.waitForFunction((name) => window.__tm.spectrum && window.__tm.spectrum.tensor === name, fresh, { timeout: 20000 });
  const gram = await page4.evaluate(() => window.__tm.spectrum);
  check(gram.rung === 'gram' && gram.exactness === 'bounded', `after consent the Gram rung answered (${gram.rung}, ${gram.exactness})`);
  await page4.waitForSelector('#spectrum-metrics td');
  const gramCells = await page4.$$eval('#spectrum-metrics td', (tds) => tds.map((td) => td.textContent));
  check(gramCells.length > 0 && gramCells.every((c) => c.startsWith('~')), 'the spectrum\'s metrics are marked ~');
  check((await page4.textContent('#spectrum-note')).includes('bounded (gram'), 'the note says how exact and which rung');
  await shot(page4, 'tensor-9-spectrum-consented');
  await page4.context().close();

  // The Spectrum section on the demo's q_proj of block 1 (four planted spikes): closed until asked,
  // then the singular values, the ESD with its fit and bulk edge, and the metrics; it stays open
  // for the next tensors, and a tensor holding NaN shows the engine's reason.
  const page5 = await newPage({ allowed: (text) => text.includes('status of 400') });
  const spiky = 'model.layers.1.self_attn.q_proj.weight';
  await page5.goto(`${url}?view=tensor&tensor=${spiky}`);
  await page5.waitForSelector('#spectrum .section-toggle', { timeout: 20000 });
  check(!(await page5.$('#spectrum-values')), 'the Spectrum section computes nothing until opened');
  await page5.click('#spectrum .section-toggle');
  await page5.waitForFunction((name) => window.__tm.spectrum && window.__tm.spectrum.tensor === name, spiky, { timeout: 30000 });
  await page5.waitForSelector('#spectrum-values canvas');
  await page5.waitForSelector('#spectrum-esd canvas');
  check(true, 'the singular values and the ESD are drawn');
  const spectrum = await page5.evaluate(() => window.__tm.spectrum);
  const metricText = async (p) => p.$$eval('#spectrum-metrics td', (tds) => Object.fromEntries(tds.map((td) => [td.dataset.metric, td.textContent])));
  const shown = await metricText(page5);
  check(shown['MP spikes'] === '4', `the metrics list 4 Marchenko-Pastur spikes (${shown['MP spikes']})`);
  check(/^\d[\d.]* \(KS [\d.]+, tail \d+\)$/.test(shown.alpha), `alpha is listed with its KS distance and tail size (${shown.alpha})`);
  check(shown['matrix'] === '384 × 384' && shown['σ₁'] !== '—' && shown['stable rank'] !== '—' && shown['effective rank'] !== '—', `σ₁, stable and effective rank are listed (${JSON.stringify(shown)})`);
  const spikyValues = safetensorsValues(demo, spiky);
  const frobenius = Math.sqrt(Array.from(spikyValues).reduce((s, v) => s + v * v, 0));
  check(Math.abs(spectrum.metrics.frobenius_norm - frobenius) <= 1e-9 * frobenius, `‖W‖_F from the singular values equals the file's (${spectrum.metrics.frobenius_norm} vs ${frobenius})`);
  const esd = spectrum.esd;
  check(esd.counts.reduce((a, b) => a + b, 0) === 384 && esd.fit.some((v) => v > 0) && esd.mp_bulk_edge > esd.edges[0] && esd.power_law.xmin > esd.edges[0],
    'the ESD holds every eigenvalue, with the power law from xmin and the bulk edge inside its range');
  await page5.$eval('#spectrum', (e) => e.scrollIntoView());
  await shot(page5, 'tensor-8-spectrum');
  await openTensor(page5, 'model.layers.0.self_attn.q_proj.weight');
  await page5.waitForFunction(() => window.__tm.spectrum && window.__tm.spectrum.tensor === 'model.layers.0.self_attn.q_proj.weight', null, { timeout: 30000 });
  await page5.waitForSelector('#spectrum-metrics');
  check((await metricText(page5))['MP spikes'] === '2', 'the section stays open for the next tensor: another q_proj has 2 spikes');
  await openTensor(page5, 'model.layers.2.mlp.down_proj.weight');
  await page5.waitForSelector('#spectrum-error', { timeout: 30000 });
  const nanWhy = await page5.textContent('#spectrum-error');
  check(nanWhy.includes('row 7, column 11 is NaN') && nanWhy.includes('model.layers.2.mlp.down_proj.weight'), `a tensor holding NaN shows the engine's reason (${nanWhy})`);
  await page5.context().close();
  await finish();
} catch (e) {
  await finish(e);
}
