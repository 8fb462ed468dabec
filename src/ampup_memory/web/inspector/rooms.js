// AmpUp Memory inspector, the rooms built after the first pages: a scope's schema, the
// advice runs, sessions and compiled procedures, workspaces, and what model passes set aside. Loaded
// after app.js (its helpers: get, h, link, route, table, pager, ...), and as plain a
// client: each page shows a route's answer for the caller named above, as text.
"use strict";

function pre(value) { return h("pre", {class: "answer"}, value); }
function list(items, cls) {
  return (items || []).length ? h("ul", {class: cls}, items.map(x => h("li", {}, x)))
    : h("span", {class: "hint"}, "—");
}
function scopeForm(path, scope, extra) {
  const form = h("form", {class: "search"},
    scopeField(scope), extra || null, h("button", {type: "submit"}, "Show"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = route(path, Object.fromEntries(new FormData(form)));
  });
  return form;
}

// -- a scope's schema (GET /schemas/{org}/{team}) -------------------------------------------
// An attribute's type with its parameter: the enum's values, money's currency, ref's entity.
function attrType(a) {
  if (a.type === "enum") return `enum (${(a.values || []).join(", ")})`;
  if (a.type === "money" && a.currency) return `money (${a.currency})`;
  if (a.type === "ref" && a.entity) return `ref → ${a.entity}`;
  return a.type;
}

async function pageSchema(scope, q) {
  const m = main();
  const view = asOf(q);
  m.replaceChildren(scopeNav(scope, "schema", view));
  const [org, team] = scope.split("/");
  const got = await get(`/schemas/${encodeURIComponent(org)}/${encodeURIComponent(team)}`, view);
  const box = h("section", {id: "schema"});
  m.append(box);
  if (!got.schema) {
    box.append(h("p", {class: "empty"}, "No schema: facts of this scope are not typed."));
    return;
  }
  const s = got.schema;
  // DOM append writes null as the text "null": absent parts are "" (no text at all).
  box.append(h("h2", {}, s.name), s.description ? h("p", {}, s.description) : "",
    h("dl", {class: "meta"},
      h("dt", {}, "Branch"), h("dd", {}, got.branch || "main"),
      h("dt", {}, "Version"), h("dd", {}, h("code", {}, short(got.version))),
      h("dt", {}, "Set"), h("dd", {}, when(got.set_at)),
      h("dt", {}, "Commit"), h("dd", {}, h("code", {}, short(got.commit)))));
  for (const e of s.entities || []) {
    box.append(h("h3", {"data-entity-type": e.name}, e.name),
      e.description ? h("p", {class: "hint"}, e.description) : "",
      table(["Attribute", "Type", "Cardinality", "Description"], (e.attributes || []).map(a =>
        h("tr", {"data-attribute": `${e.name}.${a.name}`}, h("td", {}, a.name), h("td", {}, attrType(a)),
          h("td", {}, a.cardinality || "one"), h("td", {}, a.description || "")))));
  }
  box.append(h("h2", {}, "Extract"), (s.extract || []).length
    ? table(["Episode types", "Targets", "Instructions"], s.extract.map(r => h("tr", {class: "extract-rule"},
      h("td", {}, (r.episode_types || []).join(", ")),
      h("td", {}, Object.entries(r.targets || {}).map(([t, attrs]) => `${t}: ${attrs.join(", ")}`).join("; ")),
      h("td", {}, r.instructions || ""))))
    : h("p", {class: "empty"}, "No extract rules: no model reads this scope's episodes."));
}

// -- advice: runs and procedures ------------------------------------------------------------
function reward(r) {
  return r ? `${num(r.value)} by ${r.by}${r.user && r.user !== r.by ? ` (${r.user})` : ""}: ${r.reason || ""}` : "—";
}

