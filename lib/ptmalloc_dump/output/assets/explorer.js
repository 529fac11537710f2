/* ptmalloc_dump's heap explorer: one view per heap (and one for the mmapped chunks), zoomable from the
 * whole heap down to single bytes, with a minimap, four colourings, a panel for the chunk under the
 * pointer and a search. Its data comes from explorer-data.js beside the page (written by
 * PtmallocDump::Explorer), loaded after the page's first paint. The layout is
 * PtmallocDump::ExplorerGeometry's: a view's bytes run left to right in rows of W pixels. */
"use strict";
(function () {
  const W = 896, H = 512, MW = 64, MAX_LIST = 40;
  const $ = (id) => document.getElementById(id);
  let D = null;            // decoded data
  let addr = null;         // Float64Array: chunk addresses
  const st = { view: 0, bpp: 1, row: 0, mode: null, pinned: -1, mask: null, miniCache: null };

  function bytes(b64) {
    const bin = atob(b64), n = bin.length, u8 = new Uint8Array(n);
    for (let i = 0; i < n; i++) u8[i] = bin.charCodeAt(i);
    return u8;
  }
  const typed = (b64, T) => { const u8 = bytes(b64); return new T(u8.buffer, 0, u8.length / T.BYTES_PER_ELEMENT); };
  const hex = (a) => "0x" + a.toString(16);
  function human(n) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let e = 0;
    while (n >= 1024 && e < u.length - 1) { n /= 1024; e++; }
    return e === 0 ? n + " B" : n.toFixed(n < 10 ? 1 : 0) + " " + u[e];
  }
  function rgb(h) {   // "#rrggbb" -> ImageData's little-endian 0xAABBGGRR
    const v = parseInt(h.slice(1), 16);
    return (0xff000000 | ((v & 0xff) << 16) | (v & 0xff00) | (v >> 16)) >>> 0;
  }
  function mix(c, toward, f) {
    const ch = (s) => Math.round(((c >>> s) & 0xff) * (1 - f) + ((toward >>> s) & 0xff) * f);
    return (0xff000000 | (ch(16) << 16) | (ch(8) << 8) | ch(0)) >>> 0;
  }
  const WHITE = 0xffffffff, BLACK = 0xff000000, BG = rgb("#f4f4f4");

  /* ---- data ---- */
  function decode(raw) {
    const d = raw;
    d.sizes = typed(raw.sizes, Uint32Array);
    d.st8 = bytes(raw.states8);
    d.pg8 = bytes(raw.pages);
    d.ref = raw.references ? typed(raw.refs, Uint32Array) : null;
    if (raw.tcache) {   // chunk index -> its tcache entry (thread record, bin | position << 16)
      const t = typed(raw.tcache, Uint32Array);
      d.tcacheOf = new Map();
      for (let k = 0; k + 2 < t.length; k += 3) if (!d.tcacheOf.has(t[k])) d.tcacheOf.set(t[k], [t[k + 1], t[k + 2]]);
    }
    if (raw.owners) {
      d.own = typed(raw.owners, Uint32Array);
      d.cat = bytes(raw.categories8);
      d.objAddr = typed(raw.objAddress, Float64Array);
      d.objClass = typed(raw.objClass, Uint32Array);
      d.objDtype = typed(raw.objDataType, Uint32Array);
      d.objType = typed(raw.objType, Uint32Array);
    }
    if (raw.pageChanges) d.chg8 = bytes(raw.pageChanges);
    if (raw.ownerKinds) { d.kind8 = bytes(raw.ownerKinds); d.anchorIds = typed(raw.anchorIds, Uint16Array); }
    if (raw.code) d.code = typed(raw.code, raw.codeWidth === 2 ? Uint16Array : Uint32Array);
    addr = new Float64Array(d.chunkCount);
    d.chunkHeap = new Uint32Array(d.chunkCount);
    for (const h of d.heaps) {
      let a = h.start;
      for (let i = h.firstChunk; i < h.firstChunk + h.chunks; i++) { addr[i] = a; a += d.sizes[i] * 16; d.chunkHeap[i] = h.index; }
    }
    d.viewSegs = d.views.map((v) => {
      let off = 0;
      return v.heaps.map((hi) => {
        const h = d.heaps[hi], s = { h: h, vstart: off, vend: off + (h.end - h.start) };
        off = s.vend;
        return s;
      });
    });
    const p = d.palette;
    d.col = {
      state: d.states.map((s) => rgb(p.states[s])),
      page: d.pageClasses.map((c) => rgb(p.page_classes[c])),
      owner: p.owners.map(rgb),
      resident: rgb("#3b73b9"), shared: rgb("#9e7bc4"), swapped: rgb("#8c564b"), absent: rgb("#e6e6e6"),
      anchored: rgb("#b8860b"), leaked: rgb("#e7298a"), change: p.diff.map(rgb)
    };
    return d;
  }

  const chunkSize = (i) => D.sizes[i] * 16;
  const stateOf = (i) => D.states[D.st8[i] & 15];
  const allocated = (i) => { const s = D.st8[i] & 15; return s === 0 || s === 7; };

  /* The chunk of heap h that holds address a, or -1. */
  function chunkIn(h, a) {
    if (a < h.start || a >= h.end || h.chunks === 0) return -1;
    let lo = h.firstChunk, hi = h.firstChunk + h.chunks - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (addr[mid] <= a) lo = mid; else hi = mid - 1;
    }
    return a < addr[lo] + chunkSize(lo) ? lo : -1;
  }
  function heapOf(a) { return D.heaps.find((h) => a >= h.start && a < h.end) || null; }
  function pageFlags(h, a) { return D.pg8[h.firstPage + Math.floor((a - h.pageBase) / D.pageSize)]; }

  /* ---- geometry (ExplorerGeometry) ---- */
  const segs = () => D.viewSegs[st.view];
  const viewSize = () => { const s = segs(); return s[s.length - 1].vend; };
  function addressAtOffset(v) {
    for (const s of segs()) if (v < s.vend) return s.h.start + (v - s.vstart);
    return null;
  }
  function offsetOf(a) {
    for (const s of segs()) if (a >= s.h.start && a < s.h.end) return s.vstart + (a - s.h.start);
    return null;
  }
  const offsetAt = (x, y) => ((st.row + y) * W + x) * st.bpp;
  const addressAt = (x, y) => addressAtOffset(offsetAt(x, y));
  function fitBpp() {
    let b = 1;
    while (Math.ceil(viewSize() / b / W) > H) b *= 2;
    return b;
  }
  const maxRow = () => Math.max(0, Math.ceil(viewSize() / st.bpp / W) - H);
  const clampRow = (r) => Math.max(0, Math.min(maxRow(), Math.floor(r)));

  /* ---- colours ---- */
  function colorOf(i, h, a) {
    const s = D.st8[i] & 15;
    let c;
    switch (st.mode) {
      case "owner":
        if (D.kind8 && D.kind8[i] === 3) c = D.col.leaked;
        else if (s === 0 || s === 7) c = D.cat ? D.col.owner[D.cat[i]] : D.col.owner[9];
        else if (s === 8) c = D.col.state[8];
        else c = D.col.owner[0];
        break;
      case "residency": {
        const f = pageFlags(h, a);
        c = f & 1 ? (f & 4 ? D.col.shared : D.col.resident) : f & 2 ? D.col.swapped : D.col.absent;
        break;
      }
      case "pages":
        c = D.col.page[pageFlags(h, a) >> 4];
        break;
      case "change":
        c = D.col.change[D.chg8[h.firstPage + Math.floor((a - h.pageBase) / D.pageSize)]] || BG;
        break;
      default:
        c = D.col.state[s];
        if (!(pageFlags(h, a) & 1)) c = mix(c, WHITE, 0.55);
    }
    if ((st.mode === "state" || st.mode === "owner") && (i & 1)) c = mix(c, BLACK, 0.12);
    if (st.mask && !st.mask[i]) c = mix(c, WHITE, 0.82);
    return c;
  }

  /* Fills px (w x h pixels) with the view from offset v0, `step` bytes a pixel. */
  function paint(px, w, hgt, v0, step) {
    const ss = segs();
    let si = 0, ci = -1;
    for (let q = 0; q < w * hgt; q++) {
      const v = v0 + q * step;
      while (si < ss.length && v >= ss[si].vend) { si++; ci = -1; }
      if (si >= ss.length) { px[q] = BG; continue; }
      const h = ss[si].h, a = h.start + (v - ss[si].vstart);
      if (ci < 0) ci = chunkIn(h, a);
      else while (ci < h.firstChunk + h.chunks - 1 && addr[ci + 1] <= a) ci++;
      px[q] = ci < 0 ? BG : colorOf(ci, h, a);
    }
  }

  let ctx, mctx;
  function draw() {
    const img = ctx.createImageData(W, H);
    paint(new Uint32Array(img.data.buffer), W, H, st.row * W * st.bpp, st.bpp);
    ctx.putImageData(img, 0, 0);
    if (st.pinned >= 0) outline(st.pinned);
    drawMini();
    const rows = Math.ceil(viewSize() / st.bpp / W);
    $("xp-zoom").textContent = st.bpp + " B a pixel, " + human(st.bpp * W) + " a row; rows " + st.row + "-" +
      Math.min(st.row + H, rows) + " of " + rows;
  }
  function outline(i) {
    const v0 = offsetOf(addr[i]);
    if (v0 === null) return;
    const first = Math.floor(v0 / st.bpp);
    let p = Math.max(first, st.row * W);
    const p1 = Math.min(Math.max(first + 1, Math.ceil((v0 + chunkSize(i)) / st.bpp)), (st.row + H) * W);
    ctx.fillStyle = "rgba(0,0,0,.45)";
    while (p < p1) {
      const x = p % W, run = Math.min(W - x, p1 - p);
      ctx.fillRect(x, Math.floor(p / W) - st.row, run, 1);
      p += run;
    }
  }
  function drawMini() {
    const mstep = viewSize() / (MW * H);
    const key = st.view + st.mode + (st.mask ? "m" : "");
    if (!st.miniCache || st.miniCache.key !== key) {
      const img = mctx.createImageData(MW, H);
      paint(new Uint32Array(img.data.buffer), MW, H, 0, mstep);
      st.miniCache = { key: key, img: img };
    }
    mctx.putImageData(st.miniCache.img, 0, 0);
    const y0 = (st.row * W * st.bpp) / mstep / MW, y1 = ((st.row + H) * W * st.bpp) / mstep / MW;
    mctx.strokeStyle = "#000";
    mctx.lineWidth = 2;
    mctx.strokeRect(1, y0, MW - 2, Math.max(2, Math.min(H, y1) - y0));
  }

  /* ---- the panel ---- */
  /* glibc's bin_index (smallbin_index below 1024 B, else largebin_index_64), and the chunk sizes a bin
   * holds (PtmallocDump::Bin.size_range): the index never decreases with the size */
  function binIndex(sz) {
    if (sz < 1024) return sz >> 4;
    const q = (s) => Math.floor(sz / 2 ** s);
    return q(6) <= 48 ? 48 + q(6) : q(9) <= 20 ? 91 + q(9) : q(12) <= 10 ? 110 + q(12) : q(15) <= 4 ? 119 + q(15) : q(18) <= 2 ? 124 + q(18) : 126;
  }
  function firstSize(b) {
    let lo = 1, hi = 2 ** 44;
    while (lo < hi) { const m = Math.floor((lo + hi) / 2); if (binIndex(16 * m) >= b) hi = m; else lo = m + 1; }
    return 16 * lo;
  }
  function sizesText(lo, hi) { return hi === null ? lo + " B and up" : lo === hi ? lo + " B" : lo + ".." + hi + " B"; }
  /* where glibc keeps a free chunk, worded as PtmallocDump::Bin#to_s */
  function binOf(i) {
    const s = stateOf(i), sz = chunkSize(i);
    if (s === "tcache") {
      const e = D.tcacheOf ? D.tcacheOf.get(i) : undefined;
      if (e === undefined) return sz <= 1040 ? "tcache bin " + ((sz - 32) / 16) + " (" + sz + " B)" : "tcache bin";
      const bin = e[1] & 0xffff, tid = D.threadTids[e[0]], sizes = sz === 32 + 16 * bin ? ", " + sz + " B" : "";
      return "tcache of " + (tid ? "thread " + tid : "an unlisted thread") + " (bin " + bin + sizes + ")";
    }
    if (s === "fastbin") return "fastbin " + ((sz >> 4) - 2) + " (" + sz + " B)";
    if (s === "smallbin" || s === "largebin") {
      const b = binIndex(sz);
      return s + " " + b + " (" + sizesText(firstSize(b), b >= 126 ? null : firstSize(b + 1) - 16) + ")";
    }
    if (s === "unsorted") return "unsorted";
    return "";
  }
  function ownerText(i) {
    if (!D.own) return "no Ruby data in this dump";
    const o = D.own[i];
    if (!o) return D.categories[D.cat[i]];
    const k = o - 1, dt = D.dataTypeNames[D.objDtype[k]];
    const cls = D.objClass[k] === 0xffffffff ? "(hidden)" : D.classNames[D.objClass[k]];
    return D.typeNames[D.objType[k]] + " " + cls + (dt ? " (" + dt + ")" : "") + " at " + hex(D.objAddr[k]);
  }
  function holderText(i) {
    if (!D.kind8) return "";
    const k = D.kind8[i];
    if (k === 2) return "anchored" + (D.anchorIds[i] ? " by " + D.anchors[D.anchorIds[i] - 1] : "");
    if (k === 5) return "held (interior pointer)" + (D.anchorIds[i] ? ", reached from " + D.anchors[D.anchorIds[i] - 1] : "");
    return ["", "a Ruby object", "", "leaked: nothing reaches it",
            "not known: no root reaches it, and the dump has no Ruby objects"][k] || "";
  }
  /* the code a chunk is charged to: "module M", with the method and path:line of a method's code */
  function codeText(i) {
    if (!D.code || !D.code[i]) return "";
    const [kind, mod, meth, path, line] = D.codes[D.code[i] - 1], name = (k) => (k >= 0 ? D.codeNames[k] : "");
    if (kind === "vm_table") return "VM table " + name(mod);
    let t = "module " + (mod >= 0 ? name(mod) : "(anonymous)");
    if (meth >= 0) t += ", method " + name(meth);
    if (path >= 0) t += ", " + name(path) + (line ? ":" + line : "");
    return t;
  }
  function pagesText(i) {
    const h = D.heaps[D.chunkHeap[i]], a0 = addr[i], a1 = a0 + chunkSize(i);
    const p0 = Math.floor((a0 - h.pageBase) / D.pageSize), p1 = Math.floor((a1 - 1 - h.pageBase) / D.pageSize);
    let res = 0, shared = 0, unknown = 0, swapped = 0, absent = 0;
    const classes = {};
    for (let p = p0; p <= p1; p++) {
      const f = D.pg8[h.firstPage + p];
      if (f & 1) { res++; if (f & 4) shared++; else if (f & 8) unknown++; } else if (f & 2) swapped++; else absent++;
      const c = D.pageClasses[f >> 4];
      classes[c] = (classes[c] || 0) + 1;
    }
    const n = p1 - p0 + 1;
    const sharing = [shared ? shared + " shared with another process" : "", unknown ? unknown + " of unknown sharing" : ""].filter((t) => t);
    return n + " page(s): " + res + " resident" + (sharing.length ? " (" + sharing.join(", ") + ")" : "") + ", " +
      swapped + " swapped, " + absent + " not resident; " +
      Object.entries(classes).map(([c, k]) => k + " " + c.replace("_", " ")).join(", ");
  }
  let refIndex = null;
  function refs(i) {
    if (!D.ref) return null;
    if (!refIndex) {
      const n = D.chunkCount, m = D.ref.length / 2, outC = new Uint32Array(n + 1), inC = new Uint32Array(n + 1);
      for (let k = 0; k < m; k++) { outC[D.ref[2 * k] + 1]++; inC[D.ref[2 * k + 1] + 1]++; }
      for (let k = 0; k < n; k++) { outC[k + 1] += outC[k]; inC[k + 1] += inC[k]; }
      const outT = new Uint32Array(m), inT = new Uint32Array(m), oo = outC.slice(), ii = inC.slice();
      for (let k = 0; k < m; k++) { outT[oo[D.ref[2 * k]]++] = D.ref[2 * k + 1]; inT[ii[D.ref[2 * k + 1]]++] = D.ref[2 * k]; }
      refIndex = { outC, inC, outT, inT };
    }
    const r = refIndex;
    return { out: r.outT.subarray(r.outC[i], r.outC[i + 1]), in: r.inT.subarray(r.inC[i], r.inC[i + 1]) };
  }
  function chunkLinks(list) {
    const shown = Array.from(list.subarray(0, 6)).map((c) => '<a href="#explorer" data-go="' + addr[c] + '">' + hex(addr[c]) + "</a>");
    return list.length + (list.length ? ": " + shown.join(", ") + (list.length > 6 ? ", ..." : "") : "");
  }
  function esc(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }
  function showPanel(i, a) {
    const p = $("xp-panel");
    if (i < 0) {
      p.innerHTML = a === null ? "<p>past the end of this view</p>" : "<p>" + hex(a) + ": no chunk (outside the walked heap)</p>";
      return;
    }
    const h = D.heaps[D.chunkHeap[i]], fl = D.st8[i] >> 4, flags = [];
    if (fl & 2) flags.push("a thread's tcache_perthread_struct");
    if (fl & 1) flags.push("named by an anomaly");
    if (fl & 4) flags.push("the arena's last_remainder");
    const rows = [
      ["address", hex(addr[i])], ["size", chunkSize(i) + " B" + (chunkSize(i) >= 1024 ? " (" + human(chunkSize(i)) + ")" : "")], ["state", stateOf(i)],
      ["bin", binOf(i)], ["heap", "heap " + h.index + (h.arena === null ? ", mmapped" : ", arena " + h.arena) + ", user pointer " + hex(addr[i] + 16)],
      ["pages", pagesText(i)], ["owner", ownerText(i)], ["holder", holderText(i)], ["code", codeText(i)], ["flags", flags.join("; ")]
    ];
    const r = refs(i);
    let html = "<table>" + rows.filter(([, v]) => v !== "").map(([k, v]) =>
      '<tr><th>' + k + '</th><td data-k="' + k + '">' + esc(v) + "</td></tr>").join("");
    if (r) html += '<tr><th>points at</th><td data-k="refs_out">' + chunkLinks(r.out) + '</td></tr><tr><th>pointed at by</th><td data-k="refs_in">' + chunkLinks(r.in) + "</td></tr>";
    p.innerHTML = html + "</table>" + (st.pinned === i ? '<p class="sub">pinned: click the map again or press Esc to release</p>' : "");
  }

  /* ---- navigation ---- */
  function setView(v, bpp, row) {
    if (v !== st.view) st.miniCache = null;
    st.view = v;
    $("xp-view").value = String(v);
    st.bpp = bpp || fitBpp();
    st.row = clampRow(row || 0);
    draw();
  }
  function zoom(f, x, y) {
    const v = offsetAt(x, y), nb = Math.min(fitBpp(), Math.max(1, st.bpp * f));
    if (nb === st.bpp) return;
    st.bpp = nb;
    st.row = clampRow(v / nb / W - y);
    draw();
  }
  function goTo(a, pin) {
    const h = heapOf(a);
    if (!h) return false;
    const vi = D.views.findIndex((v) => v.heaps.includes(h.index));
    st.view = vi;
    const bpp = Math.min(st.bpp, 16, fitBpp());
    st.miniCache = null;
    st.bpp = bpp;
    st.row = clampRow(offsetOf(a) / bpp / W - H / 2);
    $("xp-view").value = String(vi);
    const i = chunkIn(h, a);
    if (pin) st.pinned = i;
    draw();
    showPanel(i, a);
    return true;
  }

  /* ---- search ---- */
  function search(q) {
    q = q.trim();
    const out = $("xp-results");
    st.mask = null;
    st.miniCache = null;
    if (q === "") { out.innerHTML = ""; draw(); return; }
    if (/^0x[0-9a-f]+$/i.test(q) || /^[0-9a-f]{8,}$/i.test(q)) {
      const a = parseInt(q.replace(/^0x/i, ""), 16);
      out.innerHTML = goTo(a, true) ? "<p>" + hex(a) + " is in the chunk pinned above.</p>" : "<p>" + hex(a) + " is in no heap of this dump.</p>";
      return;
    }
    const n = D.chunkCount, mask = new Uint8Array(n);
    const keys = (table) => new Set(Object.keys(table || {}).filter((k) => table[k] === q).map(Number));
    const cls = keys(D.classNames), dt = keys(D.dataTypeNames), ty = keys(D.typeNames);
    const stIdx = D.states.indexOf(q), cat = D.categories.indexOf(q);
    const anchors = new Set((D.anchors || []).map((a, k) => (a === q ? k + 1 : 0)).filter((k) => k));
    const modName = q.replace(/^module:/, ""), onlyModule = modName !== q;
    const modsNamed = new Set((D.codes || []).map((c, k) => (c[0] !== "vm_table" && D.codeNames[c[1]] === modName ? k + 1 : 0)).filter((k) => k));
    /* a name that is a class's too stays the class's: module:Name asks for the module's code */
    const mods = onlyModule || !cls.size ? modsNamed : new Set();
    const anchor = anchors.size > 0;
    const kind = { ruby: 1, anchored: 2, leaked: 3, unknown: 4, interior: 5 }[q] || 0;
    let what = [];
    if (mods.size) what.push("module");
    if (cls.size) what.push("class");
    if (dt.size) what.push("typed-data type");
    if (ty.size) what.push("Ruby type");
    if (stIdx >= 0) what.push("state");
    if (cat >= 0) what.push("owner category");
    if (kind && D.kind8) what.push("holder");
    if (anchor) what.push("anchor");
    for (let i = 0; i < n; i++) {
      if (onlyModule) { if (D.code && mods.has(D.code[i])) mask[i] = 1; continue; }
      let m = (mods.size && mods.has(D.code[i])) || (stIdx >= 0 && (D.st8[i] & 15) === stIdx) || (D.cat && cat >= 0 && D.cat[i] === cat) ||
        (D.kind8 && ((kind && D.kind8[i] === kind) || (anchor && anchors.has(D.anchorIds[i]))));
      const o = D.own ? D.own[i] : 0;
      if (!m && o) m = cls.has(D.objClass[o - 1]) || dt.has(D.objDtype[o - 1]) || ty.has(D.objType[o - 1]);
      if (m) mask[i] = 1;
    }
    let count = 0, total = 0;
    const perHeap = {}, list = [];
    for (let i = 0; i < n; i++) {
      if (!mask[i]) continue;
      count++;
      total += chunkSize(i);
      perHeap[D.chunkHeap[i]] = (perHeap[D.chunkHeap[i]] || 0) + chunkSize(i);
      if (list.length < MAX_LIST) list.push(i);
    }
    if (onlyModule) what = mods.size ? ["module"] : [];
    if (!what.length) {
      out.innerHTML = "<p>No class, module, typed-data type, Ruby type (T_STRING ...), state or owner category is called <b>" + esc(q) +
        "</b>. Addresses start with 0x.</p>";
      draw();
      return;
    }
    st.mask = mask;
    out.innerHTML = '<p data-k="totals"><b>' + esc(q) + "</b> (" + what.join(", ") + "): " + count + " chunk(s), " + total + " B (" + human(total) +
      "); by heap: " + Object.entries(perHeap).map(([h, b]) => "heap " + h + " " + human(b)).join(", ") + "</p><p>" +
      list.map((i) => '<a href="#explorer" data-go="' + addr[i] + '">' + hex(addr[i]) + "</a> " + human(chunkSize(i))).join(" &#183; ") +
      (count > list.length ? " ..." : "") + "</p>" +
      (!onlyModule && modsNamed.size && !mods.size ? "<p>The code charged to the module " + esc(q) + ": search <b>module:" + esc(q) + "</b>.</p>" : "");
    draw();
  }

  /* ---- wiring ---- */
  function legend() {
    const p = D.palette, sw = (c, l) => '<span><span class="sw" style="background:' + c + '"></span>' + esc(l) + "</span>";
    let items;
    if (st.mode === "owner") {
      items = D.categories.slice(1).map((c, k) => sw(p.owners[k + 1], c.replace("_", " "))).concat([sw(p.owners[0], "free (bins, caches, top)"), sw(p.states.meta, "allocator metadata")]);
      if (D.kind8) items.push(sw("#e7298a", "leaked"));
    } else if (st.mode === "residency") {
      items = [sw("#3b73b9", "resident (not shared, or not known to be)"), sw("#9e7bc4", "resident, shared with another process"), sw("#8c564b", "swapped"), sw("#e6e6e6", "not resident")];
    } else if (st.mode === "change") {
      items = D.changeNames.map((c, k) => sw(p.diff[k], c.replace(/_/g, " ")));
    } else if (st.mode === "pages") {
      items = D.pageClasses.map((c) => sw(p.page_classes[c], c.replace("_", " ")));
    } else {
      items = D.states.map((s) => sw(p.states[s], s.replace("_", " "))).concat(["pale: on a page not resident"]);
    }
    $("xp-legend").innerHTML = items.join(" ");
  }
  function pointer(e) {
    const r = e.target.getBoundingClientRect();
    return [Math.floor(e.clientX - r.left - e.target.clientLeft), Math.floor(e.clientY - r.top - e.target.clientTop)];
  }
  function start(raw) {
    D = decode(raw);
    const map = $("xp-map"), mini = $("xp-mini");
    ctx = map.getContext("2d");
    mctx = mini.getContext("2d");
    $("xp-view").innerHTML = D.views.map((v, k) => '<option value="' + k + '">' + esc(v.label) + "</option>").join("");
    let drag = null;
    map.addEventListener("mousemove", (e) => {
      const [x, y] = pointer(e);
      if (drag && e.buttons & 1) {
        if (Math.abs(y - drag.y) > 3) drag.moved = true;
        if (drag.moved) { st.row = clampRow(drag.row - (y - drag.y)); draw(); }
        return;
      }
      if (st.pinned >= 0) return;
      const a = addressAt(x, y), h = a === null ? null : heapOf(a);
      showPanel(h ? chunkIn(h, a) : -1, a);
    });
    map.addEventListener("mousedown", (e) => { const [, y] = pointer(e); drag = { y: y, row: st.row, moved: false }; });
    map.addEventListener("mouseup", (e) => {
      const moved = drag && drag.moved;
      drag = null;
      if (moved) return;
      const [x, y] = pointer(e), a = addressAt(x, y), h = a === null ? null : heapOf(a), i = h ? chunkIn(h, a) : -1;
      st.pinned = st.pinned === i ? -1 : i;
      draw();
      showPanel(i, a);
    });
    map.addEventListener("wheel", (e) => { e.preventDefault(); const [x, y] = pointer(e); zoom(e.deltaY < 0 ? 0.5 : 2, x, y); }, { passive: false });
    /* the minimap: a click centres the view there, a drag over a range zooms to fit that range */
    const miniOffset = (y) => Math.max(0, y) * MW * (viewSize() / (MW * H));
    let sel = null;
    mini.addEventListener("mousedown", (e) => { sel = { y0: pointer(e)[1] }; });
    mini.addEventListener("mousemove", (e) => {
      if (!sel || !(e.buttons & 1)) return;
      sel.y1 = pointer(e)[1];
      drawMini();
      mctx.fillStyle = "rgba(0,0,0,.25)";
      mctx.fillRect(0, Math.min(sel.y0, sel.y1), MW, Math.abs(sel.y1 - sel.y0) + 1);
    });
    mini.addEventListener("mouseup", (e) => {
      if (!sel) return;
      const y1 = pointer(e)[1], lo = Math.min(sel.y0, y1), hi = Math.max(sel.y0, y1);
      sel = null;
      if (hi - lo < 3) {
        st.row = clampRow(miniOffset(y1) / st.bpp / W - H / 2);
      } else {
        const v0 = miniOffset(lo), v1 = miniOffset(hi + 1);
        let b = 1;
        while (Math.ceil((v1 - v0) / b / W) > H) b *= 2;
        st.bpp = Math.min(b, fitBpp());
        st.row = clampRow(v0 / st.bpp / W);
      }
      draw();
    });
    $("xp-view").addEventListener("change", (e) => { st.pinned = -1; setView(Number(e.target.value)); });
    $("xp-fit").addEventListener("click", () => setView(st.view));
    $("xp-in").addEventListener("click", () => zoom(0.5, W / 2, H / 2));
    $("xp-out").addEventListener("click", () => zoom(2, W / 2, H / 2));
    document.querySelectorAll("input[name=xp-mode]").forEach((r) => r.addEventListener("change", (e) => {
      st.mode = e.target.value; st.miniCache = null; legend(); draw();
    }));
    $("xp-form").addEventListener("submit", (e) => { e.preventDefault(); search($("xp-search").value); });
    document.addEventListener("keydown", (e) => { if (e.key === "Escape" && st.pinned >= 0) { st.pinned = -1; draw(); } });
    map.addEventListener("keydown", (e) => {
      const step = { ArrowDown: H / 4, ArrowUp: -H / 4, PageDown: H, PageUp: -H }[e.key];
      if (step) { st.row = clampRow(st.row + step); draw(); }
      else if (e.key === "+" || e.key === "=") zoom(0.5, W / 2, H / 2);
      else if (e.key === "-") zoom(2, W / 2, H / 2);
      else return;
      e.preventDefault();
    });
    document.addEventListener("click", (e) => {
      const g = e.target.closest && e.target.closest("[data-go]");
      if (g) { e.preventDefault(); goTo(Number(g.dataset.go), true); }
    });
    st.mode = document.querySelector("input[name=xp-mode]:checked").value;
    legend();
    setView(D.initialView || 0);
    $("xp-status").textContent = D.chunkCount + " chunks loaded";
    window.ptmdExplorer.ready = true;
    setTimeout(() => refs(0), 0);   // the reference index, built while nobody hovers yet
  }

  /* What the specs and a console user can drive. */
  window.ptmdExplorer = {
    ready: false,
    width: W, height: H,
    show(group, bpp, row) {
      const v = D.views.findIndex((x) => x.group === String(group));
      if (v < 0) throw new Error("no view " + group + " in this dump");
      setView(v, bpp, row);
      return { bpp: st.bpp, row: st.row };
    },
    state() { return { view: D.views[st.view].group, bpp: st.bpp, row: st.row, mode: st.mode, pinned: st.pinned < 0 ? null : hex(addr[st.pinned]) }; },
    search(q) { $("xp-search").value = q; search(q); },
    highlighted() { const r = []; if (st.mask) for (let i = 0; i < D.chunkCount; i++) if (st.mask[i]) r.push(hex(addr[i])); return r; },
    unpin() { st.pinned = -1; draw(); }
  };
  window.ptmdExplorerData = function (raw) {
    try { start(raw); } catch (e) { $("xp-status").textContent = "the explorer could not start: " + e.message; throw e; }
  };
  function load() {
    const s = document.createElement("script");
    s.src = "explorer-data.js";
    s.onerror = () => { $("xp-status").textContent = "explorer-data.js is missing beside this page: the explorer needs it"; };
    document.body.appendChild(s);
  }
  /* after the first paint, so the verdict shows at once whatever the size of the data */
  window.addEventListener("load", () => requestAnimationFrame(() => setTimeout(load, 0)));
})();
