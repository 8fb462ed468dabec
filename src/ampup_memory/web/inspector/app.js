// AmpUp Memory inspector: a plain client of the server's HTTP API (no build step, no
// dependency, nothing loaded from anywhere but this server). Every number and item shown
// comes from a route any caller could call with the same headers; the page decides nothing
// about who may read what. Text from the server is only ever set as textContent.
"use strict";

const WHO_KEY = "ampup-inspector-who";
const PAGE = 25;

// -- who is asking --------------------------------------------------------------------------
function who() {
  try { return JSON.parse(sessionStorage.getItem(WHO_KEY) || "{}"); } catch (e) { return {}; }
}

function headers() {
  const w = who();
  const h = {"Accept": "application/json"};
  if (w.user) h["X-AmpUp-User"] = w.user;
  if (w.agent) h["X-AMP-Agent-ID"] = w.agent;
  if (w.key) h["X-AMP-API-Key"] = w.key;
  if (w.admin) h["X-AMP-Admin-Token"] = w.admin;
  return h;
}

class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(`${status} ${err.code || ""}: ${err.message || "request failed"}`);
    this.status = status;
    this.code = err.code;
  }
}

async function call(method, path, params, body) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const init = {method, headers: headers()};
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(url, init);
  const type = res.headers.get("content-type") || "";
  const data = type.includes("json") ? await res.json() : await res.text();
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}
const get = (path, params) => call("GET", path, params);
const post = (path, body) => call("POST", path, undefined, body);

// -- tiny DOM helpers -----------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function link(href, text, attrs) { return h("a", {href, ...(attrs || {})}, text); }

function route(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return "#" + path + (s ? "?" + s : "");
}

// A ULID's head is its time, so ids made within minutes share it: those show their
// random tail. Other ids (episode hashes) are random from the start and show their head.
const ULID_END = /^(.*?)([0-9A-HJKMNP-TV-Z]{26})$/;
function short(id) {
  if (!id) return "";
  const m = ULID_END.exec(String(id));
  return m ? `${m[1]}…${m[2].slice(-8)}` : String(id).slice(0, 10);
}
function when(t) { return t ? String(t).replace("T", " ").replace("Z", "") : "—"; }
function num(x) { return typeof x === "number" ? (Math.round(x * 1000) / 1000).toString() : "—"; }

