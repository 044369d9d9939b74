// groupd status page: a group list and a page per group, and in cluster
// mode a Cluster tab with the nodes and every partition's leader, replicas
// and ISR, drawn from the admin JSON API and refreshed every few seconds. Plain DOM and SVG, no
// libraries; every request goes to the origin that served the page.
"use strict";

const REFRESH_MS = 5000;
const MAX_PAUSE_ROWS = 40;
const MAX_WAIT_ROWS = 8;
// The list draws at most this many groups; a filter narrows the rest.
const MAX_LIST_ROWS = 500;
const MAX_OFFSET_ROWS = 2000;
const MAX_PARTITION_ROWS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";

const TRIGGER_COLORS = {
  "member-joined": "#3b82c4",
  "member-left": "#8a63c9",
  "session-timeout": "#d9822b",
  "rebalance-timeout": "#c2410c",
  "subscription-changed": "#0f9488",
  "leader-rejoined": "#4f6bd6",
  "static-replaced": "#6d8f2f",
  "topic-metadata-changed": "#2c9bb3",
  "admin-removed": "#7c6f64",
  "coordinator-loaded": "#64748b",
  "pending-sync-timeout": "#b45309",
  "group-oversized": "#a23b72",
};
const STORM_COLOR = "#cf3f3f";

const state = {
  paused: false,
  timer: 0,
  seq: 0,
  view: "",         // the key of the skeleton in <main>
  filter: "",
  sort: { key: "group", asc: true },
  selected: "",     // started_at of the selected rebalance
  userSelected: false,
  groups: null,
  group: null,
  rebalances: null,
  inCluster: null,  // null until api/v1/cluster has answered once
  cluster: null,
  partitions: null,
  partFilter: "",
  problemsOnly: false,
};

// ---- DOM helpers -------------------------------------------------------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, kids);
  return el;
}

function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, kids);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.setAttribute("class", v);
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(el, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
}

// fill replaces el's children, skipping null and false as h does.
function fill(el, ...kids) {
  el.replaceChildren();
  append(el, kids);
}

function $(id) { return document.getElementById(id); }

// ---- Formatting --------------------------------------------------------

const numberFormat = new Intl.NumberFormat("en-US");

function fmtNum(n) {
  if (n === undefined || n === null || n < 0) return "–";
  return numberFormat.format(n);
}

function fmtMs(ms) {
  if (ms === undefined || ms === null || ms < 0) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10000) return `${+(ms / 1000).toFixed(2)} s`;
  if (ms < 60000) return `${+(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000), sec = Math.round((ms % 60000) / 1000);
  if (m < 60) return sec ? `${m} min ${sec} s` : `${m} min`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

// fmtTick labels an axis tick: tick steps are round, so no decimals.
function fmtTick(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${+(ms / 1000).toFixed(1)} s`;
  return `${+(ms / 60000).toFixed(1)} min`;
}

// maxOf is the largest f(x) over xs, or floor; a loop, since spreading a
// group's partitions into Math.max can exceed the argument limit.
function maxOf(xs, f, floor) {
  let m = floor;
  for (const x of xs) {
    const v = f(x);
    if (v > m) m = v;
  }
  return m;
}

function pad(n, w = 2) { return String(n).padStart(w, "0"); }

function fmtClock(t, ms = false) {
  const d = new Date(t);
  const base = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return ms ? `${base}.${pad(d.getMilliseconds(), 3)}` : base;
}

function fmtDate(t) {
  const d = new Date(t);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${fmtClock(t, true)}`;
}

function fmtAgo(t) {
  const ms = Date.now() - new Date(t).getTime();
  if (ms < 0) return "just now";
  if (ms < 1000) return "just now";
  if (ms < 60000) return `${Math.floor(ms / 1000)} s ago`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)} min ago`;
  if (ms < 86400000) return `${Math.floor(ms / 3600000)} h ago`;
  return `${Math.floor(ms / 86400000)} d ago`;
}

// known tells a time from Go's zero time, which the API gives for none.
function known(t) { return !!t && !t.startsWith("0001-"); }

function timeCell(t) {
  if (!known(t)) return h("span", { class: "faint", text: "–" });
  return h("span", { title: fmtDate(t), text: fmtAgo(t) });
}

// shortId keeps member ids readable: client ids come first in them and
// the uuid tail is what tells two members apart.
function shortId(id) {
  if (!id) return "";
  return id.length > 24 ? `${id.slice(0, 13)}…${id.slice(-6)}` : id;
}

// ranges turns [0,1,2,3,7,9,10] into "0-3, 7, 9-10".
function ranges(ps) {
  const sorted = [...ps].sort((a, b) => a - b);
  const out = [];
  for (let i = 0; i < sorted.length; i++) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    out.push(j > i ? `${sorted[i]}-${sorted[j]}` : `${sorted[i]}`);
    i = j;
  }
  return out.join(", ");
}

function stateClass(st) {
  switch (st) {
    case "Stable": return "ok";
    case "PreparingRebalance": case "CompletingRebalance": case "Assigning": case "Reconciling": return "warn";
    case "Dead": return "bad";
    default: return "";
  }
}

function triggerColor(t) { return TRIGGER_COLORS[t] || "#8b95a5"; }

function triggerBadge(r) {
  if (!r) return h("span", { class: "faint", text: "–" });
  const sw = h("span", { class: "swatch" });
  sw.style.background = triggerColor(r.trigger);
  return h("span", { class: "trigger" }, sw, r.trigger || "unknown",
    r.storm ? h("span", { class: "badge storm", title: r.storm_cause || "storm", text: "storm" }) : null);
}

function who(ref, members) {
  if (!ref) return h("span", { class: "faint", text: "–" });
  const name = ref.client_id || shortId(ref.member_id);
  const host = ref.client_host ? ` @ ${ref.client_host}` : "";
  return h("span", { title: `${ref.member_id}${ref.instance_id ? ` (instance ${ref.instance_id})` : ""}` }, name, h("span", { class: "muted", text: host }));
}

// memberName names a member id for display: its client id if the member
// is still in the group, else the shortened id.
function memberName(id, byId) {
  if (!id) return "none";
  const m = byId.get(id);
  return m ? (m.client_id || shortId(id)) : shortId(id);
}

function durationOf(r) {
  if (r.ended_at) return r.duration_ms;
  return Math.max(0, Date.now() - new Date(r.started_at).getTime());
}

