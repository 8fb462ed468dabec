// Test support: start a REAL `ampup-memory serve` process (never a mock) and make API keys
// with the real CLI. PYTHON names the interpreter (default python3); it must import
// ampup_memory (installed, or via PYTHONPATH, which the child inherits).
import { spawn, execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const PYTHON = process.env.PYTHON || "python3";

/** @returns {Promise<number>} */
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = /** @type {import("node:net").AddressInfo} */ (probe.address());
      probe.close(() => resolve(port));
    });
  });
}

export class ServerProcess {
  /** @param {Record<string, string>} [env] extra environment (e.g. AMP_REQUIRE_KEYS) */
  constructor(env = {}) {
    this.home = mkdtempSync(join(tmpdir(), "ampup-node-test-"));
    this.env = { ...process.env, AMPUP_MEMORY_HOME: this.home, ...env };
    this.output = "";
    /** @type {import("node:child_process").ChildProcess | null} */
    this.proc = null;
    this.url = "";
  }

  async start(timeoutMs = 60000) {
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    this.proc = spawn(PYTHON, ["-m", "ampup_memory.cli", "serve", "--port", String(port)], {
      env: this.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.proc.stdout?.on("data", (d) => (this.output += d));
    this.proc.stderr?.on("data", (d) => (this.output += d));
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (this.proc.exitCode !== null) throw new Error(`server exited:\n${this.output}`);
      try {
        const r = await fetch(`${this.url}/amp/v1/health`);
        if (r.status === 200) return this;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    await this.stop();
    throw new Error(`server did not start:\n${this.output}`);
  }

  /**
   * `ampup-memory keys create --agent ID [--user USER]`: the key is the last line of its
   * output.
   */
  async createKey(agentId, user) {
    const run = promisify(execFile);
    const args = ["-m", "ampup_memory.cli", "keys", "create", "--agent", agentId];
    if (user) args.push("--user", user);
    const { stdout } = await run(PYTHON, args, { env: this.env });
    return stdout.trim().split("\n").at(-1);
  }

  async stop() {
    const proc = this.proc;
    if (proc && proc.exitCode === null) {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 15000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.home, { recursive: true, force: true });
  }
}
