/**
 * Where the desired state comes from. A company adapter (kconf, Apollo, Nacos, Consul...) is one
 * small class implementing this: `load()` reads the full document now; `subscribe()` pushes
 * every new version (or the error reading it) until unsubscribed. Sources parse their wire
 * format (JSON, YAML); validation is the framework's job (`parseDesiredState`).
 */
export interface ConfigDocument {
  /** The parsed document, not yet validated: expected `{ tasks: [...] }`. */
  content: unknown;
  /** Identifies this version (content hash, etag, etcd revision); equal revisions are not re-applied. */
  revision: string;
}

export interface ConfigListener {
  next(document: ConfigDocument): void;
  /** A version that could not be read or parsed; the last valid snapshot stays in force. */
  error(error: Error): void;
}

export interface ConfigSource {
  /** Names the source in logs and errors, e.g. `file /etc/cronwarden/tasks.yaml`. */
  readonly description: string;
  load(): Promise<ConfigDocument>;
  subscribe(listener: ConfigListener): () => Promise<void>;
}