// ---- Data --------------------------------------------------------------

// groupURL is the API path of a group's read: the id as one escaped
// path segment, or as a query parameter for the ids that do not survive
// as one: "" (no segment), "." and ".." (which URL parsers resolve) and
// "/" (which the server's router takes for a trailing slash).
function groupURL(id, what) {
  if (id === "" || id === "." || id === ".." || id === "/") {
    return `api/v1/group${what ? `/${what}` : ""}?id=${encodeURIComponent(id)}`;
  }
  return `api/v1/groups/${encodeURIComponent(id)}${what ? `/${what}` : ""}`;
}

async function getJSON(path) {
  const res = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  let body = null;
  try { body = await res.json(); } catch (e) { /* an error without a JSON body */ }
  if (!res.ok) {
    const err = new Error((body && body.error) || `${res.status} ${res.statusText}`);
    err.status = res.status;
    throw err;
  }
  return body;
}

function route() {
  if (location.hash === "#/cluster") return { name: "cluster" };
  const m = location.hash.match(/^#\/groups\/(.*)$/);
  if (m) {
    let id = m[1];
    try { id = decodeURIComponent(id); } catch (e) { /* keep it raw */ }
    return { name: "group", id };
  }
  return { name: "list" };
}

async function refresh() {
  clearTimeout(state.timer);
  const seq = ++state.seq;
  const r = route();
  setDot("busy");
  if (state.inCluster === null && r.name !== "cluster") probeCluster();
  try {
    if (r.name === "cluster") {
      const [c, ps] = await Promise.all([getJSON("api/v1/cluster"), getJSON("api/v1/cluster/partitions")]);
      if (seq !== state.seq) return;
      state.cluster = c;
      state.partitions = ps || [];
      showTabs(true);
      renderCluster();
    } else if (r.name === "group") {
      const [g, rs] = await Promise.all([getJSON(groupURL(r.id)), getJSON(groupURL(r.id, "rebalances"))]);
      if (seq !== state.seq) return;
      state.group = g;
      state.rebalances = rs || [];
      renderGroup(r.id);
    } else {
      const gs = await getJSON("api/v1/groups");
      if (seq !== state.seq) return;
      state.groups = gs || [];
      renderList();
    }
    showError(null);
    $("updated").textContent = `updated ${fmtClock(Date.now())}`;
    setDot(state.paused ? "paused" : "");
  } catch (e) {
    if (seq !== state.seq) return;
    if (r.name === "group" && e.status === 404) {
      renderMissing(r.id, e.message);
      showError(null);
    } else if (r.name === "cluster" && e.status === 404) {
      showTabs(false);
      renderNoCluster(e.message);
      showError(null);
    } else {
      showError(`Could not refresh: ${e.message}. ${state.paused ? "" : `Retrying every ${REFRESH_MS / 1000} s.`}`);
    }
    $("updated").textContent = `refresh failed at ${fmtClock(Date.now())}`;
    setDot("failed");
  } finally {
    if (seq === state.seq && !state.paused) state.timer = setTimeout(refresh, REFRESH_MS);
  }
}

// probeCluster asks once whether this groupd is a node of a cluster, to
// show the Cluster tab; a failure other than 404 asks again next refresh.
async function probeCluster() {
  try {
    await getJSON("api/v1/cluster");
    showTabs(true);
  } catch (e) {
    if (e.status === 404) showTabs(false);
  }
}

function showTabs(inCluster) {
  state.inCluster = inCluster;
  $("tabs").hidden = !inCluster;
  const r = route();
  $("tab-groups").classList.toggle("active", r.name !== "cluster");
  $("tab-cluster").classList.toggle("active", r.name === "cluster");
  // The Groups tab names the group list.
  if (inCluster && r.name === "list") fill($("crumbs"));
}

function setDot(cls) { $("dot").className = `dot ${cls}`; }

function showError(msg) {
  const el = $("error");
  el.hidden = !msg;
  el.textContent = msg || "";
}

// view swaps <main>'s skeleton when the route changes; a refresh of the
// same route fills the existing one, so the filter box keeps its focus
// and the page keeps its scroll position.
function view(key, build) {
  if (state.view !== key) {
    state.view = key;
    fill($("main"), ...build());
    return true;
  }
  return false;
}

function crumbs(id) {
  const c = $("crumbs");
  if (state.inCluster) showTabs(true); // marks the tab of the route
  if (route().name === "cluster") {
    fill(c); // the tab names it
  } else if (id === undefined) {
    fill(c, state.inCluster ? null : h("span", { text: "Consumer groups" }));
  } else {
    fill(c, h("a", { href: "#/", text: "Consumer groups" }), h("span", { class: "sep", text: "/" }), h("span", { class: "here", text: id }));
  }
}

// ---- Group list --------------------------------------------------------

const LIST_COLUMNS = [
  { key: "group", label: "Group" },
  { key: "type", label: "Type" },
  { key: "state", label: "State" },
  { key: "protocol", label: "Assignor" },
  { key: "generation", label: "Gen", num: true },
  { key: "member_count", label: "Members", num: true },
  { key: "lag", label: "Lag", num: true },
  { key: "rebalances", label: "Rebalances", num: true },
  { key: "last", label: "Last rebalance" },
  { key: "lastBy", label: "Caused by", nosort: true },
  { key: "lastWhen", label: "When" },
  { key: "lastDur", label: "Took", num: true },
];

function listValue(g, key) {
  const r = g.last_rebalance;
  switch (key) {
    case "last": return r ? r.trigger : "";
    case "lastWhen": return r ? r.started_at : "";
    case "lastDur": return r ? durationOf(r) : -1;
    default: return g[key];
  }
}

function renderList() {
  document.title = "groupd · groups";
  crumbs();
  view("list", () => {
    const input = h("input", { id: "filter", type: "search", placeholder: "Filter by group, state or trigger", value: state.filter, "aria-label": "Filter groups" });
    input.addEventListener("input", () => { state.filter = input.value; fillList(); });
    const head = h("tr", {}, LIST_COLUMNS.map((c) => {
      const th = h("th", { class: `${c.num ? "num" : ""} ${c.nosort ? "" : "sortable"}`, "data-key": c.key, text: c.label });
      if (!c.nosort) {
        th.addEventListener("click", () => {
          state.sort = state.sort.key === c.key ? { key: c.key, asc: !state.sort.asc } : { key: c.key, asc: !c.num };
          fillList();
        });
      }
      return th;
    }));
    return [
      h("div", { class: "tiles", id: "tiles" }),
      h("section", { class: "panel" },
        h("div", { class: "toolbar" }, input, h("span", { class: "muted", id: "count" })),
        h("div", { class: "scroll" }, h("table", { class: "grid", id: "groups" }, h("thead", {}, head), h("tbody", { id: "group-rows" })))),
    ];
  });
  fillList();
}

// moveText is how a group came to its coordinator in a cluster: the node
// that serves it, the node that wrote its records before, and the load.
function moveText(mv) {
  const from = mv.from_node >= 0 && mv.from_node !== mv.to_node ? ` ← node ${mv.from_node}` : "";
  return `node ${mv.to_node}${from} · loaded in ${fmtMs(mv.load_ms)} ${fmtAgo(mv.at)}`;
}

function tile(k, v, alert, small) {
  return h("div", { class: `tile${alert ? " alert" : ""}` }, h("div", { class: "k", text: k }), h("div", { class: `v${small ? " small" : ""}`, text: v }));
}

function fillList() {
  const gs = state.groups || [];
  let members = 0, lag = 0, rebalancing = 0, storms = 0, lagKnown = false;
  for (const g of gs) {
    members += g.member_count;
    if (g.lag >= 0) { lag += g.lag; lagKnown = true; }
    if (stateClass(g.state) === "warn") rebalancing++;
    if (g.last_rebalance && g.last_rebalance.storm) storms++;
  }
  fill($("tiles"),
    tile("Groups", fmtNum(gs.length)),
    tile("Members", fmtNum(members)),
    tile("Total lag", lagKnown ? fmtNum(lag) : "–"),
    tile("Rebalancing now", fmtNum(rebalancing), false),
    tile("Last rebalance a storm", fmtNum(storms), storms > 0),
  );

  const f = state.filter.trim().toLowerCase();
  const shown = gs.filter((g) => !f || [g.group, g.state, g.type, g.protocol, g.last_rebalance && g.last_rebalance.trigger]
    .some((v) => v && String(v).toLowerCase().includes(f)));
  const { key, asc } = state.sort;
  shown.sort((a, b) => {
    const x = listValue(a, key), y = listValue(b, key);
    const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return (asc ? c : -c) || a.group.localeCompare(b.group);
  });
  for (const th of document.querySelectorAll("#groups th")) {
    th.classList.toggle("sorted", th.dataset.key === key);
    th.classList.toggle("asc", th.dataset.key === key && asc);
  }
  $("count").textContent = shown.length === gs.length ? `${gs.length} groups` : `${shown.length} of ${gs.length} groups`;

  const maxLag = maxOf(shown, (g) => g.lag, 1);
  const rows = shown.slice(0, MAX_LIST_ROWS).map((g) => {
    const r = g.last_rebalance;
    const link = h("a", { href: `#/groups/${encodeURIComponent(g.group)}`, class: "mono", text: g.group === "" ? "(empty id)" : g.group });
    return h("tr", { "data-group": g.group },
      h("td", {}, link),
      h("td", { class: "muted", text: g.type }),
      h("td", {}, h("span", { class: `badge ${stateClass(g.state)}`, text: g.state })),
      h("td", { text: g.protocol || "–" }),
      h("td", { class: "num", text: fmtNum(g.generation) }),
      h("td", { class: "num", text: fmtNum(g.member_count) }),
      h("td", { class: "num" }, lagCell(g.lag, maxLag)),
      h("td", { class: "num", text: fmtNum(g.rebalances) }),
      h("td", {}, triggerBadge(r)),
      h("td", {}, r ? who(r.member) : null),
      h("td", {}, r ? timeCell(r.started_at) : null),
      h("td", { class: "num" }, r ? (r.ended_at ? fmtMs(r.duration_ms) : h("span", { class: "badge warn", text: "in progress" })) : null),
    );
  });
  if (rows.length === 0) {
    rows.push(h("tr", { class: "empty" }, h("td", { colspan: LIST_COLUMNS.length, text: gs.length ? "No group matches the filter." : "No groups yet." })));
  }
  if (shown.length > MAX_LIST_ROWS) {
    rows.push(h("tr", { class: "empty" }, h("td", { colspan: LIST_COLUMNS.length, text: `${fmtNum(shown.length - MAX_LIST_ROWS)} more groups not drawn; sort or filter to find them.` })));
  }
  fill($("group-rows"), ...rows);
}

function lagCell(lag, maxLag) {
  if (lag === undefined || lag < 0) return h("span", { class: "faint", text: "–" });
  const fill = h("span");
  fill.style.width = `${Math.min(100, (lag / maxLag) * 100)}%`;
  return h("div", { class: "lagcell" }, fmtNum(lag), h("div", { class: "lagbar" }, fill));
}

// ---- Group page --------------------------------------------------------

function renderMissing(id, msg) {
  crumbs(id);
  state.view = "";
  fill($("main"), h("section", { class: "panel" }, h("p", { text: msg }), h("p", {}, h("a", { href: "#/", text: "Back to the groups" }))));
}

function renderGroup(id) {
  const g = state.group;
  document.title = `groupd · ${id}`;
  crumbs(id);
  if (view(`group:${id}`, () => [
    h("div", { class: "title" }, h("h1", { id: "gname" }), h("span", { id: "gbadges" })),
    h("div", { class: "tiles", id: "gtiles" }),
    h("section", { class: "panel" },
      h("h2", {}, "Rebalance timeline", h("small", { text: "each dot is a rebalance at its start, its height how long it took; select one to see its partitions" })),
      h("div", { class: "chart", id: "timeline" }),
      h("div", { class: "legend", id: "legend" })),
    h("section", { class: "panel", id: "detail" }),
    h("section", { class: "panel" },
      h("h2", {}, "Rebalance history", h("small", { id: "hist-note" })),
      h("div", { class: "scroll" }, h("table", { class: "grid", id: "history" }))),
    h("div", { class: "cols" },
      h("section", { class: "panel" }, h("h2", {}, "Members", h("small", { id: "members-note" })), h("div", { class: "scroll" }, h("table", { class: "grid", id: "members" }))),
      h("section", { class: "panel" }, h("h2", {}, "Lag by partition", h("small", { id: "lag-note" })), h("div", { class: "scroll" }, h("table", { class: "grid", id: "offsets" })))),
  ])) {
    state.selected = "";
    state.userSelected = false;
  }

  const rs = [...state.rebalances].sort((a, b) => a.started_at.localeCompare(b.started_at));
  // Follow the newest rebalance until the operator picks one.
  if (!state.userSelected || !rs.some((r) => r.started_at === state.selected)) {
    state.selected = rs.length ? rs[rs.length - 1].started_at : "";
    state.userSelected = false;
  }
  const byId = new Map(g.members.map((m) => [m.member_id, m]));

  $("gname").textContent = g.group === "" ? "(empty id)" : g.group;
  fill($("gbadges"),
    h("span", { class: `badge ${stateClass(g.state)}`, text: g.state }), " ",
    h("span", { class: "badge", text: g.type }), " ",
    g.protocol_type ? h("span", { class: "badge", text: g.protocol_type }) : null);
  const storms = rs.filter((r) => r.storm).length;
  const last = rs[rs.length - 1];
  fill($("gtiles"),
    tile("Members", fmtNum(g.member_count)),
    tile("Lag", fmtNum(g.lag)),
    tile("Generation", fmtNum(g.generation)),
    tile("Assignor", g.protocol || "–", false, true),
    tile("Rebalances kept", fmtNum(rs.length)),
    tile("Storm rebalances", fmtNum(storms), storms > 0),
    tile("Last trigger", last ? last.trigger : "–", last && last.storm, true),
    g.coordinator_move ? tile("Coordinator", moveText(g.coordinator_move), false, true) : null,
  );
  drawTimeline(rs);
  drawDetail(rs.find((r) => r.started_at === state.selected), byId);
  fillHistory(rs, byId);
  fillMembers(g, last);
  fillOffsets(g, byId);
}

function select(r) {
  state.selected = r.started_at;
  state.userSelected = true;
  renderGroup(route().id);
}

// ---- Scales and axes ---------------------------------------------------

function linear(d0, d1, r0, r1) {
  const k = d1 === d0 ? 0 : (r1 - r0) / (d1 - d0);
  return (v) => r0 + (v - d0) * k;
}

const TIME_STEPS = [1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 108e5, 216e5, 432e5, 864e5];
const MS_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 3e4, 6e4, 12e4, 3e5, 6e5];

