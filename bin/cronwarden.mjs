#!/usr/bin/env node
// The cronwarden CLI. The package ships TypeScript; tsx (a dependency) loads it.
import { register } from "tsx/esm/api";

register();
await import("./cronwarden.ts");
