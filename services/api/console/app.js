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
  for (const a of ["data-action", "data-node", "data-tile", "data-callback", "data-history", "href"]) if (el.getAttribute(a)) return `${el.tagName.toLowerCase()}${attr(a)}`;
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
// The address book's active entries by lower-case address: the name shown beside a raw
// address everywhere one is shown (refreshed each minute; a viewer may read it).
let book = new Map();
let bookRead = 0;
async function refreshBook() {
  if (!me || Date.now() - bookRead < 60000) return;
  bookRead = Date.now();
  try {
    const page = await api("GET", "/v3/address-book?status=active&limit=200");
    book = new Map(page.items.map((e) => [String(e.address).toLowerCase(), e]));
  } catch {
    bookRead = 0; // try again on the next screen
  }
}
/** A raw address as stored, and beside it its address-book name (or that it is not in it). */
function addr(v) {
  const raw = v && typeof v === "object" && !Array.isArray(v) ? v.address : v;
  const e = typeof raw === "string" ? book.get(raw.toLowerCase()) : null;
  return h("span", { class: "addr" }, val(v), e ? h("span", { class: e.usable ? "book" : "book cooling", title: e.usable ? `address book: ${e.name} (${e.lane}${e.network ? ` ${e.network}` : ""}${e.memo ? `, memo ${e.memo}` : ""})` : "in the book, still cooling down" }, "📒 ", h("bdi", {}, e.name), e.usable ? "" : " (cooling down)") : null);
}
function intentView(intent) {
  const i = intent || {};
  const rows = [["Amount", val(i.amount)], ["Asset", val(i.asset)], ["From", addr(i.source)], ["To", addr(i.destination)]];
  for (const [k, v] of Object.entries(i)) if (!["amount", "asset", "source", "destination"].includes(k)) rows.push([k, val(v)]);
  return h("dl", { class: "kv intent" }, rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}
/** One line for lists: amount, asset, from → to, each value isolated. */
const intentLine = (i) => h("span", {}, val(i?.amount), " ", val(i?.asset), " ", addr(i?.source), " → ", addr(i?.destination));
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
/** Seconds as a person reads them: "4.2 s", "17 min", "3.1 h". */
function secs(s) {
  if (s === null || s === undefined || s === "" || Number.isNaN(Number(s))) return "—";
  const n = Number(s);
  if (n < 120) return `${n.toFixed(1)} s`;
  if (n < 7200) return `${Math.round(n / 60)} min`;
  return `${(n / 3600).toFixed(1)} h`;
}
function duration(a, b) {
  if (!a) return "";
  return secs(((b ? new Date(b) : new Date()) - new Date(a)) / 1000);
}
/** A node's end: its completion, or for a node that stopped without one (FAILED, CANCELLED,
 * SKIPPED) the time it last changed, so its duration stops counting. */
const STOPPED = ["COMPLETED", "FAILED", "CANCELLED", "SKIPPED"];
const nodeEnd = (n) => n.completed_at || (STOPPED.includes(n.node_state) ? n.updated_at : null);
const clock = () => `${new Date().toISOString().slice(11, 19)} UTC`;
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
      const said = await submit(values);
      dialog.close();
      status(typeof said === "string" ? said : `${title}: done`);
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

// ---- movements: list and search -----------------------------------------------------------
const NODE_STATES = ["UNKNOWN", "SUBMITTING", "SUBMITTED", "OBSERVING", "FAILED", "READY", "BLOCKED"];
/** A time typed as UTC ("2026-12-03", "2026-12-03 14:00", or RFC 3339) as RFC 3339; "" stays
 * "" (anything else goes to the API as typed, which says what is wrong with it). */
function utcInput(v) {
  let t = v.trim().replace(" ", "T");
  if (!t) return "";
  if (/^\d{4}-\d{2}-\d{2}$/.test(t)) t += "T00:00";
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(t)) t += ":00";
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?$/.test(t)) t += "Z";
  return t;
}
/** An RFC 3339 UTC time as the time fields show it: "2026-12-03 14:00". */
const utcShown = (t) => (t ? t.replace("T", " ").replace(/:00(\.0+)?Z$/, "").replace(/Z$/, "") : "");
/** A time field: typed as UTC, with its format in sight. */
const timeField = (id, value) => h("input", { id, type: "text", value: utcShown(value), size: 16, placeholder: "YYYY-MM-DD HH:MM", autocomplete: "off" });
const SEARCH = [["id", "Movement id (or its start)", 14], ["idempotency_key", "Idempotency key", 14], ["destination", "Destination", 16],
  ["asset", "Asset", 6], ["amount_min", "Amount from", 8], ["amount_max", "Amount to", 8], ["template_key", "Template", 14], ["created_by", "Created by", 12]];
function movementRows(items) {
  return table(items, [
    ["Movement", (m) => h("a", { href: `#/movements/${seg(m.id)}`, class: "mono" }, String(m.id).slice(0, 8))],
    ["Template", (m) => m.template_key],
    ["State", (m) => badge(m.request_state)],
    ["Intent", (m) => intentLine(m.intent)],
    ["Approvals", (m) => (m.request_state === "PENDING_APPROVAL" ? `${m.approvals_given ?? 0} of ${m.approvals_required ?? 1}` : "—")],
    ["Created by", (m) => val(m.created_by)],
    ["Age", (m) => ago(m.created_at)],
    ["Updated (UTC)", (m) => when(m.updated_at)],
  ], "movements");
}
async function movementsScreen(main, params) {
  const q = new URLSearchParams(params);
  const state = h("select", { id: "flt-state", name: "state" }, h("option", { value: "" }, "any"), STATES.map((s) => h("option", { value: s, selected: q.get("state") === s }, s)));
  const nodeState = h("select", { id: "flt-node-state", name: "node_state" }, h("option", { value: "" }, "any"), NODE_STATES.map((s) => h("option", { value: s, selected: q.get("node_state") === s }, s)));
  const inputs = Object.fromEntries(SEARCH.map(([k, , size]) => [k, h("input", { id: `flt-${k.replace(/_/g, "-")}`, name: k, value: q.get(k) || "", size, autocomplete: "off" })]));
  const from = timeField("flt-since", q.get("since"));
  const to = timeField("flt-until", q.get("until"));
  const live = h("input", { id: "flt-live", type: "checkbox", checked: q.get("live") !== "0" });
  const apply = (ev) => {
    if (ev) ev.preventDefault();
    const p = new URLSearchParams();
    if (state.value) p.set("state", state.value);
    if (nodeState.value) p.set("node_state", nodeState.value);
    for (const [k, el] of Object.entries(inputs)) if (el.value.trim()) p.set(k, el.value.trim());
    if (from.value) p.set("since", utcInput(from.value));
    if (to.value) p.set("until", utcInput(to.value));
    if (!live.checked) p.set("live", "0");
    location.hash = `#/movements?${p}`;
  };
  const form = h("form", { class: "filters", onsubmit: apply, "aria-label": "Search movements" },
    h("label", { for: "flt-state" }, "State", state),
    h("label", { for: "flt-node-state" }, "A node in", nodeState),
    SEARCH.map(([k, label]) => h("label", { for: inputs[k].id }, label, inputs[k])),
    h("label", { for: "flt-since" }, "Created from (UTC)", from),
    h("label", { for: "flt-until" }, "to (UTC)", to),
    h("label", { for: "flt-live", class: "inline" }, live, "Live refresh"),
    h("button", { type: "submit", id: "search" }, "Search"),
    h("a", { href: "#/movements" }, "Clear"));
  const list = h("div", { id: "movement-list" });
  put(main, h("h1", {}, "Movements"), form, list);
  const load = async () => {
    const p = new URLSearchParams({ limit: "100" });
    for (const k of ["state", "node_state", "since", "until", ...SEARCH.map(([k]) => k)]) if (q.get(k)) p.set(k, q.get(k));
    if (q.get("age")) p.set("since", new Date(Date.now() - Number(q.get("age")) * 1000).toISOString());
    const page = await api("GET", `/v3/movements?${p}`);
    put(list, movementRows(page.items), page.next_cursor ? h("p", { class: "muted" }, `The newest ${page.items.length} are shown; narrow the search to see older ones.`) : null);
    status(`movements: ${page.items.length} shown, ${clock()}`);
  };
  // A search the API refuses (a bad id or amount) is said under the form, which stays.
  try {
    await load();
  } catch (e) {
    if (e.status === 401) throw e;
    put(list, failure("The search", e));
    return;
  }
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
/** An SVG element (values set as attributes and text, never as markup). */
function svgEl(tag, attrs, ...kids) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of kids) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const FILL = { COMPLETED: "#dafbe1", FAILED: "#ffebe9", UNKNOWN: "#fff1c2", CANCELLED: "#eaeef2", SKIPPED: "#eaeef2",
  BLOCKED: "#f6f8fa", READY: "#ddf4ff", PREPARING: "#ddf4ff", AWAITING_SIGNATURE: "#ddf4ff", SUBMITTING: "#b6e3ff",
  SUBMITTED: "#b6e3ff", OBSERVING: "#b6e3ff" };
