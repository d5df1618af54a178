// qtg operator console: plain JavaScript, no framework, no build step. It talks only to the
// /v3 API of the qtg-api that serves it, with the operator's own key, kept in sessionStorage
// (gone when the tab closes; never in a URL, never logged). Every value from the API is
// rendered as text (no innerHTML). Actions are shown only to the roles that may use them
// (the API decides anyway) and each asks for a reason.
"use strict";

const KEY = "qtg.console.key";
const RANKS = { viewer: 0, requester: 1, approver: 2, operator: 3, admin: 4 };
const TERMINAL = ["COMPLETED", "FAILED", "CANCELLED", "REJECTED", "EXPIRED"];
const REFRESH_MS = 2000;
const STATES = ["PENDING_APPROVAL", "APPROVED", "EXECUTING", "WAITING_MANUAL_ACTION", "MANUAL_INTERVENTION",
  "COMPLETED", "FAILED", "EXPIRED", "REJECTED", "CANCELLED"];
const CASES = ["C1", "C2", "C3a", "C3b", "C5", "C6", "C7"];

let me = null; // {principal, role}
let notice = ""; // a message for the sign-in screen (signed out, key refused, API unreachable)

// ---- DOM helpers -------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const $ = (id) => document.getElementById(id);
/** What identifies a focused control across a re-render (a refresh rebuilds the screen). */
function focusKey(el) {
  if (!el || el === document.body) return null;
  const attr = (a) => `[${a}="${CSS.escape(el.getAttribute(a))}"]`;
  if (el.id) return `#${CSS.escape(el.id)}`;
  for (const a of ["data-action", "data-node", "href"]) if (el.getAttribute(a)) return `${el.tagName.toLowerCase()}${attr(a)}`;
  return null;
}
/** Replaces el's children, skipping the null/false of optional parts; keeps the keyboard focus. */
function put(el, ...kids) {
  const key = el.contains(document.activeElement) ? focusKey(document.activeElement) : null;
  el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
  if (key) el.querySelector(key)?.focus();
}
const failure = (what, e) => h("p", { role: "alert", class: "error" }, `${what} could not be loaded: ${e.code ? `${e.code}: ` : ""}${e.message}`);
const badge = (s) => h("span", { class: `badge s-${s}` }, s ?? "—");
const text = (v) => (v === null || v === undefined || v === "" ? "—" : typeof v === "object" ? JSON.stringify(v) : String(v));
const json = (v) => h("pre", {}, JSON.stringify(v, null, 2));
// What cannot be seen or would reorder what is around it: controls, format characters (bidi
// overrides and isolates, zero-width), unassigned and private-use code points, separators
// other than the ASCII space, and letters that render blank. The API refuses them in what a
// person reads; a value stored before that rule is shown with each one spelled out.
const HIDDEN = /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}\u00A0\u1680\u2000-\u200A\u202F\u205F\u3000\u115F\u1160\u3164\uFFA0\u2800\u034F\uFE00-\uFE0F]/gu;
const spelled = (s) => s.replace(HIDDEN, (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
/** The value as stored, every character in order: isolated from the text around it, laid out
 * left to right whatever it holds (no bidi reordering), monospace, hidden characters spelled
 * out; its exact JSON (non-ASCII escaped) is in the title and one click away. */
function val(v) {
  const s = v === null || v === undefined || v === "" ? "—" : typeof v === "object" ? JSON.stringify(v) : String(v);
  const raw = JSON.stringify(v ?? null).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  const el = h("bdi", { dir: "ltr", class: "val mono", title: `raw: ${raw}`, tabindex: "0", role: "button", "aria-label": `${spelled(s)}, activate for the raw value` }, spelled(s));
  const toggle = () => { el.textContent = el.textContent === raw ? spelled(s) : raw; };
  el.addEventListener("click", toggle);
  el.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); toggle(); } });
  return el;
}
/** An intent as an approver must read it: each field on its own line, each value isolated. */
function intentView(intent) {
  const i = intent || {};
  const rows = [["Amount", i.amount], ["Asset", i.asset], ["From", i.source], ["To", i.destination]];
  for (const [k, v] of Object.entries(i)) if (!["amount", "asset", "source", "destination"].includes(k)) rows.push([k, v]);
  return h("dl", { class: "kv intent" }, rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, val(v))]));
}
/** One line for lists: amount, asset, from → to, each value isolated. */
const intentLine = (i) => h("span", {}, val(i?.amount), " ", val(i?.asset), " ", val(i?.source), " → ", val(i?.destination));
// Route parameters are data: a movement id is a UUID, a node key its plan's charset.
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const NODE_KEY = /^[A-Za-z0-9_-]{1,64}$/;
const seg = encodeURIComponent;
function when(t) {
  if (!t) return "—";
  const d = new Date(t);
  return `${d.toISOString().replace("T", " ").slice(0, 19)}Z`;
}
function ago(t) {
  if (!t) return "—";
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}
function duration(a, b) {
  if (!a) return "";
  const s = ((b ? new Date(b) : new Date()) - new Date(a)) / 1000;
  return s < 120 ? `${s.toFixed(1)} s` : `${Math.round(s / 60)} min`;
}
function table(rows, columns, caption) {
  if (!rows || rows.length === 0) return h("p", { class: "muted" }, `No ${caption || "rows"}.`);
  return h("table", {},
    caption ? h("caption", { class: "sr-only" }, caption) : null,
    h("thead", {}, h("tr", {}, columns.map(([label]) => h("th", { scope: "col" }, label)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, columns.map(([, f, cls]) => {
      const v = f(r);
      return h("td", { class: cls }, v instanceof Node ? v : text(v));
    })))));
}
function dl(pairs) {
  return h("dl", { class: "kv" }, pairs.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : text(v))]));
}
function status(msg) {
  $("status").textContent = msg;
  $("status").classList.remove("error");
}

