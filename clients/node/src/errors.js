// @ts-check
/**
 * Errors thrown by the clients (AMP and AmpUp): one class per HTTP status they use.
 *
 *     AMPError                    statusCode  code (the server's error.code)
 *     ├── AMPConnectionError      null        (no HTTP answer: refused, DNS, timeout)
 *     ├── NotModifiedError        304         (none: a read's ifNoneMatch still holds; .etag)
 *     ├── AuthenticationError     401         MISSING_AGENT_ID / MISSING_USER / UNAUTHENTICATED
 *     ├── AccessDeniedError       403         ACCESS_DENIED / ADMIN_DISABLED
 *     ├── NotFoundError           404         NOT_FOUND (AmpUp: also an id you may not read)
 *     ├── ConflictError           409         INVALID_TRANSITION / RETENTION_WINDOW / CONFLICT
 *     ├── GoneError               410         PIN_EXPIRED / PIN_RELEASED / SNAPSHOT_RELEASED
 *     ├── PreconditionFailedError 412         PRECONDITION_FAILED (ifMatch / ifNoneMatch)
 *     ├── PayloadTooLargeError    413         CELL_TOO_LARGE
 *     ├── ValidationError         422         VALIDATION_ERROR (details.errors); also an
 *     │                                       argument refused before sending (statusCode null)
 *     ├── RateLimitedError        429         RATE_LIMITED (.retryAfter seconds)
 *     └── ServerError             5xx         INTERNAL_ERROR / UNAVAILABLE
 *
 * `message` is "<code>: <message>" and `statusCode` / `details` are set as in the reference
 * client's single `AMPError`, so code that catches `AMPError` keeps working.
 */

/**
 * @typedef {Object} ErrorInit
 * @property {number | null} [statusCode]  HTTP status, null when there was no answer.
 * @property {string | null} [code]        The server's `error.code`.
 * @property {Record<string, any>} [details] The server's `error.details`.
 * @property {{ method: string, url: string } | null} [request] The request that failed.
 * @property {Record<string, string>} [headers] Response headers (lower-case names).
 * @property {unknown} [cause]
 */

export class AMPError extends Error {
  /**
   * @param {string} message  The server's `error.message` (or a transport message).
   * @param {ErrorInit} [init]
   */
  constructor(message, init = {}) {
    const { statusCode = null, code = null, details = {}, request = null, headers = {} } = init;
    super(code ? `${code}: ${message}` : message, init.cause ? { cause: init.cause } : undefined);
    this.name = new.target.name;
    /** The server's message without the code prefix. */
    this.serverMessage = message;
    /** @type {number | null} */
    this.statusCode = statusCode;
    /** @type {string | null} */
    this.code = code;
    /** @type {Record<string, any>} */
    this.details = details;
    /** @type {{ method: string, url: string } | null} */
    this.request = request;
    /** @type {Record<string, string>} */
    this.headers = headers;
  }

  /** Alias of `statusCode`. @returns {number | null} */
  get status() {
    return this.statusCode;
  }

  /**
   * Seconds the server asked to wait before trying again, from `Retry-After` or
   * `details.retry_after_seconds`: a 429's, and a 503's while storage is down (as the
   * Python client's `retry_after`). @returns {number | null}
   */
  get retryAfter() {
    for (const value of [this.headers["retry-after"], this.details.retry_after_seconds]) {
      const n = Number(value);
      if (value !== undefined && value !== null && Number.isFinite(n)) return n;
    }
    return null;
  }
}

export class AMPConnectionError extends AMPError {}
/** 304: a read sent `ifNoneMatch` with the current version's `etag`; no body. */
export class NotModifiedError extends AMPError {
  /** The current version (the answer's `ETag`). @returns {string | null} */
  get etag() {
    return this.headers.etag ?? null;
  }
}
export class AuthenticationError extends AMPError {}
export class AccessDeniedError extends AMPError {}
export class NotFoundError extends AMPError {}
export class ConflictError extends AMPError {}
/** 410 (AmpUp): a read through a pin or snapshot that no longer holds anything. */
export class GoneError extends AMPError {}
/**
 * 412: a write's `ifMatch` names a version that is no longer current (another writer got
 * there first), or its `ifNoneMatch` one that is; nothing changed. Read again, merge, retry.
 */
export class PreconditionFailedError extends AMPError {}
export class PayloadTooLargeError extends AMPError {}

export class ValidationError extends AMPError {
  /** Each failed field: `{ loc, msg, type }`. @returns {Array<{loc: Array<string|number>, msg: string, type: string}>} */
  get errors() {
    return Array.isArray(this.details.errors) ? this.details.errors : [];
  }
}

export class RateLimitedError extends AMPError {}

export class ServerError extends AMPError {}

/** @type {Record<number, typeof AMPError>} */
const BY_STATUS = {
  304: NotModifiedError,
  401: AuthenticationError,
  403: AccessDeniedError,
  404: NotFoundError,
  409: ConflictError,
  410: GoneError,
  412: PreconditionFailedError,
  413: PayloadTooLargeError,
  422: ValidationError,
  429: RateLimitedError,
};

/**
 * The error for a non-2xx response, read from the server's error envelope when present.
 *
 * @param {Response} response
 * @param {{ method: string, url: string }} request
 * @returns {Promise<AMPError>}
 */
export async function errorFor(response, request) {
  const text = await response.text();
  // A 304 has no body; another answer without one (a proxy's) is named by its status.
  let message = response.status === 304
    ? "Not modified: the version you named in ifNoneMatch is still the current one."
    : text.trim() ? `HTTP error ${response.status}: ${text}` : `HTTP error ${response.status}`;
  /** @type {string | null} */
  let code = null;
  /** @type {Record<string, any>} */
  let details = {};
  try {
    const error = JSON.parse(text)?.error;
    if (error && typeof error === "object") {
      if (typeof error.code === "string") code = error.code;
      if (typeof error.message === "string") message = error.message;
      if (error.details && typeof error.details === "object") details = error.details;
    }
  } catch {
    // Not JSON: keep the raw text in the message.
  }
  const Cls = BY_STATUS[response.status] ?? (response.status >= 500 ? ServerError : AMPError);
  /** @type {Record<string, string>} */
  const headers = {};
  response.headers.forEach((value, name) => {
    headers[name.toLowerCase()] = value;
  });
  return new Cls(message, { statusCode: response.status, code, details, request, headers });
}