const STROKE = { COMPLETED: "#1a7f37", FAILED: "#b42318", UNKNOWN: "#8a5a00" };
function dag(movementId, nodes, edges) {
  const s = svgEl;
  const { pos, W, H, width, height } = layout(nodes, edges);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "group", "aria-label": movementId === null ? "The plan's DAG: each node with its executor" : "The movement's DAG: each node with its state" });
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
    const box = (second, third) => [
      s("rect", { x: p.x, y: p.y, width: W, height: H, rx: 8, fill: FILL[n.node_state] || "#f6f8fa", stroke: STROKE[n.node_state] || "#0b5cad", "stroke-width": 2 }),
      s("text", { x: p.x + 10, y: p.y + 20, "font-weight": 700 }, n.node_key),
      s("text", { x: p.x + 10, y: p.y + 38 }, second),
      s("text", { x: p.x + 10, y: p.y + 54, fill: "#4b535d" }, third)];
    if (movementId === null) {
      // A plan (template or proposal): what each node runs; nothing ran yet.
      svg.append(s("g", { "data-node": n.node_key }, ...box(n.executor_key, `${n.node_kind} · ${n.action_type}`)));
      continue;
    }
    const end = nodeEnd(n);
    const timing = n.started_at ? `${duration(n.started_at, end)}${end ? "" : " so far"}` : "not started";
    svg.append(s("a", { href: `#/movements/${movementId}/nodes/${encodeURIComponent(n.node_key)}`, "aria-label": `node ${n.node_key}: ${n.node_state}, ${timing}`, "data-node": n.node_key },
      ...box(`${n.node_state}${n.attempt_no > 1 ? ` · attempt ${n.attempt_no}` : ""}`, timing)));
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
    const approvals = m.approvals || [];
    const given = approvals.length;
    const needed = m.approvals_required || 1;
    const approvedByMe = me && approvals.some((a) => String(a.approver).toLowerCase() === me.principal.toLowerCase());
    // Why there is no Approve button, said plainly (four-eyes, m-of-n, role).
    let approvalNote = null;
    if (m.request_state === "PENDING_APPROVAL") {
      const progress = `${given} of ${needed} approval${needed === 1 ? "" : "s"}`;
      const why = mine ? "You created this movement: four-eyes means someone else must approve it."
        : approvedByMe ? "You have approved it; it waits for another approver."
        : !can("approver") ? "Approving needs the approver role."
        : needed > 1 ? `It needs ${needed} different approvers.` : "";
      approvalNote = h("p", { id: "approval-progress", class: "note" }, h("strong", {}, progress), why ? ` — ${why}` : "");
    }
    if (m.request_state === "PENDING_APPROVAL" && can("approver") && !mine && !approvedByMe) {
      const help = h("div", { id: "approve-what" },
        h("span", {}, "You approve paying exactly this (each value as stored; activate one for its raw form):"),
        intentView(m.intent),
        dl([["Template", h("span", {}, val(m.template_key), " v", String(m.template_version))], ["Intent hash", val(m.intent_hash)], ["Movement", val(m.id)],
          ...(m.policy_version ? [["Decided by", h("span", {}, `policy version ${m.policy_version}, rule `, val(m.policy_rule))]] : [])]));
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
    const policy = m.policy_version ? h("section", { id: "policy-decision", class: "note" },
      h("p", {}, "Decided by ", h("a", { href: `#/policies/${m.policy_version}` }, `policy version ${m.policy_version}`), ", rule ", val(m.policy_rule)),
      m.policy?.progress ? table(m.policy.progress.groups, [["Approver group", (g) => g.group], ["Needs", (g) => g.min], ["Approved by", (g) => g.approved_by.length ? g.approved_by.join(", ") : "—"],
        ["", (g) => badge(g.approved_by.length >= g.min ? "filled" : "open")]], "approver groups") : null) : null;
    put(body, 
      h("h1", {}, "Movement ", h("span", { class: "mono" }, m.id), " ", badge(m.request_state)),
      approvalNote,
      policy,
      actions.childElementCount ? actions : (me && me.role === "viewer" ? null : h("p", { class: "muted" }, "No action available to your role in this state.")),
      dl([["Template", h("span", {}, val(m.template_key), ` v${m.template_version}`)], ["Intent", intentView(m.intent)],
        ["Created", h("span", {}, `${when(m.created_at)} by `, val(m.created_by))], ["Approval", h("span", {}, `${m.approval_status} (${given} of ${needed})`, m.approved_by ? h("span", {}, " by ", val(m.approved_by)) : null)],
        ["Completed", when(m.completed_at)], ["Idempotency key", val(m.idempotency_key)]]),
      h("h2", {}, "DAG"),
      dag(m.id, nodes, edges),
      h("h2", {}, "Nodes"),
      table(nodes, [
        ["Node", (n) => h("a", { href: `#/movements/${seg(m.id)}/nodes/${seg(n.node_key)}` }, n.node_key)],
        ["State", (n) => badge(n.node_state)], ["Attempt", (n) => n.attempt_no], ["Executor", (n) => n.executor_key],
        ["Provider ref", (n) => n.provider_ref_id, "mono"], ["Error", (n) => n.error_code ? `${n.error_code}: ${n.error_detail ?? ""}` : null],
        ["Started", (n) => when(n.started_at)], ["Took", (n) => duration(n.started_at, nodeEnd(n))],
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
    status(`movement ${m.request_state}, ${clock()}`);
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
        h("h2", { id: "diag-title" }, diag.case ? `Diagnosis: ${diag.case} ${diag.title ?? ""}` : `Diagnosis: ${diag.title ?? "—"}`),
        dl([["Required action", diag.required_action], ["Also consider", (diag.also_consider || []).join("; ")],
          ["Reconciliation", diag.evidence?.reconciliation], ["Since started", secs(diag.evidence?.seconds_since_started)],
          ["Grace", secs(diag.evidence?.grace_seconds)], ["Submit transport failures", diag.evidence?.submit_transport_failures]])) : null,
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
    status(`node ${n.node.node_state}, ${clock()}`);
    return !["COMPLETED", "CANCELLED", "SKIPPED"].includes(n.node.node_state);
  };
  if (await load()) every(main, load);
}

// ---- the other screens ---------------------------------------------------------------------
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
async function callbacksScreen(main, params) {
  if (!can("operator")) {
    put(main, h("h1", {}, "Callbacks DLQ"), h("p", {}, "Dead-lettered callbacks are shown to operators."));
    return;
  }
  const q = new URLSearchParams(params);
  const EVENTS = ["node_state_changed", "request_state_changed", "frontier_advanced", "request_attention", "request_expired", "drift_detected", "venue_transfer_unexplained"];
  const event = h("select", { id: "dlq-event" }, h("option", { value: "" }, "any"), EVENTS.map((e) => h("option", { value: e, selected: q.get("event_type") === e }, e)));
  const movement = h("input", { id: "dlq-movement", value: q.get("movement_id") || "", size: 36, autocomplete: "off" });
  const from = timeField("dlq-since", q.get("since"));
  const all = h("input", { id: "dlq-all", type: "checkbox", checked: q.get("all") === "1" });
  const form = h("form", { class: "filters", "aria-label": "Filter dead letters", onsubmit: (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (event.value) p.set("event_type", event.value);
    if (movement.value.trim()) p.set("movement_id", movement.value.trim());
    if (from.value) p.set("since", utcInput(from.value));
    if (all.checked) p.set("all", "1");
    location.hash = `#/callbacks?${p}`;
  } },
  h("label", { for: "dlq-event" }, "Event", event), h("label", { for: "dlq-movement" }, "Movement id", movement),
  h("label", { for: "dlq-since" }, "Created from (UTC)", from), h("label", { for: "dlq-all", class: "inline" }, all, "Include replayed"),
  h("button", { type: "submit" }, "Apply"));
  const selected = new Set();
  const opened = new Set(); // payloads open across refreshes
  const list = h("div", { id: "dlq-list" });
  const bulk = h("button", { type: "button", id: "replay-selected", class: "primary", disabled: true, "data-action": "replay-selected" }, "Replay selected");
  const setBulk = () => { bulk.disabled = selected.size === 0; bulk.textContent = `Replay selected (${selected.size})`; };
  const result = h("div", { id: "replay-result", role: "status" });
  put(main, h("h1", {}, "Callbacks DLQ"), form, h("div", { class: "actions" }, bulk), result, list);
  const load = async () => {
    const p = new URLSearchParams({ status: "dlq", limit: "200" });
    for (const k of ["event_type", "movement_id", "since"]) if (q.get(k)) p.set(k, q.get(k));
    if (q.get("all") !== "1") p.set("replayed", "false");
    const page = await api("GET", `/v3/callbacks?${p}`);
    const ids = new Set(page.items.map((c) => c.id));
    for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
    const pick = (c) => h("input", { type: "checkbox", "aria-label": `select ${c.id}`, "data-callback": c.id, checked: selected.has(c.id),
      onchange: (ev) => { if (ev.target.checked) selected.add(c.id); else selected.delete(c.id); setBulk(); } });
    const everyBox = h("input", { type: "checkbox", id: "dlq-select-all", "aria-label": "select every row shown", checked: page.items.length > 0 && selected.size === page.items.length,
      onchange: (ev) => { for (const c of page.items) if (ev.target.checked) selected.add(c.id); else selected.delete(c.id); setBulk(); put(list, render(page)); } });
    const render = (pg) => h("div", {},
      h("p", { class: "muted" }, h("label", { class: "inline", for: "dlq-select-all" }, everyBox, `Select all ${pg.items.length} shown`)),
      table(pg.items, [["", pick], ["Movement", (c) => c.request_id ? h("a", { href: `#/movements/${c.request_id}`, class: "mono" }, c.request_id.slice(0, 8)) : "— (an alert)"],
        ["Event", (c) => c.event_type], ["Seq", (c) => c.sequence], ["URL", (c) => c.callback_url, "mono"], ["Attempts", (c) => `${c.attempts}/${c.max_attempts}`],
        ["Last error", (c) => c.last_error], ["Created (UTC)", (c) => when(c.created_at)],
        ["Payload", (c) => h("details", { open: opened.has(c.id), ontoggle: (ev) => { if (ev.target.open) opened.add(c.id); else opened.delete(c.id); } },
          h("summary", { "data-callback": `payload-${c.id}` }, "view"), json(c.payload))]], "dead-lettered callbacks"));
    put(list, render(page));
    setBulk();
    status(`dlq: ${page.items.length} shown, ${clock()}`);
  };
  const first = () => load().catch((e) => {
    if (e.status === 401) throw e;
    put(list, failure("The dead letters", e));
    return false;
  });
  bulk.addEventListener("click", () => act({ title: "Replay selected", help: `Each of the ${selected.size} dead letter(s) is sent again once, as a new delivery of the same event; one that cannot be replayed does not stop the others.`,
    fields: [reasonField], submit: async (v) => {
      const r = await api("POST", "/v3/callbacks/actions/replay", { ids: [...selected], reason: v.reason });
      const failed = r.outcomes.filter((o) => o.error);
      put(result, h("p", { class: failed.length ? "error" : "note" }, `Replayed ${r.replayed} of ${r.outcomes.length}.`, failed.length ? ` Not replayed: ${failed.map((o) => `${o.id.slice(0, 8)} (${o.error})`).join("; ")}` : ""));
      selected.clear();
    }, onDone: () => load().catch(showError) }));
  if ((await first()) === false) return;
  every(main, load);
}
async function workersScreen(main, params) {
  const q = new URLSearchParams(params);
  const gone = h("input", { id: "show-gone", type: "checkbox", checked: q.get("gone") === "1", onchange: (ev) => { location.hash = ev.target.checked ? "#/workers?gone=1" : "#/workers"; } });
  const list = h("div", { id: "worker-list" });
  put(main, h("h1", {}, "Workers and heartbeats"),
    h("p", { class: "muted" }, h("label", { for: "show-gone", class: "inline" }, gone, "Also instances silent for an hour (gone: crashed and never back; one that stops cleanly removes itself)")), list);
  const load = async () => {
    const page = await api("GET", `/v3/workers?limit=200${q.get("gone") === "1" ? "&include_gone=true" : ""}`);
    put(list, table(page.items, [["Worker", (w) => w.worker], ["Binary", (w) => w.binary], ["Group", (w) => w.group], ["Host", (w) => w.hostname], ["PID", (w) => w.pid],
      ["Network class", (w) => w.network_class], ["Last beat (UTC)", (w) => `${when(w.last_beat_at)} (${secs(w.age_seconds)} ago)`],
      ["Last tick (UTC)", (w) => w.last_tick_at ? when(w.last_tick_at) : "not yet"], ["Next due (UTC)", (w) => w.next_tick_at ? when(w.next_tick_at) : "—"],
      ["Heartbeat", (w) => badge(w.gone ? "gone" : w.stale ? "stale" : "fresh")]], "heartbeats"));
    status(`workers: ${page.items.length} instance(s), ${clock()}`);
  };
  await load();
  every(main, load);
}

// ---- balances: totals, read now, history as a chart -----------------------------------------------
/** Exact decimal sum of decimal strings (BigInt; no float rounding in a total). */
function addDecimals(values) {
  const parts = values.map((v) => String(v ?? "0").trim());
  // A value that is not a plain decimal (NaN, an exponent) makes the total unknown, never short.
  if (parts.some((v) => !/^-?\d+(\.\d+)?$/.test(v))) return null;
  const scale = Math.max(0, ...parts.map((v) => (v.split(".")[1] || "").length));
  let total = 0n;
  for (const v of parts) {
    const neg = v.startsWith("-");
    const [i, f = ""] = v.replace("-", "").split(".");
    const n = BigInt(i + f.padEnd(scale, "0"));
    total += neg ? -n : n;
  }
  const neg = total < 0n;
  let s = (neg ? -total : total).toString().padStart(scale + 1, "0");
  if (scale > 0) s = `${s.slice(0, -scale)}.${s.slice(-scale)}`.replace(/\.?0+$/, "");
  return `${neg ? "-" : ""}${s}`;
}
const unreadable = () => h("span", { class: "error", title: "a balance of this asset is not a plain decimal: no total is shown rather than a wrong one" }, "— (a balance is unreadable)");
/** A line chart of snapshots (one line per account): the figures a person compares at a glance. */
function historyChart(rows) {
  const s = svgEl;
  if (rows.length === 0) return h("p", { class: "muted" }, "No snapshots in this period.");
  const W = 760, H = 260, L = 90, R = 20, T = 16, B = 40;
  const t = rows.map((r) => new Date(r.as_of).getTime());
  const v = rows.map((r) => Number(r.free) + Number(r.locked));
  const [t0, t1] = [Math.min(...t), Math.max(...t)];
  let [v0, v1] = [Math.min(...v), Math.max(...v)];
  if (v0 === v1) { v0 -= 1; v1 += 1; }
  const x = (tt) => L + ((tt - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (vv) => T + (1 - (vv - v0) / (v1 - v0)) * (H - T - B);
  const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `balance history: ${rows.length} snapshots` });
  svg.append(s("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#8c959f" }), s("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#8c959f" }));
  svg.append(s("text", { x: L - 6, y: y(v1) + 4, "text-anchor": "end", class: "axis" }, v1.toLocaleString("en-US", { maximumFractionDigits: 6 })));
  svg.append(s("text", { x: L - 6, y: y(v0) + 4, "text-anchor": "end", class: "axis" }, v0.toLocaleString("en-US", { maximumFractionDigits: 6 })));
  svg.append(s("text", { x: L, y: H - 12, class: "axis" }, when(new Date(t0).toISOString())), s("text", { x: W - R, y: H - 12, "text-anchor": "end", class: "axis" }, when(new Date(t1).toISOString())));
  const COLORS = ["#0b5cad", "#1a7f37", "#8a5a00", "#b42318", "#6e40c9"];
  const accounts = [...new Set(rows.map((r) => r.account))];
  accounts.forEach((acct, i) => {
    const pts = rows.filter((r) => r.account === acct).map((r) => `${x(new Date(r.as_of).getTime()).toFixed(1)},${y(Number(r.free) + Number(r.locked)).toFixed(1)}`);
    svg.append(s("polyline", { points: pts.join(" "), fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2 }));
    svg.append(s("text", { x: L + 8, y: T + 14 + i * 16, fill: COLORS[i % COLORS.length], class: "axis" }, `${acct} (free + locked)`));
  });
  return h("div", { class: "chart" }, svg);
}
/** The balance chart's periods: the last day from the snapshots, longer ones from the rollups. */
const HISTORY_RANGES = {
  "24h": { hours: 24, granularity: "raw", label: "last 24 h, snapshots" },
  "7d": { hours: 168, granularity: "hour", label: "last 7 days, hourly" },
  "90d": { hours: 2160, granularity: "day", label: "last 90 days, daily" },
};
async function balancesScreen(main, params) {
  const q = new URLSearchParams(params);
  const history = h("div", { id: "balance-history" });
  let lastRead = null; // when this screen last read the venues now, and what it could not read
  let lastFailed = [];
  const load = async (fresh) => {
    const b = await api("GET", `/v3/balances${fresh ? "?fresh=true" : ""}`);
    if (fresh) {
      lastRead = clock();
      lastFailed = b.failed || [];
    }
    // Withdrawals from a venue account that no movement explains (cex_transfer_ingest): what a
    // treasury must look at first.
    const u = await api("GET", "/v3/venue-transfers?unexplained=true&direction=withdrawal&limit=50");
    const attention = u.items.length === 0 ? [] : [
      h("section", { class: "attention", role: "alert", "aria-label": "unexplained withdrawals" },
        h("h2", {}, `Needs attention: ${u.items.length} withdrawal(s) no movement explains`),
        table(u.items, [["Venue", (t) => val(t.venue_key)], ["Account", (t) => val(t.account)], ["Venue id", (t) => val(t.venue_ref)],
          ["Asset", (t) => val(t.asset)], ["Amount", (t) => val(t.amount)], ["To", (t) => addr(t.address)],
          ["Status", (t) => val(t.status)], ["Seen (UTC)", (t) => when(t.first_seen_at)], ["Alerted (UTC)", (t) => t.alerted_at ? when(t.alerted_at) : "not yet"]],
          "unexplained withdrawals"))];
    const assets = [...new Set(b.items.map((r) => String(r.asset).toUpperCase()))].sort();
    const totals = assets.map((a) => {
      const rows = b.items.filter((r) => String(r.asset).toUpperCase() === a);
      return { asset: a, free: addDecimals(rows.map((r) => r.free)), locked: addDecimals(rows.map((r) => r.locked)), venues: new Set(rows.map((r) => r.venue_key)).size, stale: rows.some((r) => r.stale) };
    });
    const read = actionButton("Read now", () => load(true).catch(showError), "primary");
    put(main, h("h1", {}, "Balances"), ...attention,
      h("div", { class: "actions" }, read, lastRead ? h("span", { id: "read-at", class: "muted" }, `Venues read now at ${lastRead}`) : null, lastFailed.length ? h("span", { class: "error", id: "read-failed" }, `Not read: ${lastFailed.map((f) => `${f.venue_key}: ${f.error}`).join("; ")}`) : null),
      h("h2", {}, "Totals per asset"),
      table(totals, [["Asset", (t) => val(t.asset)], ["Free", (t) => t.free ?? unreadable()], ["Locked", (t) => t.locked ?? unreadable()], ["Venues", (t) => t.venues], ["Freshness", (t) => badge(t.stale ? "stale" : "fresh")]], "totals per asset"),
      h("h2", {}, "Per venue and account"),
      table(b.items, [["Venue", (r) => r.venue_key], ["Account", (r) => val(r.account)], ["Asset", (r) => val(r.asset)], ["Free", (r) => val(r.free)], ["Locked", (r) => val(r.locked)],
        ["As of (UTC)", (r) => when(r.as_of)], ["Source", (r) => r.source], ["Freshness", (r) => badge(r.stale ? "stale" : "fresh")],
        ["History", (r) => h("a", { href: `#/balances?${new URLSearchParams({ venue: r.venue_key, asset: r.asset })}`, "data-history": `${r.venue_key}/${r.asset}` }, "chart")]],
      "balance snapshots (is qtg-balance running?)"),
      history);
    if (q.get("venue") && q.get("asset")) {
      // The last day from the snapshots; longer periods from balance_history_rollup's hourly and
      // daily rollups (the last figure of each bucket), which outlive the snapshots.
      const range = HISTORY_RANGES[q.get("range")] ? q.get("range") : "24h";
      const { hours, granularity } = HISTORY_RANGES[range];
      const since = new Date(Date.now() - hours * 3600e3).toISOString();
      const query = { venue: q.get("venue"), asset: q.get("asset"), since, granularity };
      Object.assign(query, granularity === "raw" ? { limit: "200", spread: "true" } : { limit: "2000" });
      const hist = await api("GET", `/v3/balances/history?${new URLSearchParams(query)}`);
      const points = hist.items.map((r) => (granularity === "raw" ? r : { account: r.account, as_of: r.bucket_start, free: r.free_last, locked: r.locked_last }));
      put(history, h("h2", {}, `History: ${q.get("venue")} ${q.get("asset")} (UTC, ${HISTORY_RANGES[range].label})`),
        h("p", {}, Object.entries(HISTORY_RANGES).map(([key, r]) => h("a", { href: `#/balances?${new URLSearchParams({ venue: q.get("venue"), asset: q.get("asset"), range: key })}`, class: "range", "data-range": key }, `${r.label} `))),
        historyChart(points));
    }
    status(`balances: ${b.items.length} row(s), ${clock()}`);
    return true;
  };
  await load(false);
  every(main, () => load(false));
}

