// The HTML report's flame graphs in headless Chromium (driven by
// tests/integration/html_clients_test.cpp as clients.HtmlFlameGraphs.*):
// the page's one script runs under its Content-Security-Policy without a
// console message, draws each frame as wide as its bytes, names a frame's
// bytes and share on hover, zooms on a click and back, and shows names
// holding markup as text.
//
//   node flame_check.mjs --python PAGE --markup PAGE --ranks PAGE --deep PAGE
// PAGE: `cumemtrace report --format html` of, in turn,
// golden/traces/python_frames.jsonl, golden/charts/traces/charts_markup_names.jsonl,
// golden/traces/job.rank0.jsonl + job.rank1.jsonl, and a trace of
// `analyzer/tools/make_deep_stacks_trace.py --stacks 1000 --depth 16`
// (a thousand frames side by side in a row). Prints one line per
// failed check; exit status 1 if any failed. Chromium: CUMEMTRACE_CHROMIUM
// or /usr/bin/chromium.
import { chromium } from 'playwright-core';
import { parseArgs } from 'node:util';

const { values: pages } = parseArgs({
  options: { python: { type: 'string' }, markup: { type: 'string' }, ranks: { type: 'string' },
             deep: { type: 'string' } },
});
let failures = 0;
function check(ok, what) {
  if (!ok) {
    failures++;
    console.log(`FAIL ${what}`);
  }
}

