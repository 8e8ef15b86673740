// toolgate's console: approvals pushed over server-sent events, the journal, the tools.
// No framework, nothing fetched from elsewhere. Every state-changing request is JSON with the
// X-Toolgate-Console header (the gateway refuses any other, so a cross-site form cannot answer).
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
};

async function post(path, body) {
  const res = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Toolgate-Console": "1" },
    body: JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  return { ok: res.ok, status: res.status, data };
}

async function get(path) {
  const res = await fetch(path, { credentials: "same-origin" });
  if (res.status === 401) { showLogin(); throw new Error("signed out"); }
  return res.json();
}

function showLogin() {
  $("#login").hidden = false;
  $("#tabs").hidden = true;
  $("#live").hidden = true;
  for (const t of document.querySelectorAll(".tab")) t.hidden = true;
}

function showTab(name) {
  for (const b of document.querySelectorAll("#tabs button[data-tab]")) b.classList.toggle("active", b.dataset.tab === name);
  for (const t of document.querySelectorAll(".tab")) t.hidden = t.id !== name;
  if (name === "calls") searchCalls();
  if (name === "tools") loadTools();
}

// ---- approvals ----

function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}
const age = (iso) => span(Date.now() - Date.parse(iso));
const left = (iso) => span(Date.parse(iso) - Date.now());

function diffBlock(text) {
  const pre = el("pre", { class: "diff" });
  for (const line of text.split("\n")) {
    const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
    pre.append(el("span", cls ? { class: cls } : {}, line + "\n"));
  }
  return pre;
}

function askCard(ask) {
  const r = ask.request || {};
  const reason = el("input", { placeholder: "reason (for a reject)", "aria-label": "reason" });
  const answer = async (decision, extra = {}) => {
    const res = await post(`/console/api/approvals/${encodeURIComponent(ask.id)}`, { decision, ...extra });
    if (!res.ok) card.querySelector(".error").textContent = res.data.error || `refused (${res.status})`;
  };
  const buttons = [
    el("button", { class: "approve", "data-answer": "approve_once", onclick: () => answer("approve_once") }, "Approve once"),
    el("button", { "data-answer": "approve_session", onclick: () => answer("approve_session") }, "Calls like this, this session"),
    el("button", { "data-answer": "approve_tool", onclick: () => answer("approve_tool") }, `${r.tool} for this session`),
  ];
  if (r.suggested_rule) {
    buttons.push(el("button", { "data-answer": "approve_rule", onclick: () => answer("approve_rule", { rule: r.suggested_rule }) }, `Allow ${r.suggested_rule}`));
  }
  buttons.push(reason, el("button", { class: "reject", "data-answer": "reject", onclick: () => answer("reject", reason.value ? { reason: reason.value } : {}) }, "Reject"));
  const card = el("li", { class: "card", "data-id": ask.id },
    el("h3", {}, `${r.tool} wants to run`),
    el("p", { class: "meta" }, `session ${ask.session_id} · principal ${r.principal} · client ${r.client} · asked ${age(r.created_at)} ago · expires in ${left(r.expires_at)}`),
    el("p", {}, r.reason || ""),
    r.subject ? el("p", {}, el("span", { class: "subject" }, r.subject)) : "",
    ask.diff ? diffBlock(ask.diff) : el("pre", {}, JSON.stringify(r.arguments, null, 2)),
    el("div", { class: "answers" }, ...buttons),
    el("p", { class: "error", role: "alert" }),
  );
  return card;
}

function showApprovals(list) {
  const ul = $("#asks");
  // Keep a card being typed into; replace the rest.
  const keep = new Set(list.map((a) => a.id));
  for (const li of [...ul.children]) if (!keep.has(li.dataset.id)) li.remove();
  const have = new Set([...ul.children].map((li) => li.dataset.id));
  for (const ask of list) if (!have.has(ask.id)) ul.append(askCard(ask));
  $("#no-asks").hidden = list.length > 0;
  $("#count").textContent = list.length;
  document.title = list.length ? `(${list.length}) toolgate` : "toolgate";
}

// ---- calls ----

let callFilter = {};

function matches(row) {
  const f = callFilter;
  return (!f.session || row.session_id === f.session) && (!f.tool || row.tool === f.tool)
    && (!f.outcome || row.outcome === f.outcome || row.error_type === f.outcome)
    && (!f.principal || row.session_id.startsWith(f.principal + "/"));
}

function callRow(row) {
  const tr = el("tr", { "data-call": row.call_id, "data-session": row.session_id, onclick: () => showCall(row) },
    el("td", {}, (row.started_at || "").replace("T", " ").replace("Z", "")),
    el("td", {}, row.session_id),
    el("td", {}, row.tool),
    el("td", { class: row.outcome }, row.error_type || row.outcome),
    el("td", {}, row.source || "-"),
    el("td", {}, row.running_ms),
  );
  return tr;
}