// ---- attention: what waits for a person ------------------------------------------------------
let counts = null; // the last GET /v3/attention, for the navigation badges
const NAV_COUNT = {
  attention: (c) => c.unknown + c.manual_intervention + c.waiting_manual_action + c.dlq + c.capital_transfers + c.stale_workers + c.drift + c.down + c.unexplained_withdrawals,
  approvals: (c) => c.awaiting_my_approval,
  transfers: (c) => c.capital_transfers,
  callbacks: (c) => c.dlq,
  workers: (c) => c.stale_workers,
  health: (c) => c.down,
  controls: (c) => c.paused,
  balances: (c) => c.unexplained_withdrawals,
};
async function refreshCounts() {
  if (!me) return;
  try {
    counts = await api("GET", "/v3/attention");
  } catch {
    return; // the badges keep their last figures; the screen says what failed
  }
  const mayAct = { approvals: "approver", callbacks: "operator" };
  for (const a of document.querySelectorAll("header nav a[data-count]")) {
    const role = mayAct[a.dataset.count];
    const n = role && !can(role) ? 0 : NAV_COUNT[a.dataset.count]?.(counts) ?? 0;
    const b = a.querySelector(".count");
    b.textContent = n > 0 ? String(n) : "";
    b.hidden = n === 0;
    a.setAttribute("aria-label", n > 0 ? `${a.dataset.label}, ${n} waiting` : a.dataset.label);
  }
}
/** One kind of waiting item: a tile with its count (a link to its list) and, when there is
 * any, a section listing them. */