function step(span, want, steps) {
  for (const st of steps) if (span / st <= want) return st;
  return steps[steps.length - 1];
}

function chartWidth(el) { return Math.max(560, Math.round(el.clientWidth || 960)); }

// ---- Timeline chart ----------------------------------------------------

function drawTimeline(rs) {
  const box = $("timeline");
  const legend = $("legend");
  if (rs.length === 0) {
    fill(box, h("p", { class: "muted", text: "No rebalances recorded for this group." }));
    fill(legend);
    return;
  }
  const W = chartWidth(box), H = 190;
  const m = { l: 58, r: 18, t: 14, b: 26 };
  const now = Date.now();
  const starts = rs.map((r) => new Date(r.started_at).getTime());
  const ends = rs.map((r, i) => starts[i] + durationOf(r));
  let t0 = -maxOf(starts, (t) => -t, -Infinity), t1 = maxOf(ends, (t) => t, now);
  if (t1 - t0 < 60000) t0 = t1 - 60000;
  const padT = (t1 - t0) * 0.03;
  t0 -= padT; t1 += padT;
  const x = linear(t0, t1, m.l, W - m.r);

  const durs = rs.map(durationOf);
  const yMin = 10, yMax = Math.max(1000, maxOf(durs, (d) => d, 0) * 1.6);
  const ly = linear(Math.log10(yMin), Math.log10(yMax), H - m.b, m.t);
  const y = (ms) => ly(Math.log10(Math.max(yMin, ms)));

  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Rebalance timeline" });

  // Storm stretches: storm rebalances with the same trigger and member
  // close together share one band, which starts at the first of the run
  // (the record flags only the repeats).
  for (const run of stormRuns(rs, starts)) {
    const a = x(starts[run.from]) - 6, b = x(ends[run.to]) + 6;
    const r = rs[run.to];
    svg.append(s("rect", { class: "storm-band", x: a, y: m.t - 6, width: Math.max(12, b - a), height: H - m.b - m.t + 6 }),
      s("text", { x: a + 4, y: m.t + 5, fill: STORM_COLOR, text: `storm ×${run.count}: ${r.trigger}${r.member ? ` by ${r.member.client_id || shortId(r.member.member_id)}` : ""}` }));
  }

  // Duration grid (log scale).
  for (const [ms, label] of [[10, "10 ms"], [100, "100 ms"], [1e3, "1 s"], [1e4, "10 s"], [6e4, "1 min"], [6e5, "10 min"], [36e5, "1 h"]]) {
    if (ms > yMax) break;
    svg.append(s("line", { class: "grid-line", x1: m.l, x2: W - m.r, y1: y(ms), y2: y(ms) }),
      s("text", { x: m.l - 6, y: y(ms) + 4, "text-anchor": "end", text: label }));
  }
  // Time axis.
  svg.append(s("line", { class: "axis", x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }));
  const st = step(t1 - t0, 8, TIME_STEPS);
  const tzOffset = new Date(t0).getTimezoneOffset() * 60000;
  for (let t = Math.ceil((t0 - tzOffset) / st) * st + tzOffset; t <= t1; t += st) {
    svg.append(s("line", { class: "axis", x1: x(t), x2: x(t), y1: H - m.b, y2: H - m.b + 4 }),
      s("text", { x: x(t), y: H - m.b + 16, "text-anchor": "middle", text: st < 6e4 ? fmtClock(t) : fmtClock(t).slice(0, 5) }));
  }
  svg.append(s("line", { class: "marker", x1: x(now), x2: x(now), y1: m.t, y2: H - m.b }),
    s("text", { x: x(now) - 4, y: m.t + 4, "text-anchor": "end", text: "now" }));

  rs.forEach((r, i) => {
    const cx = x(starts[i]), cy = y(durs[i]);
    const color = triggerColor(r.trigger);
    const sel = r.started_at === state.selected;
    const tip = `${r.trigger}${r.member ? ` by ${r.member.client_id || r.member.member_id}` : ""}\n${fmtDate(r.started_at)}\n${r.ended_at ? `took ${fmtMs(r.duration_ms)}` : "in progress"}, ${r.moved.length} partitions moved${r.storm ? `\nstorm: ${r.storm_cause || ""}` : ""}`;
    const g = s("g", { class: "reb", "data-started": r.started_at, onclick: () => select(r) },
      s("title", { text: tip }),
      // The rebalance's own span on the time axis.
      s("rect", { class: "span-bar", x: cx, y: H - m.b - 4, width: Math.max(2, x(ends[i]) - cx), height: 4, fill: color }),
      s("line", { class: "stem", x1: cx, x2: cx, y1: H - m.b, y2: cy, stroke: color, "stroke-dasharray": r.ended_at ? null : "3 2" }),
      r.storm ? s("circle", { class: "storm-ring", cx, cy, r: sel ? 10 : 8 }) : null,
      s("circle", { class: `dot-r${sel ? " selected" : ""}${r.ended_at ? "" : " open"}`, cx, cy, r: sel ? 6 : 4.5, fill: color, color }),
      s("rect", { class: "hit", x: cx - 7, y: Math.min(cy - 9, H - m.b - 12), width: 14, height: Math.max(20, H - m.b - cy + 9) }));
    svg.append(g);
    if (sel) {
      const right = cx > W - 200;
      svg.append(s("text", { class: "label", x: right ? cx - 12 : cx + 12, y: cy - 8, "text-anchor": right ? "end" : "start", text: `${r.trigger} · ${fmtMs(durs[i])}` }));
    }
  });
  fill(box, svg);

  const seen = [...new Set(rs.map((r) => r.trigger))];
  fill(legend, ...seen.map((t) => {
    const sw = h("span", { class: "swatch" });
    sw.style.background = triggerColor(t);
    return h("span", {}, sw, t);
  }), rs.some((r) => r.storm) ? h("span", {}, h("span", { class: "badge storm", text: "storm" }), "the same trigger from the same member, repeating") : null);
}