// ---- the API -------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || body?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code || body?.code;
  }
}
async function api(method, path, body) {
  const key = sessionStorage.getItem(KEY);
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (res.status === 401 && me) {
    signOut("Your key was refused (expired or revoked?). Sign in again to go on where you were.");
    throw new ApiError(401, data);
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}
const can = (role) => me && RANKS[me.role] >= RANKS[role];

// ---- sign-in -------------------------------------------------------------------------------
function signOut(message) {
  sessionStorage.removeItem(KEY);
  me = null;
  notice = message || "";
  render(); // the sign-in screen, at the same place: signing in again goes on from there
}
async function signIn(key) {
  sessionStorage.setItem(KEY, key);
  try {
    me = await api("GET", "/v3/me");
  } catch (e) {
    sessionStorage.removeItem(KEY);
    me = null;
    throw e;
  }
}
function loginScreen(message) {
  const input = h("input", { id: "key", type: "password", name: "key", autocomplete: "off", required: true, "aria-describedby": "key-help" });
  const err = h("p", { role: "alert", class: "error" }, message || "");
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      err.textContent = "";
      try {
        await signIn(input.value.trim());
        // Back to where the operator was (a hash that does not change fires no event).
        if (location.hash.startsWith("#/login")) location.hash = "#/movements";
        else render();
      } catch (e) {
        err.textContent = e.status === 401 ? "This key is not valid." : `Could not sign in: ${e.message}`;
      }
    },
  },
  h("label", { for: "key" }, "API key", input),
  h("p", { id: "key-help", class: "muted" }, "Your own qtg API key. It stays in this tab's session storage and is sent only to this API."),
  h("button", { type: "submit", class: "primary", id: "signin" }, "Sign in"),
  err);
  return h("section", { class: "login", "aria-labelledby": "login-title" }, h("h1", { id: "login-title" }, "qtg console"), form);
}

// ---- actions -------------------------------------------------------------------------------
// fields: [{name, label, type: "text"|"textarea"|"select", options, required, help}]
function act({ title, help, fields, submit, danger, onDone }) {
  const dialog = $("action");
  $("action-title").textContent = title;
  if (help instanceof Node) $("action-help").replaceChildren(help);
  else $("action-help").textContent = help || "";
  $("action-error").textContent = "";
  const box = $("action-fields");
  box.replaceChildren();
  const inputs = {};
  for (const f of fields) {
    const id = `f-${f.name}`;
    let input;
    if (f.type === "select") {
      input = h("select", { id, name: f.name }, (f.options || []).map(([v, l]) => h("option", { value: v }, l)));
    } else if (f.type === "textarea") {
      input = h("textarea", { id, name: f.name, rows: 3, "aria-required": f.required ? "true" : null });
    } else {
      input = h("input", { id, name: f.name, type: "text", "aria-required": f.required ? "true" : null, autocomplete: "off" });
    }
    inputs[f.name] = input;
    box.append(h("label", { for: id }, f.required ? `${f.label} (required)` : f.label, input, f.help ? h("span", { class: "muted" }, f.help) : null));
  }
  const button = $("action-submit");
  button.className = danger ? "danger" : "primary";
  button.textContent = title;
  const form = $("action-form");
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const values = Object.fromEntries(Object.entries(inputs).map(([k, el]) => [k, el.value.trim()]));
    for (const f of fields) {
      if (f.required && !values[f.name]) {
        $("action-error").textContent = `${f.label} is required.`;
        inputs[f.name].focus();
        return;
      }
    }
    button.disabled = true;
    try {
      await submit(values);
      dialog.close();
      status(`${title}: done`);
      if (onDone) onDone();
    } catch (e) {
      $("action-error").textContent = `${e.code ? `${e.code}: ` : ""}${e.message}`;
    } finally {
      button.disabled = false;
    }
  };
  $("action-cancel").onclick = () => dialog.close();
  dialog.showModal();
  const first = fields[0] && inputs[fields[0].name];
  if (first) first.focus();
}
const reasonField = { name: "reason", label: "Reason", type: "textarea", required: true, help: "Recorded in the audit trail." };
function actionButton(label, onclick, cls) {
  return h("button", { type: "button", class: cls, onclick, "data-action": label.toLowerCase().replace(/\s+/g, "-") }, label);
}

