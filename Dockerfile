# mzproxy image: a cgo build (pg_query_go compiles PostgreSQL's own parser)
# and a small Debian runtime. The image has no PostgreSQL server: it runs
# mzproxy against an external backend, given as MZPROXY_BACKEND (or
# --backend) with a superuser, since mzproxy installs event triggers.
#
#   docker build -t mzproxy .
#   docker run -p 6875:6875 -p 6876:6876 \
#       -e MZPROXY_BACKEND='postgres://postgres:pw@db:5432/postgres' \
#       -e MZPROXY_AUTH=passthrough mzproxy
#
# The build and runtime images must be the same Debian release (glibc).
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=1
COPY go.mod go.sum ./
RUN go mod download
# PostgreSQL's parser (C, in pg_query_go) takes minutes to compile: a layer
# of its own keeps it in the build cache across source changes, with the
# classic builder as with BuildKit.
RUN go build -trimpath github.com/pganalyze/pg_query_go/v6
COPY . .
RUN go build -trimpath -ldflags='-s -w' -o /out/mzproxy ./cmd/mzproxy

FROM ${RUNTIME_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin mzproxy
COPY --from=build /out/mzproxy /usr/local/bin/mzproxy
USER mzproxy
# Clients and the HTTP endpoints (/metrics, /livez, /readyz) on every
# interface of the container. A non-loopback listener needs an --auth
# choice: scram-sha-256 (with --users-file), passthrough, or trust with
# --allow-trust-non-loopback.
ENV MZPROXY_LISTEN=0.0.0.0:6875 \
    MZPROXY_METRICS_LISTEN=0.0.0.0:6876
EXPOSE 6875 6876
# SIGTERM drains sessions for up to --shutdown-timeout (30s): give the
# container longer than that to stop (docker stop -t, stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["mzproxy"]