const STORM_JOIN_MS = 15 * 60000;

// stormRuns finds the storms in rs (sorted by start): each run is the
// storm-flagged rebalances of one trigger and member less than
// STORM_JOIN_MS apart, with the unflagged first occurrence before them.
function stormRuns(rs, starts) {
  const key = (r) => `${r.trigger}\u0000${r.member ? r.member.member_id : ""}`;
  const open = new Map();
  const runs = [];
  rs.forEach((r, i) => {
    if (!r.storm) return;
    const k = key(r);
    const run = open.get(k);
    if (run && starts[i] - starts[run.to] <= STORM_JOIN_MS) {
      run.to = i;
      run.count++;
      return;
    }
    let from = i;
    for (let j = i - 1; j >= 0 && starts[i] - starts[j] <= STORM_JOIN_MS; j--) {
      if (key(rs[j]) === k) { from = j; break; }
    }
    const fresh = { from, to: i, count: from === i ? 1 : 2 };
    open.set(k, fresh);
    runs.push(fresh);
  });
  return runs;
}

// ---- Detail of one rebalance --------------------------------------------

function drawDetail(r, byId) {
  const box = $("detail");
  if (!r) {
    fill(box, h("h2", { text: "Rebalance" }), h("p", { class: "muted", text: "Select a rebalance in the timeline or the history." }));
    return;
  }
  const start = new Date(r.started_at).getTime();
  const dur = durationOf(r);
  const end = start + dur;
  const moved = [...r.moved].sort((a, b) => b.pause_ms - a.pause_ms || a.topic.localeCompare(b.topic) || a.partition - b.partition);
  const waits = r.waited_for.slice(0, MAX_WAIT_ROWS);
  const pauses = moved.slice(0, MAX_PAUSE_ROWS);
  const maxPause = maxOf(moved, (mv) => mv.pause_ms, 0);
  const gap = moved.reduce((sum, mv) => sum + Math.max(0, mv.commit_gap), 0);

  const head = h("div", { class: "detail-head" },
    h("span", {}, triggerBadge(r)),
    h("span", { class: "muted" }, "by ", who(r.member)),
    h("span", { class: "muted", text: `${fmtDate(r.started_at)}` }),
    h("span", {}, h("span", { class: "muted", text: "took " }), r.ended_at ? fmtMs(dur) : `${fmtMs(dur)} so far`),
    h("span", {}, h("span", { class: "muted", text: "generation " }), `${r.generation_before} → ${r.generation_after}`),
    h("span", {}, h("span", { class: "muted", text: "protocol " }), r.protocol),
    h("span", {}, h("span", { class: "muted", text: "outcome " }), r.outcome || "in progress"),
    h("span", {}, h("span", { class: "muted", text: "members " }), `+${r.members_in.length} −${r.members_out.length}`),
    h("span", {}, h("span", { class: "muted", text: "moved " }), `${moved.length}`, h("span", { class: "muted", text: " · longest pause " }), fmtMs(maxPause),
      h("span", { class: "muted", text: " · commit gap " }), fmtNum(gap)),
    r.storm ? h("span", { class: "cause", text: `storm: ${r.storm_cause || "repeating"}` }) : null);

  // Rows: the rebalance, the members it waited for, the moved partitions.
  const rows = [{ kind: "span", label: "rebalance", a: start, b: end }];
  waits.forEach((w, i) => rows.push({ kind: i === 0 && w.waited_ms > 0 ? "straggler" : "wait", label: `waited: ${memberName(w.member, byId)}`, a: start, b: start + w.waited_ms, note: fmtMs(w.waited_ms), title: w.member }));
  pauses.forEach((mv) => {
    const [a, b] = pauseSpan(mv, end);
    rows.push({
      kind: "pause", label: `${mv.topic}[${mv.partition}]`, a, b,
      note: `${memberName(mv.from, byId)} → ${memberName(mv.to, byId)} · ${fmtMs(mv.pause_ms)}${mv.commit_gap > 0 ? ` · gap ${fmtNum(mv.commit_gap)}` : ""}`,
      title: `${mv.topic} partition ${mv.partition}\nfrom ${mv.from || "nobody"}\nto ${mv.to || "nobody"}\n` +
        `released ${fmtClock(a, true)}, received ${mv.to && known(mv.assigned_at) ? fmtClock(b, true) : "by nobody"}\n` +
        `paused ${fmtMs(mv.pause_ms)}, commit gap ${fmtNum(mv.commit_gap)}`,
    });
  });

  const W = chartWidth(box), rowH = 18;
  const m = { l: 170, r: 330, t: 8, b: 24 };
  const noteChars = Math.floor((m.r - 14) / 6.3);
  const H = m.t + rows.length * rowH + m.b;
  let t0 = -maxOf(rows, (rw) => -rw.a, -start), t1 = Math.max(end, start + 1);
  const padT = Math.max(1, (t1 - t0) * 0.04);
  t0 -= padT; t1 += padT;
  const x = linear(t0, t1, m.l, W - m.r);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Rebalance detail" });

  const st = step(t1 - t0, 7, MS_STEPS);
  for (let t = Math.ceil((t0 - start) / st) * st; start + t <= t1; t += st) {
    const xx = x(start + t);
    svg.append(s("line", { class: "grid-line", x1: xx, x2: xx, y1: m.t, y2: H - m.b }),
      s("text", { x: xx, y: H - m.b + 15, "text-anchor": "middle", text: t === 0 ? "start" : `${t > 0 ? "+" : "−"}${fmtTick(Math.abs(t))}` }));
  }
  svg.append(s("line", { class: "marker", x1: x(start), x2: x(start), y1: m.t, y2: H - m.b }),
    s("line", { class: "marker", x1: x(end), x2: x(end), y1: m.t, y2: H - m.b }));

  rows.forEach((rw, i) => {
    const top = m.t + i * rowH;
    if (i % 2 === 1) svg.append(s("rect", { class: "row-bg", x: 0, y: top, width: W, height: rowH }));
    const bx = x(rw.a), bw = Math.max(2, x(rw.b) - bx);
    let bar;
    if (rw.kind === "span") bar = s("rect", { x: bx, y: top + 3, width: bw, height: rowH - 6, rx: 2, fill: r.storm ? STORM_COLOR : triggerColor(r.trigger) });
    else bar = s("rect", { class: rw.kind === "pause" ? "pause" : rw.kind, x: bx, y: top + 4, width: bw, height: rowH - 8, rx: 2 });
    svg.append(s("g", {},
      s("title", { text: rw.title || rw.label }),
      s("text", { class: `label${rw.kind === "pause" ? " mono" : ""}`, x: m.l - 10, y: top + rowH / 2 + 4, "text-anchor": "end", text: clip(rw.label, 26) }),
      bar,
      s("text", { x: W - m.r + 10, y: top + rowH / 2 + 4, text: clip(rw.kind === "span" ? `${r.trigger} · ${fmtMs(dur)}` : rw.note || "", noteChars) })));
  });

  const extra = [];
  if (r.waited_for.length > waits.length) extra.push(`${r.waited_for.length - waits.length} more waits`);
  if (moved.length > pauses.length) extra.push(`${moved.length - pauses.length} more moved partitions (longest pauses shown)`);
  const chart = h("div", { class: "chart" });
  chart.append(svg);
  fill(box,
    h("h2", {}, "Selected rebalance", h("small", { text: "bars: how long the join waited for each member, and each moved partition from release to re-assignment" })),
    head, chart,
    extra.length ? h("p", { class: "note", text: `Not drawn: ${extra.join(", ")}.` }) : null,
    moved.length ? movedTable(moved, byId) : h("p", { class: "note", text: "No partition changed owner." }));
}