function runsSection(scope) {
  const body = h("tbody", {});
  const box = h("section", {id: "runs"}, h("h2", {}, "Runs"), h("p", {class: "hint"},
    "The runs you may read, newest first (GET /runs, 25 a page)."),
  h("div", {class: "scroll"}, h("table", {}, h("thead", {}, h("tr", {},
    ["Run", "Task", "Outcome", "Reward (reason)", "Advice served", "Who may read", "At"].map(c => h("th", {}, c)))),
  body)));
  const p = pager(async (before) => {
    const page = await get("/runs", {scope, limit: PAGE, before});
    return {items: page.runs, cursor: page.next_before};
  }, (page) => {
    if (!page.items.length && !body.children.length) {
      body.append(h("tr", {}, h("td", {class: "empty", colspan: 7}, "No runs you may read.")));
    }
    for (const r of page.items) {
      // The full id: cut at 10 characters, a run_ ULID keeps only its time, minutes wide.
      body.append(h("tr", {"data-run": r.id}, h("td", {}, link(route(`/run/${r.id}`), r.id, {class: "id"})),
        h("td", {}, r.task), h("td", {}, r.outcome || "—"), h("td", {class: "reward"}, reward(r.reward)),
        h("td", {}, r.advice_key ? h("code", {}, r.advice_key) : "—"), h("td", {}, (r.acl || []).join(" ")),
        h("td", {}, when(r.at))));
    }
  });
  box.append(p.box);
  return {box, load: () => p.next(undefined)};
}

async function pageRun(id) {
  const m = main();
  const r = await get(`/runs/${encodeURIComponent(id)}`);
  m.replaceChildren(title("Run ", h("code", {}, r.id)),
    h("p", {}, link(route("/advice", {scope: r.scope}), `Advice of ${r.scope}`)),
    h("dl", {class: "meta", id: "run"},
      h("dt", {}, "Task"), h("dd", {}, r.task),
      h("dt", {}, "Outcome"), h("dd", {}, r.outcome || "—"),
      h("dt", {}, "Reward"), h("dd", {class: "reward"}, reward(r.reward)),
      h("dt", {}, "Advice served"), h("dd", {}, r.advice_key || "—"),
      h("dt", {}, "Who may read"), h("dd", {}, (r.acl || []).join(" ")),
      h("dt", {}, "Recorded by"), h("dd", {}, r.user),
      h("dt", {}, "Branch"), h("dd", {}, r.branch),
      h("dt", {}, "At"), h("dd", {}, when(r.at)),
      h("dt", {}, "Commit"), h("dd", {}, h("code", {}, r.commit))),
    h("h2", {}, "Rewards, oldest first"), list((r.rewards || []).map(reward), "rewards"),
    h("h2", {}, "Trace"), r.trace ? pre(r.trace) : h("p", {class: "empty"}, "No trace."));
}

// -- sessions (GET /sessions, GET /sessions/{id}) -------------------------------------------
// The judge's word on each note served: did the agent apply it, and did it help.
function verdicts(r) {
  const notes = Object.entries((r && r.by === "judge" && r.notes) || {});
  return notes.length ? h("ul", {class: "verdicts"}, notes.map(([key, v]) => h("li", {"data-note": key},
    h("code", {}, key), `: ${v.applied ? "applied" : "not applied"}, ${v.helped ? "helped" : "did not help"}`)))
    : h("span", {class: "hint"}, "—");
}

function sessionsSection(scope) {
  const body = h("tbody", {});
  const box = h("section", {id: "sessions"}, h("h2", {}, "Sessions"), h("p", {class: "hint"},
    "The sessions you may read, newest first (GET /sessions, 25 a page), with the advice served, "
    + "the reward and the judge's verdict on each note."),
  h("div", {class: "scroll"}, h("table", {}, h("thead", {}, h("tr", {},
    ["Session", "Task", "State", "Started", "Ended", "Reward (reason)", "Judge's verdicts", "Who may read"]
      .map(c => h("th", {}, c)))), body)));
  const p = pager(async (before) => {
    const page = await get("/sessions", {scope, limit: PAGE, before});
    return {items: page.sessions, cursor: page.next_before};
  }, (page) => {
    if (!page.items.length && !body.children.length) {
      body.append(h("tr", {}, h("td", {class: "empty", colspan: 8}, "No sessions you may read.")));
    }
    for (const s of page.items) {
      body.append(h("tr", {"data-session": s.id},
        h("td", {}, link(route(`/session/${s.id}`), s.id, {class: "id"})), h("td", {}, s.task || "—"),
        h("td", {}, h("span", {class: `pill ${s.state}`}, s.state)), h("td", {}, when(s.started_at)),
        h("td", {}, when(s.ended_at)),
        h("td", {class: "reward"}, s.reward ? reward(s.reward) : (s.judging === "pending" ? "judging pending" : "—")),
        h("td", {class: "verdicts"}, verdicts(s.reward)), h("td", {}, (s.acl || []).join(" "))));
    }
  });
  box.append(p.box);
  return {box, load: () => p.next(undefined)};
}

