# syntax=docker/dockerfile:1
# Jetway gateway image: a static binary on distroless (CA certificates, a
# non-root user, no shell). The build line is the Makefile's `build` target,
# which CI runs on every change (a test keeps the two identical).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o bin/gateway ./cmd/gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/gateway /gateway
USER nonroot:nonroot
ENV JETWAY_LISTEN=0.0.0.0:8080 \
    JETWAY_ADMIN_LISTEN=0.0.0.0:9090
# 8080: WebSocket /v1/ws (and the demo page when enabled); 9090: /healthz /readyz /metrics.
EXPOSE 8080 9090
ENTRYPOINT ["/gateway"]
CMD ["serve"]
