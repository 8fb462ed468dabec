// @ts-check
/**
 * The one request function of both clients (`AMPClient`, `AmpUpClient`): URL, identity
 * headers, JSON in and out, and the error mapping of `errors.js`. A client subclasses
 * `Transport`, says which prefix its routes live under and adds headers of its own.
 */

import { AMPConnectionError, AMPError, ValidationError, errorFor } from "./errors.js";

export const DEFAULT_SERVER_URL = "http://127.0.0.1:8765";
export const API_PREFIX = "/amp/v1";

/**
 * @typedef {Object} ClientOptions
 * @property {number} [timeoutMs]  Per-request timeout (default 30000).
 * @property {Record<string, string>} [headers]  Extra headers sent with every request.
 *
 * @typedef {Record<string, string | number | boolean | undefined | null>} QueryParams
 *
 * @typedef {Object} Conditions  A conditional request (api.md, "Conditional writes").
 * @property {string} [ifMatch]      A write: only over this version (an answer's `etag`).
 * @property {string} [ifNoneMatch]  A read: `NotModifiedError` while this is the current
 *   version; a write (`setSchema`): `"*"`, only where none exists yet.
 */

/**
 * Refuse an option the method does not take (a typo such as `ifmatch` would otherwise send
 * a different request than meant, e.g. an unconditional write).
 *
 * @param {object | undefined} options
 * @param {readonly string[]} names  The options the method takes (camelCase).
 */
export function refuseUnknown(options, names) {
  for (const name of Object.keys(options ?? {})) {
    if (!names.includes(name)) {
      throw new ValidationError(`unknown option ${name} (this method takes ${names.join(", ")})`);
    }
  }
}

/**
 * The `If-Match` / `If-None-Match` headers of `conditions` (none when both are absent).
 *
 * @param {Conditions} [conditions]
 * @returns {Record<string, string>}
 */
export function preconditions({ ifMatch, ifNoneMatch } = {}) {
  /** @type {Record<string, string>} */
  const headers = {};
  if (ifMatch !== undefined && ifMatch !== null) headers["If-Match"] = ifMatch;
  if (ifNoneMatch !== undefined && ifNoneMatch !== null) headers["If-None-Match"] = ifNoneMatch;
  return headers;
}

/**
 * `body` with the answer's `ETag` as a non-enumerable `etag` property (null when the server
 * sent none): read `answer.etag`, send it back as `ifMatch`. Not enumerable, so the body
 * compares, spreads and serializes as the server sent it.
 *
 * @param {any} body
 * @param {Response} response
 * @returns {any}
 */
function versioned(body, response) {
  if (body !== null && typeof body === "object" && !Array.isArray(body)) {
    Object.defineProperty(body, "etag", {
      value: response.headers.get("etag"), enumerable: false, writable: true, configurable: true,
    });
  }
  return body;
}

/**
 * A bare host, a trailing slash or an explicit `/amp/v1` all mean the same server; the
 * answer ends in `prefix` (`/amp/v1` for AMP, nothing for the AmpUp routes).
 *
 * @param {string} url
 * @param {string} prefix
 * @returns {string}
 */
export function normalizeUrl(url, prefix) {
  let base = url.replace(/\/+$/, "");
  if (base.endsWith(API_PREFIX)) base = base.slice(0, -API_PREFIX.length);
  return base + prefix;
}

/**
 * `value` as one encoded path segment, so an id can never reach another route.
 *
 * @param {unknown} value
 * @param {string} name  The argument's name, for the error.
 * @returns {string}
 */
export function pathSegment(value, name) {
  // "." and ".." survive encoding and URL resolution walks them: /memories/.. is /amp/v1.
  if (typeof value !== "string" || value === "" || value === "." || value === "..") {
    throw new ValidationError(
      `${name} must be a non-empty string and not a dot segment, got ${JSON.stringify(value)}`);
  }
  return encodeURIComponent(value);
}

export class Transport {
  /**
   * @param {string} serverUrl
   * @param {string} prefix      Path every route of this client starts with.
   * @param {string} [agentId]   Sent as `X-AMP-Agent-ID`.
   * @param {string} [apiKey]    Sent as `X-AMP-API-Key`.
   * @param {ClientOptions} [options]
   */
  constructor(serverUrl, prefix, agentId, apiKey, options = {}) {
    this.serverUrl = normalizeUrl(serverUrl || DEFAULT_SERVER_URL, prefix);
    this.agentId = agentId;
    this.apiKey = apiKey;
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.extraHeaders = { ...(options.headers ?? {}) };
  }

  /**
   * The headers naming this client, built in one place so no call can miss them.
   * @returns {Record<string, string>}
   */
  identityHeaders() {
    /** @type {Record<string, string>} */
    const headers = { ...this.extraHeaders };
    if (this.agentId) headers["X-AMP-Agent-ID"] = this.agentId;
    if (this.apiKey) headers["X-AMP-API-Key"] = this.apiKey;
    return headers;
  }

  /**
   * Send one request; a 2xx returns the parsed JSON body (null for 204; an object with its
   * `etag`), anything else throws the matching AMPError subclass.
   *
   * @param {string} method
   * @param {string} path
   * @param {{ body?: unknown, query?: QueryParams, conditions?: Conditions }} [init]
   * @returns {Promise<any>}
   */
  async _request(method, path, { body, query, conditions } = {}) {
    let url;
    try {
      url = new URL(this.serverUrl + path);
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new AMPConnectionError(
        `invalid server URL ${JSON.stringify(this.serverUrl)}: ${reason}`, { cause });
    }
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    const headers = { ...this.identityHeaders(), ...preconditions(conditions) };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const request = { method, url: url.toString() };
    let response;
    try {
      response = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (cause) {
      // fetch says only "fetch failed"; what failed (ECONNREFUSED, a DNS name) is its cause.
      const inner = cause instanceof Error && cause.cause instanceof Error
        ? `: ${cause.cause.message}` : "";
      const reason = cause instanceof Error ? cause.message + inner : String(cause);
      throw new AMPConnectionError(`HTTP request failed: ${reason}`, { request, cause });
    }
    if (!response.ok) throw await errorFor(response, request);
    if (response.status === 204) return null;
    const text = await response.text();
    try {
      return versioned(JSON.parse(text), response);
    } catch (cause) {
      throw new AMPError(`unreadable response: ${text.slice(0, 200)}`, {
        statusCode: response.status, request, cause,
      });
    }
  }
}