function section(id, title, n, body) {
  const tile = h("a", { class: n > 0 ? "tile hot" : "tile", href: n > 0 ? `#/attention` : null, "data-tile": id, onclick: n > 0 ? (ev) => { ev.preventDefault(); $(id)?.scrollIntoView(); } : null },
    h("span", { class: "n" }, String(n)), h("span", {}, title));
  const list = n > 0 ? h("section", { class: "attn hot", id, "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, title, " ", h("span", { class: "badge s-UNKNOWN" }, String(n))), body) : null;
  return { tile, list };
}
async function attentionScreen(main) {
  const load = async () => {
    const c = await api("GET", "/v3/attention");
    counts = c;
    const list = (query) => api("GET", `/v3/movements?${query}&limit=50`).then((p) => p.items);
    const [mine, unknown, manual, waiting, transfers, workers, drift, pauses, executors, signers] = await Promise.all([
      can("approver") && c.awaiting_my_approval ? list("awaiting_approval=me") : [],
      c.unknown ? list("node_state=UNKNOWN") : [],
      c.manual_intervention ? list("state=MANUAL_INTERVENTION") : [],
      c.waiting_manual_action ? list("state=WAITING_MANUAL_ACTION") : [],
      c.capital_transfers ? api("GET", "/v3/capital-transfers?state=NEEDS_ATTENTION&limit=50").then((p) => p.items) : [],
      c.stale_workers ? api("GET", "/v3/workers?limit=200").then((p) => p.items.filter((w) => w.stale)) : [],
      c.drift ? api("GET", "/v3/drift?limit=200").then((p) => p.items.filter((d) => d.status === "drift" || d.status === "error")) : [],
      c.paused ? api("GET", "/v3/controls").then((p) => p.items) : [],
      c.down ? api("GET", "/v3/executors?limit=200").then((p) => p.items.filter((e) => e.health_state === "down")) : [],
      c.down ? api("GET", "/v3/signers?limit=200").then((p) => p.items.filter((e) => e.health_state === "down")) : [],
    ]);
    if (!main.isConnected) return;
    const parts = [
      can("approver") ? section("attn-approvals", "Waiting for your approval", c.awaiting_my_approval, movementRows(mine)) : null,
      section("attn-unknown", "A node in UNKNOWN (recovery's, then yours)", c.unknown, movementRows(unknown)),
      section("attn-manual", "MANUAL_INTERVENTION", c.manual_intervention, movementRows(manual)),
      section("attn-waiting", "WAITING_MANUAL_ACTION (a manual step to complete)", c.waiting_manual_action, movementRows(waiting)),
      section("attn-transfers", "Capital transfers in NEEDS_ATTENTION", c.capital_transfers, transferRows(transfers)),
      section("attn-dlq", "Dead-lettered callbacks not replayed", c.dlq, h("p", {}, h("a", { href: "#/callbacks" }, `Open the DLQ (${c.dlq})`))),
      section("attn-workers", "Stale workers", c.stale_workers, table(workers, [["Worker", (w) => w.worker], ["Host", (w) => w.hostname], ["Last beat (UTC)", (w) => `${when(w.last_beat_at)} (${secs(w.age_seconds)} ago)`]], "stale workers")),
      section("attn-drift", "Drift", c.drift, table(drift, [["Scope", (d) => d.scope], ["Status", (d) => badge(d.status)], ["Checked (UTC)", (d) => when(d.checked_at)], ["Differences", (d) => JSON.stringify(d.differences), "mono"], ["Error", (d) => d.error]], "drift")),
      section("attn-down", "Executors and signers down", c.down, table([...executors.map((e) => ({ key: e.executor_key, kind: "executor", e })), ...signers.map((s) => ({ key: s.signer_key, kind: "signer", e: s }))],
        [["Key", (r) => r.key], ["Kind", (r) => r.kind], ["Checked (UTC)", (r) => when(r.e.last_health_checked_at)], ["Last error", (r) => r.e.last_error]], "down")),
      section("attn-paused", "Kill-switch pauses", c.paused, table(pauses, [["Scope", (p) => p.scope], ["Target", (p) => p.target], ["By", (p) => val(p.paused_by)], ["Reason", (p) => p.reason]], "pauses")),
      section("attn-unexplained", "Venue withdrawals no movement explains", c.unexplained_withdrawals, h("p", {}, h("a", { href: "#/balances" }, "See them on the balances screen"))),
    ].filter(Boolean);
    const open = parts.filter((x) => x.list);
    put(main, h("h1", {}, "Needs attention"),
      h("div", { class: "tiles", id: "attn-summary", role: "list", "aria-label": "counts" }, parts.map((x) => x.tile)),
      open.length ? open.map((x) => x.list) : h("p", { class: "note", id: "attn-clear" }, "Nothing waits for a person right now."));
    status(`attention: ${NAV_COUNT.attention(c)} item(s), ${clock()}`);
  };
  await load();
  every(main, load);
}

// ---- approvals: my queue -------------------------------------------------------------------
async function approvalsScreen(main) {
  const load = async () => {
    const [mine, own] = await Promise.all([
      can("approver") ? api("GET", "/v3/movements?awaiting_approval=me&limit=100") : Promise.resolve({ items: [] }),
      api("GET", `/v3/movements?${new URLSearchParams({ state: "PENDING_APPROVAL", created_by: me.principal, limit: "100" })}`),
    ]);
    put(main, h("h1", {}, "Approvals"),
      h("h2", {}, "Waiting for your approval"),
      can("approver") ? h("div", { id: "my-approvals" }, movementRows(mine.items)) : h("p", { class: "muted" }, "Approving needs the approver role."),
      h("h2", {}, "Created by you, waiting for others"),
      h("p", { class: "muted" }, "Four-eyes: the person who created a movement never approves it; with m-of-n limits each approval is from a different person."),
      movementRows(own.items));
    status(`approvals: ${mine.items.length} waiting for you, ${clock()}`);
  };
  await load();
  every(main, load);
}

// ---- capital transfers -----------------------------------------------------------------------
function transferRows(items) {
  return table(items, [
    ["Transfer", (t) => h("a", { href: `#/transfers/${seg(t.id)}`, class: "mono" }, String(t.id).slice(0, 8))],
    ["State", (t) => badge(t.state)],
    ["Amount", (t) => h("span", {}, val(t.amount), " ", val(t.asset))],
    ["From → to", (t) => h("span", {}, addr(t.source), " → ", addr(t.destination))],
    ["Movement", (t) => (t.movement_id ? h("a", { href: `#/movements/${seg(t.movement_id)}`, class: "mono" }, String(t.movement_id).slice(0, 8)) : "—")],
    ["Requested by", (t) => val(t.requested_by)],
    ["Created (UTC)", (t) => when(t.created_at)],
  ], "capital transfers");
}
const TRANSFER_STATES = ["PENDING", "MOVEMENT_CREATED", "COMPLETED", "FAILED", "NEEDS_ATTENTION"];
async function transfersScreen(main, params) {
  const q = new URLSearchParams(params);
  const state = h("select", { id: "flt-transfer-state" }, h("option", { value: "" }, "any"), TRANSFER_STATES.map((s) => h("option", { value: s, selected: q.get("state") === s }, s)));
  const form = h("form", { class: "filters", "aria-label": "Filter capital transfers", onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/transfers${state.value ? `?state=${state.value}` : ""}`; } },
    h("label", { for: "flt-transfer-state" }, "State", state), h("button", { type: "submit" }, "Apply"));
  const list = h("div", { id: "transfer-list" });
  put(main, h("h1", {}, "Capital transfers"), form, list);
  const load = async () => {
    const page = await api("GET", `/v3/capital-transfers?${new URLSearchParams(q.get("state") ? { state: q.get("state"), limit: "100" } : { limit: "100" })}`);
    put(list, transferRows(page.items));
    status(`capital transfers: ${page.items.length} shown, ${clock()}`);
  };
  await load();
  every(main, load);
}
async function transferScreen(main, id) {
  const load = async () => {
    const t = await api("GET", `/v3/capital-transfers/${seg(id)}`);
    const reload = () => load().catch(showError);
    const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
    if (t.state === "NEEDS_ATTENTION" && can("operator")) {
      actions.append(actionButton("Close", () => act({ title: "Close transfer", danger: true,
        help: "Closes the request as FAILED after you have settled it by hand (its movement ended without a clear outcome). The reason is kept with it.",
        fields: [reasonField], submit: (v) => api("POST", `/v3/capital-transfers/${seg(id)}/actions/close`, { reason: v.reason }), onDone: reload }), "danger"));
    }
    put(main, h("p", {}, h("a", { href: "#/transfers" }, "← Capital transfers")),
      h("h1", {}, "Capital transfer ", h("span", { class: "mono" }, t.id), " ", badge(t.state)),
      actions.childElementCount ? actions : null,
      dl([["Amount", h("span", {}, val(t.amount), " ", val(t.asset))], ["From", addr(t.source)], ["To", addr(t.destination)], ["Reason", h("bdi", {}, t.reason)],
        ["Template", h("span", {}, val(t.template_key), t.template_version ? ` v${t.template_version}` : "")],
        ["Movement", t.movement_id ? h("span", {}, h("a", { href: `#/movements/${seg(t.movement_id)}`, class: "mono" }, t.movement_id), " ", badge(t.movement_state)) : "—"],
        ["Outcome", t.outcome], ["Requested", h("span", {}, `${when(t.created_at)} by `, val(t.requested_by))], ["Closed", when(t.closed_at)],
        ["Idempotency key", val(t.idempotency_key)]]),
      t.settlement ? h("section", {}, h("h2", {}, "Settlement"), json(t.settlement)) : null);
    status(`capital transfer ${t.state}, ${clock()}`);
    return !["COMPLETED", "FAILED"].includes(t.state);
  };
  if (await load()) every(main, load);
}

