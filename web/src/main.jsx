// The Tensormorph viewer. All numbers come from the server's JSON API (docs/VIEWER.md).
import { render } from 'preact';
import 'uplot/dist/uPlot.min.css';
import './app.css';

import { App } from './components/App.jsx';

window.__tm = window.__tm || {};
render(<App />, document.getElementById('app'));