async function pageSession(id) {
  const m = main();
  const s = await get(`/sessions/${encodeURIComponent(id)}`);
  m.replaceChildren(title("Session ", h("code", {}, s.id)),
    h("p", {}, link(route("/advice", {scope: s.scope}), `Advice of ${s.scope}`)),
    h("dl", {class: "meta", id: "session"},
      h("dt", {}, "Task"), h("dd", {}, s.task || "—"),
      h("dt", {}, "State"), h("dd", {}, s.state),
      h("dt", {}, "Started"), h("dd", {}, `${when(s.started_at)} by ${s.user}`),
      h("dt", {}, "Ended"), h("dd", {}, when(s.ended_at)),
      h("dt", {}, "Outcome"), h("dd", {}, s.outcome || "—"),
      h("dt", {}, "Reward"), h("dd", {class: "reward"}, reward(s.reward)),
      h("dt", {}, "Judging"), h("dd", {}, s.judging || "—"),
      h("dt", {}, "Who may read"), h("dd", {}, (s.acl || []).join(" ")),
      h("dt", {}, "Branch"), h("dd", {}, s.branch)),
    h("h2", {}, "Advice served"), list((s.steps || []).map(st => [when(st.at), " ",
      h("code", {}, (st.served || {}).key || "—"), (st.served || {}).kind ? ` (${st.served.kind})` : ""]), "steps"),
    h("h2", {}, "The judge's verdicts"), h("div", {id: "session-verdicts"}, verdicts(s.reward)),
    h("h2", {}, "Rewards, oldest first"), list((s.rewards || []).map(reward), "rewards"),
    h("h2", {}, "Transcript"), s.transcript ? pre(s.transcript) : h("p", {class: "empty"}, "No transcript."));
}

function proceduresSection(scope, compiled) {
  const box = h("section", {id: "procedures"}, h("h2", {}, "Procedures"));
  if (!compiled.version) {
    box.append(h("p", {class: "empty"}, "No procedures compiled yet."));
    return box;
  }
  box.append(h("p", {class: "hint"}, `Compiled ${when(compiled.compiled_at)} by ${compiled.model}, `
    + `commit ${short(compiled.version)} (GET /procedures).`));
  box.append(h("div", {class: "notes"}, compiled.procedures.map(p => h("article", {class: "note procedure",
    "data-procedure": p.key},
  h("div", {}, h("strong", {}, p.name), " ", h("code", {}, p.key)),
  h("h3", {}, "When"), h("p", {}, p.when),
  h("h3", {}, "Steps"), h("ol", {}, (p.steps || []).map(s => h("li", {}, s))),
  h("h3", {}, "Edge cases"), list(p.edge_cases),
  h("p", {class: "hint sources cites"}, `Sources you may read (${(p.sources || []).length}): `,
    ...(p.sources || []).map(c => link(route(`/scope/${scope}/episode/${c.episode}`, {unit: c.unit}),
      `${short(c.episode)} unit ${c.unit}`, {class: "cite"})))))));
  return box;
}

// -- workspaces (GET /workspaces, GET /workspaces/{id}) -------------------------------------
const CAPS = ["scopes", "episodes", "facts", "bytes"];