// pauseSpan is a moved partition's pause on the time axis: from when its
// old owner let it go (or was last heard from), which can be before the
// rebalance started, until its new owner received it. A partition nobody
// received is drawn paused until end.
function pauseSpan(mv, end) {
  const b = known(mv.assigned_at) ? new Date(mv.assigned_at).getTime() : end;
  const a = known(mv.released_at) ? new Date(mv.released_at).getTime() : b - mv.pause_ms;
  return [a, Math.max(a, b)];
}

function clip(t, n) { return t.length > n ? `${t.slice(0, n - 1)}…` : t; }

function movedTable(moved, byId) {
  const rows = moved.map((mv) => h("tr", {},
    h("td", { class: "mono", text: mv.topic }), h("td", { class: "num", text: mv.partition }),
    h("td", { title: mv.from, text: memberName(mv.from, byId) }), h("td", { title: mv.to, text: memberName(mv.to, byId) }),
    h("td", { class: "num", text: fmtMs(mv.pause_ms) }), h("td", { class: "num", text: fmtNum(mv.commit_gap) })));
  return h("details", {}, h("summary", { text: `All ${moved.length} moved partitions` }),
    h("div", { class: "scroll" }, h("table", { class: "grid" },
      h("thead", {}, h("tr", {}, ["Topic", "Partition", "From", "To", "Pause", "Commit gap"].map((c, i) => h("th", { class: i === 1 || i > 3 ? "num" : "", text: c })))),
      h("tbody", {}, rows))));
}

