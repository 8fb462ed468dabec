// @ts-check
/**
 * `AmpUpClient`: the AmpUp routes (the server's root, beside `/amp/v1`), with the Python
 * `AmpUpClient`'s methods in camelCase. Same transport and errors as `AMPClient`. Every
 * method answers the server's JSON body as a plain object (snake_case); the `iter*`
 * methods walk a listing's pages and yield its items.
 *
 * The methods are written in groups, as in the Python package: `ampup-memory.js`,
 * `ampup-advice.js`, `ampup-versions.js`, over `AmpUpFace` (`ampup-face.js`: identity,
 * argument rules, paging), over the one `Transport`.
 */

import { VersionCalls } from "./ampup-versions.js";

/**
 * `new AmpUpClient(serverUrl, user, { agentId, apiKey, adminToken, timeoutMs, headers })`:
 * keys off, `user` is sent as `X-AmpUp-User`; keys on, pass a key bound to a user as
 * `agentId` and `apiKey` (the server takes the key's user).
 */
export class AmpUpClient extends VersionCalls {}
