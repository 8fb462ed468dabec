// @ts-check
/**
 * AMP client for Node 20+: the same operations as the Python `ampup_memory.client`, with
 * the reference Node client's (`@glatinone/amp-client` 0.1.0) names and arguments, so code
 * moves over by changing the import. No dependencies: Node's own `fetch`.
 */

import { ValidationError } from "./errors.js";
import {
  API_PREFIX, DEFAULT_SERVER_URL, Transport, pathSegment, refuseUnknown,
} from "./transport.js";

export { DEFAULT_SERVER_URL };
const MAX_PAGE_SIZE = 100;

/**
 * @typedef {"episodic" | "semantic" | "procedural"} MemoryType
 * @typedef {"active" | "stale" | "archived" | "deleted"} Status
 *
 * @typedef {Object} MemoryCell  A cell exactly as the server sends it (snake_case).
 * @property {string} id
 * @property {string} amp_version
 * @property {MemoryType} type
 * @property {{ text: string, metadata: Record<string, unknown> }} content
 * @property {{ owner_id: string, owner_type: string, created_by: string, session_id: string | null }} identity
 * @property {{ importance: number, confidence: number, decay_rate: number, access_count: number }} scoring
 * @property {{ created_at: string, last_accessed_at: string, last_updated_at: string, expires_at: string | null, status: Status }} lifecycle
 * @property {{ readable_by: string[], writable_by: string[], public: boolean }} access_policy
 * @property {{ source_type: string | null, source_ref: string | null, extraction_method: string | null }} provenance
 *
 * @typedef {Object} Page
 * @property {MemoryCell[]} results
 * @property {number} returned
 * @property {boolean} has_more
 * @property {number} offset
 * @property {number} limit
 *
 * @typedef {Page & { query: string }} SearchPage
 *
 * @typedef {import("./transport.js").ClientOptions} ClientOptions
 *
 * @typedef {Object} RememberOptions
 * @property {MemoryType} [type]        Default "semantic".
 * @property {number} [importance]      0..1, default 0.5.
 * @property {string[] | string} [readableBy]  Agent id patterns (`*` wildcard) that may read.
 * @property {string} [ownerType]       "user" (default), "agent" or "organization".
 * @property {Record<string, unknown>} [metadata]
 * @property {string[] | string} [writableBy]
 * @property {boolean} [public]
 * @property {number} [confidence]
 * @property {number} [decayRate]
 * @property {string} [sessionId]
 * @property {{ source_type?: string, source_ref?: string, extraction_method?: string }} [provenance]
 * @property {Date | string} [expiresAt]
 *
 * @typedef {Object} RecallOptions
 * @property {number} [limit]          Default 5.
 * @property {boolean} [includeStale]  Default false.
 * @property {number} [offset]         Default 0.
 *
 * @typedef {Object} ListOptions
 * @property {MemoryType} [type]
 * @property {Status} [status]   Default "active".
 * @property {number} [limit]    Default 20.
 * @property {number} [offset]   Default 0.
 *
 * @typedef {Object} SearchOptions
 * @property {string} [ownerId]
 * @property {MemoryType | MemoryType[]} [types]  One type or a list (any type when left out).
 * @property {Status | Status[]} [status]  Default ["active"].
 * @property {boolean} [includeStale]      Adds "stale".
 * @property {number} [limit]              Default 10.
 * @property {number} [offset]             Default 0.
 */

/** @param {string} memoryId */
function cellPath(memoryId) {
  return `/memories/${pathSegment(memoryId, "memoryId")}`;
}

/**
 * A read's conditions (`ifNoneMatch` only).
 * @param {import("./transport.js").Conditions | undefined} conditions
 */
function read(conditions) {
  refuseUnknown(conditions, ["ifNoneMatch"]);
  return conditions;
}

/**
 * A cell write's conditions (`ifMatch` only).
 * @param {import("./transport.js").Conditions | undefined} conditions
 */
function write(conditions) {
  refuseUnknown(conditions, ["ifMatch"]);
  return conditions;
}

// The options each method takes: any other is a ValidationError, not dropped (a
// snake_case `readable_by` would otherwise store the cell private, `include_stale` search
// without stale cells).
const REMEMBER_OPTIONS = ["type", "importance", "readableBy", "ownerType", "metadata",
  "writableBy", "public", "confidence", "decayRate", "sessionId", "provenance", "expiresAt"];
const RECALL_OPTIONS = ["limit", "includeStale", "offset"];
const LIST_OPTIONS = ["ownerId", "type", "status", "limit", "offset"];
const SEARCH_OPTIONS = ["ownerId", "types", "status", "includeStale", "limit", "offset"];

/**
 * A listing's filter: one value (a list would reach the server as one comma-joined text,
 * a silently different listing; `search` takes several types and statuses).
 *
 * @param {string} name  The wire name.
 * @param {unknown} value
 */