function usage(w) {
  return h("div", {class: "chart caps"}, CAPS.map(c => {
    const used = (w.usage || {})[c] || 0, cap = (w.caps || {})[c] || 0;
    const bar = h("span", {class: "bar"});
    bar.style.width = `${cap ? Math.min(100, (100 * used) / cap) : 0}%`;
    return h("div", {class: "chart-row", "data-cap": c}, h("span", {class: "label"}, c),
      h("span", {class: "track"}, bar), h("span", {class: "used"}, `${used} / ${cap}`));
  }));
}

async function pageWorkspaces(q) {
  const m = main();
  const everyone = q.get("all") === "true";
  const box = h("input", {type: "checkbox", name: "all", value: "true", checked: everyone});
  const form = h("form", {class: "search"}, h("label", {}, box, " everyone's (admin)"),
    h("button", {type: "submit"}, "List"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = route("/workspaces", {all: box.checked ? "true" : undefined});
  });
  m.replaceChildren(title("Workspaces"), h("p", {class: "hint"},
    "Your live workspaces, oldest first, with their caps and usage (GET /workspaces; an admin "
    + "may list everyone's)."), form);
  if (everyone && !who().admin && !who().key) {
    // Everyone's is an admin's (GET /workspaces?all=true answers 403 otherwise): ask for
    // the credential rather than send a request bound to be refused.
    m.append(h("p", {class: "empty"}, "Everyone's workspaces are an admin's to list: fill in "
      + "Admin above (X-AMP-Admin-Token), or with keys on paste an admin key."));
    return;
  }
  const {workspaces} = await get("/workspaces", {all: everyone ? "true" : undefined});
  if (!workspaces.length) { m.append(h("p", {class: "empty"}, "No live workspace.")); return; }
  m.append(table(["Workspace", "Name", "Created by", "Created", "Expires", "Scopes (used / cap)"],
    workspaces.map(w => h("tr", {"data-workspace": w.id},
      h("td", {}, link(route(`/workspace/${w.id}`), w.id)), h("td", {}, w.name),
      h("td", {}, w.created_by), h("td", {}, when(w.created_at)), h("td", {}, when(w.expires_at)),
      h("td", {class: "n"}, `${(w.usage || {}).scopes || 0} / ${(w.caps || {}).scopes}`)))));
}

async function pageWorkspace(id) {
  const m = main();
  const w = await get(`/workspaces/${encodeURIComponent(id)}`);
  m.replaceChildren(title("Workspace ", h("code", {}, w.id)),
    h("dl", {class: "meta", id: "workspace"},
      h("dt", {}, "Name"), h("dd", {}, w.name),
      h("dt", {}, "Org"), h("dd", {}, h("code", {}, w.org), " (its scopes are ", h("code", {}, `${w.org}/<team>`), ")"),
      h("dt", {}, "Created by"), h("dd", {}, w.created_by),
      h("dt", {}, "Created"), h("dd", {}, when(w.created_at)),
      h("dt", {}, "Expires"), h("dd", {}, when(w.expires_at))),
    h("h2", {}, "Caps and usage"), usage(w),
    h("h2", {}, "Scopes"), list((w.scopes || []).map(s => link(route(`/scope/${s}/episodes`), s)), "ws-scopes"));
  const {snapshots} = await get(`/workspaces/${encodeURIComponent(id)}/snapshots`);
  m.append(h("h2", {}, "Snapshots"), h("p", {class: "hint"},
    "Taken of this workspace, newest first (GET /workspaces/{id}/snapshots); a read names one as snapshot=."),
  snapshots.length ? h("div", {id: "snapshots"}, table(["Snapshot", "Taken", "By", "State", "Heads held"],
    snapshots.map(x => h("tr", {"data-snapshot": x.id}, h("td", {}, h("code", {}, x.id)),
      h("td", {}, when(x.created_at)), h("td", {}, x.created_by),
      h("td", {}, h("span", {class: `pill ${x.state}`}, x.state)),
      h("td", {}, Object.entries(x.heads || {}).map(([k, c]) => h("div", {}, `${k} `, h("code", {}, short(c)))))))))
    : h("p", {class: "empty", id: "snapshots"}, "No snapshot taken of this workspace."));
}

