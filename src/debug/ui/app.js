// meshflow's debug UI: views drawn from the debug port's JSON endpoints, chosen by the URL
// fragment (#/proxies, #/proxy/ID, #/history/ID, #/explain/ID/TYPE/NAME, #/authz/ID?…,
// #/errors, #/mtls, #/convergence). Every text from the server goes in as text, never as
// markup.
"use strict";

const TYPES = ["CDS", "EDS", "LDS", "RDS", "SDS"];
const view = document.getElementById("view");
const statusLine = document.getElementById("status");

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function json(path) {
  const r = await fetch(path);
  const text = await r.text();
  if (!r.ok) throw new Error(`${path}: ${r.status} ${text}`);
  return JSON.parse(text);
}

function ago(unixSeconds) {
  if (!unixSeconds) return "";
  const s = Math.max(0, Date.now() / 1000 - unixSeconds);
  if (s < 60) return `${s.toFixed(0)}s ago`;
  if (s < 3600) return `${(s / 60).toFixed(0)}m ago`;
  return `${(s / 3600).toFixed(1)}h ago`;
}

const link = (hash, text) => el("a", { href: hash }, text);
const enc = encodeURIComponent;

// ---- views ----

async function proxiesView() {
  const list = await json("/debug/proxies");
  const head = el("tr", {}, el("th", {}, "proxy"), el("th", {}, "kind"),
    el("th", {}, "streams"), TYPES.map((t) => el("th", {}, t)));
  const rows = list.proxies.map((p) => el("tr", { "data-proxy": p.id },
    el("td", {}, link(`#/proxy/${enc(p.id)}`, p.id)),
    el("td", {}, p.kind),
    el("td", {}, p.streams),
    TYPES.map((t) => {
      const s = p.types[t];
      if (!s) return el("td", {}, "");
      const age = s.sync === "STALE" ? `${(s.stale_seconds || 0).toFixed(1)}s unanswered`
        : ago(s.last_ack || s.last_sent);
      return el("td", { class: `sync ${s.sync.replace(" ", "-").toLowerCase()}` },
        el("span", { class: "state" }, s.sync), ` ${s.resources} `,
        el("span", { class: "age" }, age),
        s.last_nack ? el("div", { class: "nack" }, s.last_nack) : null);
    })));
  return [el("h1", {}, `Connected proxies (epoch ${list.epoch})`),
    list.proxies.length ? el("table", { id: "proxies" }, head, rows)
      : el("p", {}, "No proxy is connected.")];
}

/// The resources of one section of Envoy's config dump: (name, body).
function sections(dump) {
  const out = [];
  for (const c of dump.configs || []) {
    const t = c["@type"] || "";
    const add = (type, items, name, body) => out.push([type, (items || []).map((i) => [name(i), body(i)])]);
    if (t.endsWith("ClustersConfigDump")) add("cluster", c.dynamic_active_clusters, (i) => i.cluster.name, (i) => i.cluster);
    else if (t.endsWith("ListenersConfigDump")) add("listener", c.dynamic_listeners, (i) => i.name, (i) => i.active_state && i.active_state.listener);
    else if (t.endsWith("RoutesConfigDump")) add("route", c.dynamic_route_configs, (i) => i.route_config.name, (i) => i.route_config);
    else if (t.endsWith("EndpointsConfigDump")) add("endpoint", c.dynamic_endpoint_configs, (i) => i.endpoint_config.cluster_name, (i) => i.endpoint_config);
  }
  return out;
}

async function proxyView(id) {
  const dump = await json(`/debug/config_dump?proxy=${enc(id)}`);
  const parts = sections(dump).map(([type, items]) => el("section", { class: "resources", "data-type": type },
    el("h2", {}, `${type}s (${items.length})`),
    items.map(([name, body]) => el("details", { "data-resource": `${type}/${name}` },
      el("summary", {}, name, " ", link(`#/explain/${enc(id)}/${type}/${enc(name)}`, "explain")),
      el("pre", {}, JSON.stringify(body, null, 2))))));
  return [el("h1", {}, id), el("p", {}, link(`#/history/${enc(id)}`, "history and diff"), " · ",
    link(`#/authz/${enc(id)}`, "authorization check")), parts];
}