function oneValue(name, value) {
  if (value !== undefined && value !== null && typeof value !== "string") {
    throw new ValidationError(`a listing takes one ${name}, got ${JSON.stringify(value)}`);
  }
  return value ?? undefined;
}

/**
 * @param {Page} page
 * @returns {number | null}  Where the next page starts, or null after the last one.
 */
function nextOffset(page) {
  return page.has_more && page.returned > 0 ? page.offset + page.returned : null;
}

export class AMPClient extends Transport {
  /**
   * @param {string} [serverUrl]  Base URL; `/amp/v1` is appended when missing.
   * @param {string} [agentId]    Sent as `X-AMP-Agent-ID`.
   * @param {string} [apiKey]     Sent as `X-AMP-API-Key` (needed when the server requires keys).
   * @param {ClientOptions} [options]
   */
  constructor(serverUrl = DEFAULT_SERVER_URL, agentId, apiKey, options = {}) {
    super(serverUrl, API_PREFIX, agentId, apiKey, options);
  }

  // ---- the reference client's methods -------------------------------------------------

  /**
   * Store a memory; resolves to the created cell.
   *
   * @param {string | { text: string, metadata?: Record<string, unknown> }} content
   * @param {string} ownerId
   * @param {RememberOptions} [options]
   * @returns {Promise<MemoryCell>}
   */
  async remember(content, ownerId, options = {}) {
    refuseUnknown(options, REMEMBER_OPTIONS);
    const { type = "semantic", importance = 0.5, ownerType = "user" } = options;
    const contentBody =
      typeof content === "string"
        ? { text: content, metadata: { ...(options.metadata ?? {}) } }
        : { ...content, ...(options.metadata ? { metadata: options.metadata } : {}) };
    /** @type {Record<string, any>} */
    const identity = { owner_id: ownerId, owner_type: ownerType };
    if (options.sessionId !== undefined) identity.session_id = options.sessionId;
    /** @type {Record<string, any>} */
    const scoring = { importance };
    if (options.confidence !== undefined) scoring.confidence = options.confidence;
    if (options.decayRate !== undefined) scoring.decay_rate = options.decayRate;
    /** @type {Record<string, any>} */
    const body = { type, content: contentBody, identity, scoring };
    /** @type {Record<string, any>} */
    const policy = {};
    // One pattern or a list, as in the Python client (`readableBy: "agent_billing_*"`).
    const patterns = (/** @type {unknown} */ value) => typeof value === "string" ? [value] : value;
    if (options.readableBy !== undefined) policy.readable_by = patterns(options.readableBy);
    if (options.writableBy !== undefined) policy.writable_by = patterns(options.writableBy);
    if (options.public !== undefined) policy.public = options.public;
    if (Object.keys(policy).length) body.access_policy = policy;
    if (options.provenance !== undefined) body.provenance = options.provenance;
    if (options.expiresAt !== undefined) {
      const when = options.expiresAt;
      body.lifecycle = { expires_at: when instanceof Date ? when.toISOString() : when };
    }
    return this._request("POST", "/memories", { body });
  }

  /**
   * Search one owner's active (and, if asked, stale) cells; resolves to the cells.
   *
   * @param {string} query
   * @param {string} ownerId
   * @param {RecallOptions} [options]
   * @returns {Promise<MemoryCell[]>}
   */
  async recall(query, ownerId, options = {}) {
    refuseUnknown(options, RECALL_OPTIONS);
    const { limit = 5, includeStale = false, offset = 0 } = options;
    const page = await this.search(query, { ownerId, includeStale, limit, offset });
    return page.results ?? [];
  }

  /**
   * Read one cell (a real read: the server counts the access), with its `etag`.
   * `ifNoneMatch: etag`: `NotModifiedError` (304) while the cell is still that version.
   *
   * @param {string} memoryId
   * @param {{ ifNoneMatch?: string }} [conditions]
   * @returns {Promise<MemoryCell>}
   */
  async getMemory(memoryId, conditions) {
    return this._request("GET", cellPath(memoryId), { conditions: read(conditions) });
  }

  /**
   * One page of readable cells, newest first; resolves to the cells.
   *
   * @param {string | undefined} ownerId
   * @param {ListOptions} [options]
   * @returns {Promise<MemoryCell[]>}
   */
  async listMemories(ownerId, options = {}) {
    refuseUnknown(options, LIST_OPTIONS.filter((name) => name !== "ownerId"));
    const page = await this.listPage({ ...options, ownerId });
    return page.results ?? [];
  }