function showCall(row) {
  const box = $("#call");
  const link = `/console/api/calls?session=${encodeURIComponent(row.session_id)}&call=${encodeURIComponent(row.call_id)}`;
  box.replaceChildren(
    el("h3", {}, `${row.tool} · ${row.call_id}`),
    el("p", { class: "meta" }, `${row.outcome}${row.error_type ? " (" + row.error_type + ")" : ""} · ${row.decision || "-"} by ${row.source || "-"} · ${row.attempts} attempt(s) · waited ${row.waiting_ms} ms · ran ${row.running_ms} ms`),
    el("a", { href: link }, "as JSON"),
    el("pre", {}, JSON.stringify(row, null, 2)),
  );
  box.hidden = false;
}

async function searchCalls(event) {
  if (event) event.preventDefault();
  const form = new FormData($("#filter"));
  const q = new URLSearchParams();
  callFilter = {};
  for (const k of ["session", "tool", "outcome", "principal"]) {
    const v = (form.get(k) || "").trim();
    if (v) { q.set(k, v); callFilter[k] = v; }
  }
  for (const [k, name] of [["since", "since_ms"], ["until", "until_ms"]]) {
    const v = form.get(k);
    if (v) q.set(name, String(Date.parse(v)));
  }
  const data = await get(`/console/api/calls?${q}`);
  $("#journal tbody").replaceChildren(...(data.rows || []).map(callRow));
}

function addCalls(rows) {
  const body = $("#journal tbody");
  for (const row of rows) {
    const old = body.querySelector(`tr[data-call="${CSS.escape(row.call_id)}"][data-session="${CSS.escape(row.session_id)}"]`);
    if (old) old.replaceWith(callRow(row));
    else if (matches(row)) body.prepend(callRow(row));
  }
}

// ---- tools ----

async function loadTools() {
  const data = await get("/console/api/tools");
  const flags = (a) => Object.entries(a || {}).filter(([, v]) => v).map(([k]) => k).join(", ") || "-";
  $("#toollist tbody").replaceChildren(...data.tools.map((t) => el("tr", {},
    el("td", {}, t.name), el("td", {}, flags(t.annotations)), el("td", {}, t.category), el("td", {}, t.description))));
  const servers = Object.entries(data.servers || {});
  const health = data.health || {};
  const detail = (s) => s.state === "ready" ? `${s.tools} tools${(s.unserved || []).length ? `, ${s.unserved.length} not served` : ""}`
    : s.state === "failed" ? s.reason : "";
  $("#servers tbody").replaceChildren(...(servers.length ? servers.map(([name, s]) => el("tr", { "data-server": name },
    el("td", {}, name), el("td", {}, s.state), el("td", {}, detail(s)),
    el("td", {}, (health[name] || {}).restarts || 0),
    el("td", {}, (health[name] || {}).last_error ? `${health[name].last_error} (${health[name].last_error_at})` : "-")))
    : [el("tr", {}, el("td", { colspan: "5", class: "empty" }, "no upstream servers"))]));
}

// ---- live ----

let source = null;

function connect() {
  if (source) source.close();
  source = new EventSource("/console/api/events", { withCredentials: true });
  source.addEventListener("approvals", (e) => showApprovals(JSON.parse(e.data)));
  source.addEventListener("calls", (e) => addCalls(JSON.parse(e.data)));
  source.onopen = () => { $("#live").textContent = "live"; $("#live").classList.remove("off"); };
  source.onerror = async () => {
    $("#live").textContent = "reconnecting…";
    $("#live").classList.add("off");
    // A 401 means the login ended: the stream is not retried then.
    const res = await fetch("/console/api/approvals", { credentials: "same-origin" });
    if (res.status === 401) { source.close(); showLogin(); }
  };
}

async function start() {
  const res = await fetch("/console/api/approvals", { credentials: "same-origin" });
  if (res.status === 401) { showLogin(); return; }
  showApprovals((await res.json()).approvals || []);
  $("#login").hidden = true;
  $("#tabs").hidden = false;
  $("#live").hidden = false;
  showTab("approvals");
  connect();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const res = await post("/console/login", { token: $("#token").value });
    if (!res.ok) { $("#login-error").textContent = res.data.error || `refused (${res.status})`; return; }
    $("#token").value = "";
    $("#login-error").textContent = "";
    start();
  });
  for (const b of document.querySelectorAll("#tabs button[data-tab]")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("#logout").addEventListener("click", async () => { await post("/console/logout", {}); if (source) source.close(); showLogin(); });
  $("#filter").addEventListener("submit", searchCalls);
  start();
});
