# syntax=docker/dockerfile:1
# tpu-operator image: exactly the binary the benchmarks measure, with the features CI checks
# (`cargo build --release --locked -p tpu-operator --no-default-features`, glibc), on
# distroless/cc (glibc, libgcc, CA certificates; no shell, no package manager), non-root. The
# `local` subcommand and the emulators it embeds (kube-emulator, gcp-emulator) are left out of the
# image (`tpu-operator local` there says it was built without them).
#
#   docker build -t REGISTRY/tpu-operator:TAG .                              # the operator (default target)
#   docker build --target gcp-emulator -t REGISTRY/gcp-emulator:TAG .        # the emulator, for staging clusters
#
# Why glibc and not a static musl binary (docs/architecture.md, "The image"): the operator's memory
# and latency figures (docs/benchmarks.md) are measured on this glibc build, whose allocator the
# operator tunes at start (glibc's mmap threshold, crates/operator/src/allocator.rs); musl's
# allocator is known to be slow under many threads and was never measured here.
# TLS trust: the system store (distroless/cc ships /etc/ssl/certs; SSL_CERT_FILE overrides it)
# for every client, plus rustls' compiled-in webpki roots.

ARG RUST_VERSION=1.91

FROM rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake clang \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The same command, profile, features and lockfile as the benches' builds; CI checks this
# package with these features (.ci/run).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p tpu-operator --no-default-features \
    && cargo build --release --locked -p gcp-emulator \
    && mkdir -p /out \
    && cp target/release/tpu-operator target/release/gcp-emulator /out/ \
    && strip /out/tpu-operator /out/gcp-emulator

# bookworm's glibc, as the build stage links against.
FROM gcr.io/distroless/cc-debian12:nonroot AS gcp-emulator
COPY --from=build /out/gcp-emulator /gcp-emulator
USER 65532:65532
EXPOSE 8085
ENTRYPOINT ["/gcp-emulator"]
CMD ["--listen", "0.0.0.0:8085"]

# Last stage = default target.
FROM gcr.io/distroless/cc-debian12:nonroot AS operator
COPY --from=build /out/tpu-operator /tpu-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/tpu-operator"]
CMD ["run"]
