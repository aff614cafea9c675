// speedscope reads `cumemtrace export --format folded` (ctest: clients.speedscope_folded).
//
//   node tests/js/speedscope_check.mjs CUMEMTRACE TRACE [CHROMIUM]
//
// Writes TRACE's folded stacks (--what peak and leaks) with CUMEMTRACE, serves
// them with speedscope's own release build from a local HTTP server (a page
// opened from file:// may not fetch), opens each in headless Chromium through
// playwright-core (#profileURL=…&view=sandwich) and reads speedscope's
// Sandwich table back: every frame of the file must be a row, with the total
// and self bytes speedscope computed from the file equal to what the file
// says, and the selves must add up to the report's own figure
// (`report --format json`: peak_allocated, leaked_bytes).
//
// Exit 0: passed; 1: failed; 77: a tool is missing (skipped), unless CI=true,
// where that is a failure too.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const [cumemtrace, trace, configuredChromium] = process.argv.slice(2);
if (!cumemtrace || !trace) {
  console.error('usage: speedscope_check.mjs CUMEMTRACE TRACE [CHROMIUM]');
  process.exit(1);
}

function missing(what) {
  if (process.env.CI === 'true') {
    console.error(`FAILED: ${what} (CI=true: scripts/setup.sh installs it)`);
    process.exit(1);
  }
  console.log(`SKIPPED: ${what}`);
  process.exit(77);
}

const chromiumPath = process.env.CUMEMTRACE_CHROMIUM || configuredChromium || '/usr/bin/chromium';
if (!fs.existsSync(chromiumPath)) missing(`no Chromium at ${chromiumPath}`);
const release = path.join(here, 'node_modules', 'speedscope', 'dist', 'release');
if (!fs.existsSync(path.join(release, 'index.html'))) missing('tests/js/node_modules has no speedscope (npm ci in tests/js)');
let chromium;
try {
  ({ chromium } = createRequire(path.join(here, 'package.json'))('playwright-core'));
} catch {
  missing('tests/js/node_modules has no playwright-core (npm ci in tests/js)');
}

let failures = 0;
function check(ok, message) {
  if (!ok) {
    console.error(`FAILED: ${message}`);
    ++failures;
  }
}