// ---- Tables of the group page ------------------------------------------

function fillHistory(rs, byId) {
  const head = h("thead", {}, h("tr", {}, ["Started", "Trigger", "Caused by", "Protocol", "Gen", "Took", "In / out", "Straggler", "Moved", "Longest pause", "Commit gap", "Outcome"]
    .map((c, i) => h("th", { class: [4, 5, 8, 9, 10].includes(i) ? "num" : "", text: c }))));
  const rows = [...rs].reverse().map((r) => {
    const w = r.waited_for[0];
    const maxPause = maxOf(r.moved, (mv) => mv.pause_ms, 0);
    const gap = r.moved.reduce((sum, mv) => sum + Math.max(0, mv.commit_gap), 0);
    return h("tr", { class: `clickable${r.started_at === state.selected ? " selected" : ""}`, "data-started": r.started_at, onclick: () => select(r) },
      h("td", { title: fmtDate(r.started_at), text: fmtClock(r.started_at, true) }),
      h("td", {}, triggerBadge(r)),
      h("td", {}, who(r.member)),
      h("td", { text: r.protocol }),
      h("td", { class: "num", text: `${r.generation_before} → ${r.generation_after}` }),
      h("td", { class: "num", text: r.ended_at ? fmtMs(r.duration_ms) : "in progress" }),
      h("td", { text: `+${r.members_in.length} −${r.members_out.length}` }),
      h("td", { title: w ? w.member : "" }, w ? `${memberName(w.member, byId)} (${fmtMs(w.waited_ms)})` : h("span", { class: "faint", text: "–" })),
      h("td", { class: "num", text: fmtNum(r.moved.length) }),
      h("td", { class: "num", text: r.moved.length ? fmtMs(maxPause) : "–" }),
      h("td", { class: "num", text: r.moved.length ? fmtNum(gap) : "–" }),
      h("td", { class: "wrap" }, r.storm ? h("span", { class: "cause", title: r.storm_cause || "", text: `storm: ${r.storm_cause || "repeating"}` }) : (r.outcome || "in progress")));
  });
  if (rows.length === 0) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 12, text: "No rebalances recorded." })));
  fill($("history"), head, h("tbody", {}, rows));
  $("hist-note").textContent = rs.length ? `${rs.length} kept, newest first` : "";
}