// ---- movements list -----------------------------------------------------------------------
async function movementsScreen(main, params) {
  const q = new URLSearchParams(params);
  const state = h("select", { id: "flt-state", name: "state" }, h("option", { value: "" }, "any"), STATES.map((s) => h("option", { value: s, selected: q.get("state") === s }, s)));
  const template = h("input", { id: "flt-template", name: "template_key", value: q.get("template_key") || "", size: 18 });
  const creator = h("input", { id: "flt-created-by", name: "created_by", value: q.get("created_by") || "", size: 14 });
  const ages = [["", "any"], ["3600", "last hour"], ["86400", "last 24 h"], ["604800", "last 7 days"]];
  const age = h("select", { id: "flt-age", name: "age" }, ages.map(([v, l]) => h("option", { value: v, selected: (q.get("age") || "") === v }, l)));
  const live = h("input", { id: "flt-live", type: "checkbox", checked: q.get("live") !== "0" });
  const apply = (ev) => {
    if (ev) ev.preventDefault();
    const p = new URLSearchParams();
    if (state.value) p.set("state", state.value);
    if (template.value.trim()) p.set("template_key", template.value.trim());
    if (creator.value.trim()) p.set("created_by", creator.value.trim());
    if (age.value) p.set("age", age.value);
    if (!live.checked) p.set("live", "0");
    location.hash = `#/movements?${p}`;
  };
  const form = h("form", { class: "filters", onsubmit: apply, "aria-label": "Filter movements" },
    h("label", { for: "flt-state" }, "State", state),
    h("label", { for: "flt-template" }, "Template", template),
    h("label", { for: "flt-created-by" }, "Created by", creator),
    h("label", { for: "flt-age" }, "Age", age),
    h("label", { for: "flt-live", class: "inline" }, live, "Live refresh"),
    h("button", { type: "submit" }, "Apply"));
  const list = h("div", { id: "movement-list" });
  put(main, h("h1", {}, "Movements"), form, list);
  const load = async () => {
    const p = new URLSearchParams({ limit: "100" });
    for (const k of ["state", "template_key", "created_by"]) if (q.get(k)) p.set(k, q.get(k));
    if (q.get("age")) p.set("since", new Date(Date.now() - Number(q.get("age")) * 1000).toISOString());
    const page = await api("GET", `/v3/movements?${p}`);
    put(list, table(page.items, [
      ["Movement", (m) => h("a", { href: `#/movements/${seg(m.id)}`, class: "mono" }, String(m.id).slice(0, 8))],
      ["Template", (m) => m.template_key],
      ["State", (m) => badge(m.request_state)],
      ["Intent", (m) => intentLine(m.intent)],
      ["Created by", (m) => m.created_by],
      ["Age", (m) => ago(m.created_at)],
      ["Updated", (m) => when(m.updated_at)],
    ], "movements"), page.next_cursor ? h("p", { class: "muted" }, `The newest ${page.items.length} are shown; narrow the filters to see older ones.`) : null);
    status(`movements: ${page.items.length} shown, ${new Date().toLocaleTimeString()}`);
  };
  await load();
  if (live.checked) every(main, load);
}

// ---- a movement ----------------------------------------------------------------------------
function layout(nodes, edges) {
  const level = {};
  const preds = {};
  for (const n of nodes) preds[n.node_key] = [];
  for (const e of edges) if (preds[e.to]) preds[e.to].push(e.from);
  const depth = (k, seen = new Set()) => {
    if (level[k] !== undefined) return level[k];
    if (seen.has(k)) return 0;
    seen.add(k);
    level[k] = preds[k].length === 0 ? 0 : 1 + Math.max(...preds[k].map((p) => depth(p, seen)));
    return level[k];
  };
  nodes.forEach((n) => depth(n.node_key));
  const columns = {};
  for (const n of nodes) (columns[level[n.node_key]] ||= []).push(n);
  const pos = {};
  const W = 190, H = 62, GX = 60, GY = 22;
  let maxRows = 1;
  for (const [c, list] of Object.entries(columns)) {
    maxRows = Math.max(maxRows, list.length);
    list.forEach((n, r) => { pos[n.node_key] = { x: 12 + Number(c) * (W + GX), y: 12 + r * (H + GY) }; });
  }
  const cols = Object.keys(columns).length || 1;
  return { pos, W, H, width: 24 + cols * W + (cols - 1) * GX, height: 24 + maxRows * H + (maxRows - 1) * GY };
}
const FILL = { COMPLETED: "#dafbe1", FAILED: "#ffebe9", UNKNOWN: "#fff1c2", CANCELLED: "#eaeef2", SKIPPED: "#eaeef2",
  BLOCKED: "#f6f8fa", READY: "#ddf4ff", PREPARING: "#ddf4ff", AWAITING_SIGNATURE: "#ddf4ff", SUBMITTING: "#b6e3ff",
  SUBMITTED: "#b6e3ff", OBSERVING: "#b6e3ff" };