// ---- templates and proposals -------------------------------------------------------------------
const TEMPLATE_KEY = /^[A-Za-z0-9_.-]{1,128}$/;
/** A plan drawn as its DAG: each node with its executor and action (no states: nothing ran). */
const planDag = (plan) => dag(null, (plan.nodes || []).map((n) => ({ ...n, node_state: "", plan: true })), plan.edges || []);
const planOf = (v) => ({ nodes: v?.nodes || [], edges: v?.edges || [], risk_controls: v?.risk_controls || {} });
const stable = (v) => JSON.stringify(v, (k, x) => (x && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.keys(x).sort().map((key) => [key, x[key]])) : x));
/** What a proposal changes against the current version: nodes added, removed or changed,
 * edges added or removed, the risk controls before and after. */
function planDiff(before, after) {
  const rows = [];
  const b = Object.fromEntries(before.nodes.map((n) => [n.node_key, n]));
  const a = Object.fromEntries(after.nodes.map((n) => [n.node_key, n]));
  for (const k of Object.keys(a)) if (!b[k]) rows.push({ what: "node added", key: k, before: null, after: a[k] });
  for (const k of Object.keys(b)) if (!a[k]) rows.push({ what: "node removed", key: k, before: b[k], after: null });
  for (const k of Object.keys(a)) if (b[k] && stable(a[k]) !== stable(b[k])) rows.push({ what: "node changed", key: k, before: b[k], after: a[k] });
  const e = (x) => `${x.from} → ${x.to}`;
  const be = new Set(before.edges.map(e)), ae = new Set(after.edges.map(e));
  for (const x of ae) if (!be.has(x)) rows.push({ what: "edge added", key: x, before: null, after: x });
  for (const x of be) if (!ae.has(x)) rows.push({ what: "edge removed", key: x, before: x, after: null });
  if (stable(before.risk_controls) !== stable(after.risk_controls)) rows.push({ what: "risk controls changed", key: "risk_controls", before: before.risk_controls, after: after.risk_controls });
  return rows;
}
const pretty = (v) => (v === null || v === undefined ? "—" : h("pre", { class: "diff" }, typeof v === "string" ? v : JSON.stringify(v, null, 2)));
async function templatesScreen(main) {
  const load = async () => {
    const [templates, proposals] = await Promise.all([api("GET", "/v3/templates?limit=200"), api("GET", "/v3/template-proposals?status=pending&limit=100")]);
    put(main, h("h1", {}, "Templates"),
      h("h2", {}, "Proposals waiting for review"),
      table(proposals.items, [["Proposal", (p) => h("a", { href: `#/proposals/${seg(p.id)}`, class: "mono" }, String(p.id).slice(0, 8))], ["Template", (p) => val(p.template_key)],
        ["Proposed by", (p) => val(p.proposed_by)], ["Description", (p) => (p.description ? h("bdi", {}, p.description) : "—")], ["Expires (UTC)", (p) => when(p.expires_at)]], "proposals waiting for review"),
      h("h2", {}, "Templates"),
      table(templates.items, [["Template", (t) => h("a", { href: `#/templates/${seg(t.template_key)}` }, t.template_key)], ["Latest version", (t) => t.latest_version],
        ["Plan hash", (t) => t.compiled_plan_hash, "mono"], ["Since (UTC)", (t) => when(t.created_at)]], "templates"));
    status(`templates: ${templates.items.length}, ${proposals.items.length} proposal(s) waiting, ${clock()}`);
  };
  await load();
  every(main, load);
}
async function templateScreen(main, key) {
  const load = async () => {
    const t = await api("GET", `/v3/templates/${seg(key)}`);
    const reload = () => load().catch(showError);
    put(main, h("p", {}, h("a", { href: "#/templates" }, "← Templates")),
      h("h1", {}, "Template ", h("span", { class: "mono" }, t.template_key)),
      (t.versions || []).map((v) => h("section", { class: "version", "data-version": v.version },
        h("h2", {}, `Version ${v.version} `, v.retired_at ? badge("RETIRED") : badge("ACTIVE")),
        dl([["Plan hash", h("span", { class: "mono" }, v.compiled_plan_hash)], ["Approved (UTC)", when(v.created_at)], ["Retired (UTC)", when(v.retired_at)], ["Description", v.description]]),
        !v.retired_at && can("admin") ? h("div", { class: "actions" }, actionButton(`Retire v${v.version}`, () => act({ title: `Retire version ${v.version}`, danger: true,
          help: "It takes no new movement or capital transfer; movements already on it keep their plan.", fields: [reasonField],
          submit: (x) => api("POST", `/v3/templates/${seg(key)}/versions/${v.version}/actions/retire`, { reason: x.reason }), onDone: reload }), "danger")) : null,
        planDag(planOf(v)),
        h("details", {}, h("summary", {}, "Nodes and risk controls as stored"), json({ nodes: v.nodes, edges: v.edges, risk_controls: v.risk_controls })))));
    status(`template ${key}, ${clock()}`);
  };
  await load();
}
async function proposalScreen(main, id) {
  const load = async () => {
    const p = await api("GET", `/v3/template-proposals/${seg(id)}`);
    const current = await api("GET", `/v3/templates/${seg(p.template_key)}`).catch((e) => (e.status === 404 ? null : Promise.reject(e)));
    const latest = current?.versions?.find((v) => !v.retired_at) || current?.versions?.[0] || null;
    const proposed = planOf(p.definition);
    const changes = planDiff(planOf(latest), proposed);
    const reload = () => load().catch(showError);
    const mine = me && String(p.proposed_by).toLowerCase() === me.principal.toLowerCase();
    const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
    let why = null;
    if (p.status === "pending" && !p.expired) {
      if (!can("admin")) why = "Reviewing a proposal needs the admin role.";
      else if (mine) why = "You proposed it: four-eyes means another admin must review it.";
      else {
        actions.append(actionButton("Approve proposal", () => act({ title: "Approve proposal", help: `It becomes ${p.template_key} version ${(current?.versions?.[0]?.version || 0) + 1}; the version before it is retired.`,
          fields: [reasonField], submit: (v) => api("POST", `/v3/template-proposals/${seg(id)}/approve`, { reason: v.reason }), onDone: reload }), "primary"));
        actions.append(actionButton("Reject proposal", () => act({ title: "Reject proposal", danger: true, fields: [reasonField],
          submit: (v) => api("POST", `/v3/template-proposals/${seg(id)}/reject`, { reason: v.reason }), onDone: reload }), "danger"));
      }
    }
    put(main, h("p", {}, h("a", { href: "#/templates" }, "← Templates")),
      h("h1", {}, "Proposal for ", h("span", { class: "mono" }, p.template_key), " ", badge(p.expired && p.status === "pending" ? "EXPIRED" : p.status.toUpperCase())),
      why ? h("p", { class: "note", id: "review-why" }, why) : null,
      actions.childElementCount ? actions : null,
      dl([["Proposed", h("span", {}, `${when(p.created_at)} by `, val(p.proposed_by))], ["Expires (UTC)", when(p.expires_at)], ["Reviewed by", val(p.reviewed_by)],
        ["Review reason", p.review_reason], ["Description", p.description], ["Plan hash", h("span", { class: "mono" }, p.compiled_plan_hash)]]),
      h("h2", {}, latest ? `Changes from version ${latest.version}` : "A new template (no version yet)"),
      h("div", { id: "proposal-diff" }, changes.length === 0 ? h("p", { class: "muted" }, "No change to the plan.") :
        table(changes, [["Change", (c) => c.what], ["Where", (c) => c.key, "mono"], ["Before", (c) => pretty(c.before)], ["After", (c) => pretty(c.after)]], "changes")),
      h("h2", {}, "The proposed plan"), planDag(proposed));
    status(`proposal ${p.status}, ${clock()}`);
    return p.status === "pending";
  };
  if (await load()) every(main, load);
}