function describeInput(i) {
  return `${i.op} ${i.kind} ${i.namespace ? i.namespace + "/" : ""}${i.name} (${i.source})`;
}

function diffBlock(diff) {
  if (!diff.resources.length) return el("p", { id: "diff" }, "No change between these epochs.");
  return el("div", { id: "diff" }, diff.resources.map((r) => el("section", { class: "diff" },
    el("h3", {}, `${r.change} ${r.type} ${r.name}`),
    el("pre", {}, r.lines.map((l) => el("span", {
      class: l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : l.startsWith("@@") ? "hunk" : "",
    }, l + "\n"))))));
}

async function historyView(id, query) {
  const all = await json(`/debug/diff?proxy=${enc(id)}&from=0`);
  const epochs = all.epochs.map((e) => e.epoch);
  const from = query.get("from") || (epochs.length > 1 ? String(epochs[epochs.length - 2]) : "0");
  const to = query.get("to") || String(all.to_epoch);
  const choices = [...new Set([0, ...epochs, all.to_epoch])].sort((a, b) => a - b);
  const pick = (name, value) => el("select", { name },
    choices.map((e) => { const o = el("option", { value: e }, e); if (String(e) === value) o.selected = true; return o; }));
  const fromSel = pick("from", from);
  const toSel = pick("to", to);
  const go = () => { location.hash = `#/history/${enc(id)}?from=${fromSel.value}&to=${toSel.value}`; };
  const table = el("table", { id: "epochs" },
    el("tr", {}, el("th", {}, "epoch"), el("th", {}, "applied"), el("th", {}, "inputs"), el("th", {}, "pushes")),
    all.epochs.map((e) => el("tr", { "data-epoch": e.epoch },
      el("td", {}, e.epoch), el("td", {}, new Date(e.applied * 1000).toISOString()),
      el("td", {}, e.inputs.map((i) => el("div", {}, describeInput(i)))),
      el("td", {}, e.deliveries.map((d) => el("div", {}, `${d.type} ${d.state}`))))));
  const diff = await json(`/debug/diff?proxy=${enc(id)}&from=${enc(from)}&to=${enc(to)}`);
  return [el("h1", {}, `History of ${id}`),
    el("p", {}, link(`#/proxy/${enc(id)}`, "resources")),
    table,
    el("h2", {}, "Diff"),
    el("p", { class: "pick" }, "from epoch ", fromSel, " to epoch ", toSel, " ", el("button", { onclick: go }, "diff")),
    diffBlock(diff)];
}

/// Input objects → the resource → the proxies holding it, as three columns.
function explainGraph(e) {
  const row = 34, width = 1020, boxW = 300;
  const rows = Math.max(e.inputs.length, e.holders.length, 1);
  const height = rows * row + 20;
  const mid = height / 2;
  const ys = (n) => Array.from({ length: n }, (_, i) => (height - n * row) / 2 + i * row + row / 2);
  const box = (x, y, text, cls) => svg("g", { class: cls },
    svg("rect", { x, y: y - 13, width: boxW, height: 26, rx: 4 }),
    svg("text", { x: x + 8, y: y + 5 }, text.length > 39 ? text.slice(0, 38) + "…" : text),
    svg("title", {}, text));
  const g = [];
  const inY = ys(e.inputs.length), holdY = ys(e.holders.length);
  e.inputs.forEach((i, k) => g.push(svg("line", { x1: 10 + boxW, y1: inY[k], x2: 360, y2: mid })));
  e.holders.forEach((h, k) => g.push(svg("line", { x1: 360 + boxW, y1: mid, x2: 710, y2: holdY[k] })));
  e.inputs.forEach((i, k) => g.push(box(10, inY[k], `${i.kind} ${i.namespace}/${i.name}`, "input")));
  g.push(box(360, mid, `${e.type} ${e.name}`, "resource"));
  e.holders.forEach((h, k) => g.push(box(710, holdY[k], h, "holder")));
  return svg("svg", { id: "explain-graph", viewBox: `0 0 ${width} ${height}`, width, height }, g);
}

