/**
 * The dashboard's page: an HTML shell, its style sheet and its script, served by the dashboard's own
 * routes (nothing is fetched from elsewhere, nothing needs building). The script renders every value it
 * gets with `textContent` (never as HTML), so whatever Redis holds shows as text.
 */

import { CHART_CSS, CHART_JS } from './dashboard.chart.js';

/** Escapes text for HTML (the shell's few server-side values). */
function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`);
}

export function pageHtml({
  base,
  title,
  actions,
  refreshMs,
  token,
}: {
  base: string;
  title: string;
  actions: boolean;
  refreshMs: number;
  token: string;
}): string {
  const config = escapeHtml(JSON.stringify({ base, actions, refreshMs }));
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="${escapeHtml(token)}">
<meta name="dashboard-config" content="${config}">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="${escapeHtml(base)}/app.css">
</head>
<body>
<header><a id="home" href="#/">${escapeHtml(title)}</a><a id="schedules-link" href="#/schedules">Schedules</a><span id="status" role="status"></span></header>
<main id="view" aria-live="polite"></main>
<script src="${escapeHtml(base)}/app.js"></script>
</body>
</html>
`;
}

export const APP_CSS = String.raw`
:root { color-scheme: light; --line: #d8dde3; --muted: #5f6b7a; --ok: #1f7a3d; --bad: #b42318; --accent: #2450a6; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #18202a; background: #f6f7f9; }
header { display: flex; align-items: center; gap: 16px; padding: 10px 20px; background: #18202a; }
header a { color: #fff; font-weight: 600; font-size: 16px; text-decoration: none; }
header a#schedules-link { font-weight: 400; font-size: 14px; color: #d6dde5; }
#status { color: #b8c2cc; font-size: 12px; margin-left: auto; }
main { padding: 16px 20px 40px; }
h1 { font-size: 18px; margin: 4px 0 12px; word-break: break-all; }
h2 { font-size: 15px; margin: 22px 0 8px; }
table { width: 100%; border-collapse: collapse; background: #fff; border: 1px solid var(--line); }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; font-size: 12px; color: var(--muted); white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td a { color: var(--accent); word-break: break-all; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 11px; background: #e5e9ee; color: #333; margin-left: 4px; }
.badge.paused { background: #fff1d6; color: #8a5300; }
.badge.dead { background: #fde7e6; color: var(--bad); }
.badge.alive { background: #dff3e5; color: var(--ok); }
.muted { color: var(--muted); }
.error { color: #b42318; }
.bad { color: var(--bad); }
button { font: inherit; font-size: 12px; padding: 3px 10px; border: 1px solid #b7c0ca; border-radius: 4px; background: #fff; cursor: pointer; }
button:hover { background: #eef1f4; }
button.danger { border-color: #e4a9a4; color: var(--bad); }
.bar { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 8px 0; }
.stats { display: flex; flex-wrap: wrap; gap: 18px; margin: 8px 0 14px; }
.stat .value { font-size: 18px; font-variant-numeric: tabular-nums; }
.bar label { font-size: 12px; color: var(--muted); }
select, input { font: inherit; font-size: 12px; padding: 2px 6px; }
pre { margin: 4px 0 0; padding: 6px 8px; background: #f3f5f7; border: 1px solid var(--line); max-height: 240px; overflow: auto; white-space: pre-wrap; word-break: break-all; font-size: 12px; }
svg.spark { display: block; background: #fafbfc; border-bottom: 1px solid var(--line); }
svg.spark .completed { fill: none; stroke: var(--ok); stroke-width: 1.5; }
svg.flow { display: block; margin: 8px 0; background: #fff; border: 1px solid var(--line); max-width: 100%; }
svg.flow line { stroke: #9aa5b1; stroke-width: 1.2; }
svg.flow rect { fill: #e5e9ee; stroke: #9aa5b1; rx: 4; }
svg.flow text { font: 12px system-ui, sans-serif; fill: #18202a; }
svg.flow .succeeded rect { fill: #dff3e5; stroke: var(--ok); }
svg.flow .failed rect { fill: #fde7e6; stroke: var(--bad); }
svg.flow .released rect { fill: #e3ebfa; stroke: var(--accent); }
svg.flow .cancelled rect, svg.flow .skipped rect { fill: #f1f1f1; stroke: #b8c2cc; stroke-dasharray: 3 2; }
svg.spark .failed { fill: none; stroke: var(--bad); stroke-width: 1.5; }
svg.spark circle.completed { fill: var(--ok); stroke: none; }
svg.spark circle.failed { fill: var(--bad); stroke: none; }
.summary { display: flex; flex-wrap: wrap; gap: 10px; margin-bottom: 8px; }
.summary div { background: #fff; border: 1px solid var(--line); padding: 6px 12px; min-width: 110px; }
.summary b { display: block; font-size: 18px; }
.message { padding: 8px 12px; background: #fff8e1; border: 1px solid #f0d58a; margin-bottom: 10px; }
.bar.danger-zone { margin-top: 14px; padding-top: 8px; border-top: 1px dashed #e4a9a4; }
.bar.danger-zone .label { font-size: 12px; color: var(--bad); }
.spark-legend { font-size: 11px; color: var(--muted); margin-top: 6px; }
.spark-legend i { display: inline-block; width: 10px; height: 3px; margin: 0 4px 2px 8px; vertical-align: middle; }
.spark-legend i.completed { background: var(--ok); }
.spark-legend i.failed { background: var(--bad); }
`.concat(CHART_CSS);

