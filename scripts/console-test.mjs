// The web console in a real browser (Debian's Chromium, driven by playwright-core) against the real
// gateway (`toolgate serve`), with the official TypeScript MCP SDK as the client that asks:
//   - the approver token signs in (a wrong one is refused) and becomes an HttpOnly, SameSite=Strict cookie;
//   - an ask made by an MCP client appears in the page without a reload, with the diff of the file
//     write; approved in the page, the client's call finishes and the file is written;
//   - a reject with a reason reaches the client;
//   - an ask answered elsewhere (REST) leaves the open page;
//   - the calls page shows the finished calls, a call's record and its JSON link;
//   - a request without the cookie is refused; a cross-site form post is refused and answers nothing.
// Screenshots go to target/console/. Run by scripts/console.sh, which installs what it needs.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { once } from "node:events";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

const modules = process.env.CONSOLE_MODULES;
const bin = process.env.TOOLGATE_BIN;
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
const shots = process.env.SHOTS || "target/console";
const require = createRequire(path.join(modules, "package.json"));
const { chromium: browserType } = require("playwright-core");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

let passed = 0;
let failed = 0;
const checks = [];
function check(name, ok, detail = "") {
  if (ok) passed++;
  else failed++;
  checks.push(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : ": " + detail}`);
  console.log(checks[checks.length - 1]);
}

const TOKEN = "approver-token-for-the-browser-test";
const ws = fs.mkdtempSync(path.join(os.tmpdir(), "tg-console-"));
fs.writeFileSync(path.join(ws, "notes.md"), "old line\n");
const data = fs.mkdtempSync(path.join(os.tmpdir(), "tg-console-data-"));
fs.mkdirSync(shots, { recursive: true });

const gateway = spawn(bin, ["--workspace", ws, "--store", "memory", "serve", "--listen", "127.0.0.1:0"], {
  env: { ...process.env, TOOLGATE_SERVE_APPROVER_TOKEN: TOKEN, XDG_DATA_HOME: data, XDG_CONFIG_HOME: data, RUST_LOG: "" },
  stdio: ["ignore", "ignore", "pipe"],
});
const base = await new Promise((resolve, reject) => {
  const lines = readline.createInterface({ input: gateway.stderr });
  lines.on("line", (line) => {
    const m = line.match(/MCP at (http:\/\/[^/]+)\/mcp/);
    if (m) resolve(m[1]);
  });
  gateway.on("exit", (code) => reject(new Error(`toolgate serve exited with ${code}`)));
});
console.log(`gateway at ${base}`);

const mcp = new Client({ name: "console-test", version: "1" });
await mcp.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
const call = (args, name = "write_file") => mcp.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
const rest = (p, init = {}) =>
  fetch(`${base}${p}`, { ...init, headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json", ...(init.headers || {}) } });
const pending = async () => (await (await rest("/v1/approvals")).json()).approvals;

const browser = await browserType.launch({ executablePath: chromium, args: ["--no-sandbox"] });
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  await page.goto(`${base}/`);
  await page.waitForSelector("#login-form", { state: "visible" });
  await page.fill("#token", "not the token");
  await page.click("#login-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#login-error").textContent.length > 0);
  check("a wrong token is refused", (await page.textContent("#login-error")).includes("not the approver token"));
  await page.fill("#token", TOKEN);
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#tabs", { state: "visible" });
  const cookie = (await context.cookies()).find((c) => c.name === "toolgate_console");
  check("the token became an HttpOnly SameSite=Strict cookie", cookie && cookie.httpOnly && cookie.sameSite === "Strict", JSON.stringify(cookie));

  // 1. An MCP client's ask appears without a reload; approved in the page, the call finishes.
  const first = call({ path: "notes.md", content: "old line\nhello from the browser test\n" });
  const card = page.locator("li.card", { hasText: "write_file wants to run" });
  await card.waitFor({ timeout: 30000 });
  const shown = await card.textContent();
  check("the ask shows the diff of the write", shown.includes("+hello from the browser test") && shown.includes("notes.md"), shown);
  check("the ask says who asks and when it expires", shown.includes("client console-test") && shown.includes("expires in"), shown);
  await page.screenshot({ path: path.join(shots, "approvals.png"), fullPage: true });
  await card.locator("button[data-answer=approve_once]").click();
  const firstResult = await first;
  check("approved in the page, the client's call ran", !firstResult.isError, JSON.stringify(firstResult));
  check("the file was written", fs.readFileSync(path.join(ws, "notes.md"), "utf8").includes("hello from the browser test"));
  await card.waitFor({ state: "detached", timeout: 30000 });

  // 2. A reject with a reason reaches the client.
  const second = call({ path: "other.md", content: "no\n" });
  const card2 = page.locator("li.card", { hasText: "other.md" });
  await card2.waitFor({ timeout: 30000 });
  await card2.locator("input[aria-label=reason]").fill("not in this sprint");
  await card2.locator("button[data-answer=reject]").click();
  const secondResult = await second;
  const secondText = JSON.stringify(secondResult);
  check("a reject with its reason reaches the client", secondResult.isError && secondText.includes("not in this sprint"), secondText);
  check("nothing was written", !fs.existsSync(path.join(ws, "other.md")));

  // 3. An answer given elsewhere removes the ask from the open page.
  const third = call({ path: "third.md", content: "3\n" });
  const card3 = page.locator("li.card", { hasText: "third.md" });
  await card3.waitFor({ timeout: 30000 });
  const [ask] = await pending();
  await rest(`/v1/approvals/${ask.id}`, { method: "POST", body: JSON.stringify({ decision: "approve_once" }) });
  await card3.waitFor({ state: "detached", timeout: 30000 });
  check("an ask answered over REST left the page", true);
  check("and its call ran", !(await third).isError);

  // 4. The calls page: the finished calls, one call's record, its JSON.
  await page.click("#tabs button[data-tab=calls]");
  const row = page.locator("#journal tbody tr", { hasText: "write_file" }).first();
  await row.waitFor({ timeout: 30000 });
  await page.screenshot({ path: path.join(shots, "calls.png"), fullPage: true });
  const rows = await page.locator("#journal tbody tr").allTextContents();
  check("the journal shows the approved and the rejected call", rows.some((r) => r.includes("success")) && rows.some((r) => r.includes("rejected_by_user")), rows.join(" | "));
  await row.click();
  await page.waitForSelector("#call a", { state: "visible" });
  const href = await page.getAttribute("#call a", "href");
  const record = await page.evaluate(async (h) => (await fetch(h)).json(), href);
  check("a call's record is there as JSON", record.rows && record.rows.length === 1 && record.rows[0].tool === "write_file", JSON.stringify(record));

  // The tools page: the tools exposed with their annotations and category.
  await page.click("#tabs button[data-tab=tools]");
  await page.locator("#toollist tbody tr", { hasText: "exec_shell" }).waitFor({ timeout: 30000 });
  const tools = await page.locator("#toollist tbody tr").allTextContents();
  check("the tools page lists the tools with their annotations", tools.some((t) => t.includes("exec_shell") && t.includes("destructive")) && tools.some((t) => t.includes("job_status")), tools.join(" | "));

  // 5. A phone-sized screen.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
  await phone.addCookies([cookie]);
  const small = await phone.newPage();
  await small.goto(`${base}/`);
  await small.waitForSelector("#tabs", { state: "visible" });
  await small.screenshot({ path: path.join(shots, "phone.png"), fullPage: true });
  const overflow = await small.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check("the page fits a phone's width", overflow <= 1, `${overflow}px too wide`);
  await phone.close();

  // 6. Without the cookie, refused.
  const bare = await fetch(`${base}/console/api/approvals`);
  check("a request without the cookie is refused", bare.status === 401, String(bare.status));
  const bareAnswer = await fetch(`${base}/console/api/approvals/x`, {
    method: "POST", headers: { "Content-Type": "application/json", "X-Toolgate-Console": "1" }, body: "{}",
  });
  check("an answer without the cookie is refused", bareAnswer.status === 401, String(bareAnswer.status));

  // 7. A cross-site form post, from a page on another origin in the signed-in browser: refused,
  //    and the ask still waits.
  const fourth = call({ path: "fourth.md", content: "4\n" });
  await page.click("#tabs button[data-tab=approvals]");
  await page.locator("li.card", { hasText: "fourth.md" }).waitFor({ timeout: 30000 });
  const [ask4] = await pending();
  const evil = http.createServer((req, res) => {
    res.setHeader("Content-Type", "text/html");
    res.end(`<form id=f method=POST action="${base}/console/api/approvals/${ask4.id}">` +
      `<input name=decision value=approve_once></form><script>document.getElementById("f").submit()</script>`);
  });
  evil.listen(0, "127.0.0.1");
  await once(evil, "listening");
  const attacker = await context.newPage();
  const answered = attacker.waitForResponse((r) => r.url().includes("/console/api/approvals/"));
  await attacker.goto(`http://127.0.0.1:${evil.address().port}/`);
  const response = await answered;
  check("a cross-site form post is refused", response.status() === 403 || response.status() === 401, String(response.status()));
  const still = await pending();
  check("and the ask still waits", still.some((a) => a.id === ask4.id), JSON.stringify(still));
  evil.close();
  await rest(`/v1/approvals/${ask4.id}`, { method: "POST", body: JSON.stringify({ decision: "reject", reason: "test over" }) });
  check("the cross-site ask was not run", (await fourth).isError && !fs.existsSync(path.join(ws, "fourth.md")));
} catch (e) {
  check("the browser test ran to its end", false, e.stack || String(e));
} finally {
  await browser.close();
  await mcp.close().catch(() => {});
  gateway.kill("SIGTERM");
  fs.rmSync(ws, { recursive: true, force: true });
  fs.rmSync(data, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