async function explainView(id, type, name) {
  const e = await json(`/debug/explain?proxy=${enc(id)}&resource=${enc(type + "/" + name)}`);
  return [el("h1", {}, `${e.type} ${e.name}`),
    el("p", {}, `held by ${e.holders.length} proxy(ies), shared in scope ${e.scope}; built from ${e.inputs.length} input object(s)`),
    explainGraph(e),
    el("ul", { id: "inputs" }, e.inputs.map((i) => el("li", {}, `${i.kind} ${i.namespace}/${i.name}`))),
    el("ul", { id: "holders" }, e.holders.map((h) => el("li", {}, link(`#/proxy/${enc(h)}`, h))))];
}

/// The request fields of `/debug/authz_check` (as `meshflow authz check` names them), with
/// what the form starts from.
const AUTHZ_FIELDS = [["port", ""], ["method", "GET"], ["path", "/"], ["host", ""],
  ["from", ""], ["address", ""], ["source_ip", ""], ["header", ""], ["jwt_claims", ""],
  ["ext_authz", ""]];

/// Which filter and policy of the proxy decide a request: a form, and its verdict.
async function authzView(id, query) {
  const inputs = AUTHZ_FIELDS.map(([name, start]) => el("input", {
    name, value: query.get(name) ?? start, placeholder: name === "header" ? "NAME=VALUE" : name,
  }));
  const go = () => {
    const q = new URLSearchParams();
    for (const i of inputs) if (i.value) q.set(i.name, i.value);
    location.hash = `#/authz/${enc(id)}?${q}`;
  };
  const head = [el("h1", {}, `Authorization check on ${id}`),
    el("p", {}, link(`#/proxy/${enc(id)}`, "resources")),
    el("p", { class: "pick", id: "authz-form" },
      inputs.map((i) => el("label", {}, `${i.name} `, i, " ")),
      el("button", { onclick: go }, "check"))];
  if (!query.get("port")) {
    return [...head, el("p", {}, "Describe a request (at least its port) to see which filter " +
      "and policy decide it, from what the proxy holds now.")];
  }
  const q = new URLSearchParams(query);
  q.set("proxy", id);
  const v = await json(`/debug/authz_check?${q}`);
  const row = (k, val) => el("tr", {}, el("th", {}, k), el("td", {}, val || "—"));
  return [...head, el("section", { id: "verdict", "data-decision": v.decision },
    el("h2", {}, v.status ? `${v.decision} (${v.status})` : v.decision),
    el("ol", { id: "authz-filters" }, v.filters.map((f) => el("li", {}, f))),
    el("table", {}, row("listener", v.listener), row("filter chain", v.filter_chain),
      row("route", v.route), row("clusters", v.clusters.join(", "))),
    v.why ? el("p", { class: "why" }, v.why) : null,
    v.warnings.map((w) => el("p", { class: "warning" }, w)))];
}

/// PeerAuthentication changes held part-way: each workload's step and what it waits for.
async function mtlsView() {
  const list = await json("/debug/mtls_transitions");
  const head = el("tr", {}, ["workload", "address", "clients sent", "clients send",
    "step", "since", "waits for"].map((h) => el("th", {}, h)));
  return [el("h1", {}, "mTLS changes in progress"),
    list.length ? el("table", { id: "mtls" }, head, list.map((t) => el("tr", {},
      el("td", {}, t.workload), el("td", {}, t.ip), el("td", {}, t.from), el("td", {}, t.to),
      el("td", {}, t.step), el("td", {}, ago(t.step_since_unix_ms / 1000)),
      el("td", {}, `${t.waiting} acknowledgment(s)`, t.waiting_for.map((w) => el("div", {}, w))))))
      : el("p", { id: "mtls" }, "None: every PeerAuthentication change is complete.")];
}