// ---- API keys (admin) -------------------------------------------------------------------------
const ROLES = ["viewer", "requester", "approver", "operator", "admin"];
async function keysScreen(main) {
  if (!can("admin")) {
    put(main, h("h1", {}, "API keys"), h("p", {}, "API keys are managed by admins."));
    return;
  }
  const load = async () => {
    const [keys, requests] = await Promise.all([api("GET", "/v3/api-keys?limit=200"), api("GET", "/v3/api-key-requests?status=pending&limit=100")]);
    const reload = () => load().catch(showError);
    const create = actionButton("Create key", () => act({ title: "Create key",
      help: "The secret is shown once. When two admins are required, this makes a request another admin approves.",
      fields: [{ name: "principal", label: "Principal (who acts with it)", type: "text", required: true },
        { name: "role", label: "Role", type: "select", options: ROLES.map((r) => [r, r]) }],
      submit: async (v) => {
        const r = await api("POST", "/v3/api-keys", { principal: v.principal, roles: [v.role] });
        if (r.secret) {
          showSecret(r.secret, v.principal);
          return `key created for ${v.principal}`;
        }
        return `key request for ${v.principal}: another admin must approve it`;
      },
      onDone: reload }), "primary");
    put(main, h("h1", {}, "API keys"), h("div", { class: "actions" }, create),
      h("h2", {}, "Requests waiting for a second admin"),
      table(requests.items, [["Principal", (r) => val(r.principal)], ["Roles", (r) => r.roles.join(", ")], ["Requested by", (r) => val(r.requested_by)], ["At (UTC)", (r) => when(r.created_at)],
        ["", (r) => (String(r.requested_by).toLowerCase() === me.principal.toLowerCase() ? h("span", { class: "muted" }, "yours: another admin decides")
          : h("span", {}, actionButton("Approve", () => act({ title: "Approve key request", fields: [], submit: async () => {
            const d = await api("POST", `/v3/api-key-requests/${seg(r.id)}/approve`);
            if (d.secret || d.key?.secret) showSecret(d.secret || d.key.secret, r.principal);
          }, onDone: reload }), "primary"), " ",
          actionButton("Reject", () => act({ title: "Reject key request", danger: true, fields: [], submit: () => api("POST", `/v3/api-key-requests/${seg(r.id)}/reject`), onDone: reload }), "danger")))]],
      "key requests"),
      h("h2", {}, "Keys"),
      table(keys.items, [["Principal", (k) => val(k.principal)], ["Roles", (k) => k.roles.join(", ")], ["Created (UTC)", (k) => when(k.created_at)], ["By", (k) => val(k.created_by)],
        ["Expires (UTC)", (k) => when(k.expires_at)], ["State", (k) => badge(k.revoked_at ? "REVOKED" : "ACTIVE")],
        ["", (k) => (k.revoked_at ? null : actionButton(`Revoke ${k.principal}`, () => act({ title: "Revoke key", danger: true, help: `Every call with ${k.principal}'s key is refused from now on.`,
          fields: [], submit: () => api("DELETE", `/v3/api-keys/${seg(k.id)}`), onDone: reload }), "danger"))]], "keys"));
  };
  await load();
}
/** A new key's secret, once: selectable, never stored by the console. */
function showSecret(secret, principal) {
  const box = h("p", { id: "new-secret", class: "mono secret" }, secret);
  setTimeout(() => act({ title: `Key for ${principal}`, help: h("div", {}, h("p", {}, "Copy it now: it is shown once and only its hash is kept."), box), fields: [], submit: async () => {} }), 0);
}

// ---- audit search ---------------------------------------------------------------------------------
async function auditScreen(main, params) {
  const q = new URLSearchParams(params);
  const f = Object.fromEntries([["movement_id", 36], ["actor", 14], ["action", 18]].map(([k, size]) => [k, h("input", { id: `aud-${k.replace(/_/g, "-")}`, value: q.get(k) || "", size, autocomplete: "off" })]));
  const from = timeField("aud-since", q.get("since"));
  const to = timeField("aud-until", q.get("until"));
  const form = h("form", { class: "filters", "aria-label": "Search the audit trail", onsubmit: (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, el] of Object.entries(f)) if (el.value.trim()) p.set(k, el.value.trim());
    if (from.value) p.set("since", utcInput(from.value));
    if (to.value) p.set("until", utcInput(to.value));
    location.hash = `#/audit?${p}`;
  } },
  h("label", { for: "aud-movement-id" }, "Movement id", f.movement_id), h("label", { for: "aud-actor" }, "Actor", f.actor),
  h("label", { for: "aud-action" }, "Action (e.g. movement.approval)", f.action), h("label", { for: "aud-since" }, "From (UTC)", from),
  h("label", { for: "aud-until" }, "to (UTC)", to), h("button", { type: "submit", id: "audit-search" }, "Search"));
  const list = h("div", { id: "audit-list" });
  put(main, h("h1", {}, "Audit trail"), form, list);
  const p = new URLSearchParams({ limit: "200" });
  for (const k of ["movement_id", "actor", "action", "since", "until"]) if (q.get(k)) p.set(k, q.get(k));
  if (q.get("cursor")) p.set("cursor", q.get("cursor"));
  let page;
  try {
    page = await api("GET", `/v3/audit-events?${p}`);
  } catch (e) {
    if (e.status === 401) throw e;
    put(list, failure("The search", e)); // the form stays, to correct it
    return;
  }
  const next = new URLSearchParams(q);
  if (page.next_cursor) next.set("cursor", page.next_cursor);
  put(list, table(page.items, [["#", (a) => a.id], ["At (UTC)", (a) => when(a.occurred_at)], ["Actor", (a) => val(a.actor)], ["Action", (a) => a.action],
    ["Entity", (a) => `${a.entity_type} ${a.entity_id}`, "mono"], ["Movement", (a) => (a.movement_id ? h("a", { href: `#/movements/${seg(a.movement_id)}`, class: "mono" }, String(a.movement_id).slice(0, 8)) : "—")],
    ["Data", (a) => JSON.stringify(a.data), "mono"]], "audit events"),
  page.next_cursor ? h("p", {}, h("a", { href: `#/audit?${next}`, id: "audit-next" }, "Next page →")) : null);
  status(`audit: ${page.items.length} event(s), ${clock()}`);
}


