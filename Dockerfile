# One image for every service; the container's args pick one, e.g.
#   docker run sats-subscriptions services/billing/dist/main.js
# (Kubernetes: `args: ["services/billing/dist/main.js"]`; deploy/k8s does this per Deployment.)

FROM node:20-bookworm-slim AS build
WORKDIR /app
# Manifests first so the dependency layer is reused while only sources change. Every workspace's
# package.json must be listed (npm ci refuses a lockfile naming a workspace it cannot see);
# test/deploy.test.ts fails when one is missing.
COPY package.json package-lock.json ./
COPY libs/contracts/package.json libs/contracts/
COPY libs/runtime/package.json libs/runtime/
COPY services/billing/package.json services/billing/
COPY services/gateway/package.json services/gateway/
COPY services/notifier/package.json services/notifier/
COPY services/nwc/package.json services/nwc/
COPY services/payments/package.json services/payments/
COPY web/package.json web/
RUN npm ci --no-audit --no-fund
COPY tsconfig.base.json tsconfig.json ./
COPY libs libs
COPY services services
COPY web web
RUN npm run build

FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
COPY libs/contracts/package.json libs/contracts/
COPY libs/runtime/package.json libs/runtime/
COPY services/billing/package.json services/billing/
COPY services/gateway/package.json services/gateway/
COPY services/notifier/package.json services/notifier/
COPY services/nwc/package.json services/nwc/
COPY services/payments/package.json services/payments/
COPY web/package.json web/
# Workspaces are installed too (npm's default), so node_modules/@sb/* link to libs/* as in development.
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
# Only build output: sources, tests and the dev toolchain stay in the build stage.
COPY --from=build /app/libs/contracts/dist libs/contracts/dist
COPY --from=build /app/libs/runtime/dist libs/runtime/dist
COPY --from=build /app/services/billing/dist services/billing/dist
COPY --from=build /app/services/gateway/dist services/gateway/dist
COPY --from=build /app/services/notifier/dist services/notifier/dist
COPY --from=build /app/services/nwc/dist services/nwc/dist
COPY --from=build /app/services/payments/dist services/payments/dist
# The hosted pages (checkout, portal, API reference) the gateway serves.
COPY --from=build /app/web/dist web/dist
# The numeric id of the image's `node` user: Kubernetes can only verify runAsNonRoot against a number.
USER 1000:1000
EXPOSE 8080 9101 9102 9103 9104
ENTRYPOINT ["node"]
CMD ["services/gateway/dist/main.js"]