// What speedscope should show for a folded file, worked out here from its
// lines: per frame, the bytes of the stacks it is in (once per stack, as a
// recursive frame is counted) and of those it ends.
function expectedRows(folded) {
  const rows = new Map();
  let total = 0;
  for (const line of folded.split('\n')) {
    if (line === '') continue;
    const space = line.lastIndexOf(' ');
    const bytes = Number(line.slice(space + 1));
    const frames = line.slice(0, space).split(';');
    total += bytes;
    for (const name of new Set(frames)) {
      const row = rows.get(name) ?? { total: 0, self: 0 };
      row.total += bytes;
      rows.set(name, row);
    }
    rows.get(frames[frames.length - 1]).self += bytes;
  }
  return { rows, total };
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cumemtrace-speedscope-'));
const report = JSON.parse(execFileSync(cumemtrace, ['report', trace, '--format', 'json'], { encoding: 'utf8' }));
const profiles = new Map();  // URL path -> file contents
const cases = [
  { what: 'peak', figure: 'peak_allocated', groups: 'top_at_peak' },
  { what: 'leaks', figure: 'leaked_bytes', groups: 'leaks' },
];
for (const c of cases) {
  const file = path.join(tmp, `${c.what}.folded`);
  execFileSync(cumemtrace, ['export', trace, '--format', 'folded', '--what', c.what, '-o', file]);
  c.folded = fs.readFileSync(file, 'utf8');
  profiles.set(`/${c.what}.folded`, c.folded);
}
fs.rmSync(tmp, { recursive: true, force: true });

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (profiles.has(url.pathname)) {
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });
    res.end(profiles.get(url.pathname));
    return;
  }
  const file = path.join(release, path.normalize(url.pathname === '/' ? '/index.html' : url.pathname));
  if (!file.startsWith(release + path.sep)) {
    res.writeHead(403);
    res.end();
    return;
  }
  fs.readFile(file, (err, data) => {
    res.writeHead(err ? 404 : 200);
    res.end(err ? '' : data);
  });
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
try {
  const errors = [];
  for (const c of cases) {
    // A page each: speedscope reads the hash once, when it loads. Tall enough
    // that the Sandwich table draws every row (it draws the visible ones).
    const page = await browser.newPage({ viewport: { width: 1600, height: 2400 } });
    page.on('pageerror', (e) => errors.push(String(e)));
    const title = `cumemtrace ${c.what}`;
    const profileURL = encodeURIComponent(`${base}/${c.what}.folded`);
    await page.goto(`${base}/index.html#profileURL=${profileURL}&title=${encodeURIComponent(title)}&view=sandwich`);
    await page.waitForSelector('tr td', { timeout: 15000 });
    const shown = await page.$$eval('tr', (trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.innerText.trim())).filter((cells) => cells.length === 3));
    const { rows, total } = expectedRows(c.folded);
    check(rows.size > 0, `${c.what}: the folded file has no stacks`);
    check(total === report[c.figure], `${c.what}: the file's lines add up to ${total}, the report's ${c.figure} is ${report[c.figure]}`);
    check((await page.title()) === `${title} - speedscope`, `${c.what}: page title ${await page.title()}`);
    // "11,534,336 (100%)" -> 11534336
    const bytes = (cell) => Number(cell.split(' ')[0].replaceAll(',', ''));
    const seen = new Map(shown.map(([t, s, name]) => [name, { total: bytes(t), self: bytes(s) }]));
    check(seen.size === rows.size, `${c.what}: speedscope shows ${seen.size} frames, the file has ${rows.size}`);
    let selves = 0;
    for (const [name, want] of rows) {
      const got = seen.get(name);
      check(got !== undefined, `${c.what}: frame ${JSON.stringify(name)} is not in speedscope's table`);
      if (got === undefined) continue;
      check(got.total === want.total && got.self === want.self,
        `${c.what}: ${name}: speedscope shows total ${got.total}, self ${got.self}; expected ${want.total}, ${want.self}`);
      selves += got.self;
    }
    check(selves === report[c.figure], `${c.what}: speedscope's selves add up to ${selves}, not ${report[c.figure]}`);
    // Against the report's own stacks (frames innermost first), not the file:
    // the outermost frames are the roots, with all their stacks' bytes, and
    // the bytes sit on the innermost frames (the allocator), so speedscope
    // read the frames in the order they run.
    const groups = report[c.groups];
    const outermost = new Map();
    for (const g of groups) {
      const fn = g.frames?.at(-1)?.fn;
      if (fn) outermost.set(fn, (outermost.get(fn) ?? 0) + g.bytes);
    }
    check(outermost.size > 0, `${c.what}: the report has no stacks with frames`);
    for (const [fn, bytes] of outermost) {
      check(seen.get(fn)?.total === bytes, `${c.what}: outermost frame ${fn}: speedscope shows ${seen.get(fn)?.total}, the report ${bytes}`);
    }
    const innermost = groups.map((g) => g.frames?.[0]?.fn).filter(Boolean);
    for (const [name, row] of seen) {
      // Names over 100 characters are shortened ("f<…>"): compare what comes before.
      const head = name.split(/[<(]/)[0];
      check(row.self === 0 || innermost.some((fn) => fn.startsWith(head)),
        `${c.what}: ${name} has ${row.self} bytes of its own but is no stack's innermost frame in the report`);
    }
    console.log(`${c.what}: speedscope shows ${seen.size} frames, ${selves} bytes in all (${c.figure} ${report[c.figure]})`);
    await page.close();
  }
  check(errors.length === 0, `page errors: ${errors.join('; ')}`);
} finally {
  await browser.close();
  server.close();
}
if (failures > 0) process.exit(1);
console.log('speedscope read the folded stacks: frames and totals match');