async function errorsView() {
  const e = await json("/debug/config_errors");
  const list = (id, title, items) => [el("h2", {}, `${title} (${items.length})`),
    items.length ? el("ul", { id }, items.map((t) => el("li", { class: t.includes(": error: ") ? "error" : "" }, t)))
      : el("p", { id }, "none")];
  return [el("h1", {}, "Config errors and analysis"),
    list("rejected", "Rejected input objects", e.rejected_inputs),
    list("dataflow", "Across objects", e.errors.map((x) => `${x.object}: ${x.message}`)),
    list("analysis", "Analysis of accepted objects", e.analysis)];
}

/// `meshflow_convergence_seconds` buckets from the Prometheus text, per bucket (not cumulative).
function histogram(text, metric) {
  const buckets = [];
  let count = 0, sum = 0;
  for (const line of text.split("\n")) {
    let m = line.match(new RegExp(`^${metric}_bucket\\{.*le="([^"]+)".*\\} ([0-9.e+-]+)`));
    if (m) buckets.push([m[1], Number(m[2])]);
    m = line.match(new RegExp(`^${metric}_count(?:\\{[^}]*\\})? ([0-9.e+-]+)`));
    if (m) count = Number(m[1]);
    m = line.match(new RegExp(`^${metric}_sum(?:\\{[^}]*\\})? ([0-9.e+-]+)`));
    if (m) sum = Number(m[1]);
  }
  const per = buckets.map(([le, c], i) => [le, c - (i ? buckets[i - 1][1] : 0)]);
  return { per, count, sum };
}

async function convergenceView() {
  const r = await fetch("/metrics");
  const h = histogram(await r.text(), "meshflow_convergence_seconds");
  const max = Math.max(1, ...h.per.map(([, c]) => c));
  const barW = 52, height = 220, width = Math.max(1, h.per.length) * barW + 60;
  const bars = h.per.map(([le, c], i) => {
    const bh = (c / max) * (height - 60);
    const label = le === "+Inf" ? "+Inf" : Number(le) < 1 ? `${(Number(le) * 1000).toPrecision(3)} ms` : `${Number(le).toPrecision(3)} s`;
    return svg("g", { class: "bar", "data-le": le, "data-count": c },
      svg("rect", { x: 40 + i * barW, y: height - 40 - bh, width: barW - 8, height: bh }),
      svg("text", { x: 40 + i * barW + (barW - 8) / 2, y: height - 44 - bh, "text-anchor": "middle" }, c),
      svg("text", { x: 40 + i * barW + (barW - 8) / 2, y: height - 24, "text-anchor": "middle", class: "le" }, `≤${label}`));
  });
  const mean = h.count ? (h.sum / h.count) * 1000 : 0;
  return [el("h1", {}, "Convergence: input change → proxy ACK"),
    el("p", { id: "convergence-summary" }, `${h.count} pushes acknowledged, mean ${mean.toFixed(1)} ms`),
    svg("svg", { id: "convergence", viewBox: `0 0 ${width} ${height}`, width, height }, bars)];
}

// ---- routing ----

async function route() {
  const [path, q] = (location.hash.slice(1) || "/proxies").split("?");
  const query = new URLSearchParams(q || "");
  const parts = path.split("/").slice(1).map(decodeURIComponent);
  let render;
  switch (parts[0]) {
    case "proxy": render = () => proxyView(parts[1]); break;
    case "history": render = () => historyView(parts[1], query); break;
    case "explain": render = () => explainView(parts[1], parts[2], parts.slice(3).join("/")); break;
    case "authz": render = () => authzView(parts[1], query); break;
    case "errors": render = errorsView; break;
    case "mtls": render = mtlsView; break;
    case "convergence": render = convergenceView; break;
    default: render = proxiesView;
  }
  try {
    const nodes = await render();
    view.replaceChildren(...[nodes].flat(2));
    view.dataset.view = parts[0] || "proxies";
    statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    view.replaceChildren(el("p", { class: "error", id: "load-error" }, String(err.message || err)));
  }
  document.body.dataset.ready = "true";
}

window.addEventListener("hashchange", route);
route();
