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
 */

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
   * Send one request; a 2xx returns the parsed JSON body (null for 204), anything else
   * throws the matching AMPError subclass.
   *
   * @param {string} method
   * @param {string} path
   * @param {{ body?: unknown, query?: QueryParams }} [init]
   * @returns {Promise<any>}
   */
  async _request(method, path, { body, query } = {}) {
    const url = new URL(this.serverUrl + path);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    const headers = this.identityHeaders();
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
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new AMPConnectionError(`HTTP request failed: ${reason}`, { request, cause });
    }
    if (!response.ok) throw await errorFor(response, request);
    if (response.status === 204) return null;
    const text = await response.text();
    try {
      return JSON.parse(text);
    } catch (cause) {
      throw new AMPError(`unreadable response: ${text.slice(0, 200)}`, {
        statusCode: response.status, request, cause,
      });
    }
  }
}
