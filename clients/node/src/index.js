// @ts-check
/**
 * AmpUp Memory's Node client: the Agent Memory Protocol (AMP v0.1, `AMPClient`) and the
 * AmpUp routes at the server's root (`AmpUpClient`).
 *
 * ```js
 * import { AMPClient } from "@ampup/memory-client";
 *
 * const client = new AMPClient("http://127.0.0.1:8765", "agent_assistant");
 * await client.remember("User prefers email", "user_123");
 * const hits = await client.recall("contact preference", "user_123");
 * ```
 */

export { AMPClient, DEFAULT_SERVER_URL } from "./client.js";
export { AmpUpClient } from "./ampup.js";
export {
  AMPError,
  AMPConnectionError,
  AuthenticationError,
  AccessDeniedError,
  NotFoundError,
  ConflictError,
  GoneError,
  NotModifiedError,
  PreconditionFailedError,
  PayloadTooLargeError,
  ValidationError,
  RateLimitedError,
  ServerError,
} from "./errors.js";
