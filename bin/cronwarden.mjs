#!/usr/bin/env node
// The cronwarden CLI. It runs from the TypeScript source under tsx (a dependency), so that
// `--tasks-module` can load a TypeScript task module as the service does.
import { register } from "tsx/esm/api";

register();
await import("./cronwarden.ts");
