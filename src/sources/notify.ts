import { toError } from "../core/logger.js";
import type { ConfigDocument, ConfigListener } from "./configSource.js";

/*
 * A source's background loop calls its listener through these: a listener that throws must not
 * end the loop, nor be mistaken for a failure of the config source.
 */

export function notifyNext(listener: ConfigListener, document: ConfigDocument): void {
  try {
    listener.next(document);
  } catch (thrown) {
    notifyError(listener, toError(thrown));
  }
}

export function notifyError(listener: ConfigListener, error: Error): void {
  try {
    listener.error(error);
  } catch {
    // the listener's own failure has nowhere better to go
  }
}
