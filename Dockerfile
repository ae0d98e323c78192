# cronwarden's reference service as an image. Multi-stage: the build stage compiles TypeScript
# (src/ to dist/, tasks/ to build/tasks/); the runtime stage has production dependencies and
# compiled JavaScript only, and runs as the unprivileged `node` user.
#
# Your own service: replace tasks/ with your task modules (they export registerTasks(registrar)),
# or install cronwarden as a dependency and keep this CMD with your compiled module's path.
#
# PID 1 is node itself (no shell, no npm in between): it handles SIGTERM/SIGINT and drains
# (up to CRONWARDEN_DRAIN_TIMEOUT_MS). Run with `docker run --init` (compose: `init: true`) so
# an init reaps any orphaned child process.
#
# Node 24, an LTS line maintained until 2028-04-30 (docs/deployment.md, "Node versions"): the
# package supports Node >= 20.19 (package.json engines), and installs on 24 without an engine
# warning (test/integration/package.test.ts installs the packed package on that Node).
#
# Not built in this repository's CI (no container daemon there): test/integration/deployment.test.ts
# runs this CMD as a process in the same layout and checks that it drains on SIGTERM.

FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json tsconfig.tasks.json ./
COPY scripts ./scripts
COPY src ./src
COPY tasks ./tasks
RUN npm run build && npm run build:tasks

FROM node:24-slim
ENV NODE_ENV=production \
    CRONWARDEN_ADMIN_HOST=0.0.0.0 \
    CRONWARDEN_ADMIN_PORT=8787 \
    CRONWARDEN_CONFIG_FILE=/etc/cronwarden/tasks.yaml
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY --from=build /app/build/tasks ./build/tasks
COPY bin ./bin
COPY config/tasks.yaml /etc/cronwarden/tasks.yaml
USER node
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=5s CMD ["node", "-e", "fetch('http://127.0.0.1:8787/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
CMD ["node", "bin/cronwarden.mjs", "serve", "--tasks", "build/tasks/index.js"]
