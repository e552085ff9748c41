// End-to-end, the model as a whole and the page as a product: the overview grid against the
// file's statistics, the tree (natural block order, search, PyTorch Sequential blocks, badges),
// folded thin tensors, the metadata view, deep links (reload and back/forward restore the view),
// exports (PNG of the right size, CSV equal to the API's data), keyboard navigation, themes, a
// laptop-sized window, no layout shift while tiles stream, and the spectra computed on request.
// Usage: node tests/browser/overview.test.mjs TENSORMORPH_BINARY ARTIFACT_DIR
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { binary, check, finish, getJson, heatmapLoaded, indexed, newPage, safetensorsValues, serve, shared, shot, work, zoomOnto } from './harness.mjs';

const demo = path.join(work, 'demo');
execFileSync(binary, ['demo', demo], { stdio: 'ignore' });
const copy = (name) => { const to = path.join(work, name); fs.copyFileSync(path.join(shared, 'real', name), to); return to; };
const files = [demo, path.join(demo, 'demo-mixed-quant.gguf'), copy('stories260K.gguf'), copy('peft-gpt2_adapter_model.safetensors'), copy('taef2_decoder.pth')];

/** Mean and standard deviation (population) of the finite values, in float64. */
function moments(values) {
  let n = 0, s = 0;
  for (const v of values) if (Number.isFinite(v)) { n++; s += v; }
  const mean = s / n;
  let q = 0;
  for (const v of values) if (Number.isFinite(v)) q += (v - mean) ** 2;
  return { mean, std: Math.sqrt(q / n) };
}
const sig6 = (v) => Number(Number(v).toPrecision(6));
/** Width and height from a PNG's IHDR. */
const pngSize = (buffer) => ({ width: buffer.readUInt32BE(16), height: buffer.readUInt32BE(20) });