  /**
   * Archive, then delete (the protocol deletes only archived cells). True on 204.
   * `ifMatch`: only if the cell is still that version, else `PreconditionFailedError`:
   * the archive is sent with it, and the delete with the version the archive wrote, so a
   * write landing between the two is not deleted over (it is a `PreconditionFailedError`
   * too, with the cell left archived).
   *
   * @param {string} memoryId
   * @param {{ ifMatch?: string }} [conditions]
   * @returns {Promise<boolean>}
   */
  async forget(memoryId, conditions) {
    const archived = await this.archive(memoryId, conditions);
    const version = conditions?.ifMatch !== undefined ? archived?.etag : undefined;
    await this._request("DELETE", cellPath(memoryId),
      version ? { conditions: { ifMatch: version } } : {});
    return true;
  }

  /**
   * True when the server answers `ok`; false, never a throw, otherwise.
   * @returns {Promise<boolean>}
   */
  async health() {
    try {
      const body = await this._request("GET", "/health");
      return body?.status === "ok";
    } catch {
      return false;
    }
  }

  // ---- beyond the reference -----------------------------------------------------------

  /**
   * PATCH a cell: sub-objects deep-merge server-side, e.g. `{ scoring: { importance: 0.9 } }`.
   * `ifMatch` (a cell's `etag`): only over that version, else `PreconditionFailedError`
   * and nothing changes; the answer has the new `etag`.
   *
   * @param {string} memoryId
   * @param {Record<string, unknown>} fields  Wire (snake_case) fields.
   * @param {{ ifMatch?: string }} [conditions]
   * @returns {Promise<MemoryCell>}
   */
  async update(memoryId, fields, conditions) {
    return this._request("PATCH", cellPath(memoryId),
      { body: fields ?? {}, conditions: write(conditions) });
  }

  /**
   * PATCH the status to archived (`ifMatch` as for `update`).
   *
   * @param {string} memoryId
   * @param {{ ifMatch?: string }} [conditions]
   * @returns {Promise<MemoryCell>}
   */
  async archive(memoryId, conditions) {
    return this.update(memoryId, { lifecycle: { status: "archived" } }, conditions);
  }

  /**
   * Search with every filter; resolves to the whole page (`results`, `has_more`, ...).
   *
   * @param {string} query
   * @param {SearchOptions} [options]
   * @returns {Promise<SearchPage>}
   */
  async search(query, options = {}) {
    refuseUnknown(options, SEARCH_OPTIONS);
    const { ownerId, types, status, includeStale = false, limit = 10, offset = 0 } = options;
    /** @type {Record<string, unknown>} */
    const body = { query, include_stale: includeStale, limit, offset };
    if (ownerId !== undefined) body.owner_id = ownerId;
    if (types !== undefined) body.types = typeof types === "string" ? [types] : types;
    if (status !== undefined) body.status = Array.isArray(status) ? status : [status];
    return this._request("POST", "/memories/search", { body });
  }

  /**
   * Like `listMemories`, but the whole page including `has_more`.
   *
   * @param {ListOptions & { ownerId?: string }} [options]
   * @returns {Promise<Page>}
   */
  async listPage(options = {}) {
    refuseUnknown(options, LIST_OPTIONS);
    const { ownerId, type, status, limit = 20, offset = 0 } = options;
    return this._request("GET", "/memories", {
      query: { owner_id: oneValue("owner_id", ownerId), type: oneValue("type", type),
        status: oneValue("status", status), limit, offset },
    });
  }

  /**
   * Every readable cell matching the filters, fetched page by page.
   *
   * @param {{ ownerId?: string, type?: MemoryType, status?: Status, pageSize?: number }} [options]
   * @returns {AsyncGenerator<MemoryCell, void, undefined>}
   */
  async *iterMemories(options = {}) {
    refuseUnknown(options, ["ownerId", "type", "status", "pageSize"]);
    const { pageSize = MAX_PAGE_SIZE, ...filters } = options;
    /** @type {number | null} */
    let offset = 0;
    while (offset !== null) {
      const page = await this.listPage({ ...filters, limit: pageSize, offset });
      yield* page.results;
      offset = nextOffset(page);
    }
  }

  /**
   * Every search hit, best first, fetched page by page.
   *
   * @param {string} query
   * @param {Omit<SearchOptions, "limit" | "offset"> & { pageSize?: number }} [options]
   * @returns {AsyncGenerator<MemoryCell, void, undefined>}
   */
  async *iterSearch(query, options = {}) {
    refuseUnknown(options, ["ownerId", "types", "status", "includeStale", "pageSize"]);
    const { pageSize = MAX_PAGE_SIZE, ...filters } = options;
    /** @type {number | null} */
    let offset = 0;
    while (offset !== null) {
      const page = await this.search(query, { ...filters, limit: pageSize, offset });
      yield* page.results;
      offset = nextOffset(page);
    }
  }

  /**
   * The server's `/spec`: version and advertised capabilities.
   * @returns {Promise<Record<string, any>>}
   */
  async spec() {
    return this._request("GET", "/spec");
  }
}
