// The flame graphs of cumemtrace's HTML report, the page's only script.
// render/html_flame.cpp writes each trace's data into a
// <script type="application/json" class="flamedata"> (every '<' as \u003c)
// and this file, embedded at build time, after the page; the page's
// Content-Security-Policy allows this script by its SHA-256 and nothing else.
// Trace text reaches the page only through textContent, never as markup.
//
// Data: {"names": [...], "views": [view|null, ...]} with one view per
// .flameview in the same order. A view's frames are flat arrays in depth-
// first order (a frame, then all it called), frame 0 the root: n (index in
// names), d (depth; the caller is the last frame before at depth d - 1),
// b (bytes, inclusive; 0: the caller's), c (allocations, inclusive; 0: the
// caller's), k (one letter per frame: python, native, framework, unknown);
// label says what the bytes are, for the tooltips.
'use strict';
(function () {
  var SVG = 'http://www.w3.org/2000/svg';
  var ROW = 18;        // px per frame row
  var MIN_PX = 2;      // narrower frames side by side are drawn as one bar (a few thousand
                       // rects at most, where one per frame could be tens of thousands)
  var CHAR_PX = 6.6;   // width of a label character (11px sans), to cut labels without measuring
  var KINDS = {p: 'fk-python', n: 'fk-native', f: 'fk-framework', u: 'fk-unknown'};

  function formatBytes(b) {
    if (b < 1024) return b + ' B';
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
    var u = 0;
    while (u + 1 < units.length && b >= 1024 - 0.005) { b /= 1024; u++; }
    return b.toFixed(2) + ' ' + units[u];
  }

  function share(part, whole) {
    if (!(whole > 0)) return '0%';
    var p = 100 * part / whole;
    return (p < 0.1 && p > 0 ? p.toFixed(3) : p.toFixed(1)) + '%';
  }

  function element(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function svgElement(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var a in attrs) e.setAttribute(a, attrs[a]);
    return e;
  }

  // One flame graph: its data laid out once (each frame's left edge in
  // bytes, its depth, its children), drawn again on each zoom.
  function View(data, names, box, reset, label) {
    var n = data.n.length;
    this.names = names;
    this.data = data;
    this.box = box;
    this.reset = reset;
    this.label = label;
    this.zoom = 0;
    this.drawnWidth = -1;
    this.parent = new Int32Array(n);
    this.bytes = new Float64Array(n);
    this.count = new Float64Array(n);
    this.left = new Float64Array(n);
    this.depth = data.d;
    this.first = new Int32Array(n).fill(-1);
    this.next = new Int32Array(n).fill(-1);
    this.bytes[0] = data.b[0];
    this.count[0] = data.c[0];
    var last = [0];  // the latest frame at each depth
    var cursor = new Float64Array(n);
    for (var i = 1; i < n; i++) {
      var p = last[data.d[i] - 1];
      last[data.d[i]] = i;
      this.parent[i] = p;
      this.bytes[i] = data.b[i] || this.bytes[p];
      this.count[i] = data.c[i] || this.count[p];
      this.left[i] = cursor[p];
      cursor[p] += this.bytes[i];
      cursor[i] = this.left[i];
    }
    for (var j = n - 1; j >= 1; j--) {  // children in the data's order
      this.next[j] = this.first[this.parent[j]];
      this.first[this.parent[j]] = j;
    }
    this.tip = null;
  }

  View.prototype.frame = function (svg, i, x, width, ancestor) {
    var d = this.data;
    var y = this.depth[i] * ROW;
    var rect = svgElement('rect', {x: x.toFixed(2), y: y, width: width.toFixed(2), height: ROW - 1,
                                   'class': KINDS[d.k.charAt(i)] + (ancestor ? ' anc' : '')});
    rect.flameNode = i;  // an expando: the DOM keeps no trace of it
    svg.appendChild(rect);
    var fit = Math.floor((width - 6) / CHAR_PX);
    if (fit >= 3) {
      var name = this.names[d.n[i]];
      var text = svgElement('text', {x: (x + 3).toFixed(2), y: y + 13});
      text.textContent = name.length <= fit ? name : name.slice(0, fit - 1) + '\u2026';
      svg.appendChild(text);
    }
  };

  // The zoomed frame across the whole width, its callers above it across
  // the whole width too (click one to zoom out to it), and what it called
  // beneath; frames narrower than MIN_PX in runs, one bar per run and row.
  View.prototype.draw = function () {
    var width = this.box.clientWidth || 800;
    var z = this.zoom;
    var scale = width / this.bytes[z];
    var base = this.left[z];
    var svg = svgElement('svg', {'class': 'flamesvg', width: width});
    for (var a = z; a !== 0;) {
      a = this.parent[a];
      this.frame(svg, a, 0, width, true);
    }
    var deepest = this.depth[z];
    var narrow = {};  // depth -> [x, width, frame] of the narrow frames in that row
    var todo = [z];
    while (todo.length) {
      var i = todo.pop();
      var w = this.bytes[i] * scale;
      var x = (this.left[i] - base) * scale;
      if (this.depth[i] > deepest) deepest = this.depth[i];
      if (w < MIN_PX) (narrow[this.depth[i]] = narrow[this.depth[i]] || []).push([x, w, i]);
      else this.frame(svg, i, x, w, false);
      for (var c = this.first[i]; c >= 0; c = this.next[c]) todo.push(c);
    }
    for (var row in narrow) this.runs(svg, +row, narrow[row]);
    svg.setAttribute('height', (deepest + 1) * ROW);
    var self = this;
    svg.addEventListener('mousemove', function (e) { self.hover(e); });
    svg.addEventListener('mouseleave', function () { if (self.tip) self.tip.hidden = true; });
    svg.addEventListener('click', function (e) {
      if (e.target.flameNode !== undefined) self.zoomTo(e.target.flameNode);
      else if (e.target.flameRun) self.zoomTo(self.commonCaller(e.target.flameRun.frames));
    });
    var old = this.box.querySelector('svg');
    if (old) this.box.replaceChild(svg, old);
    else this.box.appendChild(svg);
    this.drawnWidth = width;
    this.reset.disabled = z === 0;
  };

  // Narrow frames that touch (within half a pixel) become one bar: hovering
  // it counts them, clicking it zooms into the caller they all share.
  View.prototype.runs = function (svg, row, frames) {
    frames.sort(function (a, b) { return a[0] - b[0]; });
    for (var k = 0; k < frames.length;) {
      var run = {frames: [], bytes: 0};
      var start = frames[k][0];
      var end = start;
      for (; k < frames.length && frames[k][0] <= end + 0.5; k++) {
        end = Math.max(end, frames[k][0] + frames[k][1]);
        run.frames.push(frames[k][2]);
        run.bytes += this.bytes[frames[k][2]];
      }
      var rect = svgElement('rect', {x: start.toFixed(2), y: row * ROW, width: (end - start).toFixed(2),
                                     height: ROW - 1, 'class': 'narrow'});
      rect.flameRun = run;
      svg.appendChild(rect);
    }
  };

  View.prototype.commonCaller = function (frames) {
    var a = this.parent[frames[0]];
    for (var k = 1; k < frames.length; k++) {
      var b = this.parent[frames[k]];
      while (a !== b) {  // climb the deeper one until both meet
        if (this.depth[a] >= this.depth[b]) a = this.parent[a];
        else b = this.parent[b];
      }
    }
    return a;
  };

  View.prototype.zoomTo = function (i) {
    if (i === this.zoom) return;
    this.zoom = i;
    if (this.tip) this.tip.hidden = true;
    this.draw();
  };

  View.prototype.hover = function (e) {
    var i = e.target.flameNode;
    var run = e.target.flameRun;
    if (i === undefined && !run) {
      if (this.tip) this.tip.hidden = true;
      return;
    }
    var d = this.data;
    var total = this.bytes[0];
    if (!this.tip) {
      this.tip = element('div', 'flametip');
      this.tip.setAttribute('role', 'tooltip');
      this.box.appendChild(this.tip);
    }
    if (run) {
      this.tip.textContent = run.frames.length + (run.frames.length === 1 ? ' frame' : ' frames') +
          ' too narrow to draw apart: ' + formatBytes(run.bytes) + ', ' + share(run.bytes, total) + ' of ' +
          this.label + '\nclick to zoom into their caller';
      this.place(e);
      return;
    }
    var b = this.bytes[i];
    var count = this.count[i];
    var lines = [this.names[d.n[i]],
                 formatBytes(b) + (b >= 1024 ? ' (' + b + ' bytes)' : '') + ', ' + share(b, total) + ' of ' +
                     this.label + ' (' + formatBytes(total) + ')',
                 count + (count === 1 ? ' allocation' : ' allocations')];
    if (this.zoom !== 0 && i !== this.zoom && this.depth[i] > this.depth[this.zoom]) {
      lines.push(share(b, this.bytes[this.zoom]) + ' of the zoomed frame');
    }
    this.tip.textContent = lines.join('\n');
    this.place(e);
  };

  View.prototype.place = function (e) {
    this.tip.hidden = false;
    var r = this.box.getBoundingClientRect();
    var x = e.clientX - r.left + 14;
    if (x + this.tip.offsetWidth > r.width) x = Math.max(0, e.clientX - r.left - this.tip.offsetWidth - 14);
    this.tip.style.left = x + 'px';
    this.tip.style.top = (e.clientY - r.top + 16) + 'px';
  };

  // One trace's three graphs as tabs; only the chosen one is drawn, when chosen.
  function setUp(container) {
    var source = container.querySelector('script.flamedata');
    if (!source) return;
    var data = JSON.parse(source.textContent);
    var blocks = container.querySelectorAll('.flameview');
    var tabs = element('div', 'flametabs');
    tabs.setAttribute('role', 'tablist');
    var entries = [];
    var choose = function (k) {
      for (var j = 0; j < entries.length; j++) {
        var entry = entries[j];
        entry.block.hidden = j !== k;
        entry.tab.setAttribute('aria-selected', j === k ? 'true' : 'false');
        if (j !== k || !entry.make) continue;
        if (!entry.view) entry.view = entry.make();  // laid out when first shown
        if (entry.view.drawnWidth !== entry.view.box.clientWidth) entry.view.draw();
      }
    };
    Array.prototype.forEach.call(blocks, function (block, k) {
      var heading = block.querySelector('h3');
      var tab = element('button', 'flametab', heading ? heading.textContent : 'view ' + (k + 1));
      tab.type = 'button';
      tab.setAttribute('role', 'tab');
      tab.addEventListener('click', function () { choose(k); });
      tabs.appendChild(tab);
      var entry = {block: block, tab: tab, view: null, make: null};
      var box = block.querySelector('.flamegraph');
      var viewData = data.views[k];
      if (box && viewData && viewData.b[0] > 0) {
        var reset = element('button', 'flamereset', 'Reset zoom');
        reset.type = 'button';
        block.insertBefore(reset, box);
        entry.make = function () { return new View(viewData, data.names, box, reset, viewData.label || 'all'); };
        reset.addEventListener('click', function () { entry.view.zoomTo(0); });
      }
      entries.push(entry);
    });
    if (!entries.length) return;
    container.insertBefore(tabs, blocks[0]);
    container.classList.add('tabbed');
    container.flameChoose = function () {
      for (var j = 0; j < entries.length; j++) if (!entries[j].block.hidden) choose(j);
    };
    choose(0);
  }

  var containers = document.querySelectorAll('.flames');
  Array.prototype.forEach.call(containers, setUp);
  // A wider or narrower window: the shown graphs are drawn again to fit.
  var pending = false;
  window.addEventListener('resize', function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () {
      pending = false;
      Array.prototype.forEach.call(containers, function (c) { if (c.flameChoose) c.flameChoose(); });
    });
  });
})();
