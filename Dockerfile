# Multi-stage build: a full Rust toolchain to build, a small Debian runtime to run.
#   docker build -t fawn .
#   docker run -p 127.0.0.1:2024:2024 -v fawn-data:/data fawn
# The container listens on 0.0.0.0 (its own network) with authentication on. On that address
# no first-start admin key is made by itself: pass FAWN_FIRST_ADMIN_KEY=1 once (the key is
# printed and kept in /data/admin_api_key), or `docker exec … fawn user add EMAIL --admin` and
# `fawn api-key create EMAIL`.
# bash runs inside bubblewrap, which needs user namespaces (the default on Docker with the
# default seccomp profile on recent kernels; otherwise run with --security-opt seccomp=unconfined
# or set sandbox.allow_host_bash explicitly).

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config \
    && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --locked --profile dist -p fawn \
    && strip target/dist/fawn

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates bubblewrap bash coreutils python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /data fawn
COPY --from=build /src/target/dist/fawn /usr/local/bin/fawn
COPY --from=build /src/skills /opt/fawn/skills
COPY --from=build /src/config.example.yaml /opt/fawn/config.example.yaml
USER fawn
ENV FAWN_HOME=/data FAWN_HOST=0.0.0.0 FAWN_PORT=2024 \
    DEER_FLOW_SKILLS_PATH=/opt/fawn/skills
VOLUME ["/data"]
EXPOSE 2024
ENTRYPOINT ["/usr/local/bin/fawn"]
CMD ["serve"]
