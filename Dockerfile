# iggy-server with the official CLI. Build: `docker build -t iggy-server .` (or, without a
# daemon, `buildah bud -t iggy-server .`). Run (the server refuses to start without an
# advertised address, because every listener binds 0.0.0.0 here):
#   docker run -p 3000:3000 -p 8090:8090 -e IGGY_NODE_ADVERTISED_ADDRESS=localhost iggy-server
# The base images are arguments so a mirror can stand in for Docker Hub.
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin iggy-server \
    && cargo install iggy-cli --version 0.14.1-edge.2 --locked --root /opt/iggy \
    && cp target/release/iggy-server /opt/iggy/bin/

FROM ${RUNTIME_IMAGE}
COPY --from=builder /opt/iggy/bin/ /usr/local/bin/
# The data directory is a subdirectory of the volume: a fresh volume's root may hold
# lost+found, and the storage gate refuses a nonempty directory without its format marker.
RUN mkdir -p /var/lib/iggy && chown 10001:10001 /var/lib/iggy
VOLUME /var/lib/iggy
WORKDIR /var/lib/iggy
USER 10001:10001
# One variable per line: conformance/tests/e2e/docker_image.rs runs the server with exactly
# these. Every listener binds the wildcard address, so a single node refuses to start until
# IGGY_NODE_ADVERTISED_ADDRESS says where clients reach it (cluster metadata publishes it); a
# cluster node is advertised by its roster entry (deploy/compose/).
ENV IGGY_SYSTEM_PATH=/var/lib/iggy/data
ENV IGGY_TCP_ADDRESS=0.0.0.0:8090
ENV IGGY_HTTP_ADDRESS=0.0.0.0:3000
ENV IGGY_QUIC_ADDRESS=0.0.0.0:8080
ENV IGGY_WEBSOCKET_ADDRESS=0.0.0.0:8092
# TCP, QUIC and HTTP (on by default) are served; WebSocket serves with
# IGGY_WEBSOCKET_ENABLED=true.
EXPOSE 8090 3000 8080/udp 8092
ENTRYPOINT ["iggy-server"]
