// OpenSeadragon set up for tensor heatmaps: tiles fetched with fetch() so that a refused tile's
// JSON answer (its reason, its hint, the consent ladder) reaches the view that asked for it.
import OpenSeadragon from 'openseadragon';

import { fetchBlob } from './api.js';

// A page opened on a tensor draws its heatmap first; what can wait (the model's listing, the
// inspector's analyses) asks the server and the page's thread after it.
/** True once the page has drawn a heatmap. */
export const heatmapPainted = () => performance.getEntriesByName('tm-heatmap-painted').length > 0;

/** Runs `then` once the page's first heatmap is drawn (at once if it is), or after 1.5 s. */
export function afterFirstHeatmap(then) {
  if (heatmapPainted()) { then(); return () => {}; }
  let done = false;
  const observer = new PerformanceObserver((list) => { if (list.getEntries().some((e) => e.name === 'tm-heatmap-painted')) once(); });
  const timer = setTimeout(() => once(), 1500);
  function once() {
    if (done) return;
    done = true;
    observer.disconnect();
    clearTimeout(timer);
    then();
  }
  observer.observe({ type: 'mark', buffered: true });
  return () => { done = true; observer.disconnect(); clearTimeout(timer); };
}

/** A deep-zoom viewer on `element`. `navigator` adds the minimap. */
export function createViewer(element, { navigator = false } = {}) {
  return OpenSeadragon({
    element,
    drawer: 'canvas',            // a 2-D canvas: exportable as PNG, crisp cells with smoothing off
    imageSmoothingEnabled: false,
    showNavigationControl: false,
    showNavigator: navigator,
    navigatorPosition: 'BOTTOM_RIGHT',
    navigatorSizeRatio: 0.12,
    navigatorAutoFade: true,
    maxZoomPixelRatio: 2,
    visibilityRatio: 0.2,
    minZoomImageRatio: 0.5,
    animationTime: 0.3,
    // Tiles are local and fast: fetch the level a view needs only (not every coarser one first),
    // and a screenful of them at once (the library's default is one new tile per frame).
    immediateRender: true,
    maxTilesPerFrame: 8,
    preserveImageSizeOnResize: true,
    gestureSettingsMouse: { clickToZoom: false, dblClickToZoom: true },
    keyboardNavEnabled: false,   // the page's own shortcuts handle the keyboard
  });
}

/** A tile source over the server's zoom geometry. `urlOf(level, x, y)` names a tile;
 *  `onError(error, url)` hears every tile the server refused (an ApiError). */
export function tileSource(zoom, urlOf, onError) {
  return {
    width: zoom.width,
    height: zoom.height,
    tileSize: zoom.tile_size,
    tileOverlap: 0,
    minLevel: zoom.min_level,
    maxLevel: zoom.max_level,
    getTileUrl: (level, x, y) => urlOf(level, x, y),
    downloadTileStart(context) {
      const controller = new AbortController();
      context.userData.controller = controller;
      fetchBlob(context.src, controller.signal).then(
        (blob) => context.finish(blob, null, 'rasterBlob'),
        (error) => {
          if (error.name === 'AbortError') return;
          if (onError) onError(error, context.src);
          context.fail(error.message, null);
        });
    },
    downloadTileAbort(context) {
      if (context.userData.controller) context.userData.controller.abort();
    },
  };
}

/** Opens `source` in `viewer` and, once open, restores a zoom and centre when given, else shows
 *  `start` (an image rectangle {x, y, width, height}) when given, else the whole image. */
export function openAt(viewer, source, at, start) {
  if (at || start) viewer.addOnceHandler('open', () => {
    const vp = viewer.viewport;
    if (at) {
      vp.zoomTo(at.zoom, null, true);
      vp.panTo(new OpenSeadragon.Point(at.cx, at.cy), true);
    } else {
      vp.fitBounds(vp.imageToViewportRectangle(start.x, start.y, start.width, start.height), true);
    }
  });
  viewer.open(source);
}