// ---- approval policy ------------------------------------------------------------------------------
/** A rule's conditions in words. */
function whenText(w) {
  if (!w) return "every movement";
  const parts = [];
  if (w.templates?.length) parts.push(`template ${w.templates.join(" or ")}`);
  if (w.assets?.length) parts.push(`asset ${w.assets.join(" or ")}`);
  if (w.amount_at_least) parts.push(`amount ≥ ${w.amount_at_least}`);
  if (w.amount_below) parts.push(`amount < ${w.amount_below}`);
  for (const [side, e] of [["source", w.sources], ["destination", w.destinations]]) {
    if (!e) continue;
    const any = [...(e.addresses || []), ...(e.book_entries || []).map((n) => `book entry ${n}`), ...(e.book_tags || []).map((t) => `book tag ${t}`)];
    if (any.length) parts.push(`${side} ${any.join(" or ")}`);
    if (e.in_book === true) parts.push(`${side} in the address book`);
    if (e.in_book === false) parts.push(`${side} NOT in the address book`);
  }
  if (w.requesters?.length) parts.push(`requested by ${w.requesters.join(" or ")}`);
  if (w.requester_roles?.length) parts.push(`requester role ${w.requester_roles.join(" or ")}`);
  if (w.weekdays?.length) parts.push(`on ${w.weekdays.join(", ")}`);
  if (w.hours) parts.push(`${w.hours.from}–${w.hours.to} UTC`);
  return parts.length ? parts.join("; ") : "every movement";
}
function actionText(a) {
  if (!a) return "—";
  if (a.type === "block") return `BLOCK: ${a.reason}`;
  const groups = (a.groups || []).map((g) => `${g.min} of ${g.group || (g.principals?.length ? g.principals.join(", ") : `role ${g.role}`)}${g.group && g.role ? ` or role ${g.role}` : ""}`);
  return `approve by ${groups.join(" + ")}${a.approval_ttl_seconds ? `, within ${secs(a.approval_ttl_seconds)}` : ""}${a.max_fee ? `, fee ≤ ${a.max_fee}` : ""}`;
}
function rulesTable(doc) {
  const rows = [...(doc?.rules || []).map((r, i) => ({ n: String(i + 1), name: r.name, when: whenText(r.when), action: actionText(r.action) })),
    { n: "—", name: "default", when: "no rule above holds", action: actionText(doc?.default || { type: "block", reason: "no rule covers it" }) }];
  return h("div", {},
    doc?.groups && Object.keys(doc.groups).length ? dl(Object.entries(doc.groups).map(([g, m]) => [`group ${g}`, m.join(", ")])) : null,
    table(rows, [["#", (r) => r.n], ["Rule", (r) => h("bdi", {}, r.name)], ["When", (r) => r.when], ["Then", (r) => r.action]], "rules (the first that holds decides)"));
}
/** What a version changes from another: rules added, removed, changed or moved; groups; default. */
function policyDiff(before, after) {
  const rows = [];
  const b = new Map((before?.rules || []).map((r, i) => [r.name, { r, i }]));
  const a = new Map((after?.rules || []).map((r, i) => [r.name, { r, i }]));
  for (const [n, x] of a) if (!b.has(n)) rows.push({ what: "rule added", key: n, before: null, after: `${x.i + 1}. ${whenText(x.r.when)} → ${actionText(x.r.action)}` });
  for (const [n, x] of b) if (!a.has(n)) rows.push({ what: "rule removed", key: n, before: `${x.i + 1}. ${whenText(x.r.when)} → ${actionText(x.r.action)}`, after: null });
  for (const [n, x] of a) {
    const y = b.get(n);
    if (!y) continue;
    if (stable(x.r) !== stable(y.r)) rows.push({ what: "rule changed", key: n, before: `${whenText(y.r.when)} → ${actionText(y.r.action)}`, after: `${whenText(x.r.when)} → ${actionText(x.r.action)}` });
    else if (x.i !== y.i) rows.push({ what: "rule moved", key: n, before: `position ${y.i + 1}`, after: `position ${x.i + 1}` });
  }
  if (stable(before?.groups || {}) !== stable(after?.groups || {})) rows.push({ what: "groups changed", key: "groups", before: before?.groups || {}, after: after?.groups || {} });
  if (stable(before?.default || null) !== stable(after?.default || null)) rows.push({ what: "default changed", key: "default", before: actionText(before?.default), after: actionText(after?.default) });
  return rows;
}
function simulationView(sim) {
  return h("section", { id: "simulation" }, h("h2", {}, `Simulation: ${sim.changed.length} of ${sim.evaluated} movement(s) would change`),
    sim.truncated ? h("p", { class: "error" }, "Only the oldest movements of the window were evaluated: narrow the days.") : null,
    table(sim.changed, [["Movement", (c) => h("a", { href: `#/movements/${seg(c.movement_id)}`, class: "mono" }, String(c.movement_id).slice(0, 8))],
      ["Intent", (c) => intentLine(c.intent)], ["Created (UTC)", (c) => when(c.created_at)],
      ["Before", (c) => `${c.before.rule ?? "no policy"}: ${c.before.outcome}${c.before.approvers.length ? ` (${c.before.approvers.join(" + ")})` : ""}`],
      ["After", (c) => `${c.after.rule}: ${c.after.outcome}${c.after.approvers.length ? ` (${c.after.approvers.join(" + ")})` : ""}`]], "movements whose outcome changes"));
}
async function policiesScreen(main) {
  const [list, current] = await Promise.all([api("GET", "/v3/policies?limit=100"), api("GET", "/v3/policies/current").catch((e) => (e.status === 404 ? null : Promise.reject(e)))]);
  const doc = h("textarea", { id: "policy-doc", rows: 14, cols: 100, spellcheck: "false", class: "mono" }, JSON.stringify(current?.document || { groups: {}, rules: [], default: { type: "block", reason: "no rule covers it" } }, null, 2));
  const desc = h("input", { id: "policy-desc", size: 60, autocomplete: "off" });
  const eff = timeField("policy-effective", "");
  const out = h("div", { id: "policy-result" });
  const parse = () => { try { return JSON.parse(doc.value); } catch (e) { put(out, h("p", { class: "error", role: "alert" }, `The document is not JSON: ${e.message}`)); return null; } };
  const simulate = async () => {
    const d = parse();
    if (!d) return;
    try { put(out, simulationView(await api("POST", "/v3/policies/simulate", { document: d, days: 30 }))); } catch (e) { put(out, failure("The simulation", e)); }
  };
  const propose = async (ev) => {
    ev.preventDefault();
    const d = parse();
    if (!d) return;
    try {
      const body = { document: d };
      if (desc.value.trim()) body.description = desc.value.trim();
      if (eff.value.trim()) body.effective_at = utcInput(eff.value);
      const v = await api("POST", "/v3/policies", body);
      location.hash = `#/policies/${v.version}`;
    } catch (e) { put(out, failure("The proposal", e)); }
  };
  put(main, h("h1", {}, "Approval policy"),
    current ? h("p", { class: "note", id: "policy-current" }, "In force: ", h("a", { href: `#/policies/${current.version}` }, `version ${current.version}`), ` since ${when(current.effective_at)}`)
      : h("p", { class: "note", id: "policy-current" }, "No policy is in force: each template's approvals and the risk limits alone apply."),
    current ? rulesTable(current.document) : null,
    h("h2", {}, "Versions"),
    table(list.items, [["Version", (v) => h("a", { href: `#/policies/${v.version}` }, `v${v.version}`)], ["Status", (v) => badge(v.status.toUpperCase())],
      ["Proposed by", (v) => val(v.proposed_by)], ["Effective (UTC)", (v) => when(v.effective_at)], ["Decided by", (v) => val(v.decided_by)], ["Description", (v) => (v.description ? h("bdi", {}, v.description) : "—")]], "policy versions"),
    can("admin") || can("operator") ? h("section", {}, h("h2", {}, "Draft a new version"),
      h("p", { class: "muted" }, "Edit the document (JSON: groups, rules in order — the first that holds decides — and a default), simulate it against the last 30 days, then propose it: other admins approve it before it is in force."),
      h("form", { onsubmit: propose, "aria-label": "Draft a policy version" },
        h("label", { for: "policy-doc" }, "Policy document", doc),
        h("div", { class: "filters" }, h("label", { for: "policy-desc" }, "Description", desc), h("label", { for: "policy-effective" }, "Effective from (UTC; empty: at its approval)", eff)),
        h("div", { class: "actions" }, h("button", { type: "button", id: "policy-simulate", onclick: simulate }, "Simulate"),
          can("admin") ? h("button", { type: "submit", id: "policy-propose", class: "primary" }, "Propose") : null)),
      out) : null);
  status(`policy: ${list.items.length} version(s), ${clock()}`);
}
async function policyScreen(main, version) {
  const load = async () => {
    const v = await api("GET", `/v3/policies/${version}`);
    const current = await api("GET", "/v3/policies/current").catch((e) => (e.status === 404 ? null : Promise.reject(e)));
    const reload = () => load().catch(showError);
    const mine = me && String(v.proposed_by).toLowerCase() === me.principal.toLowerCase();
    const approvedByMe = (v.approvals || []).some((a) => String(a.approver).toLowerCase() === me.principal.toLowerCase());
    const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
    let why = null;
    if (v.status === "pending") {
      if (!can("admin")) why = "Deciding on a policy version needs the admin role.";
      else if (mine) why = "You proposed it: other admins approve it (you may withdraw it).";
      else if (approvedByMe) why = "You have approved it; it waits for another admin.";
      if (can("admin") && !mine && !approvedByMe) {
        actions.append(actionButton("Approve policy", () => act({ title: "Approve policy", help: `Version ${v.version} is in force once it has ${v.approvals_required} approval(s) by admins other than ${v.proposed_by}, from ${when(v.effective_at)} or then.`,
          fields: [reasonField], submit: (x) => api("POST", `/v3/policies/${version}/approve`, { reason: x.reason }), onDone: reload }), "primary"));
      }
      if (can("admin")) actions.append(actionButton(mine ? "Withdraw policy" : "Reject policy", () => act({ title: mine ? "Withdraw policy" : "Reject policy", danger: true, fields: [reasonField],
        submit: (x) => api("POST", `/v3/policies/${version}/reject`, { reason: x.reason }), onDone: reload }), "danger"));
      actions.append(actionButton("Simulate", async () => {
        try { put($("policy-sim"), simulationView(await api("POST", "/v3/policies/simulate", { document: v.document, days: 30 }))); } catch (e) { put($("policy-sim"), failure("The simulation", e)); }
      }));
    }
    const base = current && current.version !== v.version ? current : null;
    const changes = policyDiff(base?.document || null, v.document);
    put(main, h("p", {}, h("a", { href: "#/policies" }, "← Approval policy")),
      h("h1", {}, `Policy version ${v.version} `, badge(v.in_force ? "IN FORCE" : v.status.toUpperCase())),
      why ? h("p", { class: "note", id: "policy-why" }, why) : null,
      actions.childElementCount ? actions : null,
      dl([["Proposed", h("span", {}, `${when(v.created_at)} by `, val(v.proposed_by))], ["Effective (UTC)", when(v.effective_at)],
        ["Approvals", `${(v.approvals || []).length} of ${v.approvals_required}: ${(v.approvals || []).map((a) => a.approver).join(", ") || "none yet"}`],
        ["Decided", v.decided_at ? `${when(v.decided_at)} by ${v.decided_by}` : "—"], ["Description", v.description], ["Document hash", h("span", { class: "mono" }, v.document_hash)]]),
      h("div", { id: "policy-sim" }),
      h("h2", {}, base ? `Changes from version ${base.version} (in force)` : "Changes from no policy"),
      h("div", { id: "policy-diff" }, changes.length ? table(changes, [["Change", (c) => c.what], ["Rule", (c) => h("bdi", {}, c.key)], ["Before", (c) => pretty(c.before)], ["After", (c) => pretty(c.after)]], "changes") : h("p", { class: "muted" }, "No change.")),
      h("h2", {}, "Rules"), rulesTable(v.document));
    status(`policy version ${v.version} ${v.status}, ${clock()}`);
  };
  await load();
}

