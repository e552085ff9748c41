// The viewer's frame: top bar, model tree, the main view, the inspector, the Compute drawer and
// the consent dialog; loads checkpoints and models, follows the URL, and owns the shortcuts.
import { useEffect, useState } from 'preact/hooks';
import { effect } from '@preact/signals';

import { api } from '../lib/api.js';
import { colorTable } from '../lib/colors.js';
import { afterFirstHeatmap } from '../lib/heatmap.js';
import { prepareModel, unusualTensors, buildTree, treeOrder } from '../lib/model.js';
import * as S from '../lib/state.js';
import { TopBar } from './TopBar.jsx';
import { Tree } from './Tree.jsx';
import { Overview, ModelSummary } from './Overview.jsx';
import { TensorView } from './TensorView.jsx';
import { Inspector } from './Inspector.jsx';
import { MetadataView } from './Metadata.jsx';
import { CompareView } from './Compare.jsx';
import { ComputeDrawer, startComputePolling } from './ComputeDrawer.jsx';
import { ConsentDialog } from './ConsentDialog.jsx';
import { Shortcuts } from './Shortcuts.jsx';
import { ErrorNote, Empty } from './ui.jsx';

// Checkpoints are polled while any index builds (progress, then statistics once it is ready).
async function refreshCheckpoints() {
  const { checkpoints } = await api('/api/checkpoints');
  S.checkpoints.value = checkpoints;
  return checkpoints;
}

let modelRequest = 0;
async function loadModel(id) {
  const mine = ++modelRequest;
  // The overview's colour table comes with the listing, so that its first drawing is in colour.
  const [answer] = await Promise.all([api('/api/tensors', { ckpt: id, form: 'columns' }), colorTable('sequential', null).catch(() => null)]);
  if (mine !== modelRequest) return;
  S.model.value = prepareModel(answer);
  window.__tm = { ...(window.__tm || {}), model: S.model.value };
}

/** The tensors in the order the tree shows them (for next / previous). */
export function tensorSequence() {
  const m = S.model.value;
  return m ? treeOrder(buildTree(m)) : [];
}

/** Opens the next (+1) or previous (-1) tensor of the tree. */
export function stepTensor(delta) {
  const seq = tensorSequence();
  if (!seq.length) return;
  const at = seq.findIndex((t) => t.name === S.tensorName.value);
  const next = seq[Math.max(0, Math.min(seq.length - 1, at < 0 ? 0 : at + delta))];
  S.go({ tensor: next.name, view: S.view.value === 'overview' || S.view.value === 'metadata' ? 'tensor' : S.view.value });
}

export function App() {
  const [loadError, setLoadError] = useState(null);

  useEffect(() => {
    S.applyUrl(S.parseUrl(location.search));
    history.replaceState(null, '', S.currentUrl());
    const onPop = () => S.applyUrl(S.parseUrl(location.search));
    window.addEventListener('popstate', onPop);

    let timer = 0, wasBuilding = new Set();
    const poll = async () => {
      try {
        const list = await refreshCheckpoints();
        setLoadError(null);
        const building = new Set(list.filter((c) => c.index === 'building').map((c) => c.id));
        // An index that just finished brings the statistics: reload the shown model.
        if (wasBuilding.has(S.ckpt.value) && !building.has(S.ckpt.value)) loadModel(S.ckpt.value).catch(setLoadError);
        wasBuilding = building;
        timer = setTimeout(poll, building.size ? 700 : 5000);
      } catch (e) {
        setLoadError(e);
        timer = setTimeout(poll, 3000);
      }
    };
    poll();
    const stopCompute = startComputePolling();
    return () => { window.removeEventListener('popstate', onPop); clearTimeout(timer); stopCompute(); };
  }, []);

  // The model follows the checkpoint. A page opened on a tensor draws it first: the listing
  // (megabytes for a large model) waits until its tiles are in, or a second and a half.
  useEffect(() => {
    let first = S.view.value === 'tensor' && !!S.tensorName.value;
    return effect(() => {
      const id = S.ckpt.value;
      S.model.value = null;
      const load = () => loadModel(id).catch(setLoadError);
      if (!first) { load(); return undefined; }
      first = false;
      afterFirstHeatmap(load);
      return undefined;
    });
  }, []);

  // The theme is an attribute of the document (CSS variables follow it).
  useEffect(() => effect(() => { document.documentElement.dataset.theme = S.theme.value; }), []);

  // The tensor view never opens empty: the most unusual tensor, else the first.
  useEffect(() => effect(() => {
    const m = S.model.value;
    if (!m || S.view.value !== 'tensor' || S.tensorName.value) return;
    const pick = unusualTensors(m, 1)[0];
    const first = pick ? pick.t : tensorSequence()[0];
    if (first) { S.tensorName.value = first.name; history.replaceState(null, '', S.currentUrl()); }
  }), []);

  const view = S.view.value;
  const m = S.model.value;
  const nothingServed = S.checkpoints.value.length === 0 && !loadError;
  return (
    <div class="app">
      <TopBar />
      <div class={`body view-${view}`}>
        <aside class="tree-pane" aria-label="model tree"><Tree /></aside>
        <main class="main-pane" id="main">
          <ErrorNote error={loadError} what="Loading the checkpoint" />
          {nothingServed ? <Empty title="Loading…" />
            : view === 'tensor' ? <TensorView />
            : !m ? <Empty title="Reading the checkpoint's header…" />
            : view === 'overview' ? <Overview />
            : view === 'metadata' ? <MetadataView />
            : <CompareView />}
        </main>
        {view === 'tensor' && <aside class="inspector-pane" aria-label="inspector"><Inspector /></aside>}
        {view === 'overview' && m && <aside class="inspector-pane" aria-label="model summary"><ModelSummary /></aside>}
      </div>
      <ComputeDrawer />
      <ConsentDialog />
      <Shortcuts />
    </div>
  );
}