/** The first view of a matrix over `ratio` times longer than wide: its start, fitted to the
 *  viewer's width (a tall one) or height (a wide one), so that its rows stay readable (the whole of
 *  it is a "fit" away, the minimap shows where the view is); null for other shapes. */
export function readableStart(viewer, rows, cols, pixelsPerElement, ratio = 8) {
  const box = viewer.container.getBoundingClientRect();
  if (!(box.width > 0 && box.height > 0)) return null;
  const aspect = box.height / box.width;
  if (rows > ratio * cols) return { x: 0, y: 0, width: cols * pixelsPerElement, height: Math.min(rows, cols * aspect) * pixelsPerElement };
  if (cols > ratio * rows) return { x: 0, y: 0, width: Math.min(cols, rows / aspect) * pixelsPerElement, height: rows * pixelsPerElement };
  return null;
}

/** The viewer's zoom and centre now. */
export function viewOf(viewer) {
  const c = viewer.viewport.getCenter(true);
  return { zoom: viewer.viewport.getZoom(true), cx: c.x, cy: c.y };
}

/** Screen pixels one element covers now. */
export function cellPixels(viewer, pixelsPerElement) {
  const vp = viewer.viewport;
  return vp.viewportToImageZoom(vp.getZoom(true)) * pixelsPerElement;
}

/** The element (row, col) under a point of the viewer element, or null outside the matrix. */
export function elementAt(viewer, point, pixelsPerElement, rows, cols) {
  const p = viewer.viewport.viewerElementToImageCoordinates(point);
  const row = Math.floor(p.y / pixelsPerElement), col = Math.floor(p.x / pixelsPerElement);
  if (row < 0 || col < 0 || row >= rows || col >= cols) return null;
  return { row, col };
}

/** The element rectangle in view: first/last visible row and column (clipped). */
export function visibleRange(viewer, pixelsPerElement, rows, cols) {
  const vp = viewer.viewport;
  const b = vp.viewportToImageRectangle(vp.getBounds(true));
  return {
    r0: Math.max(0, Math.floor(b.y / pixelsPerElement)), c0: Math.max(0, Math.floor(b.x / pixelsPerElement)),
    r1: Math.min(rows, Math.ceil((b.y + b.height) / pixelsPerElement)), c1: Math.min(cols, Math.ceil((b.x + b.width) / pixelsPerElement)),
  };
}

/** Viewer-element coordinates of an element boundary (row or column, fractional allowed). */
export function elementToScreen(viewer, row, col, pixelsPerElement) {
  return viewer.viewport.imageToViewerElementCoordinates(new OpenSeadragon.Point(col * pixelsPerElement, row * pixelsPerElement));
}

/** Zooms so that the element rectangle fills the view (a single element: 1 image pixel per
 *  screen pixel at most 32x). */
export function zoomToElements(viewer, row, col, rows, cols, pixelsPerElement, outline) {
  const vp = viewer.viewport;
  const rect = vp.imageToViewportRectangle(col * pixelsPerElement, row * pixelsPerElement, cols * pixelsPerElement, rows * pixelsPerElement);
  viewer.clearOverlays();
  if (outline) {
    const box = document.createElement('div');
    box.className = 'highlight';
    box.id = 'highlight';
    viewer.addOverlay({ element: box, location: rect });
  }
  if (rows === 1 && cols === 1) {
    const center = new OpenSeadragon.Point(rect.x + rect.width / 2, rect.y + rect.height / 2);
    // Pan first, then zoom about the centre: a zoom about a reference point would hold that point
    // where it is on screen for the whole animation instead of bringing it to the middle.
    vp.panTo(center, false);
    vp.zoomTo(vp.imageToViewportZoom(1.0), null, false);
  } else {
    vp.fitBoundsWithConstraints(rect, false);
  }
}

export { OpenSeadragon };