const STROKE = { COMPLETED: "#1a7f37", FAILED: "#b42318", UNKNOWN: "#8a5a00" };
function dag(movementId, nodes, edges) {
  const NS = "http://www.w3.org/2000/svg";
  const s = (tag, attrs, ...kids) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    for (const c of kids) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  };
  const { pos, W, H, width, height } = layout(nodes, edges);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "group", "aria-label": "The movement's DAG: each node with its state" });
  svg.append(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
    s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#57606a" }))));
  for (const e of edges) {
    const a = pos[e.from], b = pos[e.to];
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    svg.append(s("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, fill: "none", stroke: "#57606a", "stroke-width": 1.5, "marker-end": "url(#arrow)" }));
  }
  for (const n of nodes) {
    const p = pos[n.node_key];
    const timing = n.started_at ? `${duration(n.started_at, n.completed_at)}${n.completed_at ? "" : " so far"}` : "not started";
    const link = s("a", { href: `#/movements/${movementId}/nodes/${encodeURIComponent(n.node_key)}`, "aria-label": `node ${n.node_key}: ${n.node_state}, ${timing}`, "data-node": n.node_key },
      s("rect", { x: p.x, y: p.y, width: W, height: H, rx: 8, fill: FILL[n.node_state] || "#f6f8fa", stroke: STROKE[n.node_state] || "#0b5cad", "stroke-width": 2 }),
      s("text", { x: p.x + 10, y: p.y + 20, "font-weight": 700 }, n.node_key),
      s("text", { x: p.x + 10, y: p.y + 38 }, `${n.node_state}${n.attempt_no > 1 ? ` · attempt ${n.attempt_no}` : ""}`),
      s("text", { x: p.x + 10, y: p.y + 54, fill: "#4b535d" }, timing));
    svg.append(link);
  }
  return h("div", { class: "dag" }, svg);
}
async function templateEdges(m) {
  try {
    const t = await api("GET", `/v3/templates/${encodeURIComponent(m.template_key)}`);
    const v = (t.versions || []).find((x) => x.version === m.template_version) || (t.versions || [])[0];
    return v?.edges || [];
  } catch {
    return [];
  }
}
async function movementScreen(main, id) {
  const m0 = await api("GET", `/v3/movements/${seg(id)}`);
  const edges = await templateEdges(m0);
  if (!main.isConnected) return;
  const body = h("div", { id: "movement" });
  put(main, h("p", {}, h("a", { href: "#/movements" }, "← Movements")), body);
  const load = async () => {
    const m = await api("GET", `/v3/movements/${seg(id)}`);
    const [callbacks, audit] = await Promise.all([
      can("operator") ? api("GET", `/v3/callbacks?${new URLSearchParams({ movement_id: id, limit: "200" })}`).catch((e) => ({ error: e })) : Promise.resolve(null),
      api("GET", `/v3/audit-events?${new URLSearchParams({ movement_id: id, limit: "200" })}`).catch((e) => ({ error: e })),
    ]);
    const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
    const reload = () => load().catch(showError);
    const mine = me && m.created_by.toLowerCase() === me.principal.toLowerCase();
    if (m.request_state === "PENDING_APPROVAL" && can("approver") && !mine) {
      const help = h("div", { id: "approve-what" },
        h("span", {}, "You approve paying exactly this (each value as stored; activate one for its raw form):"),
        intentView(m.intent),
        dl([["Template", h("span", {}, val(m.template_key), " v", String(m.template_version))], ["Intent hash", val(m.intent_hash)], ["Movement", val(m.id)]]));
      actions.append(actionButton("Approve", () => act({ title: "Approve", help,
        fields: [reasonField], submit: (v) => api("POST", `/v3/movements/${seg(m.id)}/approve`, { reason: v.reason }), onDone: reload }), "primary"));
      actions.append(actionButton("Reject", () => act({ title: "Reject", fields: [reasonField], danger: true,
        submit: (v) => api("POST", `/v3/movements/${seg(m.id)}/reject`, { reason: v.reason }), onDone: reload }), "danger"));
    }
    if (!TERMINAL.includes(m.request_state) && can("operator")) {
      actions.append(actionButton("Cancel", () => act({
        title: "Cancel movement", danger: true,
        help: "A node whose side effect may be in flight (SUBMITTING, SUBMITTED, OBSERVING, UNKNOWN) needs the runbook case that justifies the cancel; C6 needs evidence.",
        fields: [reasonField,
          { name: "runbook_case", label: "Runbook case", type: "select", options: [["", "none (nothing in flight)"], ...CASES.map((c) => [c, c])] },
          { name: "evidence", label: "Evidence (what you checked, references)", type: "textarea" }],
        submit: (v) => {
          const b = { reason: v.reason };
          if (v.runbook_case) b.runbook_case = v.runbook_case;
          if (v.evidence) b.evidence = { note: v.evidence };
          return api("POST", `/v3/movements/${seg(m.id)}/actions/cancel`, b);
        },
        onDone: reload,
      }), "danger"));
    }
    if (m.request_state === "MANUAL_INTERVENTION" && can("operator")) {
      actions.append(actionButton("Resume", () => act({ title: "Resume", fields: [reasonField],
        submit: (v) => api("POST", `/v3/movements/${seg(m.id)}/actions/resume`, { reason: v.reason }), onDone: reload })));
    }
    const nodes = m.nodes || [];
    put(body, 
      h("h1", {}, "Movement ", h("span", { class: "mono" }, m.id), " ", badge(m.request_state)),
      actions.childElementCount ? actions : (me && me.role === "viewer" ? null : h("p", { class: "muted" }, "No action available to your role in this state.")),
      dl([["Template", h("span", {}, val(m.template_key), ` v${m.template_version}`)], ["Intent", intentView(m.intent)],
        ["Created", h("span", {}, `${when(m.created_at)} by `, val(m.created_by))], ["Approval", h("span", {}, `${m.approval_status}`, m.approved_by ? h("span", {}, " by ", val(m.approved_by)) : null)],
        ["Completed", when(m.completed_at)], ["Idempotency key", val(m.idempotency_key)]]),
      h("h2", {}, "DAG"),
      dag(m.id, nodes, edges),
      h("h2", {}, "Nodes"),
      table(nodes, [
        ["Node", (n) => h("a", { href: `#/movements/${seg(m.id)}/nodes/${seg(n.node_key)}` }, n.node_key)],
        ["State", (n) => badge(n.node_state)], ["Attempt", (n) => n.attempt_no], ["Executor", (n) => n.executor_key],
        ["Provider ref", (n) => n.provider_ref_id, "mono"], ["Error", (n) => n.error_code ? `${n.error_code}: ${n.error_detail ?? ""}` : null],
        ["Started", (n) => when(n.started_at)], ["Took", (n) => duration(n.started_at, n.completed_at)],
      ], "nodes"),
      h("div", { class: "grid" },
        h("section", {}, h("h2", {}, "Approvals"), table(m.approvals || [], [["By", (a) => val(a.approver ?? a.approved_by ?? a.principal)], ["At", (a) => when(a.approved_at ?? a.created_at)], ["Reason", (a) => h("bdi", {}, a.reason ?? "—")]], "approvals")),
        h("section", {}, h("h2", {}, "Callbacks"), callbacks === null ? h("p", { class: "muted" }, "Callbacks are shown to operators.") :
          callbacks.error ? failure("Callbacks", callbacks.error) : table(callbacks.items, [["Seq", (c) => c.sequence], ["Event", (c) => c.event_type], ["Status", (c) => badge(c.status)], ["Attempts", (c) => c.attempts], ["Last error", (c) => c.last_error]], "callbacks"))),
      h("h2", {}, "Audit trail"),
      audit.error ? failure("The audit trail", audit.error) : table(audit.items, [["At", (a) => when(a.occurred_at)], ["Actor", (a) => val(a.actor)], ["Action", (a) => a.action],
        ["Entity", (a) => `${a.entity_type}`], ["Data", (a) => JSON.stringify(a.data), "mono"]], "audit events"),
      audit.next_cursor ? h("p", { class: "muted" }, `The first ${audit.items.length} audit events are shown (qtgctl or GET /v3/audit-events has the rest).`) : null,
    );
    status(`movement ${m.request_state}, ${new Date().toLocaleTimeString()}`);
    return !TERMINAL.includes(m.request_state); // a finished movement stops refreshing
  };
  if (await load()) every(main, load);
}

// ---- a node --------------------------------------------------------------------------------
async function nodeScreen(main, id, key) {
  const load = async () => {
    const n = await api("GET", `/v3/movements/${seg(id)}/nodes/${seg(key)}`);
    const diag = can("operator") ? await api("GET", `/v3/movements/${seg(id)}/nodes/${seg(key)}/diagnosis`).catch((e) => ({ error: e })) : null;
    const reload = () => load().catch(showError);
    const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
    // What the API would take: a FAILED node without a late effect is retried; only a manual
    // node that is READY is completed by hand (an UNKNOWN node is recovery's to decide).
    if (can("operator") && n.node.node_state === "FAILED" && !("__late_effect" in (n.node.provider_refs || {}))) {
      actions.append(actionButton("Retry", () => act({ title: "Retry node", help: "A new attempt with a new idempotency key. Only when the runbook says the venue has no effect of the old one.",
        fields: [reasonField], submit: (v) => api("POST", `/v3/movements/${seg(id)}/nodes/${seg(key)}/actions/retry`, { reason: v.reason }), onDone: reload })));
    }
    if (can("operator") && n.node.node_kind === "manual" && n.node.node_state === "READY") {
      actions.append(actionButton("Complete manually", () => act({ title: "Complete manually", help: "Record that the effect was completed by hand, with evidence.",
        fields: [reasonField, { name: "reference", label: "Reference (venue id, transaction hash)", type: "text", required: true }],
        submit: (v) => api("POST", `/v3/movements/${seg(id)}/nodes/${seg(key)}/actions/complete-manual`, { evidence: { reason: v.reason, reference: v.reference } }),
        onDone: reload })));
    }
    const markers = Object.fromEntries(Object.entries(n.node.provider_refs || {}).filter(([k]) => k.startsWith("__")));
    const refs = Object.fromEntries(Object.entries(n.node.provider_refs || {}).filter(([k]) => !k.startsWith("__")));
    put(main, 
      h("p", {}, h("a", { href: `#/movements/${seg(id)}` }, "← Movement")),
      h("h1", {}, "Node ", n.node.node_key, " ", badge(n.node.node_state)),
      actions.childElementCount ? actions : null,
      diag?.error ? failure("The diagnosis", diag.error) : diag ? h("section", { class: "diagnosis", "aria-labelledby": "diag-title", id: "diagnosis" },
        h("h2", { id: "diag-title" }, `Diagnosis: ${diag.case ?? "—"} ${diag.title ?? ""}`),
        dl([["Required action", diag.required_action], ["Also consider", (diag.also_consider || []).join("; ")],
          ["Reconciliation", diag.evidence?.reconciliation], ["Seconds since started", diag.evidence?.seconds_since_started],
          ["Grace", diag.evidence?.grace_seconds], ["Submit transport failures", diag.evidence?.submit_transport_failures]])) : null,
      dl([["Executor", n.node.executor_key], ["Signer", n.node.signer_key], ["Attempt", n.node.attempt_no], ["Provider state", n.node.provider_state],
        ["Provider ref", n.node.provider_ref_id], ["Error", n.node.error_code ? `${n.node.error_code}: ${n.node.error_detail ?? ""}` : null],
        ["Started", when(n.node.started_at)], ["Completed", when(n.node.completed_at)], ["Observed", `${n.node.observe_count} times, last ${when(n.node.last_observed_at)}`]]),
      h("div", { class: "grid" },
        h("section", {}, h("h2", {}, "Markers"), Object.keys(markers).length ? json(markers) : h("p", { class: "muted" }, "No markers.")),
        h("section", {}, h("h2", {}, "Provider refs"), Object.keys(refs).length ? json(refs) : h("p", { class: "muted" }, "None."))),
      h("h2", {}, "State history and calls"),
      table(n.events, [["At", (e) => when(e.at)], ["Attempt", (e) => e.attempt_no], ["Kind", (e) => e.kind], ["Method", (e) => e.method],
        ["Outcome", (e) => e.outcome], ["Transition", (e) => e.to ? `${e.from ?? ""} → ${e.to}` : null],
        ["Error", (e) => e.error_code ? `${e.error_code}: ${e.error_detail ?? ""}` : null], ["ms", (e) => e.duration_ms], ["Actor", (e) => e.actor]], "events"),
      h("h2", {}, "Artifacts"),
      table(n.artifacts, [["Attempt", (a) => a.attempt_no], ["Kind", (a) => a.kind], ["Hash", (a) => a.payload_hash, "mono"], ["At", (a) => when(a.created_at)],
        ["Payload", (a) => JSON.stringify(a.payload).slice(0, 300), "mono"]], "artifacts"),
    );
    status(`node ${n.node.node_state}, ${new Date().toLocaleTimeString()}`);
    return !["COMPLETED", "CANCELLED", "SKIPPED"].includes(n.node.node_state);
  };
  if (await load()) every(main, load);
}

// ---- the other screens ---------------------------------------------------------------------
async function callbacksScreen(main) {
  if (!can("operator")) {
    put(main, h("h1", {}, "Callbacks DLQ"), h("p", {}, "Dead-lettered callbacks are shown to operators."));
    return;
  }
  const load = async () => {
    const page = await api("GET", "/v3/callbacks?status=dlq&limit=200");
    put(main, h("h1", {}, "Callbacks DLQ"),
      table(page.items, [["Movement", (c) => c.request_id ? h("a", { href: `#/movements/${c.request_id}`, class: "mono" }, c.request_id.slice(0, 8)) : "— (an alert)"],
        ["Event", (c) => c.event_type], ["Seq", (c) => c.sequence], ["URL", (c) => c.callback_url, "mono"], ["Attempts", (c) => `${c.attempts}/${c.max_attempts}`],
        ["Last error", (c) => c.last_error], ["Created", (c) => when(c.created_at)],
        ["", (c) => actionButton("Replay", () => act({ title: "Replay callback", help: "Sends the event again as a new delivery (same event id).", fields: [],
          submit: () => api("POST", `/v3/callbacks/${c.id}/actions/replay`), onDone: () => load().catch(showError) }))]], "dead-lettered callbacks"));
  };
  await load();
  every(main, load);
}
async function workersScreen(main) {
  const load = async () => {
    const page = await api("GET", "/v3/workers?limit=200");
    put(main, h("h1", {}, "Workers and heartbeats"),
      table(page.items, [["Worker", (w) => w.worker], ["Binary", (w) => w.binary], ["Group", (w) => w.group], ["Host", (w) => w.hostname], ["PID", (w) => w.pid],
        ["Network class", (w) => w.network_class], ["Last beat", (w) => `${when(w.last_beat_at)} (${Math.round(w.age_seconds ?? 0)} s)`],
        ["Last tick", (w) => w.last_tick_at ? when(w.last_tick_at) : "not yet"], ["Next due", (w) => w.next_tick_at ? when(w.next_tick_at) : "—"],
        ["", (w) => badge(w.stale ? "stale" : "fresh")]], "heartbeats"));
  };
  await load();
  every(main, load);
}
async function healthScreen(main) {
  const load = async () => {
    const [ex, si] = await Promise.all([api("GET", "/v3/executors?limit=200"), api("GET", "/v3/signers?limit=200")]);
    put(main, h("h1", {}, "Executors and signers"),
      h("h2", {}, "Executors"),
      table(ex.items, [["Executor", (e) => e.executor_key], ["Transport", (e) => e.transport], ["Lane", (e) => e.lane], ["Health", (e) => badge(e.health_state)],
        ["Checked", (e) => when(e.last_health_checked_at)], ["Last error", (e) => e.last_error]], "executors"),
      h("h2", {}, "Signers and identity posture"),
      table(si.items, [["Signer", (s) => s.signer_key], ["Transport", (s) => s.transport], ["Health", (s) => badge(s.health_state)],
        ["Identity", (s) => badge(s.identity_posture)], ["Expected", (s) => s.expected_signer_address, "mono"], ["Observed", (s) => s.observed_signer_address, "mono"],
        ["Checked", (s) => when(s.last_health_checked_at)], ["Last error", (s) => s.last_error]], "signers"));
  };
  await load();
  every(main, load);
}
async function controlsScreen(main) {
  const load = async () => {
    const page = await api("GET", "/v3/controls");
    const reload = () => load().catch(showError);
    const scopeFields = [{ name: "scope", label: "Scope", type: "select", options: [["global", "global (every submit)"], ["lane", "a recovery lane"], ["executor", "an executor"]] },
      { name: "target", label: "Target: a lane (ccip, stargate, cex, other) or an executor key; empty for global", type: "text" }, reasonField];
    const body = (v) => (v.scope === "global" ? { scope: "global", reason: v.reason } : { scope: v.scope, target: v.target, reason: v.reason });
    put(main, h("h1", {}, "Kill-switch pauses"),
      can("admin") ? h("div", { class: "actions" }, actionButton("Pause", () => act({ title: "Pause", danger: true, fields: scopeFields,
        submit: (v) => api("POST", "/v3/controls/pause", body(v)), onDone: reload }), "danger")) : null,
      table(page.items, [["Scope", (p) => p.scope], ["Target", (p) => p.target], ["Paused by", (p) => p.paused_by], ["At", (p) => when(p.paused_at)], ["Reason", (p) => p.reason],
        ["", (p) => can("admin") ? actionButton("Resume", () => act({ title: "Resume", fields: [reasonField],
          submit: (v) => api("POST", "/v3/controls/resume", p.scope === "global" ? { scope: "global", reason: v.reason } : { scope: p.scope, target: p.target, reason: v.reason }), onDone: reload })) : null]],
      "pauses: submits run everywhere"));
  };
  await load();
  every(main, load);
}
async function balancesScreen(main) {
  const load = async () => {
    const b = await api("GET", "/v3/balances");
    // Withdrawals from a venue account that no movement explains (cex_transfer_ingest): what a
    // treasury must look at first.
    const u = await api("GET", "/v3/venue-transfers?unexplained=true&direction=withdrawal&limit=50");
    const attention = u.items.length === 0 ? [] : [
      h("section", { class: "attention", role: "alert", "aria-label": "unexplained withdrawals" },
        h("h2", {}, `Needs attention: ${u.items.length} withdrawal(s) no movement explains`),
        table(u.items, [["Venue", (t) => val(t.venue_key)], ["Account", (t) => val(t.account)], ["Venue id", (t) => val(t.venue_ref)],
          ["Asset", (t) => val(t.asset)], ["Amount", (t) => val(t.amount)], ["To", (t) => val(t.address)],
          ["Status", (t) => val(t.status)], ["Seen", (t) => when(t.first_seen_at)], ["Alerted", (t) => t.alerted_at ? when(t.alerted_at) : "not yet"]],
          "unexplained withdrawals"))];
    put(main, h("h1", {}, "Balances"), ...attention,
      table(b.items, [["Venue", (r) => r.venue_key], ["Account", (r) => val(r.account)], ["Asset", (r) => val(r.asset)], ["Free", (r) => val(r.free)], ["Locked", (r) => val(r.locked)],
        ["As of", (r) => when(r.as_of)], ["Source", (r) => r.source], ["", (r) => badge(r.stale ? "stale" : "fresh")]], "balance snapshots (is qtg-balance running?)"));
  };
  await load();
  every(main, load);
}

// ---- routing -------------------------------------------------------------------------------
/** Refreshes a screen every REFRESH_MS, one load at a time, for as long as its view is on the
 * page (a newer screen replaces the view, which ends this chain); skipped while a dialog is
 * open or text is selected; `load` answering false ends it (nothing more will change). */
function every(view, load) {
  const tick = async () => {
    if (!view.isConnected) return;
    const selecting = String(window.getSelection?.() || "") !== "";
    if (!$("action").open && !selecting) {
      try {
        if ((await load()) === false) return;
      } catch (e) {
        showError(e);
      }
    }
    if (view.isConnected) setTimeout(tick, REFRESH_MS);
  };
  setTimeout(tick, REFRESH_MS);
}
function showError(e) {
  if (e.status === 401) return;
  status(`refresh failed, showing what was last loaded: ${e.code ? `${e.code}: ` : ""}${e.message}`);
  $("status").classList.add("error");
}
async function render() {
  $("status").classList.remove("error");
  // Each screen writes into a view of its own: a screen still loading when the operator moves
  // on writes into a view no longer on the page, and its refresh ends with it.
  const main = h("div", { class: "view" });
  $("main").replaceChildren(main);
  const [path, query] = (location.hash.slice(1) || "/movements").split("?");
  const parts = path.split("/").filter(Boolean);
  if (!me && sessionStorage.getItem(KEY)) {
    try {
      me = await api("GET", "/v3/me");
    } catch (e) {
      me = null;
      if (e.status === 401) sessionStorage.removeItem(KEY);
      else notice = `The API did not answer (${e.message}); your key is kept, try again.`;
    }
    if (!main.isConnected) return;
  }
  $("top").hidden = !me;
  if (!me) {
    main.replaceChildren(loginScreen(notice));
    notice = "";
    $("key")?.focus();
    return;
  }
  $("who").textContent = `${me.principal} (${me.role})`;
  for (const a of document.querySelectorAll("header nav a")) {
    if (a.getAttribute("href") === `#/${parts[0] || "movements"}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    // A route names a screen and its data, never a path: ids and keys are checked, then
    // encoded wherever they go into a request.
    const arg = (i, re) => {
      let v;
      try { v = decodeURIComponent(parts[i]); } catch { v = null; }
      if (v === null || !re.test(v)) throw Object.assign(new Error(`"${spelled(String(parts[i]))}" is not a valid ${re === UUID ? "movement id" : "node key"}`), { code: "NOT_A_ROUTE" });
      return v;
    };
    if (parts[0] === "movements" && parts.length > 4) throw Object.assign(new Error("no such screen"), { code: "NOT_A_ROUTE" });
    if (parts[0] === "movements" && parts[1] && parts[2] === "nodes" && parts[3]) await nodeScreen(main, arg(1, UUID), arg(3, NODE_KEY));
    else if (parts[0] === "movements" && parts[1] && parts.length === 2) await movementScreen(main, arg(1, UUID));
    else if (parts[0] === "movements" && parts[1]) throw Object.assign(new Error("no such screen"), { code: "NOT_A_ROUTE" });
    else if (parts[0] === "callbacks") await callbacksScreen(main);
    else if (parts[0] === "workers") await workersScreen(main);
    else if (parts[0] === "health") await healthScreen(main);
    else if (parts[0] === "controls") await controlsScreen(main);
    else if (parts[0] === "balances") await balancesScreen(main);
    else await movementsScreen(main, query || "");
  } catch (e) {
    if (e.status === 401 || !main.isConnected) return;
    put(main, h("h1", {}, "Could not load this screen"), failure("This screen", e));
  }
}
window.addEventListener("hashchange", () => render());
window.addEventListener("DOMContentLoaded", () => {
  $("signout").addEventListener("click", () => signOut("Signed out."));
  // The skip link moves the focus; it must not change the route.
  document.querySelector(".skip").addEventListener("click", (ev) => {
    ev.preventDefault();
    $("main").focus();
  });
  render();
});