try {
  const { url } = await serve(files);
  const checkpoints = await indexed(url);
  const page = await newPage({ downloads: true });
  await page.goto(url);
  await page.waitForSelector('.overview-grid');
  await shot(page, 'overview-1-grid');

  // The grid: blocks x roles of the demo's one stack; a hovered cell shows the file's std.
  const geometry = JSON.parse(await page.getAttribute('.overview-grid', 'data-geometry'));
  check(geometry.blocks.join() === '0,1,2,3', `the grid's rows are the blocks in order (${geometry.blocks})`);
  check(geometry.roles.length === 9, `the grid has a column per role (${geometry.roles.length})`);
  const hoverCell = async (block, role) => {
    const canvas = await page.$('.overview-grid'), box = await canvas.boundingBox();
    const i = geometry.roles.indexOf(role), j = geometry.blocks.indexOf(block);
    const x = box.x + geometry.labelWidth + (i + 0.5) * geometry.geometry.cellW, y = box.y + geometry.headerHeight + (j + 0.5) * geometry.geometry.cellH;
    await page.mouse.move(x, y);
    await page.waitForSelector('#overview-tooltip');
    return { x, y, name: await page.textContent('#overview-tooltip .tname'), value: await page.textContent('#overview-tooltip [data-value]') };
  };
  for (const [block, role] of [[1, 'self_attn.q_proj.weight'], [3, 'mlp.up_proj.weight'], [2, 'input_layernorm.weight']]) {
    const cell = await hoverCell(block, role);
    const name = `model.layers.${block}.${role}`;
    const want = moments(safetensorsValues(demo, name)).std;
    check(cell.name === name && sig6(cell.value) === sig6(want), `cell (block ${block}, ${role}) is ${name} with std ${cell.value} (file: ${want})`);
  }
  await page.selectOption('#overview-stat', 'nonfinite');
  const nanCell = await hoverCell(2, 'mlp.down_proj.weight');
  const pixel = await page.evaluate(({ x, y }) => {
    const c = document.querySelector('.overview-grid'), r = c.getBoundingClientRect(), ratio = c.width / r.width;
    return [...c.getContext('2d').getImageData(Math.round((x - r.left) * ratio), Math.round((y - r.top) * ratio), 1, 1).data];
  }, nanCell);
  check(pixel[0] === 255 && pixel[1] === 0 && pixel[2] === 255, `the cell of the tensor holding NaN is magenta under "NaN/Inf present" (${pixel})`);
  await page.waitForFunction(() => location.search.includes('ostat=nonfinite'));
  check(true, 'the overview statistic is part of the URL');
  await page.selectOption('#overview-stat', 'dtype');
  await page.waitForSelector('.legend');
  check((await page.textContent('.legend')).includes('BF16'), 'storage types are coloured with a legend');
  await page.selectOption('#overview-stat', 'std');
  await page.waitForSelector('.role-lines canvas');
  check(true, 'a line chart follows each role across blocks');

  // Export: the overview's CSV equals /api/tensors.
  const csvDownload = page.waitForEvent('download');
  await page.click('.overview .toolbar [data-export="csv"]');
  const csv = fs.readFileSync(await (await csvDownload).path(), 'utf8').trim().split(/\r\n/);
  const api = await getJson(url, 'api/tensors?ckpt=0');
  check(csv.length === api.tensors.length + 1, `the overview CSV has a row per tensor (${csv.length - 1})`);
  const line = csv.find((l) => l.startsWith('model.layers.0.mlp.gate_proj.weight,'));
  const tensorStd = api.tensors.find((t) => t.name === 'model.layers.0.mlp.gate_proj.weight').stats.std;
  check(line && Number(line.split(',').at(-1)) === tensorStd, `its values are the API's (${line})`);

  // Keyboard: / searches, Enter opens, j / k step through the tree, o returns to the overview, ? helps.
  await page.keyboard.press('/');
  check(await page.evaluate(() => document.activeElement.id) === 'search', '"/" focuses the search');
  await page.keyboard.type('LAYERS 0 Q_PROJ');
  await page.waitForSelector('.tree-note');
  check((await page.textContent('.tree-note')).startsWith('1 match'), `search is case-insensitive by words (${await page.textContent('.tree-note')})`);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => window.__tm.tensorInfo && window.__tm.tensorInfo.name === 'model.layers.0.self_attn.q_proj.weight');
  await page.fill('#search', '');
  await page.keyboard.press('Escape');
  check(await page.evaluate(() => document.activeElement.id) !== 'search', 'Escape leaves the search');
  await page.keyboard.press('j');
  await page.waitForFunction(() => new URLSearchParams(location.search).get('tensor') === 'model.layers.0.self_attn.k_proj.weight');
  check(true, '"j" opens the next tensor of its block');
  await page.keyboard.press('k');
  await page.waitForFunction(() => new URLSearchParams(location.search).get('tensor') === 'model.layers.0.self_attn.q_proj.weight');
  check(true, '"k" goes back');
  await page.keyboard.press('?');
  check(await page.isVisible('.shortcuts'), '"?" lists the shortcuts');
  await page.keyboard.press('Escape');

  // The tree: blocks in numeric order, collapsible; a block with NaN/Inf carries the badge.
  const blocks = await page.$$eval('.block-head', (bs) => bs.map((b) => Number(b.dataset.block)));
  check(blocks.join() === [...blocks].sort((a, b) => a - b).join(), `blocks in numeric order (${blocks})`);
  check((await page.textContent('.block-head[data-block="2"]')).includes('NaN/Inf'), 'block 2 carries the NaN/Inf badge');
  const normBadges = await page.$$eval('.tensor[data-name*="layernorm"] .badge.outlier', (b) => b.length);
  check(normBadges === 0, 'norm weights centred at 1 carry no outlier badge');

  // A deep link: tensor, pixel statistic, scale, palette, range, zoom and centre survive a reload.
  const tensor = 'model.layers.3.mlp.up_proj.weight';
  await page.goto(`${url}?ckpt=0&view=tensor&tensor=${tensor}`);
  await heatmapLoaded(page);
  await page.selectOption('#stat', 'std');
  await page.click('#scale button[data-value="diverging"]');
  const palettes = await page.$$eval('#palette option', (o) => o.map((x) => x.value).filter(Boolean));
  check(palettes.length >= 2, `diverging palettes to choose from (${palettes})`);
  await page.selectOption('#palette', palettes[palettes.length - 1]);
  await page.fill('#lo', '-0.03'); await page.fill('#hi', '0.05'); await page.press('#hi', 'Enter');
  await zoomOnto(page, 300, 100);
  await heatmapLoaded(page);
  await page.waitForTimeout(600);
  const link = page.url();
  const view = await page.evaluate(() => { const v = window.__tm.viewer.viewport, c = v.getCenter(true); return { zoom: v.getZoom(true), x: c.x, y: c.y }; });
  const second = await newPage();
  await second.goto(link);
  await heatmapLoaded(second);
  await second.waitForTimeout(600);
  const restored = await second.evaluate(() => { const v = window.__tm.viewer.viewport, c = v.getCenter(true); return { zoom: v.getZoom(true), x: c.x, y: c.y }; });
  const near = (a, b) => Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b));
  check(near(restored.zoom, view.zoom) && near(restored.x, view.x) && near(restored.y, view.y), `the link restores zoom and centre (${JSON.stringify(restored)} vs ${JSON.stringify(view)})`);
  const controls = await second.evaluate(() => ({ stat: document.getElementById('stat').value, scale: document.querySelector('#scale .on').dataset.value,
    palette: document.getElementById('palette').value, lo: document.getElementById('lo').value, hi: document.getElementById('hi').value }));
  check(controls.stat === 'std' && controls.scale === 'diverging' && controls.palette === palettes[palettes.length - 1] && controls.lo === '-0.03' && controls.hi === '0.05',
    `the link restores statistic, scale, palette and range (${JSON.stringify(controls)})`);
  await shot(second, 'overview-2-deep-link');
  await second.context().close();

  // Back and forward move between tensors and views.
  await page.click('.tensor[data-name="model.layers.3.mlp.down_proj.weight"]');
  await page.waitForFunction(() => window.__tm.tensorInfo && window.__tm.tensorInfo.name === 'model.layers.3.mlp.down_proj.weight');
  await page.goBack();
  await page.waitForFunction((t) => window.__tm.tensorInfo && window.__tm.tensorInfo.name === t, tensor);
  check(await page.inputValue('#stat') === 'std', 'back returns to the previous tensor with its settings');
  await page.goForward();
  await page.waitForFunction(() => window.__tm.tensorInfo && window.__tm.tensorInfo.name === 'model.layers.3.mlp.down_proj.weight');
  check(true, 'forward returns to the next');

  // Exports of the tensor view: the PNG is the heatmap canvas plus its colour bar band; the
  // statistics CSV equals /api/stats.
  await heatmapLoaded(page);
  const pngDownload = page.waitForEvent('download');
  await page.click('#export-png');
  const png = fs.readFileSync(await (await pngDownload).path());
  const canvas = await page.evaluate(() => window.__tm.exportedPng.canvas);
  const size = pngSize(png);
  check(size.width === canvas[0] && size.height === canvas[1] + 44, `the PNG is the view (${canvas}) plus a 44-pixel colour bar band (${size.width} x ${size.height})`);
  await page.waitForSelector('#stats');
  const statsDownload = page.waitForEvent('download');
  await page.click('#statistics [data-export="csv"]');
  const statsCsv = Object.fromEntries(fs.readFileSync(await (await statsDownload).path(), 'utf8').trim().split(/\r\n/).slice(1).map((l) => l.split(',')));
  const stats = await getJson(url, 'api/stats?ckpt=0&tensor=model.layers.3.mlp.down_proj.weight');
  check(['count', 'nan', 'pos_inf', 'min', 'max', 'mean', 'std'].every((k) => Number(statsCsv[k]) === stats[k]), `the statistics CSV equals the API's (${JSON.stringify(statsCsv)})`);

  // No layout shift while the tiles of a new tensor stream in.
  await page.evaluate(() => { window.__shift = 0; new PerformanceObserver((l) => { for (const e of l.getEntries()) if (!e.hadRecentInput) window.__shift += e.value; }).observe({ type: 'layout-shift', buffered: false }); });
  await page.fill('#search', 'layers 1 gate');
  await page.click('.tensor[data-name="model.layers.1.mlp.gate_proj.weight"]');
  await heatmapLoaded(page);
  await page.waitForTimeout(500);
  const shift = await page.evaluate(() => window.__shift);
  check(shift < 0.02, `no layout shift while tiles stream (cumulative ${shift})`);

  // Thin and N-D tensors are folded so that their values show: LoRA A/B and a conv kernel.
  const lora = checkpoints.find((c) => c.name.includes('peft-gpt2'));
  const loraModel = await getJson(url, `api/tensors?ckpt=${lora.id}`);
  const thin = loraModel.tensors.find((t) => t.shape.length === 2 && Math.max(...t.shape) / Math.min(...t.shape) > 8);
  await page.goto(`${url}?ckpt=${lora.id}&view=tensor&tensor=${encodeURIComponent(thin.name)}`);
  await heatmapLoaded(page);
  const thinInfo = await page.evaluate(() => window.__tm.tensorInfo);
  check(thinInfo.view.folded && Math.max(thinInfo.view.rows, thinInfo.view.cols) / Math.min(thinInfo.view.rows, thinInfo.view.cols) <= 8,
    `a thin ${JSON.stringify(thin.shape)} LoRA tensor is shown as ${thinInfo.view.rows} x ${thinInfo.view.cols}: ${thinInfo.view.rule}`);
  await shot(page, 'overview-3-lora-folded');
  const taef = checkpoints.find((c) => c.name.includes('taef2'));
  const taefModel = await getJson(url, `api/tensors?ckpt=${taef.id}`);
  const conv = taefModel.tensors.find((t) => t.shape.length === 4 && t.shape[2] === 3);
  check(taefModel.tensors.some((t) => t.block !== null), 'a PyTorch Sequential model gets numbered blocks');
  await page.goto(`${url}?ckpt=${taef.id}&view=tensor&tensor=${encodeURIComponent(conv.name)}`);
  await heatmapLoaded(page);
  const convInfo = await page.evaluate(() => window.__tm.tensorInfo);
  check(convInfo.view.cols === conv.shape[1] * conv.shape[2] * conv.shape[3] || convInfo.view.rows * convInfo.view.cols === conv.elements,
    `a conv kernel ${JSON.stringify(conv.shape)} is shown as ${convInfo.view.rows} x ${convInfo.view.cols} (${convInfo.view.rule})`);
  await page.goto(`${url}?ckpt=${taef.id}&view=overview`);
  await page.waitForSelector('.overview-grid');
  await shot(page, 'overview-4-sequential');

  // Metadata: the GGUF's facts and key/values; a vocabulary collapsed, searchable.
  const stories = checkpoints.find((c) => c.name.includes('stories260K'));
  await page.goto(`${url}?ckpt=${stories.id}&view=metadata`);
  await page.waitForSelector('#metadata-facts');
  const facts = await page.textContent('#metadata-facts');
  check(/version/i.test(facts) && /alignment/i.test(facts), `the facts name the GGUF version and alignment (${facts.slice(0, 120)})`);
  const tokens = await page.$('#metadata-entries tr[data-key="tokenizer.ggml.tokens"]');
  check(!!tokens && (await tokens.textContent()).includes('show all'), 'the vocabulary is collapsed');
  await tokens.$eval('button', (b) => b.click());
  await page.fill('#metadata-entries tr[data-key="tokenizer.ggml.tokens"] input[type="search"]', 'the');
  await page.waitForFunction(() => {
    const cells = [...document.querySelectorAll('#metadata-entries tr[data-key="tokenizer.ggml.tokens"] .array-items td:last-child')];
    return cells.length > 0 && cells.length < 100;
  });
  const found = await page.$$eval('#metadata-entries tr[data-key="tokenizer.ggml.tokens"] .array-items td:last-child', (tds) => tds.map((td) => td.textContent));
  check(found.length > 0 && found.every((t) => t.toLowerCase().includes('the')), `searching the vocabulary finds matching tokens (${found.slice(0, 4)})`);
  await page.fill('#metadata-filter', 'context_length');
  await page.waitForFunction(() => document.querySelectorAll('#metadata-entries tbody tr').length === 1);
  check(true, 'the key filter narrows the key/values');
  await shot(page, 'overview-5-metadata');

  // Dark theme, and a laptop-sized window without horizontal scrolling.
  await page.goto(`${url}?ckpt=0&view=overview`);
  await page.waitForSelector('.overview-grid');
  await page.click('#theme');
  check(await page.evaluate(() => document.documentElement.dataset.theme) === 'dark', 'the theme switches to dark');
  await shot(page, 'overview-6-dark');
  await page.click('#theme');
  await page.setViewportSize({ width: 1280, height: 720 });
  await page.goto(`${url}?ckpt=0&view=tensor&tensor=model.embed_tokens.weight`);
  await heatmapLoaded(page);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  check(overflow <= 0, `a 1280 x 720 window needs no horizontal scrolling (${overflow} px)`);
  await shot(page, 'overview-7-laptop');

  // Spectra: nothing known at first; "Compute spectra" walks every matrix, the alpha and stable
  // rank charts follow each role across blocks with the API's values, and the one tensor holding
  // NaN is listed as having no spectrum.
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.goto(`${url}?ckpt=0&view=overview`);
  await page.waitForSelector('#spectra-compute');
  check((await page.textContent('#spectra')).includes('no spectra computed yet'), 'the overview starts with no spectra');
  check(!(await page.$('.spectra-chart canvas')), 'and draws no spectra chart before the button');
  await page.click('#spectra-compute');
  await page.waitForSelector('#spectra-progress');
  await page.waitForFunction(() => /^done: 29 \/ 29/.test(document.querySelector('#spectra-progress')?.textContent || ''), null, { timeout: 120000 });
  check(true, 'the progress line counts every matrix (29)');
  await page.waitForFunction(() => document.querySelectorAll('.spectra-chart canvas').length >= 2);
  const charts = await page.$$eval('.spectra-chart', (cs) => cs.map((c) => `${c.dataset.stack}/${c.dataset.metric}`));
  check(charts.includes('model.layers/alpha') && charts.includes('model.layers/stable_rank'), `alpha and stable rank are charted by block (${charts})`);
  const drawn = await page.evaluate(() => window.__tm.spectraCharts['model.layers/alpha']);
  const known = await getJson(url, 'api/spectra?ckpt=0');
  const alphaOf = (name) => known.tensors.find((t) => t.name === name).metrics.power_law.alpha;
  const qLine = drawn.series.find((s) => s.role === 'self_attn.q_proj.weight');
  check(!!qLine && [0, 1, 2, 3].every((b) => qLine.values[b] === alphaOf(`model.layers.${b}.self_attn.q_proj.weight`)),
    `the q line's alphas are the API's (${qLine && qLine.values.map((v) => v.toFixed(2))})`);
  check(drawn.series.every((s) => !s.role.includes('layernorm')), 'norm vectors have no line');
  const downLine = drawn.series.find((s) => s.role === 'mlp.down_proj.weight');
  check(downLine.values[2] === null, 'the block whose down_proj holds NaN has a gap');
  check((await page.textContent('#spectra-errors')).includes('model.layers.2.mlp.down_proj.weight'), 'that tensor is listed as having no spectrum');
  check(known.tensors.find((t) => t.name === 'model.layers.1.self_attn.q_proj.weight').metrics.mp_spikes === 4, 'the spectra kept hold the planted spikes');
  await shot(page, 'overview-8-spectra');
  await page.reload();
  await page.waitForFunction(() => document.querySelectorAll('.spectra-chart canvas').length >= 2, null, { timeout: 20000 });
  check((await page.textContent('#spectra')).includes('28 matrices known'), 'after a reload the kept spectra are charted at once');
  await finish();
} catch (e) {
  await finish(e);
}