// -- set aside (GET /set-aside, GET /extraction/set-aside, GET /extraction/status) -----------
const ASIDE_KINDS = ["", "extract", "judge", "learn", "compile"];

// An extraction's item is an episode (on its branch), the judge's a session: linked to
// their pages; learn's situation and compile's scope have none here.
function asideItem(i) {
  if (i.kind === "extract") {
    return link(route(`/scope/${i.scope}/episode/${i.item}`, {branch: i.branch === "main" ? undefined : i.branch}),
      i.item, {class: "id"});
  }
  return i.kind === "judge" ? link(route(`/session/${i.item}`), i.item, {class: "id"}) : h("code", {}, i.item);
}

function asideRows(items) {
  return items.map(i => h("tr", {"data-item": i.item, "data-kind": i.kind},
    h("td", {}, i.kind), h("td", {}, asideItem(i)), h("td", {}, i.branch || "—"),
    h("td", {}, i.model), h("td", {class: "reason"}, i.reason), h("td", {class: "n"}, i.passes),
    h("td", {}, when(i.at))));
}
const ASIDE_HEAD = ["Kind", "Item", "Branch", "Model", "Why", "Passes", "At"];

async function pageSetAside(q) {
  const m = main();
  const scope = q.get("scope") || "";
  const kind = q.get("kind") || "";
  const branch = q.get("branch") || "main";
  m.replaceChildren(title("Set aside"), h("p", {class: "hint"},
    "What model passes set aside (no usable answer, or the request refused, on 3 passes in a row) "
    + "and why, as you may read it."),
  scopeForm("/set-aside", scope, [
    h("select", {name: "kind"}, ASIDE_KINDS.map(k => h("option", {value: k, selected: k === kind}, k || "every kind"))),
    h("input", {name: "branch", value: branch, placeholder: "branch", size: 10})]));
  if (!scope) return;
  const [status, extraction] = await Promise.all([
    get("/extraction/status", {scope, branch}), get("/extraction/set-aside", {scope, branch})]);
  const body = h("tbody", {});
  m.append(h("h2", {}, "Every branch (GET /set-aside)"),
    h("div", {class: "scroll"}, h("table", {id: "set-aside"},
      h("thead", {}, h("tr", {}, ASIDE_HEAD.map(c => h("th", {}, c)))), body)));
  const p = pager(async (after) => {
    const page = await get("/set-aside", {scope, kind, limit: PAGE, after});
    return {items: page.items, cursor: page.next_after};
  }, (page) => {
    if (!page.items.length && !body.children.length) {
      body.append(h("tr", {}, h("td", {class: "empty", colspan: 7}, "Nothing set aside that you may read.")));
    }
    body.append(...asideRows(page.items));
  });
  m.append(p.box);
  await p.next(undefined);
  m.append(h("h2", {}, `Extraction on ${branch} (GET /extraction/status, /extraction/set-aside)`),
    h("dl", {class: "meta", id: "extraction-status"},
      h("dt", {}, "Model"), h("dd", {}, status.model),
      h("dt", {}, "Schema"), h("dd", {}, status.schema_name || "—"),
      h("dt", {}, "Episodes read"), h("dd", {}, status.episodes_read),
      h("dt", {}, "Pending"), h("dd", {}, status.episodes_pending),
      h("dt", {}, "Facts written"), h("dd", {}, status.facts_written),
      h("dt", {}, "Rejected"), h("dd", {}, Object.entries(status.rejected || {})
        .map(([k, v]) => `${k} ${v}`).join(", ") || "—"),
      h("dt", {}, "Last error"), h("dd", {}, status.last_error
        ? `${status.last_error} (${when(status.last_error_at)})` : "—")),
    h("div", {id: "extraction-set-aside"}, extraction.items.length ? table(ASIDE_HEAD, asideRows(extraction.items))
      : h("p", {class: "empty"}, "No episode of this branch set aside that you may read.")));
}