// ---- the address book ---------------------------------------------------------------------------------
async function bookScreen(main) {
  const load = async () => {
    const [active, pending] = await Promise.all([api("GET", "/v3/address-book?status=active&limit=200"), api("GET", "/v3/address-book?status=pending&limit=200")]);
    bookRead = 0;
    await refreshBook();
    const reload = () => load().catch(showError);
    const propose = can("admin") ? actionButton("Propose entry", () => act({ title: "Propose entry", help: "Another admin activates it; it is usable after its cool-down.",
      fields: [{ name: "name", label: "Name", type: "text", required: true }, { name: "lane", label: "Lane", type: "select", options: ["evm", "cex", "cctp", "ccip", "sim", "other"].map((l) => [l, l]) },
        { name: "network", label: "Network or chain (optional)", type: "text" }, { name: "address", label: "Address", type: "text", required: true },
        { name: "memo", label: "Memo or tag (optional)", type: "text" },
        { name: "tags", label: "Tags (comma separated)", type: "text" }, { name: "cool_down", label: "Cool-down seconds (optional)", type: "text" }, { name: "reason", label: "Reason", type: "text" }],
      submit: (v) => {
        const body = { name: v.name, lane: v.lane, address: v.address, tags: v.tags ? v.tags.split(",").map((t) => t.trim()).filter(Boolean) : [] };
        if (v.network) body.network = v.network;
        if (v.memo) body.memo = v.memo;
        if (v.cool_down) body.cool_down_seconds = Number(v.cool_down);
        if (v.reason) body.reason = v.reason;
        return api("POST", "/v3/address-book", body);
      }, onDone: reload }), "primary") : null;
    const entryCols = [["Name", (e) => h("bdi", {}, e.name)], ["Lane", (e) => e.lane], ["Network", (e) => e.network || "—"], ["Address", (e) => val(e.address)], ["Memo", (e) => (e.memo ? val(e.memo) : "—")], ["Tags", (e) => e.tags.join(", ") || "—"]];
    put(main, h("h1", {}, "Address book"), propose ? h("div", { class: "actions" }, propose) : null,
      h("h2", {}, "Waiting for a second admin"),
      table(pending.items, [...entryCols, ["Proposed by", (e) => val(e.proposed_by)], ["Cool-down", (e) => secs(e.cool_down_seconds)],
        ["", (e) => (String(e.proposed_by).toLowerCase() === me.principal.toLowerCase() ? h("span", { class: "muted" }, "yours: another admin decides") : can("admin") ? h("span", {},
          actionButton(`Activate ${e.name}`, () => act({ title: "Activate entry", help: h("div", {}, h("p", {}, "You activate paying to exactly this address:"), dl([["Name", h("bdi", {}, e.name)], ["Address", val(e.address)], ["Memo", e.memo ? val(e.memo) : "none"], ["Lane / network", `${e.lane} ${e.network || "(any network)"}`],
            ...(e.replaces ? [["Replaces", (() => { const old = active.items.find((x) => x.id === e.replaces); return old ? h("span", {}, h("bdi", {}, old.name), " at ", val(old.address), old.address.toLowerCase() === e.address.toLowerCase() ? " (same address)" : h("strong", { class: "error" }, " — the address changes")) : val(e.replaces); })()]] : [])])),
            fields: [reasonField], submit: (x) => api("POST", `/v3/address-book/${seg(e.id)}/approve`, { reason: x.reason }), onDone: reload }), "primary"), " ",
          actionButton(`Reject ${e.name}`, () => act({ title: "Reject entry", danger: true, fields: [reasonField], submit: (x) => api("POST", `/v3/address-book/${seg(e.id)}/reject`, { reason: x.reason }), onDone: reload }), "danger")) : null)]],
      "entries waiting for a second admin"),
      h("h2", {}, "Active"),
      table(active.items, [...entryCols, ["Usable from (UTC)", (e) => `${when(e.usable_at)}${e.usable ? "" : " (cooling down)"}`], ["Activated by", (e) => val(e.decided_by)],
        ["", (e) => (can("admin") ? actionButton(`Remove ${e.name}`, () => act({ title: "Remove entry", danger: true, help: "It can no longer be paid as a book entry.", fields: [reasonField],
          submit: (x) => api("POST", `/v3/address-book/${seg(e.id)}/actions/remove`, { reason: x.reason }), onDone: reload }), "danger") : null)]], "active entries"));
    status(`address book: ${active.items.length} active, ${pending.items.length} waiting, ${clock()}`);
  };
  await load();
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
  status(""); // the previous screen's status is not this one's
  // Each screen writes into a view of its own: a screen still loading when the operator moves
  // on writes into a view no longer on the page, and its refresh ends with it.
  const main = h("div", { class: "view" });
  $("main").replaceChildren(main);
  const [path, query] = (location.hash.slice(1) || "/attention").split("?");
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
  const screen = { proposals: "templates" }[parts[0]] || parts[0] || "attention";
  for (const a of document.querySelectorAll("header nav a")) {
    if (a.getAttribute("href") === `#/${screen}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  // Screens only an admin uses are not offered to others (the API refuses them anyway).
  for (const a of document.querySelectorAll("header nav a[data-role]")) a.hidden = !can(a.dataset.role);
  refreshCounts();
  await refreshBook();
  try {
    // A route names a screen and its data, never a path: ids and keys are checked, then
    // encoded wherever they go into a request.
    const arg = (i, re) => {
      let v;
      try { v = decodeURIComponent(parts[i]); } catch { v = null; }
      if (v === null || !re.test(v)) throw Object.assign(new Error(`"${spelled(String(parts[i]))}" is not a valid ${re === NODE_KEY ? "node key" : re === TEMPLATE_KEY ? "template key" : parts[0] === "movements" ? "movement id" : "id"}`), { code: "NOT_A_ROUTE" });
      return v;
    };
    const TRANSFER = { test: (v) => UUID.test(v) };
    if (parts[0] === "movements" && parts.length > 4) throw Object.assign(new Error("no such screen"), { code: "NOT_A_ROUTE" });
    if (parts[0] === "movements" && parts[1] && parts[2] === "nodes" && parts[3]) await nodeScreen(main, arg(1, UUID), arg(3, NODE_KEY));
    else if (parts[0] === "movements" && parts[1] && parts.length === 2) await movementScreen(main, arg(1, UUID));
    else if (parts[0] === "movements" && parts[1]) throw Object.assign(new Error("no such screen"), { code: "NOT_A_ROUTE" });
    else if (parts[0] === "movements") await movementsScreen(main, query || "");
    else if (parts[0] === "attention") await attentionScreen(main);
    else if (parts[0] === "approvals") await approvalsScreen(main);
    else if (parts[0] === "transfers" && parts[1]) await transferScreen(main, arg(1, TRANSFER));
    else if (parts[0] === "transfers") await transfersScreen(main, query || "");
    else if (parts[0] === "templates" && parts[1]) await templateScreen(main, arg(1, TEMPLATE_KEY));
    else if (parts[0] === "templates") await templatesScreen(main);
    else if (parts[0] === "proposals" && parts[1]) await proposalScreen(main, arg(1, UUID));
    else if (parts[0] === "keys") await keysScreen(main);
    else if (parts[0] === "policies" && parts[1]) await policyScreen(main, arg(1, /^[1-9][0-9]{0,8}$/));
    else if (parts[0] === "policies") await policiesScreen(main);
    else if (parts[0] === "book") await bookScreen(main);
    else if (parts[0] === "audit") await auditScreen(main, query || "");
    else if (parts[0] === "callbacks") await callbacksScreen(main, query || "");
    else if (parts[0] === "workers") await workersScreen(main, query || "");
    else if (parts[0] === "health") await healthScreen(main);
    else if (parts[0] === "controls") await controlsScreen(main);
    else if (parts[0] === "balances") await balancesScreen(main, query || "");
    else await attentionScreen(main);
  } catch (e) {
    if (e.status === 401 || !main.isConnected) return;
    put(main, h("h1", {}, "Could not load this screen"), failure("This screen", e));
  }
}
window.addEventListener("hashchange", () => render());
(function countsLoop() {
  const next = () => setTimeout(countsLoop, 5000);
  if (me && !$("action").open) refreshCounts().finally(next);
  else next();
})();
window.addEventListener("DOMContentLoaded", () => {
  $("signout").addEventListener("click", () => signOut("Signed out."));
  // What a dialog showed (a new key's secret) goes with it.
  // (The close event comes after the task that closed it: a dialog opened since keeps its help.)
  $("action").addEventListener("close", () => { if (!$("action").open) $("action-help").replaceChildren(); });
  // The skip link moves the focus; it must not change the route.
  document.querySelector(".skip").addEventListener("click", (ev) => {
    ev.preventDefault();
    $("main").focus();
  });
  render();
});