function fillMembers(g, last) {
  const straggler = last && last.waited_for.length && last.waited_for[0].waited_ms > 0 ? last.waited_for[0].member : "";
  const head = h("thead", {}, h("tr", {}, ["Client id", "Member id", "Host", "Assignment", "Last heartbeat"].map((c) => h("th", { text: c }))));
  const members = [...g.members].sort((a, b) => (a.client_id || "").localeCompare(b.client_id || "") || a.member_id.localeCompare(b.member_id));
  const rows = members.map((m) => {
    const hbAge = known(m.last_heartbeat) ? Date.now() - new Date(m.last_heartbeat).getTime() : -1;
    const late = m.session_timeout_ms > 0 && hbAge > m.session_timeout_ms / 2;
    return h("tr", { "data-member": m.member_id },
      h("td", {}, m.client_id || h("span", { class: "faint", text: "–" }),
        m.member_id === straggler ? [" ", h("span", { class: "badge warn", title: "the member the last rebalance waited for longest", text: "straggler" })] : null,
        m.protocol === "classic" ? [" ", h("span", { class: "badge", title: "speaks the classic protocol inside this consumer group (a migration between the protocols)", text: "classic" })] : null),
      h("td", { class: "mono", title: m.member_id + (m.instance_id ? `\ninstance ${m.instance_id}` : "") },
        h("span", { class: "ellipsis", text: shortId(m.member_id) }), m.instance_id ? h("div", { class: "muted", text: `instance ${m.instance_id}` }) : null),
      h("td", { text: m.client_host }),
      h("td", {}, m.assignment.length ? m.assignment.map((tp) => h("div", {}, h("span", { class: "mono", text: tp.topic }), h("span", { class: "muted", text: `: ${ranges(tp.partitions)}` })))
        : h("span", { class: "faint", text: "none" })),
      h("td", { class: late ? "cause" : "" }, timeCell(m.last_heartbeat),
        h("div", { class: "muted", title: `rebalance timeout ${fmtMs(m.rebalance_timeout_ms)}`, text: `session ${fmtMs(m.session_timeout_ms)}` })));
  });
  if (rows.length === 0) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 5, text: "No members." })));
  fill($("members"), head, h("tbody", {}, rows));
  $("members-note").textContent = `${g.members.length}`;
}

function fillOffsets(g, byId) {
  const head = h("thead", {}, h("tr", {}, ["Topic", "Partition", "Owner", "Committed", "High watermark", "Lag"]
    .map((c, i) => h("th", { class: i === 1 || i > 2 ? "num" : "", text: c }))));
  const offs = [...g.offsets].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  const maxLag = maxOf(offs, (o) => o.lag, 1);
  const rows = [];
  let topic = null, topicLag = 0, topicRows = 0;
  const subtotal = () => {
    if (topic !== null && topicRows > 1) rows.push(h("tr", { class: "subtotal" }, h("td", { class: "mono", text: topic }), h("td", { class: "num muted", text: `${topicRows} partitions` }), h("td"), h("td"), h("td"), h("td", { class: "num", text: fmtNum(topicLag) })));
  };
  for (const o of offs.slice(0, MAX_OFFSET_ROWS)) {
    if (o.topic !== topic) { subtotal(); topic = o.topic; topicLag = 0; topicRows = 0; }
    topicRows++;
    if (o.lag > 0) topicLag += o.lag;
    rows.push(h("tr", {},
      h("td", { class: "mono", text: o.topic }),
      h("td", { class: "num", text: o.partition }),
      h("td", { title: o.owner || "" }, o.owner ? memberName(o.owner, byId) : h("span", { class: "faint", text: "–" })),
      h("td", { class: "num", text: fmtNum(o.committed) }),
      h("td", { class: "num", text: o.high_watermark < 0 ? "unknown" : fmtNum(o.high_watermark) }),
      h("td", { class: "num" }, lagCell(o.lag, maxLag))));
  }
  subtotal();
  if (rows.length === 0) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 6, text: "No committed offsets." })));
  if (offs.length > MAX_OFFSET_ROWS) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 6, text: `${fmtNum(offs.length - MAX_OFFSET_ROWS)} more partitions not drawn; the API has them all.` })));
  fill($("offsets"), head, h("tbody", {}, rows));
  $("lag-note").textContent = g.lag >= 0 ? `total ${fmtNum(g.lag)}` : "";
}

// ---- Cluster -----------------------------------------------------------

function renderNoCluster(msg) {
  document.title = "groupd · cluster";
  crumbs();
  state.view = "";
  fill($("main"), h("section", { class: "panel" }, h("p", { text: msg }), h("p", {}, h("a", { href: "#/", text: "Back to the groups" }))));
}

// partStatus is a partition's worst condition, for its badge and its row.
function partStatus(p) {
  if (p.offline) return { cls: "bad", text: "offline", title: "no live leader: the partition cannot be read or written" };
  if (p.under_replicated) return { cls: "warn", text: "under-replicated", title: "the ISR is smaller than the replica list" };
  return { cls: "ok", text: "ok", title: "every replica in sync" };
}