// Recorded in the page before its own script runs (an init script is
// outside the page's CSP): CSP violations and any alert() an injected
// handler would call.
function watch() {
  window.cspViolations = [];
  window.alerts = [];
  document.addEventListener('securitypolicyviolation', (e) =>
    window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  window.alert = (m) => window.alerts.push(String(m));
}

async function open(browser, path, label) {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  page.setDefaultTimeout(5000);  // a check that waits in vain fails fast
  const messages = [];
  page.on('console', (m) => messages.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => messages.push(`page error: ${e.message}`));
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  await page.addInitScript(watch);
  await page.goto('file://' + path, { waitUntil: 'load' });
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
  const done = async () => {
    check(messages.length === 0, `${label}: the console is silent: ${JSON.stringify(messages)}`);
    const csp = await page.evaluate(() => window.cspViolations);
    check(csp.length === 0, `${label}: no CSP violation: ${JSON.stringify(csp)}`);
    check(requests.length === 1, `${label}: the page loads nothing: ${JSON.stringify(requests)}`);
    check((await page.evaluate(() => window.alerts)).length === 0, `${label}: no alert() ran`);
    await page.close();
  };
  return { page, done };
}

// The shown graph of the `container`-th .flames: each drawn frame with its
// node, name, box and the data's bytes.
async function shown(page, container = 0) {
  return page.evaluate((container) => {
    const flames = document.querySelectorAll('.flames')[container];
    const data = JSON.parse(flames.querySelector('script.flamedata').textContent);
    const blocks = [...flames.querySelectorAll('.flameview')];
    const index = blocks.findIndex((b) => !b.hidden);
    const view = data.views[index];
    // The data as flame_graph.js describes it, decoded apart from the script.
    const parent = [0], bytes = view ? [view.b[0]] : [], last = [0];
    for (let i = 1; view && i < view.n.length; i++) {
      parent[i] = last[view.d[i] - 1];
      last[view.d[i]] = i;
      bytes[i] = view.b[i] === 0 ? bytes[parent[i]] : view.b[i];
    }
    const svg = blocks[index].querySelector('svg.flamesvg');
    const frames = svg === null ? [] : [...svg.querySelectorAll('rect:not(.narrow)')].map((r) => ({
      node: r.flameNode, name: data.names[view.n[r.flameNode]], bytes: bytes[r.flameNode],
      parent: parent[r.flameNode], x: +r.getAttribute('x'), y: +r.getAttribute('y'),
      width: +r.getAttribute('width'), ancestor: r.classList.contains('anc'),
      fill: getComputedStyle(r).fill, kind: view.k[r.flameNode],
    }));
    const reset = blocks[index].querySelector('button.flamereset');
    return {
      index, total: view ? view.total : 0, frames, width: svg ? +svg.getAttribute('width') : 0,
      text: blocks[index].textContent, resetDisabled: reset ? reset.disabled : null,
      tabs: [...flames.querySelectorAll('button.flametab')].map((t) => t.textContent),
      labels: svg ? [...svg.querySelectorAll('text')].map((t) => t.textContent) : [],
    };
  }, container);
}

const rectOf = (g, name) => g.frames.find((f) => f.name === name && !f.ancestor);

// Every frame as wide as its bytes, relative to the zoomed frame, which
// spans the whole graph; each frame within its parent.
function expectProportional(g, zoomBytes, label) {
  check(g.frames.length > 0, `${label}: frames are drawn`);
  for (const f of g.frames) {
    const want = f.ancestor ? g.width : (f.bytes / zoomBytes) * g.width;
    if (Math.abs(f.width - want) > 0.02) {
      check(false, `${label}: ${f.name} is ${f.width} px wide, ${want} for its ${f.bytes} bytes`);
      return;
    }
    const parent = g.frames.find((p) => p.node === f.parent && f.node !== 0);
    if (parent && !f.ancestor && !parent.ancestor) {
      check(f.x >= parent.x - 0.02 && f.x + f.width <= parent.x + parent.width + 0.02 && f.y > parent.y,
            `${label}: ${f.name} lies under its caller ${parent.name}`);
    }
  }
}

async function hover(page, frame, container = 0) {
  const box = await page.evaluate(([node, container]) => {
    const flames = document.querySelectorAll('.flames')[container];
    const view = [...flames.querySelectorAll('.flameview')].find((b) => !b.hidden);
    const rect = [...view.querySelectorAll('svg.flamesvg rect')].find((r) => r.flameNode === node);
    rect.scrollIntoView({ block: 'center' });
    const b = rect.getBoundingClientRect();
    return { x: b.x + Math.min(b.width / 2, 20), y: b.y + b.height / 2 };
  }, [frame.node, container]);
  await page.mouse.move(box.x, box.y);
  return page.evaluate((container) => {
    const tip = document.querySelectorAll('.flames')[container].querySelector('.flameview:not([hidden]) .flametip');
    return tip && !tip.hidden ? tip.textContent : null;
  }, container);
}

async function click(page, frame, container = 0) {
  await hover(page, frame, container);
  await page.mouse.down();
  await page.mouse.up();
}

async function pythonPage(browser) {
  const { page, done } = await open(browser, pages.python, 'python_frames');
  let g = await shown(page);
  check(g.tabs.join('|') === 'Live at the allocated peak|Live at the end (leaks)|Everything allocated',
        `the three views are tabs: ${g.tabs}`);
  check(g.index === 0 && g.total === 15728640, 'the peak is shown first (15 MiB)');
  check(g.width > 1000, `the graph spans the page: ${g.width} px`);
  expectProportional(g, g.total, 'peak');
  const load = rectOf(g, 'Model.load_weights (model.py:31)');
  const hook = rectOf(g, 'Trainer.train_step.<locals>.hook (train.py)');
  check(load && hook, 'Python frames are drawn: Model.load_weights, the hook');
  if (!load || !hook) return done();
  check(Math.abs(load.width / g.width - 8 / 15) < 1e-3, 'load_weights: 8 of the 15 MiB');
  // Colour by kind: Python frames green, the program's native code orange, frameworks grey-blue.
  const native = g.frames.find((f) => f.name.startsWith('ext::run_with_callback'));
  const framework = g.frames.find((f) => f.name === '_PyEval_EvalFrameDefault');
  check(load.fill === 'rgb(124, 200, 122)', `a Python frame is green: ${load.fill}`);
  check(native && native.fill === 'rgb(242, 166, 90)', `a native frame of the program is orange: ${native && native.fill}`);
  check(framework && framework.fill === 'rgb(182, 195, 214)', `a framework frame is grey-blue: ${framework && framework.fill}`);
  check(g.labels.includes('Model.load_weights (model.py:31)'), 'a wide frame is labelled with its name');

  const tip = await hover(page, load);
  check(tip !== null && tip.includes('Model.load_weights (model.py:31)') && tip.includes('8.00 MiB (8388608 bytes)') &&
        tip.includes('53.3% of what was live at the peak (15.00 MiB)') && tip.includes('1 allocation'),
        `hovering names the frame, its bytes and share: ${tip}`);
  await page.mouse.move(1, 1);

  // Zoom into load_weights: it spans the whole width, its callers stay above
  // as full-width ancestors, the other stacks are gone.
  await click(page, load);
  g = await shown(page);
  const zoomed = rectOf(g, 'Model.load_weights (model.py:31)');
  check(zoomed && zoomed.x === 0 && Math.abs(zoomed.width - g.width) < 0.02, 'the clicked frame spans the full width');
  check(!g.frames.some((f) => f.name.startsWith('Trainer.')), 'frames outside the zoomed one are not drawn');
  check(g.frames.some((f) => f.ancestor && f.name === 'main (train.py:78)'), 'its callers stay above it');
  check(g.resetDisabled === false, 'Reset zoom is enabled when zoomed');
  expectProportional(g, 8388608, 'zoomed');
  const inner = g.frames.find((f) => f.name === 'torch::autograd::THPVariable_empty(_object*, _object*, _object*)');
  const innerTip = inner ? await hover(page, inner) : null;
  check(innerTip && innerTip.includes('53.3% of what was live at the peak') && innerTip.includes('100.0% of the zoomed frame'),
        `hovering in a zoom gives the share of the total and of the zoomed frame: ${innerTip}`);

  // Back out by a click on the root ("all", an ancestor now).
  await click(page, g.frames.find((f) => f.node === 0));
  g = await shown(page);
  check(g.frames.find((f) => f.node === 0 && !f.ancestor && f.width === g.width) !== undefined &&
        rectOf(g, 'Trainer.evaluate (train.py:61)') !== undefined && g.resetDisabled === true,
        'clicking the root zooms back out');
  // Zoom in and out again through an ancestor and the Reset button.
  await click(page, rectOf(g, 'Trainer.train_step.<locals>.hook (train.py)'));
  g = await shown(page);
  const caller = g.frames.find((f) => f.ancestor && f.name === 'Trainer.train_step (train.py:42)');
  check(caller !== undefined, 'the hook\'s caller is drawn above it');
  if (caller) {
    await click(page, caller);
    g = await shown(page);
    const step = rectOf(g, 'Trainer.train_step (train.py:42)');
    check(step && step.x === 0 && Math.abs(step.width - g.width) < 0.02, 'clicking a caller zooms out to it');
  }
  await page.click('.flameview:not([hidden]) button.flamereset');
  g = await shown(page);
  check(g.frames.filter((f) => f.ancestor).length === 0 && rectOf(g, 'main (train.py:78)') !== undefined,
        'Reset zoom shows the whole graph again');

  // The other views, drawn when chosen.
  await page.click('button.flametab >> nth=1');
  g = await shown(page);
  check(g.index === 1 && g.total === 11534336 && g.frames.length > 0, 'the leaks tab shows its own graph');
  expectProportional(g, g.total, 'leaks');
  await page.click('button.flametab >> nth=2');
  g = await shown(page);
  check(g.index === 2 && g.total === 24117248, 'the allocated tab shows everything allocated');
  expectProportional(g, g.total, 'allocated');
  await done();
}

async function markupPage(browser) {
  const { page, done } = await open(browser, pages.markup, 'charts_markup_names');
  const g = await shown(page);
  expectProportional(g, g.total, 'markup');
  const img = g.frames.find((f) => f.name === '"><img src=x onerror=alert(2)>');
  const script = g.frames.find((f) => f.name === '<script>alert(1)</script>');
  check(img && script, `the markup names are frames: ${g.frames.map((f) => f.name)}`);
  check(g.labels.includes('"><img src=x onerror=alert(2)>') && g.labels.includes('<script>alert(1)</script>'),
        `their labels read as the text itself: ${g.labels}`);
  if (img) {
    const tip = await hover(page, img);
    check(tip && tip.startsWith('"><img src=x onerror=alert(2)>\n'), `the tooltip shows the name as text: ${tip}`);
  }
  // No element came from a name: within the flame graphs only ours.
  const tags = await page.evaluate(() =>
    [...new Set([...document.querySelectorAll('.flames *')].map((e) => e.tagName.toLowerCase()))].sort());
  check(JSON.stringify(tags) === JSON.stringify(['button', 'div', 'h3', 'p', 'rect', 'script', 'svg', 'text']),
        `the flame graphs hold only their own elements: ${tags}`);
  const foreign = await page.evaluate(() => document.querySelectorAll('img, iframe, object, embed, script:not(.flamedata):not(:last-of-type)').length);
  check(foreign === 0, 'no element from a name anywhere in the page');
  await done();
}

async function ranksPage(browser) {
  const { page, done } = await open(browser, pages.ranks, 'two ranks');
  const count = await page.evaluate(() => document.querySelectorAll('.flames.tabbed').length);
  check(count === 2, `each process's report has its flame graphs: ${count}`);
  const rank1 = await shown(page, 1);
  expectProportional(rank1, rank1.total, 'rank 1');
  // Rank 0 leaks nothing: its leaks view says so, with no graph.
  await page.click('.flames >> nth=0 >> button.flametab >> nth=1');
  const leaks = await shown(page, 0);
  check(leaks.index === 1 && leaks.frames.length === 0 && leaks.text.includes('Nothing was live at the end: no leaks.'),
        `an empty view says so: ${leaks.text}`);
  await done();
}

// A thousand frames of a pixel or so side by side: drawn as grey bars, one
// per run and row, that count them on hover and zoom into their common
// caller on a click, where they are wide enough to draw apart.
async function deepPage(browser) {
  const { page, done } = await open(browser, pages.deep, 'deep stacks');
  const runs = () => page.evaluate(() => [...document.querySelectorAll('.flameview:not([hidden]) rect.narrow')]
    .map((r) => ({ frames: r.flameRun.frames.length, width: +r.getAttribute('width'), y: +r.getAttribute('y') })));
  let g = await shown(page);
  const before = await runs();
  const merged = before.reduce((sum, r) => sum + r.frames, 0);
  check(before.length > 0 && merged > 500 && before.length * 2 < merged,
        `narrow frames are drawn in runs, fewer bars than frames: ${before.length} bars for ${merged} frames`);
  check(before.every((r) => r.width > 0), 'each run has a width');
  expectProportional(g, g.total, 'deep');
  const widest = await page.evaluate(() => {
    const bars = [...document.querySelectorAll('.flameview:not([hidden]) rect.narrow')];
    const bar = bars.sort((a, b) => b.flameRun.frames.length - a.flameRun.frames.length)[0];
    bar.scrollIntoView({ block: 'center' });
    const b = bar.getBoundingClientRect();
    return { x: b.x + Math.min(b.width / 2, 3), y: b.y + b.height / 2 };
  });
  await page.mouse.move(widest.x, widest.y);
  const tip = await page.evaluate(() => document.querySelector('.flameview:not([hidden]) .flametip').textContent);
  check(/^\d+ frames too narrow to draw apart: .* of what was live at the peak\nclick to zoom into their caller$/.test(tip),
        `hovering a run counts its frames: ${tip}`);
  await page.mouse.down();
  await page.mouse.up();
  g = await shown(page);
  const zoomed = g.frames.find((f) => !f.ancestor && f.x === 0 && Math.abs(f.width - g.width) < 0.02 && f.node !== 0);
  check(zoomed !== undefined && g.resetDisabled === false, 'clicking a run zooms into their caller');
  if (zoomed) expectProportional(g, zoomed.bytes, 'deep, zoomed');
  await done();
}

const browser = await chromium.launch({
  executablePath: process.env.CUMEMTRACE_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
// The pages side by side, each in its own tab: most of the time is spent
// waiting for the browser.
await Promise.all([['python', pythonPage], ['markup', markupPage], ['ranks', ranksPage], ['deep', deepPage]]
  .filter(([name]) => pages[name])
  .map(([name, run]) => run(browser).catch((e) => check(false, `${name}: ${e.message.split('\n')[0]}`))));
await browser.close();
console.log(failures === 0 ? 'flame graphs: all checks passed' : `flame graphs: ${failures} checks failed`);
process.exit(failures === 0 ? 0 : 1);
