// Times the HTML report's flame graphs in headless Chromium (not a test: the
// figures in analyzer/render/README.md come from it):
//
//   analyzer/tools/make_deep_stacks_trace.py /tmp/deep.jsonl
//   cumemtrace report /tmp/deep.jsonl --format html -o /tmp/deep.html
//   node tests/js/flame_measure.mjs /tmp/deep.html [runs]
//
// Prints the page's size, its data block's, and the median over `runs`
// (default 5) fresh loads of: first contentful paint, when the first graph
// was drawn (the script has run), the frames drawn; then a tab switch, a
// zoom and a zoom back out, each until the next frame is painted.
import { chromium } from 'playwright-core';
import { statSync } from 'node:fs';

const [path, runsArg] = process.argv.slice(2);
if (!path) {
  console.error('usage: node flame_measure.mjs PAGE.html [runs]');
  process.exit(2);
}
const runs = Number(runsArg || 5);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const browser = await chromium.launch({
  executablePath: process.env.CUMEMTRACE_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const results = [];
for (let run = 0; run < runs; run++) {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto('file://' + path, { waitUntil: 'load' });
  const r = await page.evaluate(async () => {
    const paint = () => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
    await paint();
    const fcp = performance.getEntriesByName('first-contentful-paint')[0];
    const nav = performance.getEntriesByType('navigation')[0];
    const out = {
      fcp: fcp ? fcp.startTime : NaN,
      interactive: nav.domInteractive,  // parsed, the script run and the first graph drawn
      load: nav.loadEventEnd,
      frames: document.querySelectorAll('svg.flamesvg rect').length,
      texts: document.querySelectorAll('svg.flamesvg text').length,
      elements: document.getElementsByTagName('*').length,
    };
    // Zoom into the widest frame two levels down, then back out.
    const rects = [...document.querySelectorAll('.flameview:not([hidden]) svg.flamesvg rect')];
    const target = rects.filter((x) => +x.getAttribute('y') === 2 * 18)
      .sort((a, b) => b.getAttribute('width') - a.getAttribute('width'))[0];
    let t = performance.now();
    target.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    await paint();
    out.zoom = performance.now() - t;
    t = performance.now();
    document.querySelector('.flameview:not([hidden]) button.flamereset').click();
    await paint();
    out.unzoom = performance.now() - t;
    // The third view, drawn when first chosen.
    t = performance.now();
    document.querySelectorAll('button.flametab')[2].click();
    await paint();
    out.tab = performance.now() - t;
    out.allocatedFrames = document.querySelectorAll('.flameview:not([hidden]) svg.flamesvg rect').length;
    return out;
  });
  results.push({ ...r, errors: errors.length });
  await page.close();
}
await browser.close();

const html = statSync(path).size;
console.log(`page: ${(html / 1024).toFixed(0)} KiB`);
for (const key of ['fcp', 'interactive', 'load', 'tab', 'zoom', 'unzoom']) {
  console.log(`${key}: median ${median(results.map((r) => r[key])).toFixed(1)} ms over ${runs} loads ` +
              `(${results.map((r) => r[key].toFixed(0)).join(', ')})`);
}
const last = results[results.length - 1];
console.log(`frames drawn: peak ${last.frames} (${last.texts} labelled), allocated ${last.allocatedFrames}; ` +
            `elements in the page: ${last.elements}; console errors: ${last.errors}`);
