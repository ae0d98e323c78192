// `npm run cli`: the CLI from the TypeScript source, under tsx.
import "../src/cli/run.js";