export const APP_JS =
  String.raw`
'use strict';
(function () {
  var config = JSON.parse(document.querySelector('meta[name="dashboard-config"]').getAttribute('content'));
  var token = document.querySelector('meta[name="csrf-token"]').getAttribute('content');
  var view = document.getElementById('view');
  var status = document.getElementById('status');
  var selected = new Set();
  var opened = new Set();
  var busy = false;
  var message = '';

  // Every value becomes a text node: nothing from Redis is ever parsed as HTML.
  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      var value = attrs[key];
      if (value === undefined || value === null || value === false) return;
      if (key === 'onclick' || key === 'onchange' || key === 'ontoggle') node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? '' : String(value));
    });
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function append(node, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) child.forEach(function (c) { append(node, c); });
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }
  function num(n) { return n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US'); }
  function age(ms) {
    if (ms === null || ms === undefined) return '–';
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    if (ms < 3600000) return Math.floor(ms / 60000) + ' min';
    return (ms / 3600000).toFixed(1) + ' h';
  }
  function query(params) {
    return Object.keys(params).filter(function (k) { return params[k] !== undefined && params[k] !== ''; })
      .map(function (k) { return encodeURIComponent(k) + '=' + encodeURIComponent(params[k]); }).join('&');
  }
  function route() {
    var hash = location.hash.replace(/^#/, '') || '/';
    var at = hash.indexOf('?');
    var params = {};
    new URLSearchParams(at < 0 ? '' : hash.slice(at + 1)).forEach(function (v, k) { params[k] = v; });
    return { path: at < 0 ? hash : hash.slice(0, at), params: params };
  }
  function link(path, params, text) { return el('a', { href: '#' + path + '?' + query(params) }, text); }

  function get(path, params) {
    return fetch(config.base + '/api/' + path + (params ? '?' + query(params) : ''), { credentials: 'same-origin', headers: { accept: 'application/json' } })
      .then(answer);
  }
  function post(path, body) {
    return fetch(config.base + '/api/' + path, {
      method: 'POST', credentials: 'same-origin',
      headers: { 'content-type': 'application/json', accept: 'application/json', 'x-csrf-token': token },
      body: JSON.stringify(body),
    }).then(answer);
  }
  function answer(response) {
    return response.json().catch(function () { return {}; }).then(function (body) {
      if (!response.ok) throw new Error(response.status + ': ' + (body && body.message ? [].concat(body.message).join(', ') : response.statusText));
      return body;
    });
  }
  function act(promise, done) {
    busy = true;
    return promise.then(function (result) { message = done(result); }, function (error) { message = 'Refused: ' + error.message; })
      .then(function () { busy = false; return refresh(); });
  }

  function sparkline(points) {
    var svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    svg.setAttribute('class', 'spark'); svg.setAttribute('width', '180'); svg.setAttribute('height', '36');
    svg.setAttribute('viewBox', '0 0 120 28'); svg.setAttribute('preserveAspectRatio', 'none');
    var max = 1;
    points.forEach(function (p) { max = Math.max(max, p.completed, p.failed); });
    var now = points.length ? points[points.length - 1].at : 0;
    ['completed', 'failed'].forEach(function (kind) {
      // A minute every 2 px, the latest at the right edge; a dot per recorded minute, joined by a line.
      var xy = points.map(function (p) {
        return [118 - ((now - p.at) / 60000) * 2, 26 - (p[kind] / max) * 24];
      });
      var line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
      line.setAttribute('class', kind);
      line.setAttribute('points', xy.map(function (c) { return c[0].toFixed(1) + ',' + c[1].toFixed(1); }).join(' '));
      svg.appendChild(line);
      xy.forEach(function (c) {
        var dot = document.createElementNS('http://www.w3.org/2000/svg', 'circle');
        dot.setAttribute('class', kind);
        dot.setAttribute('cx', c[0].toFixed(1)); dot.setAttribute('cy', c[1].toFixed(1)); dot.setAttribute('r', '1.6');
        svg.appendChild(dot);
      });
    });
    var title = document.createElementNS('http://www.w3.org/2000/svg', 'title');
    title.textContent = 'completed (green) and failed (red) per minute, last hour; peak ' + max + '/min';
    svg.appendChild(title);
    return svg;
  }
  // The last whole minute; the minute under way (so far) when it is the only one recorded yet.
  // With what the minute under way counted so far beside it, so a burst shows at once (and agrees with the chart).
  function latest(points, kind) {
    var whole = points.filter(function (p) { return !p.partial; });
    var current = points.filter(function (p) { return p.partial; })[0];
    var sofar = current ? num(Math.round(current[kind] || 0)) + ' so far' : null;
    if (!whole.length) return sofar || '–';
    var last = num(Math.round(whole[whole.length - 1][kind] || 0));
    return current && current[kind] ? last + ' (' + sofar + ')' : last;
  }

` +
  CHART_JS +
  String.raw`
  // One word per state, as the CLI and RedisTaskAdmin.stats() say it: paused, no worker, running (no badge).
  function stateBadge(row) {
    if (row.state === 'paused') return el('span', { class: 'badge paused', 'data-testid': 'state' }, 'paused');
    if (row.state !== 'no worker') return null;
    return el('span', {
      class: 'badge dead', 'data-testid': 'state',
      title: row.workers === 0 ? 'no worker is registered on this pattern (a misspelt name?)' : 'every registered worker\'s lease expired: dead or hung',
    }, 'no worker');
  }

  function headline(row) {
    function stat(label, field, value) {
      return el('div', { class: 'stat' }, el('div', { class: 'muted' }, label), el('div', { class: 'value', 'data-field': field }, value));
    }
    return el('div', { class: 'stats', 'data-testid': 'headline' },
      stat('Pending', 'pending', num(row.pending)), stat('In flight', 'inFlight', num(row.inFlight)),
      stat('Delayed', 'delayed', num(row.delayed)), stat('Dead letters (held now)', 'deadLetters', num(row.deadLetters)),
      stat('Oldest waiting', 'oldest', (row.oldestExact ? '' : '≥ ') + age(row.oldestWaitingAgeMs)),
      stat('Completed / min', 'completed', latest(row.perMinute, 'completed')), stat('Failed attempts / min', 'failed', latest(row.perMinute, 'failed')),
      stat('Dead-lettered / min', 'deadLettered', latest(row.perMinute, 'deadLettered')),
      stat('Workers alive', 'workers', num(row.workersAlive) + ' / ' + num(row.workers)),
      stat('State', 'state', row.state));
  }

  function pauseButton(row) {
    if (!config.actions) return null;
    var paused = row.paused;
    return el('button', {
      'data-testid': 'toggle-pause',
      onclick: function () {
        act(post(paused ? 'resume' : 'pause', { name: row.pattern, group: row.group }), function () { return (paused ? 'Resumed ' : 'Paused ') + row.pattern; });
      },
    }, paused ? 'Resume' : 'Pause');
  }

  function renderOverview(data) {
    var rows = data.patterns.map(function (row) {
      var params = { name: row.pattern, group: row.group };
      return el('tr', { 'data-pattern': row.pattern, 'data-group': row.group },
        el('td', null, link('/pattern', params, row.pattern), row.group !== 'default' ? el('span', { class: 'badge' }, 'group ' + row.group) : null,
          stateBadge(row)),
        el('td', { class: 'num', 'data-field': 'pending' }, num(row.pending)),
        el('td', { class: 'num', 'data-field': 'inFlight' }, num(row.inFlight)),
        el('td', { class: 'num', 'data-field': 'delayed' }, num(row.delayed)),
        el('td', { class: 'num', 'data-field': 'deadLetters' }, link('/dead', params, num(row.deadLetters))),
        el('td', { class: 'num', 'data-field': 'workers' }, num(row.workersAlive) + ' / ' + num(row.workers)),
        el('td', { class: 'num', 'data-field': 'oldest' }, (row.oldestExact ? '' : '≥ ') + age(row.oldestWaitingAgeMs)),
        el('td', { class: 'num', 'data-field': 'completed' }, latest(row.perMinute, 'completed')),
        el('td', { class: 'num', 'data-field': 'failed' }, latest(row.perMinute, 'failed')),
        el('td', null, sparkline(row.perMinute)),
        el('td', null, pauseButton(row)));
    });
    return [
      el('h1', null, 'Patterns'),
      rows.length === 0 ? el('p', { class: 'muted' }, 'No pattern under this prefix yet.') :
        el('table', { 'data-testid': 'overview' },
          el('thead', null, el('tr', null, el('th', null, 'Pattern'), el('th', { class: 'num' }, 'Pending'), el('th', { class: 'num' }, 'In flight'),
            el('th', { class: 'num' }, 'Delayed'), el('th', { class: 'num' }, 'Dead'), el('th', { class: 'num' }, 'Workers alive'),
            el('th', { class: 'num' }, 'Oldest waiting'), el('th', { class: 'num' }, 'Completed/min'), el('th', { class: 'num' }, 'Failed/min'),
            el('th', null, 'Last hour'), el('th', null, ''))),
          el('tbody', null, rows)),
      rows.length === 0 ? null : el('div', { class: 'spark-legend' }, 'Last hour, per minute:', el('i', { class: 'completed' }), 'completed',
        el('i', { class: 'failed' }), 'failed attempts', ' (each pattern page has the full chart, with axes and values)'),
      outboxPanel(data.outbox),
      batchLookup(''),
      flowLookup(''),
    ];
  }

  // The transactional outbox (when the app has one): rows waiting for a relay, the oldest one's age.
  function outboxPanel(outbox) {
    if (!outbox) return null;
    if (outbox.error) return el('section', { 'data-testid': 'outbox' }, el('h2', null, 'Outbox'), el('p', { class: 'error' }, outbox.error));
    return el('section', { 'data-testid': 'outbox' }, el('h2', null, 'Outbox'),
      el('table', null,
        el('thead', null, el('tr', null, el('th', { class: 'num' }, 'Waiting rows'), el('th', { class: 'num' }, 'Oldest waiting'),
          el('th', { class: 'num' }, 'Unreadable rows'), el('th', { class: 'num' }, 'Relayed here'))),
        el('tbody', null, el('tr', null,
          el('td', { class: 'num', 'data-field': 'depth' }, num(outbox.depth)),
          el('td', { class: 'num', 'data-field': 'lag' }, age(outbox.lagMs)),
          el('td', { class: 'num', 'data-field': 'rejected' }, num(outbox.rejected)),
          el('td', { class: 'num', 'data-field': 'relayed' }, outbox.relay ? num(outbox.relay.relayed) : 'no relay here')))));
  }

  function renderPattern(data, params) {
    var offset = Number(params.offset || 0);
    var clients = data.clients;
    return [
      el('h1', null, data.pattern, data.group !== 'default' ? el('span', { class: 'badge' }, 'group ' + data.group) : null,
        data.summary ? stateBadge(data.summary) : null),
      data.summary ? headline(data.summary) : el('p', { class: 'muted' }, 'Nothing recorded for this group yet.'),
      data.summary ? ratesChart(data.summary.perMinute, Date.now()) : null,
      data.summary ? oldestChart(data.pattern + '|' + data.group, data.summary, Date.now()) : null,
      taskLookup(data.pattern, data.group),
      el('div', { class: 'bar' }, link('/dead', { name: data.pattern, group: data.group }, 'Dead letters'),
        data.groups.length ? el('span', { class: 'muted' }, 'Consumer groups: ') : null,
        data.groups.map(function (g) { return link('/pattern', { name: data.pattern, group: g }, g); })),
      el('h2', null, 'Clients waiting (' + num(clients.total) + ')'),
      el('table', { 'data-testid': 'clients' },
        el('thead', null, el('tr', null, el('th', null, 'Client'), el('th', null, 'State'), el('th', { class: 'num' }, 'Pending'),
          el('th', { class: 'num' }, clients.clientConcurrency === null ? 'In flight' : 'In flight (cap ' + clients.clientConcurrency + ')'), el('th', { class: 'num' }, 'Weight'), el('th', { class: 'num' }, 'Rate limit /s'))),
        el('tbody', null, clients.clients.map(function (c) {
          return el('tr', null, el('td', null, c.clientId), el('td', null, c.state === 'parked' ? 'parked at its concurrency cap' : c.state),
            el('td', { class: 'num' }, num(c.pending)), el('td', { class: 'num' }, num(c.inFlight)), el('td', { class: 'num' }, num(c.weight)),
            el('td', { class: 'num' }, c.rateLimit === null ? '–' : num(c.rateLimit)));
        }))),
      el('div', { class: 'bar' },
        offset > 0 ? link('/pattern', { name: data.pattern, group: data.group, offset: Math.max(0, offset - 50) }, '← previous') : null,
        offset + clients.clients.length < clients.total ? link('/pattern', { name: data.pattern, group: data.group, offset: offset + 50 }, 'next →') : null),
      el('h2', null, 'Workers'),
      data.workers.length === 0 ? el('p', { class: 'muted', 'data-testid': 'no-workers' },
        'No worker consumes this pattern' + (data.group !== 'default' ? ' for group ' + data.group : '') + ': its tasks wait until one starts.') :
      el('table', { 'data-testid': 'workers' },
        el('thead', null, el('tr', null, el('th', null, 'Worker'), el('th', null, 'Liveness'), el('th', { class: 'num' }, 'Heartbeat age'),
          el('th', { class: 'num' }, 'In flight'), el('th', null, 'Running'))),
        el('tbody', null, data.workers.map(function (w) {
          return el('tr', null, el('td', null, w.workerId),
            el('td', null, el('span', { class: w.alive ? 'badge alive' : 'badge dead' }, w.alive ? 'alive' : 'lease expired')),
            el('td', { class: 'num' }, age(w.heartbeatAgeMs)), el('td', { class: 'num' }, num(w.inFlight)),
            el('td', null, w.running.map(function (t) { return el('div', null, t.id, el('span', { class: 'muted' }, ' client ' + t.clientId + ', attempt ' + t.attempt)); })));
        }))),
    ];
  }

  // A tracked task by id: its own view, with where it is or how it ended.
  function taskLookup(name, group, id) {
    var input = el('input', { 'data-testid': 'task-id', placeholder: 'task id', value: id || '' });
    function find() { if (input.value) location.hash = '#/task?' + query({ name: name, group: group, id: input.value.trim() }); }
    input.addEventListener('change', find);
    return el('div', { class: 'bar' }, el('label', null, 'Find a tracked task '), input,
      el('button', { 'data-testid': 'find-task', onclick: find }, 'Find'));
  }
  function renderTask(data, params) {
    var fields = [
      ['State', data.cancelRequested ? data.state + ' (cancel requested)' : data.state], ['Client', data.clientId],
      ['Enqueued', when(data.enqueuedAt)], ['Changed', when(data.changedAt)], ['Priority', data.priority],
      ['Waiting in its client', data.clientPending], ['Due', data.dueAt && when(data.dueAt)], ['Why', data.why],
      ['Worker', data.workerId], ['Attempt', data.attempt], ['Started', data.startedAt && when(data.startedAt)],
      ['Lease until', data.leaseExpiresAt && when(data.leaseExpiresAt)], ['Was', data.was], ['Reason', data.reason],
      ['Detail', data.detail], ['Progress', data.progressHidden ? 'reported (hidden: progress values are payload; showPayloads shows them)' : data.progress === undefined ? undefined : JSON.stringify(data.progress)],
      ['Steps done', data.steps && data.steps.done],
      ['Checkpoint', data.steps && (data.steps.checkpointHidden ? 'saved (hidden: checkpoints are payload; showPayloads shows them)' : data.steps.checkpoint === undefined ? undefined : JSON.stringify(data.steps.checkpoint))],
      ['Result', data.result === undefined ? undefined : JSON.stringify(data.result)],
      ['Error', data.error === undefined ? undefined : JSON.stringify(data.error)],
    ].filter(function (f) { return f[1] !== undefined && f[1] !== null; });
    var live = data.state === 'pending' || data.state === 'delayed' || data.state === 'running';
    return [
      el('h1', null, 'Task ', data.id, ' of ', link('/pattern', { name: params.name, group: params.group || 'default' }, params.name)),
      taskLookup(params.name, params.group || 'default', params.id),
      data.state === 'unknown' ? el('p', { class: 'muted', 'data-testid': 'task-unknown' }, 'No tracked task with this id here: it was not tracked, its record expired, or it belongs to another group.') :
        el('table', { 'data-testid': 'task' }, el('tbody', null, fields.map(function (f) {
          return el('tr', { 'data-field': f[0] }, el('th', null, f[0]), el('td', null, String(f[1])));
        }))),
      config.actions && live ? el('div', { class: 'bar' }, el('button', { class: 'danger', 'data-action': 'cancel-task', onclick: function () {
        if (!window.confirm('Cancel task ' + data.id + '?')) return;
        act(post('task/cancel', { name: params.name, group: params.group || 'default', id: data.id }), function (r) {
          return r.cancelled ? 'Cancelled ' + data.id + ' (it was ' + r.was + ')' : 'Not cancelled: it had ended (' + r.state + ')';
        });
      } }, 'Cancel task')) : null,
    ];
  }

  // A batch by id: its tasks' counts and its callback, found from the overview.
  function batchLookup(id) {
    var input = el('input', { 'data-testid': 'batch-id', placeholder: 'batch id', value: id || '' });
    function find() { if (input.value) location.hash = '#/batch?' + query({ id: input.value.trim() }); }
    input.addEventListener('change', find);
    return el('div', { class: 'bar' }, el('label', null, 'Find a batch '), input,
      el('button', { 'data-testid': 'find-batch', onclick: find }, 'Find'));
  }
  function renderBatch(data, params) {
    var fields = [
      ['State', data.state], ['Tasks', data.total], ['Pending', data.pending], ['Succeeded', data.succeeded],
      ['Failed', data.failed], ['Cancelled', data.cancelled],
      ['Callback', data.callbackIds ? data.callback + ' (' + data.callbackIds.join(', ') + ')' : data.callback],
      ['Opened', data.createdAt && when(data.createdAt)], ['Completed', data.firedAt && when(data.firedAt)],
    ].filter(function (f) { return f[1] !== undefined && f[1] !== null; });
    var live = (data.state === 'open' || data.state === 'sealed') && data.callback === 'waiting';
    return [
      el('h1', null, 'Batch ', data.id),
      batchLookup(params.id),
      data.state === 'unknown' ? el('p', { class: 'muted', 'data-testid': 'batch-unknown' }, 'No batch with this id: never opened, or its record expired.') :
        el('table', { 'data-testid': 'batch' }, el('tbody', null, fields.map(function (f) {
          return el('tr', { 'data-field': f[0] }, el('th', null, f[0]), el('td', null, String(f[1])));
        }))),
      config.actions && live ? el('div', { class: 'bar' }, el('button', { class: 'danger', 'data-action': 'cancel-batch', onclick: function () {
        if (!window.confirm('Cancel batch ' + data.id + '?')) return;
        act(post('batch/cancel', { id: data.id }), function (r) {
          return r.cancelled ? 'Cancelled batch ' + data.id + ': ' + r.removed + ' waiting removed, ' + r.stopped + ' running stopped' : 'No such batch';
        });
      } }, 'Cancel batch')) : null,
    ];
  }

  // A flow by id: its graph (each node a box colored by its state, an arrow from each parent) and its nodes.
  function flowLookup(id) {
    var input = el('input', { 'data-testid': 'flow-id', placeholder: 'flow id', value: id || '' });
    function find() { if (input.value) location.hash = '#/flow?' + query({ id: input.value.trim() }); }
    input.addEventListener('change', find);
    return el('div', { class: 'bar' }, el('label', null, 'Find a flow '), input,
      el('button', { 'data-testid': 'find-flow', onclick: find }, 'Find'));
  }
  // Columns by depth (a node one column right of its deepest parent), rows in the order the nodes come (svgEl: the
  // chart's, dashboard.chart.ts).
  function flowGraph(nodes) {
    var depth = {}, byId = {}, columns = [];
    nodes.forEach(function (n) { byId[n.id] = n; });
    function depthOf(n, seen) {
      if (depth[n.id] !== undefined) return depth[n.id];
      if (seen[n.id]) return 0;
      seen[n.id] = true;
      var d = 0;
      n.deps.forEach(function (dep) { if (byId[dep]) d = Math.max(d, depthOf(byId[dep], seen) + 1); });
      depth[n.id] = d;
      return d;
    }
    nodes.forEach(function (n) { var d = depthOf(n, {}); (columns[d] = columns[d] || []).push(n); });
    var W = 150, H = 28, GX = 50, GY = 12, at = {}, rows = 0;
    columns.forEach(function (column, c) {
      rows = Math.max(rows, column.length);
      column.forEach(function (n, r) { at[n.id] = { x: 10 + c * (W + GX), y: 10 + r * (H + GY) }; });
    });
    var width = 20 + columns.length * (W + GX) - GX, height = 20 + rows * (H + GY) - GY;
    var svg = svgEl('svg', { class: 'flow', 'data-testid': 'flow-graph', width: width, height: height, viewBox: '0 0 ' + width + ' ' + height, role: 'img' });
    svg.appendChild(svgEl('title', {}, 'The flow: each node a box (its state by color), a line from each parent'));
    nodes.forEach(function (n) {
      n.deps.forEach(function (dep) {
        if (!at[dep]) return;
        svg.appendChild(svgEl('line', { x1: at[dep].x + W, y1: at[dep].y + H / 2, x2: at[n.id].x, y2: at[n.id].y + H / 2 }));
      });
    });
    nodes.forEach(function (n) {
      var g = svgEl('g', { class: n.state, 'data-node': n.id, 'data-state': n.state });
      g.appendChild(svgEl('rect', { x: at[n.id].x, y: at[n.id].y, width: W, height: H }));
      var label = n.id.length > 18 ? n.id.slice(0, 17) + '…' : n.id;
      g.appendChild(svgEl('text', { x: at[n.id].x + 6, y: at[n.id].y + 18 }, label + ' · ' + n.state));
      g.appendChild(svgEl('title', {}, n.id + ' (' + n.pattern + '): ' + n.state));
      svg.appendChild(g);
    });
    return svg;
  }
  function renderFlow(data, params) {
    var fields = [
      ['State', data.state + (data.ended ? ', ended' : '')], ['Reason', data.reason],
      ['Created', data.createdAt && when(data.createdAt)], ['Ended', data.endedAt && when(data.endedAt)],
      ['Callback', data.callbackId],
    ].filter(function (f) { return f[1] !== undefined && f[1] !== null; });
    var outcome = function (n) {
      if (n.error) return n.error.message;
      if (n.result !== undefined) return JSON.stringify(n.result);
      return n.state === 'succeeded' && data.resultsHidden ? '(hidden: results are payload; showPayloads shows them)' : '';
    };
    return [
      el('h1', null, 'Flow ', data.id),
      flowLookup(params.id),
      data.state === 'unknown' ? el('p', { class: 'muted', 'data-testid': 'flow-unknown' }, 'No flow with this id: never created, or its record expired.') : [
        el('table', { 'data-testid': 'flow' }, el('tbody', null, fields.map(function (f) {
          return el('tr', { 'data-field': f[0] }, el('th', null, f[0]), el('td', null, String(f[1])));
        }))),
        flowGraph(data.nodes),
        el('table', { 'data-testid': 'flow-nodes' },
          el('thead', null, el('tr', null, el('th', null, 'Node'), el('th', null, 'State'), el('th', null, 'Pattern'),
            el('th', null, 'After'), el('th', null, 'Result or error'))),
          el('tbody', null, data.nodes.map(function (n) {
            return el('tr', { 'data-node': n.id },
              el('td', null, link('/task', { name: n.pattern, id: n.taskId }, n.id)),
              el('td', { class: n.state === 'failed' ? 'bad' : null }, n.state), el('td', null, n.pattern),
              el('td', null, n.deps.join(', ') + (n.deps.length && n.onParentFailure !== 'fail-flow' ? ' (' + n.onParentFailure + ')' : '')),
              el('td', null, outcome(n)));
          }))),
      ],
      config.actions && data.state === 'running' ? el('div', { class: 'bar' }, el('button', { class: 'danger', 'data-action': 'cancel-flow', onclick: function () {
        if (!window.confirm('Cancel flow ' + data.id + '?')) return;
        act(post('flow/cancel', { id: data.id }), function (r) {
          return r.cancelled ? 'Cancelled flow ' + data.id + ': ' + r.stopped + ' released node(s) stopped' : 'Not cancelled: it ended ' + r.state;
        });
      } }, 'Cancel flow')) : null,
    ];
  }

  function renderDead(data, params) {
    var name = params.name;
    var group = params.group || 'default';
    var offset = Number(params.offset || 0);
    var matching = { reason: params.reason || undefined, clientId: params.clientId || undefined };
    var reason = el('select', { 'data-testid': 'reason', onchange: function () { go({ reason: reason.value, offset: 0 }); } },
      ['', 'failed', 'timeout', 'interrupted', 'expired', 'malformed', 'unsupported-version', 'rejected'].map(function (r) {
        return el('option', { value: r, selected: r === (params.reason || '') }, r || 'any reason');
      }));
    var client = el('input', { 'data-testid': 'client-filter', placeholder: 'client id', value: params.clientId || '' });
    client.addEventListener('change', function () { go({ clientId: client.value, offset: 0 }); });
    function go(change) {
      var next = Object.assign({}, params, change);
      location.hash = '#/dead?' + query(next);
    }
    function actions(label, body, danger) {
      if (!config.actions) return null;
      return el('button', { class: danger ? 'danger' : null, 'data-action': label, onclick: function () {
        if (danger && !confirm(label + '?')) return;
        var selection = typeof body.selection === 'function' ? body.selection() : body.selection;
        act(post(body.purge ? 'dead-letters/purge' : 'dead-letters/requeue', Object.assign({ name: name, group: group }, selection)), function (r) {
          selected.clear();
          return body.purge ? 'Purged ' + r.purged : 'Requeued ' + r.requeued + (r.skipped ? ' (' + r.skipped + ' skipped)' : '');
        });
      } }, label);
    }
    var filtered = matching.reason || matching.clientId;
    function chosen() { return { ids: Array.from(selected) }; }
    return [
      el('h1', null, 'Dead letters of ', link('/pattern', { name: name, group: group }, name)),
      el('div', { class: 'bar' }, el('label', null, 'Reason '), reason, el('label', null, 'Client '), client,
        el('span', { class: 'muted' }, num(data.total) + ' dead letters in all')),
      el('div', { class: 'bar' },
        actions('Requeue selected', { selection: chosen }),
        actions(filtered ? 'Requeue all matching' : 'Requeue all', { selection: filtered ? { matching: matching } : { all: true } })),
      el('table', { 'data-testid': 'dead-letters' },
        el('thead', null, el('tr', null, config.actions ? el('th', null, '') : null, el('th', null, 'Task'), el('th', null, 'Reason'), el('th', { class: 'num' }, 'Attempts'),
          el('th', null, 'Dead at'), el('th', null, 'Error and payload'), config.actions ? el('th', null, '') : null)),
        el('tbody', null, data.records.map(function (r) {
          var box = config.actions && r.id ? el('input', { type: 'checkbox', checked: selected.has(r.id), onchange: function () { if (box.checked) selected.add(r.id); else selected.delete(r.id); } }) : null;
          var error = r.error ? [r.error.name, r.error.code ? ' [' + r.error.code + ']' : '', ': ', r.error.message].join('') : (r.detail || '');
          return el('tr', { 'data-task': r.id || '' },
            config.actions ? el('td', null, box) : null,
            el('td', null, r.id || '(no id)', el('div', { class: 'muted' }, 'client ' + (r.clientId || '?'))),
            el('td', null, r.reason), el('td', { class: 'num' }, num(r.attempts)),
            el('td', null, new Date(r.deadAt).toISOString().replace('T', ' ').slice(0, 19)),
            el('td', null, el('div', { class: 'bad' }, error),
              r.error && r.error.data !== undefined ? el('pre', null, JSON.stringify(r.error.data, null, 2)) : null,
              'payload' in r ? el('details', { open: opened.has(r.id), ontoggle: function (event) { if (event.target.open) opened.add(r.id); else opened.delete(r.id); } }, el('summary', null, 'payload'), el('pre', { 'data-field': 'payload' }, JSON.stringify(r.payload, null, 2))) : null,
              r.raw ? el('pre', null, r.raw) : null),
            config.actions && r.id ? el('td', null,
              actions('Requeue', { selection: { ids: [r.id] } }), ' ', actions('Purge', { purge: true, selection: { ids: [r.id] } }, true)) : null);
        }))),
      el('div', { class: 'bar' },
        offset > 0 ? el('button', { onclick: function () { go({ offset: 0 }); } }, '← first page') : null,
        data.nextOffset !== null ? el('button', { 'data-testid': 'next-page', onclick: function () { go({ offset: data.nextOffset }); } }, 'next page →') : null),
      // Deleting for good sits apart from requeueing, below the list, each behind a confirmation.
      config.actions ? el('div', { class: 'bar danger-zone', 'data-testid': 'danger-zone' }, el('span', { class: 'label' }, 'Delete for good:'),
        actions('Purge selected', { purge: true, selection: chosen }, true),
        actions(filtered ? 'Purge all matching' : 'Purge all', { purge: true, selection: filtered ? { matching: matching } : { all: true } }, true)) : null,
    ];
  }

  function when(ms) { return ms === undefined || ms === null ? '–' : new Date(ms).toISOString().replace('T', ' ').slice(0, 19); }
  function renderSchedules(data) {
    // The button says what it does; the message after it, what was done.
    function action(row, label, done, name, danger) {
      return el('button', { class: danger ? 'danger' : null, 'data-action': name, onclick: function () {
        if (name === 'remove' && !window.confirm('Remove schedule ' + row.id + '?')) return;
        act(post('schedules/action', { id: row.id, action: name }), function (r) {
          if (name === 'trigger') return r.fired ? 'Triggered ' + row.id + ': task ' + r.taskId : 'Nothing triggered: the previous task of ' + row.id + ' still runs';
          return done + ' ' + row.id;
        });
      } }, label);
    }
    var rows = data.schedules.map(function (row) {
      var spec = row.spec;
      var state = row.state;
      return el('tr', { 'data-schedule': row.id },
        el('td', null, row.id, row.source === 'code' ? el('span', { class: 'badge' }, '@TaskSchedule') : null),
        el('td', null, link('/pattern', { name: spec.pattern, group: 'default' }, spec.pattern)),
        el('td', null, spec.cron !== undefined ? 'cron ' + spec.cron + (spec.tz ? ' (' + spec.tz + ')' : '') : 'every ' + num(spec.everyMs) + ' ms'),
        el('td', { 'data-field': 'state' }, row.orphaned ? el('span', { class: 'bad' }, 'orphaned: decorator gone') : row.paused ? 'paused' : row.ended ? 'ended' :
          row.heldReason ? el('span', { class: 'bad', title: row.heldReason }, 'held: no worker of ' + spec.pattern + ' yet') : 'active'),
        el('td', null, row.nextTicks.length === 0 ? '–' : row.nextTicks.map(function (t) { return el('div', null, when(t)); })),
        el('td', null, when(state.lastTick), state.lastOutcome ? el('span', { class: 'muted' }, ' ' + state.lastOutcome) : null,
          state.lastTaskId ? el('div', { class: 'muted' }, state.lastTaskId) : null),
        el('td', { class: 'num', 'data-field': 'fired' }, num(state.fired)),
        el('td', { class: 'num', 'data-field': 'skipped' }, num(state.skipped)),
        el('td', { class: 'num', 'data-field': 'missed' }, num(state.missed)),
        el('td', { class: 'num', 'data-field': 'held' }, num(state.held || 0)),
        config.actions ? el('td', null, row.paused || row.orphaned ? action(row, 'Resume', 'Resumed', 'resume') : action(row, 'Pause', 'Paused', 'pause'), ' ',
          action(row, 'Trigger now', 'Triggered', 'trigger'), ' ', action(row, 'Remove', 'Removed', 'remove', true)) : null);
    });
    return [
      el('h1', null, 'Schedules'),
      rows.length === 0 ? el('p', { class: 'muted' }, 'No recurring schedule under this prefix.') :
        el('table', { 'data-testid': 'schedules' },
          el('thead', null, el('tr', null, el('th', null, 'Schedule'), el('th', null, 'Pattern'), el('th', null, 'Rhythm'), el('th', null, 'State'),
            el('th', null, 'Next ticks (UTC)'), el('th', null, 'Last tick'), el('th', { class: 'num' }, 'Fired'), el('th', { class: 'num' }, 'Skipped'),
            el('th', { class: 'num' }, 'Missed'), el('th', { class: 'num', title: 'Ticks that produced nothing because no worker or producer had used the pattern yet' }, 'Held'), config.actions ? el('th', null, '') : null)),
          el('tbody', null, rows)),
    ];
  }

  var loaders = {
    '/': function () { return get('overview').then(renderOverview); },
    '/pattern': function (params) { return get('pattern', params).then(function (d) { return renderPattern(d, params); }); },
    '/dead': function (params) { return get('dead-letters', params).then(function (d) { return renderDead(d, params); }); },
    '/schedules': function () { return get('schedules').then(renderSchedules); },
    '/task': function (params) { return get('task', params).then(function (d) { return renderTask(d, params); }); },
    '/batch': function (params) { return get('batch', params).then(function (d) { return renderBatch(d, params); }); },
    '/flow': function (params) { return get('flow', params).then(function (d) { return renderFlow(d, params); }); },
  };

  var generation = 0;
  function refresh() {
    if (busy) return Promise.resolve();
    var current = route();
    var shown = location.hash || '#/';
    var mine = ++generation;
    var load = loaders[current.path] || loaders['/'];
    return load(current.params).then(function (nodes) {
      if (mine !== generation) return;
      // A focused filter keeps its place: the refresh waits until it is left.
      if (document.activeElement && document.activeElement.tagName === 'INPUT' && document.activeElement.type !== 'checkbox') return;
      view.replaceChildren();
      if (message) append(view, el('div', { class: 'message', 'data-testid': 'message' }, message));
      append(view, nodes);
      // Which route the view shows, once it shows it: a hash change renders later, after its fetch.
      view.setAttribute('data-route', shown);
      status.textContent = 'updated ' + new Date().toLocaleTimeString();
      status.removeAttribute('data-error');
    }, function (error) {
      status.textContent = 'refresh failed: ' + error.message;
      status.setAttribute('data-error', 'true');
    });
  }
  window.addEventListener('hashchange', function () { message = ''; selected.clear(); refresh(); });
  setInterval(refresh, config.refreshMs);
  refresh();
})();
`;