// Text with marked stretches: every occurrence of `quote` (exact) and of any of `words`
// (case-insensitive, at a word start) is wrapped in <mark>.
function marked(text, quote, words) {
  const out = h("span", {class: "marked"});
  const s = String(text || "");
  const spans = [];
  if (quote) {
    let i = s.indexOf(quote);
    while (i >= 0) { spans.push([i, i + quote.length, "quote"]); i = s.indexOf(quote, i + quote.length); }
  }
  for (const w of words || []) {
    const re = new RegExp("\\b" + w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") + "\\w*", "gi");
    let m;
    while ((m = re.exec(s)) !== null) spans.push([m.index, m.index + m[0].length, "word"]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  let at = 0;
  for (const [a, b, kind] of spans) {
    if (a < at) continue;
    out.append(s.slice(at, a), h("mark", {class: kind}, s.slice(a, b)));
    at = b;
  }
  out.append(s.slice(at));
  return out;
}

const STOP = new Set(["the", "and", "for", "was", "what", "who", "how", "with", "from", "that",
  "this", "are", "is", "of", "to", "in", "on", "a", "an", "at", "by", "it", "be", "as", "or", "did", "does"]);
function queryWords(q) {
  return [...new Set((q || "").toLowerCase().match(/[\p{L}\p{N}]+/gu) || [])]
    .filter(w => w.length > 2 && !STOP.has(w));
}

// The scope field of the pages that ask for one (Search, Advice, Set aside): it offers the
// scopes GET /scopes lists for the caller (those with an episode it may read); any other
// scope (one holding only advice runs, say) can still be typed. A failed listing leaves
// the field as a plain one: the page's own request says what went wrong.
function scopeField(value) {
  const known = h("datalist", {id: "known-scopes"});
  get("/scopes").then(d => known.append(...d.scopes.map(s => h("option", {value: s.scope}))),
    () => {});
  return [h("input", {name: "scope", value, placeholder: "org/team", required: true, size: 16,
    list: "known-scopes"}), known];
}

function table(head, rows) {
  return h("div", {class: "scroll"}, h("table", {},
    h("thead", {}, h("tr", {}, head.map(c => h("th", {}, c)))),
    h("tbody", {}, rows)));
}

function errorBox(err) {
  return h("p", {class: "error", role: "alert"}, err instanceof Error ? err.message : String(err));
}

// A "more" button that appends the next page of a cursor-paged listing.
function pager(load, render, into) {
  const box = h("div", {class: "pager"});
  async function next(cursor) {
    box.replaceChildren();
    try {
      const page = await load(cursor);
      render(page, into);
      if (page.cursor) box.append(h("button", {class: "more", onclick: () => next(page.cursor)}, "More"));
    } catch (err) { box.append(errorBox(err)); }
  }
  return {box, next};
}

// -- pages ----------------------------------------------------------------------------------
// Each render draws into a box of its own: a page still loading when the user moves on
// finishes into a detached box, never into the page shown now.
let current = null;
const main = () => current;

function title(text, ...extra) { return h("h1", {}, text, ...extra); }

// A read as of a commit: the commit and the branch it is on (a commit is looked up on its
// own branch, so a branch's commit read as main's would be a 404).
function asOf(q) {
  return {at_commit: q.get("at_commit") || undefined, branch: q.get("branch") || undefined};
}

function scopeNav(scope, active, view) {
  const atCommit = view.at_commit;
  const tabs = [["episodes", "Episodes"], ["facts", "Facts"], ["schema", "Schema"], ["history", "History"]];
  const nav = h("nav", {class: "tabs"}, tabs.map(([k, label]) =>
    link(route(`/scope/${scope}/${k}`, k === "history" ? {} : view), label,
      {class: k === active ? "active" : ""})),
    link(route("/search", {scope}), "Search"), link(route("/advice", {scope}), "Advice"),
    link(route("/set-aside", {scope}), "Set aside"));
  const box = h("div", {}, h("h1", {}, "Scope ", h("code", {}, scope)), nav);
  if (atCommit) {
    box.append(h("p", {class: "asof"}, "Memory as of commit ", h("code", {}, short(atCommit)),
      view.branch ? [" on branch ", h("code", {}, view.branch)] : null,
      " (what that commit left, read with today's ACLs). ",
      link(route(`/scope/${scope}/${active}`), "Back to now")));
  }
  return box;
}

async function pageScopes() {
  const m = main();
  m.replaceChildren(title("Scopes"), h("p", {class: "hint"},
    "The scopes where you may read at least one episode, with what you may read there (GET /scopes)."));
  const data = await get("/scopes");
  if (!data.scopes.length) { m.append(h("p", {class: "empty"}, "Nothing readable for this caller.")); return; }
  m.append(table(["Scope", "Episodes", "Fact versions", "Entities"], data.scopes.map(s =>
    h("tr", {"data-scope": s.scope}, h("td", {}, link(route(`/scope/${s.scope}/episodes`), s.scope)),
      h("td", {class: "n"}, s.episodes), h("td", {class: "n"}, s.facts),
      h("td", {class: "n"}, s.entities)))));
}

async function pageEpisodes(scope, q) {
  const m = main();
  const view = asOf(q);
  m.replaceChildren(scopeNav(scope, "episodes", view));
  const body = h("tbody", {});
  const total = h("p", {class: "hint"});
  m.append(total, h("div", {class: "scroll"}, h("table", {id: "episodes"},
    h("thead", {}, h("tr", {}, ["Occurred", "Source", "Type", "ACL", "Document (versions)", "Commit"]
      .map(c => h("th", {}, c)))), body)));
  const p = pager(async (after) => {
    const page = await get("/episodes", {scope, ...view, limit: PAGE, after});
    total.textContent = `${page.total} episodes you may read, newest first.`;
    return {items: page.episodes, cursor: page.next_after};
  }, (page) => {
    for (const e of page.items) {
      body.append(h("tr", {"data-episode": e.id},
        h("td", {}, when(e.occurred_at)),
        h("td", {}, link(route(`/scope/${scope}/episode/${e.id}`, view), e.source)),
        h("td", {}, e.type), h("td", {}, e.acl.join(" ")),
        h("td", {}, e.document ? `${e.document} (${e.document_versions})` : "—"),
        h("td", {}, h("code", {}, short(e.commit)))));
    }
  });
  m.append(p.box);
  await p.next(undefined);
}

async function pageEpisode(scope, id, q) {
  const m = main();
  const view = asOf(q);
  const unit = Number(q.get("unit") || 0);
  const quote = q.get("quote") || "";
  m.replaceChildren(scopeNav(scope, "episodes", view));
  const e = await get(`/episodes/${id}`, {scope, ...view});
  m.append(h("h2", {}, e.source),
    h("dl", {class: "meta"},
      h("dt", {}, "Episode"), h("dd", {}, h("code", {}, e.id)),
      h("dt", {}, "Type"), h("dd", {}, e.type),
      h("dt", {}, "Occurred"), h("dd", {}, when(e.occurred_at)),
      h("dt", {}, "ACL"), h("dd", {}, e.acl.join(" ")),
      h("dt", {}, "Document"), h("dd", {}, e.document || "—"),
      h("dt", {}, "About"), h("dd", {}, e.about.join(", ") || "—"),
      h("dt", {}, "Commit"), h("dd", {}, h("code", {}, e.commit))),
    h("ol", {class: "units", id: "units"}, e.units.map(u => h("li", {
      id: `u${u.n}`, value: u.n, class: u.n === unit ? "unit cited" : "unit", "data-unit": u.n},
    h("span", {class: "kind"}, `${u.kind} ${u.n}`),
    h("p", {}, u.n === unit ? marked(u.text, quote) : u.text)))));
  const target = document.getElementById(`u${unit}`);
  if (target) target.scrollIntoView({block: "center"});
}

async function pageFacts(scope, q) {
  const m = main();
  const view = asOf(q);
  m.replaceChildren(scopeNav(scope, "facts", view));
  const list = h("ul", {class: "entities", id: "entities"});
  const total = h("p", {class: "hint"});
  m.append(total, list);
  const p = pager(async (after) => {
    const page = await get("/entities", {scope, ...view, limit: 50, after});
    total.textContent = `${page.total} entities with facts you may read.`;
    return {items: page.entities, cursor: page.next_after};
  }, (page) => {
    for (const e of page.items) {
      list.append(h("li", {"data-entity": e.entity},
        link(route(`/scope/${scope}/entity/${encodeURIComponent(e.entity)}`, view), e.entity),
        h("span", {class: "hint"}, ` ${e.predicates.join(", ")} · ${e.versions} versions`)));
    }
  });
  m.append(p.box);
  await p.next(undefined);
}

// Valid-time bars: each version a bar from valid_from to valid_to (open: to today).
function timeline(facts) {
  const now = Date.now();
  const t = (s) => (s ? Date.parse(s) : now);
  const lo = Math.min(...facts.map(f => t(f.valid_from)));
  const hi = Math.max(now, ...facts.map(f => t(f.valid_to)));
  const span = Math.max(1, hi - lo);
  return (f) => {
    const bar = h("div", {class: f.kind === "closure" ? "bar closure" : "bar",
      title: `${when(f.valid_from)} → ${f.valid_to ? when(f.valid_to) : "open"}`});
    bar.style.left = `${(100 * (t(f.valid_from) - lo)) / span}%`;
    bar.style.width = `${Math.max(0.8, (100 * (t(f.valid_to) - t(f.valid_from))) / span)}%`;
    return h("div", {class: "track"}, bar);
  };
}

async function pageEntity(scope, entity, q) {
  const m = main();
  const view = asOf(q);
  m.replaceChildren(scopeNav(scope, "facts", view), h("h2", {}, entity));
  const [all, now] = await Promise.all([
    get("/facts", {scope, entity, history: "true", ...view}),
    get("/facts", {scope, entity, ...view})]);
  const current = new Set(now.facts.map(f => f.id));
  if (!all.facts.length) { m.append(h("p", {class: "empty"}, "No facts you may read.")); return; }
  const bar = timeline(all.facts);
  m.append(h("p", {class: "hint"}, "Every version you may read, with its valid time; ",
    h("span", {class: "pill current"}, "current"), " marks the value holding now (GET /facts)."));
  const rows = all.facts.map(f => h("div", {class: current.has(f.id) ? "fact current" : "fact",
    "data-fact": f.id},
    h("div", {class: "fact-head"},
      h("strong", {}, f.predicate), " = ",
      h("span", {class: "value"}, f.kind === "closure" ? "(closed)" : JSON.stringify(f.value)),
      current.has(f.id) ? h("span", {class: "pill current"}, "current") : null,
      h("span", {class: "hint"}, ` ${when(f.valid_from)} → ${f.valid_to ? when(f.valid_to) : "open"} · ${f.written_by}`)),
    bar(f),
    h("blockquote", {}, f.quote),
    h("div", {class: "cites"}, "Quote from: ", f.cites.map(c =>
      link(route(`/scope/${scope}/episode/${c.episode}`, {unit: c.unit, quote: f.quote, ...view}),
        `${short(c.episode)} unit ${c.unit}`, {class: "cite"})))));
  m.append(h("div", {class: "facts"}, rows));
}

// -- history --------------------------------------------------------------------------------
function graph(commits, branches) {
  // One column per branch, one row per commit (newest first); a line from each commit to
  // each parent shown, so a merge is drawn as two lines joining.
  const col = new Map(branches.map((b, i) => [b, i]));
  const row = new Map(commits.map((c, i) => [c.id, i]));
  const W = 22, H = 44;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", String(W * Math.max(1, branches.length) + 8));
  svg.setAttribute("height", String(H * commits.length));
  svg.setAttribute("class", "graph");
  const x = (c) => 12 + W * (col.get(c.branch) || 0);
  const y = (i) => H / 2 + H * i;
  commits.forEach((c, i) => {
    for (const p of c.parents || []) {
      const j = row.get(p);
      const pc = commits[j];
      const line = document.createElementNS(ns, "path");
      const y2 = j === undefined ? H * commits.length : y(j);
      const x2 = pc ? x(pc) : x(c);
      line.setAttribute("d", `M${x(c)},${y(i)} C${x(c)},${y(i) + H / 2} ${x2},${y2 - H / 2} ${x2},${y2}`);
      line.setAttribute("class", p === c.parent ? "edge" : "edge merge");
      svg.append(line);
    }
  });
  commits.forEach((c, i) => {
    const dot = document.createElementNS(ns, "circle");
    dot.setAttribute("cx", String(x(c)));
    dot.setAttribute("cy", String(y(i)));
    dot.setAttribute("r", (c.parents || []).length > 1 ? "7" : "5");
    dot.setAttribute("class", `dot b${(col.get(c.branch) || 0) % 6}`);
    svg.append(dot);
  });
  return svg;
}

async function pageHistory(scope, q) {
  const m = main();
  m.replaceChildren(scopeNav(scope, "history", {}));
  const {branches} = await get("/branches", {scope});
  const names = branches.map(b => b.name);
  m.append(h("p", {class: "hint"}, `Branches: ${names.join(", ")}. Newest commits first, `
    + "a page per branch (GET /ledger); a merge joins two lines."));
  const commits = [];
  const cursors = new Map();
  const box = h("div", {class: "history"});
  const more = h("div", {class: "pager"});
  m.append(box, more);
  async function load() {
    for (const b of names) {
      if (cursors.get(b) === null) continue;
      const page = await get("/ledger", {scope, branch: b, limit: 20, before: cursors.get(b)});
      commits.push(...page.commits);
      cursors.set(b, page.next_before);
    }
    commits.sort((a, b) => (b.time > a.time ? 1 : b.time < a.time ? -1 : b.seq - a.seq));
    const list = h("ol", {class: "commits", id: "commits"}, commits.map(c => h("li", {"data-commit": c.id},
      h("div", {}, h("code", {}, short(c.id)), " ", h("span", {class: "pill"}, c.branch), " ",
        c.message, (c.parents || []).length > 1 ? h("span", {class: "pill merge"}, "merge") : null),
      h("div", {class: "hint"}, `${when(c.time)} · ${c.author} · `,
        Object.entries(c.changes).filter(([, v]) => v).map(([k, v]) => `${v} ${k}`).join(", ") || "no rows",
        " · ", link(route(`/scope/${scope}/episodes`,
          {at_commit: c.id, branch: c.branch === "main" ? undefined : c.branch}),
          "show memory as of this commit",
          {class: "asof-link"})))));
    box.replaceChildren(graph(commits, names), list);
    more.replaceChildren();
    if ([...cursors.values()].some(v => v)) more.append(h("button", {class: "more", onclick: load}, "More"));
  }
  await load();
}

// -- search ---------------------------------------------------------------------------------
function parts(p) {
  return h("span", {class: "parts"}, ["keyword", "meaning", "time"].map(k =>
    h("span", {class: `part ${k}`, title: k}, `${k} ${num(p ? p[k] : undefined)}`)));
}

async function pageSearch(q) {
  const m = main();
  const scope = q.get("scope") || "";
  const text = q.get("q") || "";
  const form = h("form", {class: "search", id: "search-form"},
    scopeField(scope),
    h("input", {name: "q", value: text, placeholder: "what to look for", required: true, size: 30}),
    h("button", {type: "submit"}, "Search"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    location.hash = route("/search", {scope: f.get("scope"), q: f.get("q")});
  });
  m.replaceChildren(title("Search"), form);
  if (!scope || !text) return;
  // The form's `required` lets white space through; the routes refuse a blank query (422):
  // say so here rather than send three requests bound to be refused.
  if (!text.trim()) {
    m.append(h("p", {class: "empty", id: "search-blank"}, "Type a word to look for: a blank query finds nothing."));
    return;
  }
  const words = queryWords(text);
  const [facts, passages, answer] = await Promise.all([
    post("/search", {scope, query: text, limit: 10}),
    post("/query", {scope, find: "passages", query: text, limit: 10}),
    post("/search", {scope, query: text, limit: 10, format: "text"})]);
  const left = h("section", {class: "col", id: "search-facts"}, h("h2", {}, "Facts (POST /search)"),
    facts.results.length ? facts.results.map(f => h("div", {class: "hit"},
      h("div", {}, link(route(`/scope/${scope}/entity/${encodeURIComponent(f.entity)}`), f.entity), " · ",
        h("strong", {}, f.predicate), " = ", JSON.stringify(f.value)),
      h("blockquote", {}, marked(f.quote, null, words)),
      h("div", {}, `score ${num(f.score)} `, parts(f.parts)),
      h("div", {class: "cites"}, f.cites.map(c => link(route(`/scope/${scope}/episode/${c.episode}`,
        {unit: c.unit, quote: f.quote}), `${short(c.episode)} unit ${c.unit}`, {class: "cite"})))))
      : h("p", {class: "empty"}, "No facts."),
    facts.sources.length ? h("h3", {}, "Source text no fact cites") : null,
    facts.sources.map(s => h("div", {class: "hit"}, link(route(`/scope/${scope}/episode/${s.episode}`,
      {unit: s.unit}), `${s.source} unit ${s.unit}`), h("p", {}, marked(s.text, null, words)))));
  const right = h("section", {class: "col", id: "search-passages"}, h("h2", {}, "Passages (POST /query)"),
    passages.results.length ? passages.results.map(p => h("div", {class: "hit"},
      h("div", {}, link(route(`/scope/${scope}/episode/${p.episode}`, {unit: p.first_unit}), p.source),
        h("span", {class: "hint"}, ` units ${p.first_unit}–${p.last_unit} · ${when(p.occurred_at)}`)),
      h("p", {}, marked(p.text, null, words)),
      h("div", {}, `score ${num(p.score)} `, parts(p.parts)))) : h("p", {class: "empty"}, "No passages."));
  m.append(h("div", {class: "cols"}, left, right),
    h("h2", {}, "The text answer, as an agent sees it (format: text)"),
    h("pre", {class: "answer", id: "search-answer"}, answer));
}

// -- AMP cells ------------------------------------------------------------------------------
const STATES = ["active", "stale", "archived"];

async function pageCells(q) {
  const m = main();
  const owner = q.get("owner") || "";
  const status = q.get("status") || "active";
  const form = h("form", {class: "search"},
    h("input", {name: "owner", value: owner, placeholder: "owner id (all when empty)", size: 24}),
    h("select", {name: "status"}, STATES.map(s => h("option", {value: s, selected: s === status}, s))),
    h("button", {type: "submit"}, "List"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    location.hash = route("/cells", {owner: f.get("owner"), status: f.get("status")});
  });
  m.replaceChildren(title("AMP cells"), h("p", {class: "hint"},
    "Cells this agent may read (GET /amp-cells: the page GET /amp/v1/memories lists, with each cell's decay score; listing is not a read, so no clock moves)."), form);
  if (!who().agent) {
    m.append(h("p", {class: "empty"}, "AMP cells are read as an agent: name one above (Agent)."));
    return;
  }
  // How many readable cells are in each state now (a page of 100 each: "100+" past that).
  const counts = await Promise.all(STATES.map(s => get("/amp/v1/memories",
    {owner_id: owner, status: s, limit: 100})));
  const max = Math.max(1, ...counts.map(c => c.returned));
  m.append(h("div", {class: "chart", id: "cell-states"}, STATES.map((s, i) => {
    const bar = h("span", {class: `bar ${s}`});
    bar.style.width = `${(100 * counts[i].returned) / max}%`;
    return h("div", {class: "chart-row"}, h("span", {class: "label"}, s), h("span", {class: "track"}, bar),
      h("span", {class: "n"}, `${counts[i].returned}${counts[i].has_more ? "+" : ""}`));
  })), h("p", {class: "hint"}, "Readable cells in each state now."));
  const lifecycle = h("section", {id: "lifecycle"}, h("h2", {}, "Lifecycle over the recent passes"));
  m.append(lifecycle);
  const body = h("tbody", {});
  m.append(h("div", {class: "scroll"}, h("table", {id: "cells"}, h("thead", {}, h("tr", {},
    ["Cell", "Owner", "Type", "Status", "Decay score", "Importance × confidence", "Decay rate", "Clock from", "Access", "Text"]
      .map(c => h("th", {}, c)))), body)));
  let asked = false;
  const p = pager(async (offset) => {
    const page = await get("/amp-cells", {owner_id: owner, status, limit: PAGE, offset: offset || 0});
    if (!asked) {  // the first page says whether these credentials are an admin's
      asked = true;
      await lifecycleHistory(lifecycle, page.admin);
    }
    return {items: page.cells.map(x => ({...x, stale_below: page.stale_below})),
      cursor: page.has_more ? page.offset + page.cells.length : null};
  }, (page) => {
    for (const x of page.items) {
      const c = x.cell, l = c.lifecycle, s = c.scoring, a = c.access_policy;
      const low = x.decay_score < x.stale_below;
      body.append(h("tr", {"data-cell": c.id}, h("td", {}, h("code", {}, short(c.id))),
        h("td", {}, `${c.identity.owner_type}:${c.identity.owner_id}`), h("td", {}, c.type),
        h("td", {}, h("span", {class: `pill ${l.status}`}, l.status)),
        h("td", {class: `n decay${low ? " low" : ""}`, title: `stale below ${x.stale_below}`}, num(x.decay_score)),
        h("td", {class: "n"}, `${num(s.importance)} × ${num(s.confidence)}`), h("td", {class: "n"}, num(s.decay_rate)),
        h("td", {}, when(x.decay_clock)),
        h("td", {}, a.public ? "public" : `read: ${(a.readable_by || []).join(" ") || "owner"}`),
        h("td", {}, String(c.content.text).slice(0, 160))));
    }
  });
  m.append(p.box);
  await p.next(0);
}

// The recent lifecycle passes (GET /amp-lifecycle, admin only: its counts cover every
// owner's cells) as stacked bars of the cells in each status after each pass, oldest left.
// Asked only when GET /amp-cells said the credentials are an admin's: a refused request
// would show in the browser's console as a failed load.
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  el.append(...children);
  return el;
}

async function lifecycleHistory(box, admin) {
  if (!admin) {
    box.append(h("p", {class: "empty"}, "The lifecycle history counts every owner's cells: "
      + "it is shown to an admin (Admin token, or an admin key)."));
    return;
  }
  const passes = (await get("/amp-lifecycle", {limit: 30})).passes;
  const kept = passes.filter(p => Object.keys(p.states || {}).length).reverse();
  if (!kept.length) {
    box.append(h("p", {class: "empty"}, "No lifecycle pass recorded yet."));
    return;
  }
  const states = ["active", "stale", "archived", "deleted"];
  const total = p => states.reduce((n, s) => n + (p.states[s] || 0), 0);
  const top = Math.max(1, ...kept.map(total));
  const W = 24, GAP = 6, H = 120, width = kept.length * (W + GAP) + GAP;
  const chart = svg("svg", {viewBox: `0 0 ${width} ${H + 4}`, width, height: H + 4, role: "img",
    "aria-label": "cells in each status after each lifecycle pass"});
  kept.forEach((p, i) => {
    let y = H;
    const g = svg("g", {"data-pass": p.started_at});
    g.append(svg("title", {}, `${when(p.started_at)}: ` + states.map(s => `${s} ${p.states[s] || 0}`).join(", ")));
    for (const s of states) {
      const n = p.states[s] || 0;
      if (!n) continue;
      const hgt = (H * n) / top;
      y -= hgt;
      g.append(svg("rect", {class: `st-${s}`, x: GAP + i * (W + GAP), y, width: W, height: hgt}));
    }
    chart.append(g);
  });
  const newest = kept[kept.length - 1];
  box.append(h("div", {class: "scroll"}, chart), h("p", {class: "legend"}, states.map(s =>
    h("span", {class: `key st-${s}`}, `${s} ${newest.states[s] || 0}`))),
  h("p", {class: "hint"}, `${kept.length} passes, oldest left; the numbers are after the latest `
    + `(${when(newest.started_at)}).`));
}

// -- advice ---------------------------------------------------------------------------------
async function pageAdvice(q) {
  const m = main();
  const scope = q.get("scope") || "";
  m.replaceChildren(title("Advice"), scopeForm("/advice", scope));
  if (!scope) return;
  const [map, notes, compiled] = await Promise.all([get("/situations", {scope}), get("/notes", {scope}),
    get("/procedures", {scope})]);
  m.append(h("h2", {}, "Situations"), map.situations.length ? table(["Category", "Situation", "Terms", "Size", "Runs you may read"],
    map.situations.map(s => h("tr", {}, h("td", {}, (map.categories.find(c => c.id === s.category) || {}).name || s.category),
      h("td", {}, s.name), h("td", {}, (s.terms || []).join(", ")), h("td", {class: "n"}, s.size),
      h("td", {class: "n", "data-members": (s.members || []).join(" ")}, (s.members || []).length))))
    : h("p", {class: "empty"}, "No situation map yet."));
  m.append(h("h2", {}, "Notes"), notes.notes.length ? h("div", {class: "notes"}, notes.notes.map(n => h("article", {class: "note"},
    h("div", {}, h("span", {class: `pill ${n.state}`}, n.state), " ", h("code", {}, n.key), " · ", n.situation),
    h("h3", {}, "When"), h("p", {}, n.when),
    h("h3", {}, "Steps"), h("ol", {}, (n.steps || []).map(s => h("li", {}, s))),
    h("h3", {}, "Pitfalls"), h("ul", {}, (n.pitfalls || []).map(s => h("li", {}, s))),
    h("p", {class: "evidence"}, Object.entries(n.evidence || {}).map(([k, v]) => `${k} ${v}`).join(" · ")),
    h("p", {class: "hint sources"}, `Learnt from ${(n.sources || []).length} session(s) you may read: `,
      // Full ids: cut at 10 characters, a ses_ ULID keeps only its time, minutes wide.
      ...(n.sources || []).map(id => h("code", {"data-session": id}, id, " "))))))
    : h("p", {class: "empty"}, "No notes."));
  m.append(proceduresSection(scope, compiled));
  const runs = runsSection(scope);
  const sessions = sessionsSection(scope);
  m.append(runs.box, sessions.box);
  await Promise.all([runs.load(), sessions.load()]);
}

// -- router ---------------------------------------------------------------------------------
async function render() {
  const [path, query] = (location.hash.slice(1) || "/scopes").split("?");
  const q = new URLSearchParams(query || "");
  // A hand-typed or truncated link may hold a bad %-escape: keep that part as typed
  // rather than throw before the page (and its error box) is drawn.
  const parts = path.split("/").filter(Boolean).map((p) => {
    try { return decodeURIComponent(p); } catch { return p; }
  });
  for (const a of document.querySelectorAll("#nav a")) {
    const section = {scope: "scopes", run: "advice", session: "advice", workspace: "workspaces"}[parts[0]] || parts[0];
    a.classList.toggle("active", a.dataset.page === section);
  }
  const m = h("div", {class: "page"});
  current = m;
  document.getElementById("main").replaceChildren(m);
  m.append(h("p", {class: "hint"}, "Loading…"));
  try {
    if (!who().user && !who().agent) {
      m.replaceChildren(title("Who is asking?"), h("p", {}, "Name a user (AmpUp routes: X-AmpUp-User) "
        + "and/or an agent id (AMP routes: X-AMP-Agent-ID) above; with keys on, paste the agent's key too. "
        + "You see exactly what that caller may read over the API."));
      return;
    }
    // Every page but the AMP cells reads AmpUp routes, which act for a user: the User
    // field, or with keys on the key's bound user. Without either they all answer 401.
    if (parts[0] !== "cells" && !who().user && !who().key) {
      m.replaceChildren(title("Who is asking?"), h("p", {class: "empty"}, "This page is read as an AmpUp "
        + "user: name one above (User), or with keys on paste the agent's key (its bound user)."));
      return;
    }
    if (parts[0] === "scope" && parts.length >= 4) {
      const scope = `${parts[1]}/${parts[2]}`;
      const page = parts[3];
      if (page === "episodes") await pageEpisodes(scope, q);
      else if (page === "episode") await pageEpisode(scope, parts[4], q);
      else if (page === "facts") await pageFacts(scope, q);
      else if (page === "entity") await pageEntity(scope, parts.slice(4).join("/"), q);
      else if (page === "history") await pageHistory(scope, q);
      else if (page === "schema") await pageSchema(scope, q);
      else m.replaceChildren(errorBox("No such page."));
    } else if (parts[0] === "search") await pageSearch(q);
    else if (parts[0] === "cells") await pageCells(q);
    else if (parts[0] === "advice") await pageAdvice(q);
    else if (parts[0] === "run" && parts[1]) await pageRun(parts[1]);
    else if (parts[0] === "session" && parts[1]) await pageSession(parts[1]);
    else if (parts[0] === "workspaces") await pageWorkspaces(q);
    else if (parts[0] === "workspace" && parts[1]) await pageWorkspace(parts[1]);
    else if (parts[0] === "set-aside") await pageSetAside(q);
    else await pageScopes();
  } catch (err) {
    m.append(errorBox(err));
  }
}

function init() {
  const w = who();
  const form = document.getElementById("who");
  form.user.value = w.user || "";
  form.agent.value = w.agent || "";
  form.key.value = w.key || "";
  form.admin.value = w.admin || "";
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(WHO_KEY, JSON.stringify({
      user: form.user.value.trim(), agent: form.agent.value.trim(), key: form.key.value.trim(),
      admin: form.admin.value.trim()}));
    render();
  });
  window.addEventListener("hashchange", render);
  render();
}

document.addEventListener("DOMContentLoaded", init);