function renderCluster() {
  const c = state.cluster;
  document.title = "groupd · cluster";
  crumbs();
  view("cluster", () => {
    const input = h("input", { id: "part-filter", type: "search", placeholder: "Filter by topic", value: state.partFilter, "aria-label": "Filter partitions by topic" });
    input.addEventListener("input", () => { state.partFilter = input.value; fillPartitions(); });
    const only = h("input", { id: "problems-only", type: "checkbox", checked: state.problemsOnly });
    only.addEventListener("change", () => { state.problemsOnly = only.checked; fillPartitions(); });
    return [
      h("div", { class: "tiles", id: "ctiles" }),
      h("section", { class: "panel" }, h("h2", {}, "Nodes", h("small", { id: "nodes-note" })), h("div", { class: "scroll" }, h("table", { class: "grid", id: "nodes" }))),
      h("section", { class: "panel" },
        h("h2", {}, "Partitions", h("small", { text: "replicas in assignment order, the preferred leader first; filled: the leader, green: in sync, dashed: out of sync, struck: on no live node" })),
        h("div", { class: "toolbar" }, input, h("label", {}, only, "Only under-replicated or offline"), h("span", { class: "muted", id: "part-count" })),
        h("div", { class: "scroll" }, h("table", { class: "grid", id: "partitions" }))),
    ];
  });
  const n = c.partitions;
  fill($("ctiles"),
    tile("Cluster id", c.cluster_id, false, true),
    tile("Nodes", fmtNum(c.nodes.length)),
    tile("Controller", c.controller >= 0 ? `node ${c.controller}` : "none", c.controller < 0, true),
    tile("Topics", fmtNum(n.topics)),
    tile("Partitions", fmtNum(n.total)),
    tile("Under-replicated", fmtNum(n.under_replicated), n.under_replicated > 0),
    tile("Offline", fmtNum(n.offline), n.offline > 0),
    tile("Reassigning", fmtNum(n.reassigning)),
    tile(`Led by node ${c.node_id}`, fmtNum(n.leading)),
  );
  fillNodes(c, state.partitions);
  fillPartitions();
}

function fillNodes(c, ps) {
  const leads = new Map(), hosts = new Map();
  for (const p of ps) {
    if (p.leader >= 0) leads.set(p.leader, (leads.get(p.leader) || 0) + 1);
    for (const r of p.replicas) hosts.set(r, (hosts.get(r) || 0) + 1);
  }
  const head = h("thead", {}, h("tr", {}, ["Node", "Host", "Port", "Rack", "Role", "Leader of", "Replicas"]
    .map((t, i) => h("th", { class: i === 2 || i > 4 ? "num" : "", text: t }))));
  const rows = c.nodes.map((nd) => h("tr", { "data-node": nd.id },
    h("td", { class: "mono", text: nd.id }),
    h("td", { class: "mono", text: nd.host }),
    h("td", { class: "num", text: nd.port }),
    h("td", { text: nd.rack || "–" }),
    h("td", {},
      nd.controller ? h("span", { class: "badge ok", title: "holds the controller key in etcd", text: "controller" }) : null,
      nd.controller && nd.self ? " " : null,
      nd.self ? h("span", { class: "badge", title: "the node serving this page", text: "this node" }) : null),
    h("td", { class: "num", text: fmtNum(leads.get(nd.id) || 0) }),
    h("td", { class: "num", text: fmtNum(hosts.get(nd.id) || 0) })));
  if (rows.length === 0) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 7, text: "No live nodes." })));
  fill($("nodes"), head, h("tbody", {}, rows));
  $("nodes-note").textContent = `${c.nodes.length} live`;
}

function replicaChips(p) {
  const isr = new Set(p.isr), down = new Set(p.offline_replicas);
  return h("span", { class: "replicas" }, p.replicas.map((r) => {
    let cls = "rep", title = `node ${r}`;
    if (down.has(r)) { cls += " down"; title += ": not alive"; }
    else if (r === p.leader) { cls += " lead"; title += ": the leader"; }
    else if (isr.has(r)) { cls += " isr"; title += ": in sync"; }
    else { cls += " lag"; title += ": out of sync"; }
    if ((p.adding_replicas || []).includes(r)) title += ", being added";
    if ((p.removing_replicas || []).includes(r)) title += ", being removed";
    return h("span", { class: cls, title, text: r });
  }));
}

function fillPartitions() {
  const ps = state.partitions || [];
  const f = state.partFilter.trim().toLowerCase();
  const shown = ps.filter((p) => (!f || p.topic.toLowerCase().includes(f)) && (!state.problemsOnly || p.offline || p.under_replicated));
  const head = h("thead", {}, h("tr", {}, ["Topic", "Partition", "Leader", "Epoch", "Replicas", "ISR", "Status"]
    .map((t, i) => h("th", { class: i === 1 || i === 2 || i === 3 ? "num" : "", text: t }))));
  const rows = shown.slice(0, MAX_PARTITION_ROWS).map((p) => {
    const st = partStatus(p);
    return h("tr", { "data-tp": `${p.topic}/${p.partition}`, class: st.cls === "ok" ? "" : st.cls },
      h("td", { class: "mono", text: p.topic }),
      h("td", { class: "num", text: p.partition }),
      h("td", { class: "num" }, p.leader >= 0 ? String(p.leader) : h("span", { class: "cause", text: "none" })),
      h("td", { class: "num", text: p.leader_epoch }),
      h("td", {}, replicaChips(p)),
      h("td", { class: "mono", text: p.isr.length ? p.isr.join(", ") : "–" }),
      h("td", {}, h("span", { class: `badge ${st.cls}`, title: st.title, text: st.text }),
        p.reassigning ? [" ", h("span", { class: "badge", title: `adding ${(p.adding_replicas || []).join(", ") || "none"}, removing ${(p.removing_replicas || []).join(", ") || "none"}`, text: "reassigning" })] : null));
  });
  if (rows.length === 0) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 7, text: ps.length ? "No partition matches." : "No topics yet." })));
  if (shown.length > MAX_PARTITION_ROWS) rows.push(h("tr", { class: "empty" }, h("td", { colspan: 7, text: `${fmtNum(shown.length - MAX_PARTITION_ROWS)} more partitions not drawn; filter by topic, or read api/v1/cluster/partitions.` })));
  fill($("partitions"), head, h("tbody", {}, rows));
  $("part-count").textContent = shown.length === ps.length ? `${ps.length} partitions` : `${shown.length} of ${ps.length} partitions`;
}

// ---- Start -------------------------------------------------------------

function init() {
  $("pause").addEventListener("click", () => {
    state.paused = !state.paused;
    $("pause").textContent = state.paused ? "Resume" : "Pause";
    if (state.paused) { clearTimeout(state.timer); setDot("paused"); } else refresh();
  });
  window.addEventListener("hashchange", () => { state.view = ""; refresh(); });
  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (state.view.startsWith("group:")) renderGroup(route().id); }, 150);
  });
  refresh();
}

init();
