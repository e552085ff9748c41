// End-to-end Compare mode: `tensormorph serve A B` on stories260K (F32) and its Q4_K_M quantization
// (same tensor names) in headless Debian Chromium: the most-changed table, the A | B | A−B heatmaps
// kept in step, the quantization figures and the block view's values against both files, the
// overview coloured by the difference, and the table's CSV export.
// Usage: node tests/browser/compare.test.mjs TENSORMORPH_BINARY ARTIFACT_DIR
import fs from 'node:fs';
import path from 'node:path';

import { check, finish, getJson, ggufF32, indexed, newPage, serve, shared, shot, work } from './harness.mjs';

const files = [path.join(shared, 'real/stories260K.gguf'), path.join(shared, 'gguf-ref/stories260K-Q4_K_M.gguf')].map((f) => {
  const to = path.join(work, path.basename(f));
  fs.copyFileSync(f, to);
  return to;
});
const loaded = (page) => page.waitForFunction(() => {
  const v = window.__tm.compareViewers;
  return v && ['a', 'b', 'd'].every((k) => v[k] && v[k].world.getItemCount() > 0 && v[k].world.getItemAt(0).getFullyLoaded());
}, null, { timeout: 30000 });

try {
  const { url } = await serve(files);
  await indexed(url);
  const page = await newPage({ width: 1600, height: 1000, downloads: true });
  await page.goto(`${url}?ckpt=0&view=compare&b=1`);
  await page.waitForSelector('#diff-table tbody tr.clickable');

  // The table: every tensor, most changed first by ‖a−b‖/‖a‖, the unquantized norms identical.
  const diff = await page.evaluate(() => window.__tm.diff);
  const rows = await page.$$eval('#diff-table tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  check(rows.length === 48, `the table lists the 48 matched tensors (${rows.length})`);
  const relFro = diff.tensors.map((t) => t.rel_fro);
  check(relFro.every((v, i) => i === 0 || !(v > relFro[i - 1])), 'most changed first by rel_fro');
  check(rows.filter((r) => r.at(-1).includes('identical')).length === 11, 'the 11 F32 norms are marked identical');
  check((await page.textContent('#cmp-summary')).includes('48 matched'), 'the summary says 48 matched');
  await page.selectOption('#diff-sort', 'cosine');
  await page.waitForFunction(() => window.__tm.diff && window.__tm.diff.sort === 'cosine');
  check(true, 'the table re-sorts by another metric');
  const csvDownload = page.waitForEvent('download');
  await page.click('#compare [data-export="csv"]');
  const csv = fs.readFileSync(await (await csvDownload).path(), 'utf8').trim().split(/\r\n/);
  const api = await getJson(url, 'api/diff?a=0&b=1&sort=cosine');
  check(csv.length === api.tensors.length + 1 && csv[1].startsWith(`${api.tensors[0].a},`), 'the table\'s CSV equals the API\'s comparison');

  // One tensor: three heatmaps in step.
  const tensor = 'blk.0.attn_q.weight';
  await page.click(`#diff-table tbody tr:has(span[title="${tensor}"])`);
  await page.waitForFunction((t) => window.__tm.compareRow && window.__tm.compareRow.a === t, tensor);
  await loaded(page);
  check(page.url().includes(`tensor=${tensor}`), 'the compared tensor is part of the URL');
  await shot(page, 'compare-1-triple');
  const home = await page.evaluate(() => window.__tm.compareViewers.a.viewport.getZoom(true));
  await page.evaluate(() => {
    const vp = window.__tm.compareViewers.a.viewport;
    vp.zoomBy(3, undefined, true);
    const c = vp.getCenter(true);
    c.x += 0.04; c.y += 0.03;
    vp.panTo(c, true);
    vp.applyConstraints(true);
  });
  await page.waitForTimeout(600);
  const views = await page.evaluate(() => {
    const v = window.__tm.compareViewers;
    return Object.fromEntries(['a', 'b', 'd'].map((k) => { const c = v[k].viewport.getCenter(true); return [k, { zoom: v[k].viewport.getZoom(true), x: c.x, y: c.y }]; }));
  });
  const close = (p, r) => Math.abs(p.zoom - r.zoom) < 1e-6 * r.zoom && Math.abs(p.x - r.x) < 1e-6 && Math.abs(p.y - r.y) < 1e-6;
  check(views.a.zoom > 2 * home, `A zoomed in (zoom ${views.a.zoom}, home ${home})`);
  check(close(views.b, views.a) && close(views.d, views.a), 'B and A−B follow A\'s zoom and pan');
  await loaded(page);

  // The quantization view: Q5_0 measured against the F32 original.
  await page.waitForFunction(() => window.__tm.quant && window.__tm.quant.quantized, null, { timeout: 20000 });
  const quant = await page.evaluate(() => window.__tm.quant);
  check(quant.quantized === 'Q5_0' && quant.reference === 'F32', `quantization figures for Q5_0 against F32 (${quant.quantized}, ${quant.reference})`);
  check((await page.textContent('#quant-figures')).includes('p99'), 'the figures show RMSE, max, p95 and p99');
  check(await page.$('#quant-histogram canvas') !== null, 'the error histogram is drawn');

  // Click a cell of the A−B heatmap: its block, with decoded and reference values and the errors.
  const target = await page.evaluate(() => {
    const v = window.__tm.compareViewers.d, vp = v.viewport, ppe = window.__tm.compareRow.zoom.pixels_per_element;
    const c = vp.viewportToImageCoordinates(vp.getCenter(true));
    const row = Math.floor(c.y / ppe), col = Math.floor(c.x / ppe);
    c.x = col * ppe + ppe / 2; c.y = row * ppe + ppe / 2;
    const p = vp.imageToViewerElementCoordinates(c), r = v.canvas.getBoundingClientRect();
    return { row, col, x: r.left + p.x, y: r.top + p.y };
  });
  await page.mouse.click(target.x, target.y);
  await page.waitForFunction(() => window.__tm.block, null, { timeout: 10000 });
  const block = await page.evaluate(() => window.__tm.block);
  check(block.row === target.row && block.cols[0] <= target.col && target.col < block.cols[1], `the block holds the clicked cell (${target.row}, ${target.col})`);
  const f32 = ggufF32(files[0], tensor);
  const want = Array.from({ length: 32 }, (_, i) => f32.values[block.row * f32.cols + block.cols[0] + i]);
  check(block.reference.every((v, i) => v === want[i]), 'the block\'s reference values are the F32 file\'s');
  check(block.error.every((e, i) => Math.fround(block.decoded[i] - block.reference[i]) === e), 'each error is decoded − reference');
  check(block.fields.d !== undefined && block.quants.every((qv, i) => Math.fround(Math.fround(qv) * block.fields.d) === block.decoded[i]), 'each decoded value is its quant times d');
  check(await page.$$eval('#block-values tbody tr', (trs) => trs.length) === 32, 'the block view lists 32 elements');
  await shot(page, 'compare-2-block');

  // The overview coloured by the difference against B.
  await page.goto(`${url}?ckpt=0&view=overview&ostat=diff&b=1`);
  await page.waitForSelector('.overview-grid');
  await page.waitForFunction(() => !document.querySelector('.overview').textContent.includes('comparing every matched'), null, { timeout: 20000 });
  const geometry = JSON.parse(await page.getAttribute('.overview-grid', 'data-geometry'));
  const box = await (await page.$('.overview-grid')).boundingBox();
  const i = geometry.roles.indexOf('attn_q.weight');
  await page.mouse.move(box.x + geometry.labelWidth + (i + 0.5) * geometry.geometry.cellW, box.y + geometry.headerHeight + 0.5 * geometry.geometry.cellH);
  await page.waitForSelector('#overview-tooltip');
  const shown = Number(await page.textContent('#overview-tooltip [data-value]'));
  const relQ = api.tensors.find((t) => t.a === 'blk.0.attn_q.weight').rel_fro;
  check(Number(shown.toPrecision(6)) === Number(relQ.toPrecision(6)), `the overview cell shows the pair's ‖a−b‖/‖a‖ (${shown} vs ${relQ})`);
  await shot(page, 'compare-3-overview-difference');
  await finish();
} catch (e) {
  await finish(e);
}
