/**
 * The dashboard's charts, as script source placed inside its page script (see dashboard.assets.ts): an SVG
 * line chart over the last hour with both axes labelled, a legend, and a hover value for every minute (the
 * browser's own tooltip, from an SVG `<title>`). Text goes in with `textContent` only.
 */
export const CHART_CSS = String.raw`
.chart { background: #fff; border: 1px solid var(--line); padding: 8px 10px 4px; margin: 8px 0 14px; max-width: 760px; }
.chart h3 { font-size: 13px; margin: 0 0 4px; }
.chart svg { display: block; width: 100%; height: auto; }
.chart .axis line, .chart .grid line { stroke: var(--line); }
.chart .axis text { font-size: 10px; fill: var(--muted); }
.chart polyline { fill: none; stroke-width: 2; }
.chart .completed { stroke: var(--ok); fill: var(--ok); }
.chart .failed { stroke: #d97706; fill: #d97706; }
.chart .deadLettered { stroke: var(--bad); fill: var(--bad); }
.chart .oldest { stroke: var(--accent); fill: var(--accent); }
.chart polyline.completed, .chart polyline.failed, .chart polyline.deadLettered, .chart polyline.oldest { fill: none; }
.chart rect.hover { fill: transparent; }
.chart rect.hover:hover { fill: rgba(36, 80, 166, 0.08); }
.legend { display: flex; flex-wrap: wrap; gap: 14px; font-size: 12px; color: var(--muted); margin: 2px 0 0; }
.legend i { display: inline-block; width: 12px; height: 3px; margin-right: 5px; vertical-align: middle; }
.legend i.completed { background: var(--ok); } .legend i.failed { background: #d97706; }
.legend i.deadLettered { background: var(--bad); } .legend i.oldest { background: var(--accent); }
`;

export const CHART_JS = String.raw`
  var SVG = 'http://www.w3.org/2000/svg';
  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, String(attrs[key])); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  // A round top for the y axis: 1, 2 or 5 times a power of ten, at least the largest value.
  function niceMax(value) {
    if (!(value > 0)) return 1;
    var power = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * power >= value) return steps[i] * power;
    return 10 * power;
  }
  function clock(ms) { var d = new Date(ms); return ('0' + d.getHours()).slice(-2) + ':' + ('0' + d.getMinutes()).slice(-2); }
  function rounded(n) { return Math.round(n * 10) / 10; }

  // spec: { title, testid, now, series: [{ key, label, points: [{ at, value }] }], format(value), unit, floor }
  // (floor: the least top of the y axis)
  // The last 60 minutes run left to right; every series shares the y axis (0 to a round maximum).
  function chart(spec) {
    var W = 720, H = 190, left = 48, right = 12, top = 10, bottom = 26;
    var plotW = W - left - right, plotH = H - top - bottom;
    var from = spec.now - 60 * 60000;
    var max = 0;
    spec.series.forEach(function (s) { s.points.forEach(function (p) { if (p.at >= from) max = Math.max(max, p.value); }); });
    max = niceMax(Math.max(max, spec.floor || 0));
    function x(at) { return left + ((at - from) / (60 * 60000)) * plotW; }
    function y(value) { return top + plotH - (value / max) * plotH; }
    var svg = svgEl('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': spec.title });
    var grid = svgEl('g', { class: 'grid' });
    var axis = svgEl('g', { class: 'axis' });
    [0, 0.5, 1].forEach(function (f) {
      grid.appendChild(svgEl('line', { x1: left, x2: W - right, y1: y(max * f), y2: y(max * f) }));
      axis.appendChild(svgEl('text', { x: left - 6, y: y(max * f) + 3, 'text-anchor': 'end' }, spec.format(max * f)));
    });
    [60, 45, 30, 15, 0].forEach(function (ago) {
      var at = spec.now - ago * 60000;
      axis.appendChild(svgEl('line', { x1: x(at), x2: x(at), y1: top + plotH, y2: top + plotH + 4 }));
      axis.appendChild(svgEl('text', { x: x(at), y: H - 8, 'text-anchor': ago === 0 ? 'end' : 'middle' }, ago === 0 ? 'now' : '-' + ago + ' min'));
    });
    axis.appendChild(svgEl('line', { x1: left, x2: left, y1: top, y2: top + plotH }));
    axis.appendChild(svgEl('line', { x1: left, x2: W - right, y1: top + plotH, y2: top + plotH }));
    svg.appendChild(grid);
    svg.appendChild(axis);
    spec.series.forEach(function (s) {
      var shown = s.points.filter(function (p) { return p.at >= from; });
      svg.appendChild(svgEl('polyline', { class: s.key, 'data-series': s.key, points: shown.map(function (p) {
        return x(p.at).toFixed(1) + ',' + y(p.value).toFixed(1);
      }).join(' ') }));
      shown.forEach(function (p) { svg.appendChild(svgEl('circle', { class: s.key, cx: x(p.at).toFixed(1), cy: y(p.value).toFixed(1), r: 2 })); });
    });
    // One hover band per sample time: its tooltip gives every series' value then.
    var times = {};
    spec.series.forEach(function (s) { s.points.forEach(function (p) { if (p.at >= from) times[p.at] = true; }); });
    Object.keys(times).map(Number).sort(function (a, b) { return a - b; }).forEach(function (at) {
      var lines = spec.series.map(function (s) {
        var found = s.points.filter(function (p) { return p.at === at; })[0];
        return found ? s.label + ': ' + spec.format(found.value) + (found.partial ? ' (so far)' : '') : null;
      }).filter(Boolean);
      var band = svgEl('rect', { class: 'hover', 'data-at': at, x: (x(at) - 5).toFixed(1), y: top, width: 10, height: plotH });
      band.appendChild(svgEl('title', null, clock(at) + (spec.unit ? ' (' + spec.unit + ')' : '') + '\n' + lines.join('\n')));
      svg.appendChild(band);
    });
    var legend = el('div', { class: 'legend' }, spec.series.map(function (s) { return el('span', null, el('i', { class: s.key }), s.label); }));
    return el('div', { class: 'chart', 'data-testid': spec.testid }, el('h3', null, spec.title), svg, legend);
  }

  // The pattern page's rates: completed, failed attempts and dead-lettered tasks per minute.
  function ratesChart(perMinute, now) {
    function series(key, label) {
      // Each minute drawn at its middle (the minute under way at now, at the latest).
      return { key: key, label: label, points: perMinute.map(function (p) { return { at: Math.min(p.at + 30000, now), value: p[key] || 0, partial: p.partial }; }) };
    }
    return chart({
      title: 'Last hour, per minute', testid: 'rates-chart', now: now, unit: 'tasks per minute',
      format: function (v) { return num(rounded(v)); },
      series: [series('completed', 'completed'), series('failed', 'failed attempts'), series('deadLettered', 'dead-lettered')],
    });
  }

  // Oldest waiting age, as this page sampled it at each refresh (the server keeps no history of it).
  var oldestSamples = {};
  function oldestChart(key, summary, now) {
    var samples = oldestSamples[key] || (oldestSamples[key] = []);
    samples.push({ at: now, value: summary.oldestWaitingAgeMs === null ? 0 : summary.oldestWaitingAgeMs });
    while (samples.length && samples[0].at < now - 60 * 60000) samples.shift();
    return chart({
      title: 'Oldest waiting task (sampled by this page since it opened)', testid: 'oldest-chart', now: now, unit: 'age',
      format: age, floor: 1000, series: [{ key: 'oldest', label: 'oldest waiting', points: samples }],
    });
  }
`;
