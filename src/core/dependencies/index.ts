export * from "./decide.js";
export * from "./graph.js";
export * from "./spec.js";
